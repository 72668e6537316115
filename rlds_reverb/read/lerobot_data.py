"""A LeRobot dataset's frames, read in NumPy: row ranges of parquet files, columns to arrays.

LeRobot keeps every frame of every episode in `data/chunk-*/file-*.parquet` (one row per
frame, the files in sorted order holding the global frame indices 0 .. total_frames - 1 one
after the other; LeRobot writes one row group per episode). `ParquetRows` reads a range of
those rows (an episode's) by row groups, from the files' footers alone, so only the row
groups holding the episode are read; consecutive episodes in one large row group read it
once (the last block read is kept). The episodes table's own columns (episode fields) are
read the same way. `to_array` turns a column into a `[T, ...]` NumPy array as info.json
describes it; every error names the file and the column.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlds_reverb.core.errors import LeRobotFormatError
from rlds_reverb.read import lerobot_meta
from rlds_reverb.read.lerobot_meta import Feature

# Helpers of the package's other modules only (`load` reads LeRobot datasets): nothing public.
__all__: list[str] = []

_BYTES = 'bytes'


@dataclasses.dataclass(frozen=True)
class _File:
    path: pathlib.Path
    first_row: int
    rows: int
    group_starts: np.ndarray  # Row-group boundaries within the file (len = groups + 1).
    columns: tuple[str, ...]


class ParquetRows:
    """Reads ranges of the rows that a list of parquet files holds one after the other.

    Args:
      paths: The files, in order (row 0 is the first file's first row).
      columns: Columns every file must have (checked now, from the footers).
      where: How messages name the files ('the data files of ...').

    Raises:
      LeRobotFormatError: If a file is not a readable parquet file or lacks a column.
    """

    def __init__(self, paths: Sequence[pathlib.Path], columns: Sequence[str], *, where: str):
        import pyarrow.parquet as pq

        self._files: list[_File] = []
        first = 0
        for path in paths:
            try:
                metadata = pq.read_metadata(path)
                names = tuple(pq.read_schema(path).names)
            except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds.
                raise LeRobotFormatError(f'{path} is not a readable parquet file ({e}).') from e
            missing = [c for c in columns if c not in names]
            if missing:
                raise LeRobotFormatError(
                    f'{path} has no column {missing[0]!r}, which {lerobot_meta.INFO} lists '
                    f'as a feature (its columns: {list(names)}).'
                )
            sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
            starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
            self._files.append(_File(path, first, metadata.num_rows, starts, names))
            first += metadata.num_rows
        self.rows = first
        self._where = where
        self._block: tuple[pathlib.Path, int, int, Any] | None = None  # (file, first, last, table)
        self._open: tuple[pathlib.Path, Any] | None = None

    def find_file(self, row: int) -> pathlib.Path:
        """Returns the file holding `row`."""
        return self._files[self._locate(row)].path

    def _locate(self, row: int) -> int:
        firsts = [f.first_row for f in self._files]
        return int(np.searchsorted(firsts, row, side='right')) - 1

    def read(self, start: int, stop: int, columns: Sequence[str]) -> Any:
        """Returns rows `start` .. `stop` - 1 (a `pyarrow.Table` of `columns`).

        Raises:
          LeRobotFormatError: If the files hold fewer rows, or one cannot be read.
        """
        import pyarrow as pa

        if stop > self.rows:
            raise LeRobotFormatError(
                f'{self._where}: rows {start} .. {stop - 1} are asked for, but the files hold '
                f'{self.rows} rows ({[str(f.path) for f in self._files][-3:]}).'
            )
        pieces = []
        index = self._locate(start)
        while start < stop:
            file = self._files[index]
            end = min(stop, file.first_row + file.rows)
            pieces.append(
                self._read_in_file(file, start - file.first_row, end - file.first_row, columns)
            )
            start, index = end, index + 1
        return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)

    def _read_in_file(self, file: _File, start: int, stop: int, columns: Sequence[str]) -> Any:
        first = int(np.searchsorted(file.group_starts, start, side='right')) - 1
        last = int(np.searchsorted(file.group_starts, stop, side='left'))
        block = self._block
        if block is None or block[0] != file.path or not (block[1] <= first and last <= block[2]):
            table = self._read_groups(file, list(range(first, last)), columns)
            block = self._block = (file.path, first, last, table)
        offset = int(file.group_starts[block[1]])
        return block[3].slice(start - offset, stop - start).select(list(columns))

    def _read_groups(self, file: _File, groups: list[int], columns: Sequence[str]) -> Any:
        import pyarrow.parquet as pq

        if self._open is None or self._open[0] != file.path:
            self._block = None
            self._open = (file.path, pq.ParquetFile(file.path))
        try:
            return self._open[1].read_row_groups(groups, columns=list(columns))
        except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds.
            raise LeRobotFormatError(
                f'{file.path}: row groups {groups} could not be read ({e}).'
            ) from e


def _flatten(column: Any, *, where: str) -> tuple[np.ndarray, list[int]]:
    """Returns the values of a (nested) list column and the lengths of each nesting level."""
    import pyarrow as pa

    shape: list[int] = []
    while (
        pa.types.is_list(column.type)
        or pa.types.is_fixed_size_list(column.type)
        or (pa.types.is_large_list(column.type))
    ):
        if column.null_count:
            raise LeRobotFormatError(f'{where} has {column.null_count} null entries.')
        rows = len(column)
        column = column.flatten()
        shape.append(len(column) // rows if rows else 0)
    return np.asarray(column.to_numpy(zero_copy_only=False)), shape


def to_array(column: Any, feature: Feature, *, where: str) -> np.ndarray:
    """Returns a data column as a `[T, ...]` array of the feature's dtype and shape.

    Scalar columns (shape [1]) give `[T]`; vectors and arrays `[T, *shape]`; strings an
    object array of `str`; images (image mode) an object array of the stored PNG bytes.

    Raises:
      LeRobotFormatError: If the column holds nulls, or its values do not fit the
        feature's shape or dtype.
    """
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    rows = len(column)
    if feature.dtype == lerobot_meta.IMAGE:
        return _image_bytes(column, where=where)
    if column.null_count:
        raise LeRobotFormatError(f'{where} has {column.null_count} null values.')
    if feature.dtype == lerobot_meta.STRING:
        return np.asarray(column.to_pylist(), dtype=object)
    values, shape = _flatten(column, where=where)
    want = () if feature.is_scalar else feature.shape
    if values.size != rows * int(np.prod(want, dtype=np.int64)):
        raise LeRobotFormatError(
            f'{where} holds {values.size} values for {rows} frames; {lerobot_meta.INFO} says '
            f'shape {list(feature.shape)} ({"scalar " if feature.is_scalar else ""}dtype '
            f'{feature.dtype}), column type {column.type}.'
        )
    try:
        return values.astype(feature.dtype, copy=False).reshape([rows, *want])
    except (TypeError, ValueError) as e:
        raise LeRobotFormatError(
            f'{where} holds {values.dtype} values (column type {column.type}); '
            f'{lerobot_meta.INFO} says dtype {feature.dtype}.'
        ) from e


def _image_bytes(column: Any, *, where: str) -> np.ndarray:
    """Returns an image column's PNG (or JPEG) bytes as an object array."""
    import pyarrow as pa

    if not pa.types.is_struct(column.type) or column.type.get_field_index(_BYTES) < 0:
        raise LeRobotFormatError(
            f'{where} is {column.type}; an image column is struct<bytes: binary, path: string>.'
        )
    blobs = column.field(_BYTES)
    if blobs.null_count or column.null_count:
        raise LeRobotFormatError(
            f'{where}: {max(blobs.null_count, column.null_count)} frames have no image bytes '
            '(only a path): the images are not embedded in the parquet file as LeRobot '
            'v3.0 keeps them.'
        )
    return np.asarray(blobs.to_numpy(zero_copy_only=False), dtype=object)
