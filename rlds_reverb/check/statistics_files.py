"""Statistics saved beside the dataset, with a fingerprint of the data, reused while it matches.

`ensure_statistics(source)` reads the statistics file of a dataset when its fingerprint
matches the data and the options, and otherwise computes them (`compute_statistics`, one
pass) and writes the file. The file is JSON (`statistics_json`), written whole or not at
all (a temporary file renamed into place), never world-writable (`core/files.py`):

* a TFDS dataset directory (given by path or found by name): beside its
  `dataset_info.json`, as `rlds_reverb_statistics-<split>.json`;
* another dataset directory (Minari): inside it, under the same name; a dataset file
  (D4RL's HDF5): beside it, as `<file name>.rlds_reverb_statistics-<split>.json`;
* anywhere else with `path=` (a `tf.data.Dataset` has no place of its own, nor a
  fingerprint: its statistics are computed every time).

The fingerprint is the SHA-256 of the data's description and the options. For a TFDS
directory the description holds the SHA-256 of `dataset_info.json` and of `features.json`
(so the step fields, their dtypes and shapes), the split, and each of its shard files' name,
size, record count and modification time (a rewrite with records of the same size changes
the time; a copy that does not keep the times is read again, which is safe); when the
shards are not in TFDS' default layout, every file of the directory. For other paths: every
file's name, size and modification time. The dataset's location is shown in the file but
is not part of the fingerprint, so a dataset moved with its times kept keeps its statistics.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import re
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from rlds_reverb.check import statistics_json
from rlds_reverb.check.statistics import (
    DEFAULT_QUANTILES,
    DEFAULT_SKETCH_CAPACITY,
    DatasetStatistics,
    StatisticsOptions,
    compute_statistics,
)
from rlds_reverb.core import files, types
from rlds_reverb.read import raw_records

__all__ = [
    'STATISTICS_FILE_PREFIX',
    'StatisticsFile',
    'compute_fingerprint',
    'describe_data',
    'ensure_statistics',
    'locate_statistics',
    'read_statistics',
    'save_statistics',
]

_LOGGER = logging.getLogger(__name__)
STATISTICS_FILE_PREFIX = 'rlds_reverb_statistics'
_DATASET_INFO = 'dataset_info.json'
_FEATURES = 'features.json'
_LOCATION = 'location'


def _hash_file(path: pathlib.Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _describe_file(path: pathlib.Path, name: str, records: int | None = None) -> dict[str, Any]:
    stat = path.stat()
    entry: dict[str, Any] = {'name': name, 'bytes': stat.st_size, 'mtime_ns': stat.st_mtime_ns}
    if records is not None:
        entry['records'] = records
    return entry


def _list_data_files(root: pathlib.Path) -> list[pathlib.Path]:
    """Every file under `root` but statistics files (and their temporary files)."""
    return sorted(
        p for p in root.rglob('*') if p.is_file() and STATISTICS_FILE_PREFIX not in p.name
    )


def _describe_files(root: pathlib.Path) -> dict[str, Any]:
    if root.is_file():
        return {'kind': 'file', 'files': [_describe_file(root, root.name)]}
    entries = [_describe_file(p, str(p.relative_to(root))) for p in _list_data_files(root)]
    return {'kind': 'directory', 'files': entries}


def _split_names(split: str) -> list[str]:
    return [re.split(r'[\[(]', part, maxsplit=1)[0].strip() for part in split.split('+')]


def _describe_tfds_directory(directory: pathlib.Path, split: str) -> dict[str, Any]:
    shards: list[dict[str, Any]] | None = []
    for name in _split_names(split):
        found = raw_records.find_split_files(directory, name)
        if found is None or shards is None:
            shards = None  # Not TFDS' default layout: every file of the directory instead.
            continue
        shards += [
            _describe_file(p, p.name, count)
            for p, count in zip(found.paths, found.counts, strict=True)
        ]
    description: dict[str, Any] = {
        'kind': 'tfds',
        'split': split,
        'dataset_info_sha256': _hash_file(directory / _DATASET_INFO),
        'features_sha256': _hash_file(directory / _FEATURES),
    }
    if shards is None:
        description['files'] = _describe_files(directory)['files']
    else:
        description['shards'] = shards
    return description


def _find_tfds_directory(source: Any, data_dir: Any) -> pathlib.Path | None:
    """The TFDS directory a path or name means, or None for a path that holds no TFDS data."""
    path = pathlib.Path(source).expanduser()
    if path.is_dir() and (path / _DATASET_INFO).is_file():
        return path.absolute()  # The common case, without importing TFDS.
    if path.exists() and not any(
        p for pattern in (f'*/{_DATASET_INFO}', f'*/*/{_DATASET_INFO}') for p in path.glob(pattern)
    ):
        return None  # A file (D4RL), or a directory of another kind (Minari).
    from rlds_reverb.read import tfds_dirs  # Imports TFDS.

    if path.exists():  # The parent of version (or config) directories.
        return tfds_dirs.find_dataset_directory(path)
    return pathlib.Path(os.fspath(tfds_dirs.open_builder(source, data_dir=data_dir).data_dir))


def _statistics_name(split: str) -> str:
    safe = re.sub(r'[^A-Za-z0-9_.-]', '_', split)
    if safe != split:  # Slices differ only in the characters replaced.
        safe += '-' + hashlib.sha256(split.encode()).hexdigest()[:8]
    return f'{STATISTICS_FILE_PREFIX}-{safe}.json'


def describe_data(
    source: Any, *, split: str = 'train', data_dir: Any = None
) -> tuple[pathlib.Path | None, dict[str, Any] | None]:
    """Returns where `source`'s statistics go by default, and the description fingerprinted.

    Args:
      source: What `rlds_reverb.load` reads: a path, a TFDS name, or a `tf.data.Dataset`.
      split: The split read (slices included).
      data_dir: Where a TFDS name is looked up.

    Returns:
      `(path, description)`; `(None, None)` for a `tf.data.Dataset`.

    Raises:
      SourceNotFoundError: If a path does not exist and no TFDS dataset has that name.

    Example:
      >>> path, description = describe_data('/data/fractal/0.1.0')
    """
    if isinstance(source, tf.data.Dataset):
        return None, None
    directory = _find_tfds_directory(source, data_dir)
    name = _statistics_name(split)
    if directory is not None:
        return directory / name, {
            **_describe_tfds_directory(directory, split),
            _LOCATION: str(directory),
        }
    root = pathlib.Path(source).expanduser().absolute()
    description = {**_describe_files(root), 'split': split, _LOCATION: str(root)}
    where = root / name if root.is_dir() else root.parent / f'{root.name}.{name}'
    return where, description


def compute_fingerprint(description: dict[str, Any], options: StatisticsOptions) -> str:
    """Returns the SHA-256 (hex) of a data description (its location left out) and options.

    Example:
      >>> compute_fingerprint(describe_data(path)[1], StatisticsOptions())
    """
    content = {
        'format': statistics_json.FORMAT,
        'data': {k: v for k, v in description.items() if k != _LOCATION},
        'options': statistics_json.options_to_json(options),
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def save_statistics(
    statistics: DatasetStatistics, path: os.PathLike | str, *, data: dict | None = None
) -> pathlib.Path:
    """Writes statistics as JSON to `path`, whole (a temporary file renamed into place).

    Args:
      statistics: What to write (its `fingerprint` included).
      path: The file (replaced if it exists).
      data: The description of the data the fingerprint covers (`describe_data`), shown
        in the file for people.

    Returns:
      `path` as a `pathlib.Path`.

    Raises:
      OSError: If `path` cannot be written (a directory, a missing or read-only directory).

    Example:
      >>> save_statistics(compute_statistics(episodes), '/tmp/statistics.json')
    """
    path = pathlib.Path(path)
    document = statistics_json.statistics_to_json(statistics, data=data)
    text = json.dumps(document, indent=1, allow_nan=False) + '\n'
    try:
        with files.replace_file(path, text=True) as out:
            out.write(text)
    except IsADirectoryError as e:
        raise IsADirectoryError(f"Cannot write statistics to '{path}': it is a directory.") from e
    return path


def read_statistics(path: os.PathLike | str) -> DatasetStatistics:
    """Reads statistics written by `save_statistics` (JSON only: nothing in the file runs).

    Raises:
      OSError: If the file cannot be read (`FileNotFoundError` if it does not exist).
      ValueError: If it is not rlds-reverb statistics, or is malformed; names the file.

    Example:
      >>> read_statistics('/data/fractal/0.1.0/rlds_reverb_statistics-train.json')
    """
    path = pathlib.Path(path)
    try:
        document = json.loads(path.read_text(encoding='utf-8'))
        return statistics_json.statistics_from_json(document)
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors.
        raise ValueError(f'{path} holds no readable statistics: {e}.') from e


@dataclasses.dataclass(frozen=True)
class StatisticsFile:
    """Where a dataset's statistics are kept, and the fingerprint they must carry.

    Attributes:
      path: The JSON file.
      data: The description of the data (`describe_data`); None for a `tf.data.Dataset`.
      fingerprint: The data's and the options' fingerprint; None when there is no data
        description (then the file is never reused).
    """

    path: pathlib.Path
    data: dict[str, Any] | None
    fingerprint: str | None

    def read_if_current(self) -> DatasetStatistics | None:
        """Returns the saved statistics if their fingerprint matches (`reused` set), else None.

        A file that cannot be read is logged and treated as absent (it is recomputed).
        """
        if self.fingerprint is None or not self.path.is_file():
            return None
        try:
            saved = read_statistics(self.path)
        except (OSError, ValueError) as e:
            _LOGGER.warning('Recomputing the statistics: %s', e)
            return None
        if saved.fingerprint != self.fingerprint:
            return None
        return dataclasses.replace(saved, reused=True)

    def check_writable(self) -> None:
        """Raises `OSError` (naming the file and what to do) if the file cannot be written."""
        try:
            handle, temporary = files.create_temporary_beside(self.path)
        except OSError as e:
            raise type(e)(
                f"Cannot write statistics to '{self.path}' ({e.strerror or e}); give another "
                'file with path= (rlds-reverb stats --out).'
            ) from e
        os.close(handle)
        os.unlink(temporary)

    def save(self, statistics: DatasetStatistics) -> DatasetStatistics:
        """Writes `statistics` with this file's fingerprint; returns them with it."""
        found = dataclasses.replace(statistics, fingerprint=self.fingerprint)
        save_statistics(found, self.path, data=self.data)
        return found


def locate_statistics(
    source: Any,
    *,
    split: str,
    data_dir: Any,
    path: os.PathLike | str | None,
    options: StatisticsOptions,
) -> StatisticsFile:
    """Returns the statistics file of `source` (`path`, or beside the dataset) and fingerprint.

    Raises:
      ValueError: If `source` is a `tf.data.Dataset` and `path` is None.
      SourceNotFoundError: If the source does not exist.
      SourceError: If a path holds several TFDS datasets (`find_dataset_directory`).

    Example:
      >>> located = locate_statistics(path, split='train', data_dir=None, path=None,
      ...                             options=StatisticsOptions())
    """
    default_path, data = describe_data(source, split=split, data_dir=data_dir)
    target = pathlib.Path(path) if path is not None else default_path
    if target is None:
        raise ValueError(
            'A tf.data.Dataset has no directory to keep its statistics in: pass path=, or '
            'call compute_statistics() to compute them without saving.'
        )
    fingerprint = None if data is None else compute_fingerprint(data, options)
    return StatisticsFile(target, data, fingerprint)


def ensure_statistics(
    source: Any,
    *,
    split: str = 'train',
    data_dir: Any = None,
    path: os.PathLike | str | None = None,
    refresh: bool = False,
    fields: Sequence[str] | None = None,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    sketch_capacity: int = DEFAULT_SKETCH_CAPACITY,
    progress: types.EpisodeProgressFn | None = None,
) -> DatasetStatistics:
    """Returns a dataset's statistics: the saved ones while they match, else computed and saved.

    Args:
      source: A path or TFDS name `rlds_reverb.load` reads, or a `tf.data.Dataset` of RLDS
        episodes (then `path` is required, and the statistics are always computed).
      split: The split (TFDS slicing allowed: each slice has its own file).
      data_dir: Where a TFDS name is looked up.
      path: The statistics file; by default beside the dataset (module docstring).
      refresh: Compute and save even when the saved statistics match.
      fields: As for `compute_statistics`.
      quantiles: As for `compute_statistics`.
      sketch_capacity: As for `compute_statistics`.
      progress: Optional `fn(episodes, steps)`, called after each batch of episodes read.

    Returns:
      The `DatasetStatistics`, with its `fingerprint`, and `reused` true when read from the
      file.

    Raises:
      ValueError: If `source` is a `tf.data.Dataset` and `path` is None, or an option is
        not valid (as `compute_statistics` says).
      OSError: If the statistics file cannot be written (checked before reading the data).
      SourceNotFoundError: If the source does not exist.
      SourceError: If the source is not an RLDS dataset (as `rlds_reverb.load` says).
      SpecMismatchError: If `fields` names a missing or non-numeric field.

    Example:
      >>> statistics = ensure_statistics('/data/fractal/0.1.0', quantiles=[0.01, 0.99])
      >>> statistics.reused  # True the second time, while the data is unchanged
    """
    options = StatisticsOptions(fields=fields, quantiles=quantiles, sketch_capacity=sketch_capacity)
    located = locate_statistics(source, split=split, data_dir=data_dir, path=path, options=options)
    saved = None if refresh else located.read_if_current()
    if saved is not None:
        return saved
    located.check_writable()
    if isinstance(source, tf.data.Dataset):
        episodes = source
    else:
        from rlds_reverb.read import loading  # Not needed when the saved file is current.

        episodes = loading.load(source, split=split, data_dir=data_dir)
    found = compute_statistics(
        episodes,
        fields=options.fields,
        quantiles=options.quantiles,
        sketch_capacity=options.sketch_capacity,
        progress=progress,
    )
    return located.save(found)
