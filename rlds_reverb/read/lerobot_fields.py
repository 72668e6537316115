"""LeRobot features as RLDS step fields: which are read, their specs, one episode's steps.

`make_layout` reads a LeRobot dataset's metadata (`lerobot_meta`) and decides what each
feature becomes (docs/lerobot.md, "Reading"): a step field at `to_rlds_path(name)` with a
per-step shape (`[]` for a shape-[1] column, unless our writer's record says it was `[1]`
or a flattened array), `next.done` the `is_terminal` flag, `task_index` the
`language_instruction` strings; `Layout.read_episode` builds one episode's steps in NumPy
from its rows and video frames (image-mode cameras stay PNG bytes here: `lerobot.py`
decodes them in a step of their own).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from rlds_reverb.core import types
from rlds_reverb.core.errors import LeRobotFormatError
from rlds_reverb.read import lerobot_data, lerobot_meta, step_fields
from rlds_reverb.read.lerobot_meta import Feature, Info

# Helpers of the package's other modules only (`load` reads LeRobot datasets): nothing public.
__all__: list[str] = []

# Features that are not step fields: the frame's place, and what the flags and tasks hold.
_NOT_FIELDS = (
    lerobot_meta.FRAME_INDEX,
    lerobot_meta.EPISODE_INDEX,
    lerobot_meta.INDEX,
    lerobot_meta.TASK_INDEX,
    lerobot_meta.NEXT_DONE,
)
_MADE_HERE = {types.IS_FIRST, types.IS_LAST, types.IS_TERMINAL, types.LANGUAGE_INSTRUCTION}
_RECORD_FIELDS = 'fields'
_RECORD_EPISODE_FIELDS = 'episode_fields'


@dataclasses.dataclass(frozen=True)
class Field:
    """One feature read as a step field.

    Fields:
      feature: The LeRobot feature.
      path: The step field's key path.
      shape: Its per-step shape as read (`[]` for an image-mode camera's PNG bytes).
      dtype: Its dtype as read (`tf.string` for image-mode PNG bytes before decoding).
      frame_shape: A camera's (height, width, channels), else None.
    """

    feature: Feature
    path: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: tf.DType
    frame_shape: tuple[int, int, int] | None = None

    @property
    def key(self) -> str:
        """The step field as a `/` path."""
        return '/'.join(self.path)


@dataclasses.dataclass(frozen=True)
class EpisodeField:
    """An episode-level field stored as a column of the episodes table (our writer's)."""

    column: str
    path: tuple[str, ...]
    dtype: str
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Layout:
    """A LeRobot dataset's metadata and what is read of it.

    Fields:
      info: info.json (and our writer's record).
      tasks: The task strings by task_index.
      episodes: The episodes table's structural columns.
      data_paths: The data files, in LeRobot's (sorted) order.
      fields: The features read as step fields.
      language: Whether `language_instruction` is kept.
      derived: The required step fields made up here ('reward' without `next.reward`,
        'discount' without a `discount` feature).
      episode_fields: Episode-level fields in the episodes table (our writer's).
      warnings: What the reader tells the caller (fields made up or left out).
    """

    info: Info
    tasks: tuple[str, ...]
    episodes: lerobot_meta.Episodes
    data_paths: tuple[pathlib.Path, ...]
    fields: tuple[Field, ...]
    language: bool
    derived: tuple[str, ...]
    episode_fields: tuple[EpisodeField, ...]
    warnings: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """How messages name the data files."""
        return f'the data files of the LeRobot dataset {self.info.root}'

    @property
    def columns(self) -> list[str]:
        """The data columns read for each episode."""
        names = [lerobot_meta.INDEX, lerobot_meta.EPISODE_INDEX]
        optional = [lerobot_meta.FRAME_INDEX, lerobot_meta.NEXT_DONE]
        if self.language:
            names.append(lerobot_meta.TASK_INDEX)
        if any(f.feature.dtype == lerobot_meta.VIDEO for f in self.fields):
            names.append(lerobot_meta.TIMESTAMP)
        names += [o for o in optional if o in self.info.features]
        names += [f.feature.name for f in self.fields if f.feature.dtype != lerobot_meta.VIDEO]
        return list(dict.fromkeys(names))

    def generated_signature(self) -> dict:
        """The `tf.TensorSpec`s of what `read_episode` yields (PNG frames as strings)."""
        steps: dict = {}
        for field in self.fields:
            _put(steps, field.path, tf.TensorSpec([None, *field.shape], field.dtype))
        for path, spec in _made_specs(self).items():
            _put(steps, path, spec)
        signature: dict = {
            types.EPISODE_INDEX: tf.TensorSpec([], tf.int64),
            types.FPS: tf.TensorSpec([], tf.float64),
        }
        for extra in self.episode_fields:
            _put(signature, extra.path, tf.TensorSpec(extra.shape, tf.as_dtype(_np_dtype(extra))))
        signature[types.STEPS] = steps
        return signature

    def open_episode_fields(self) -> lerobot_data.ParquetRows | None:
        """Returns a reader of the episodes table's episode-field columns (or None)."""
        if not self.episode_fields:
            return None
        columns = [f.column for f in self.episode_fields]
        where = f'the episodes table of {self.info.root}'
        return lerobot_data.ParquetRows(self.episodes.paths, columns, where=where)

    def read_episode(
        self,
        position: int,
        rows: lerobot_data.ParquetRows,
        episode_rows: lerobot_data.ParquetRows | None,
        cursors: Mapping[str, Any],
    ) -> dict:
        """Returns episode `position` as whole-episode NumPy arrays.

        Raises:
          LeRobotFormatError: If its rows are not where the episodes table says, a column
            does not fit info.json, a video frame is missing, or `next.done` is set before
            its last frame.
        """
        start, end = int(self.episodes.starts[position]), int(self.episodes.ends[position])
        table = rows.read(start, end, self.columns)
        file = rows.find_file(start)

        def column(name: str) -> np.ndarray:
            where = f'{file}: column {name!r} (episode {position}, rows {start} .. {end - 1})'
            return lerobot_data.to_array(table.column(name), self.info.features[name], where=where)

        _check_place(column, position, start, end, file, self.info.features)
        steps: dict = {}
        for field in self.fields:
            if field.feature.dtype == lerobot_meta.VIDEO:
                values = self._read_video(field, position, column(lerobot_meta.TIMESTAMP), cursors)
            else:
                values = column(field.feature.name).reshape([end - start, *field.shape])
            _put(steps, field.path, values)
        for path, values in self._make_fields(column, position, end - start, file).items():
            _put(steps, path, values)
        episode = {types.EPISODE_INDEX: np.int64(position), types.FPS: np.float64(self.info.fps)}
        if episode_rows is not None:
            table = episode_rows.read(
                position, position + 1, [f.column for f in self.episode_fields]
            )
            for extra in self.episode_fields:
                value = np.asarray(
                    table.column(extra.column).to_pylist()[0], dtype=_np_dtype(extra)
                )
                _put(episode, extra.path, value.reshape(extra.shape))
        return {**episode, types.STEPS: steps}

    def _read_video(
        self, field: Field, position: int, timestamps: np.ndarray, cursors
    ) -> np.ndarray:
        places = self.episodes.videos[field.feature.name]
        path = self.info.root / str(self.info.video_path).format(
            video_key=field.feature.name,
            chunk_index=int(places.chunks[position]),
            file_index=int(places.files[position]),
        )
        # LeRobot's query: the float64 start plus each float32 timestamp as a Python float.
        times = places.from_timestamps[position] + timestamps.astype(np.float64)
        return cursors[field.feature.name].read(path, times, episode=position)

    def _make_fields(self, column, position: int, length: int, file) -> dict:
        """Returns the flags, and the task strings, reward and discount made here."""
        index = np.arange(length)
        terminal = False
        if lerobot_meta.NEXT_DONE in self.info.features:
            done = column(lerobot_meta.NEXT_DONE).reshape(length).astype(bool)
            if done[:-1].any():
                raise LeRobotFormatError(
                    f'{file}: column {lerobot_meta.NEXT_DONE!r} is set on frame '
                    f'{int(np.flatnonzero(done)[0])} of episode {position}, which has {length} '
                    'frames; next.done marks the last frame of a terminated episode only.'
                )
            terminal = bool(done[-1])
        made: dict = {
            (types.IS_FIRST,): index == 0,
            (types.IS_LAST,): index == length - 1,
            (types.IS_TERMINAL,): (index == length - 1) & terminal,
        }
        if self.language:
            made[(types.LANGUAGE_INSTRUCTION,)] = _tasks(self.tasks, column, position, file)
        if types.REWARD in self.derived:
            made[(types.REWARD,)] = np.zeros(length, np.float32)
        if types.DISCOUNT in self.derived:
            discount = np.ones(length, np.float32)
            if terminal:
                discount[-2:] = 0.0  # Into the terminal step, and on it (dm_env's convention).
            made[(types.DISCOUNT,)] = discount
        return made


def _tasks(tasks: Sequence[str], column, position: int, file) -> np.ndarray:
    indices = column(lerobot_meta.TASK_INDEX)
    bad = np.flatnonzero((indices < 0) | (indices >= len(tasks)))
    if bad.size:
        raise LeRobotFormatError(
            f'{file}: column {lerobot_meta.TASK_INDEX!r} is {indices[bad[0]]} on frame '
            f'{bad[0]} of episode {position}; {lerobot_meta.TASKS} has {len(tasks)} tasks.'
        )
    return np.asarray(tasks, dtype=object)[indices]


def _check_place(column, position: int, start: int, end: int, file, features) -> None:
    """Raises unless the rows read are episode `position`'s frames start .. end - 1."""
    checks = {
        lerobot_meta.INDEX: np.arange(start, end),
        lerobot_meta.EPISODE_INDEX: np.full(end - start, position),
    }
    if lerobot_meta.FRAME_INDEX in features:
        checks[lerobot_meta.FRAME_INDEX] = np.arange(end - start)
    for name, want in checks.items():
        got = column(name)
        if not np.array_equal(got, want):
            first = int(np.flatnonzero(got != want)[0]) if len(got) == len(want) else 0
            raise LeRobotFormatError(
                f'{file}: column {name!r} holds {got[first]} at row {start + first}, where the '
                f'episodes table puts frame {first} of episode {position} (global index '
                f'{start + first}); the data file and {lerobot_meta.EPISODES_DIR} disagree.'
            )


def _made_specs(layout: Layout) -> dict[tuple[str, ...], tf.TensorSpec]:
    specs: dict[tuple[str, ...], tf.TensorSpec] = {
        (flag,): tf.TensorSpec([None], tf.bool)
        for flag in (types.IS_FIRST, types.IS_LAST, types.IS_TERMINAL)
    }
    if layout.language:
        specs[(types.LANGUAGE_INSTRUCTION,)] = tf.TensorSpec([None], tf.string)
    for name in layout.derived:
        specs[(name,)] = tf.TensorSpec([None], tf.float32)
    return specs


def _put(nest: dict, path: Sequence[str], value: Any) -> None:
    for key in path[:-1]:
        nest = nest.setdefault(key, {})
    nest[path[-1]] = value


def _np_dtype(field: EpisodeField) -> Any:
    return object if field.dtype == lerobot_meta.STRING else np.dtype(field.dtype)


def _make_field(feature: Feature, record: Mapping, *, where: str) -> Field:
    path = lerobot_meta.to_rlds_path(feature.name)
    if feature.is_camera:
        frame = feature.frame_shape(where=where)
        if feature.dtype == lerobot_meta.IMAGE:  # PNG bytes until decoded (lerobot.py).
            return Field(feature, path, (), tf.string, frame)
        return Field(feature, path, frame, tf.uint8, frame)
    shape = () if feature.is_scalar else feature.shape
    stored = record.get(feature.name, {}).get('shape')
    if stored is not None and int(np.prod(stored, dtype=np.int64)) == int(
        np.prod(shape, dtype=np.int64)
    ):
        shape = tuple(stored)
    dtype = tf.string if feature.dtype == lerobot_meta.STRING else tf.as_dtype(feature.dtype)
    return Field(feature, path, shape, dtype)


def _check_paths(paths: Sequence[tuple[str, ...]], *, where: str) -> None:
    """Raises if two fields are one path, or one is inside the other."""
    seen = sorted(paths)
    for a, b in zip(seen, seen[1:], strict=False):
        if b[: len(a)] == a:
            raise LeRobotFormatError(
                f'{where}: features {lerobot_meta.to_feature_name(a)!r} and '
                f'{lerobot_meta.to_feature_name(b)!r} are both step field {"/".join(a)!r} '
                '(or one holds the other): an RLDS step cannot hold both.'
            )


def make_layout(root: pathlib.Path, *, step_fields: Any = None) -> Layout:
    """Reads a dataset's metadata and decides the step fields (see the module docstring).

    Args:
      root: The dataset directory.
      step_fields: The step fields to keep, as key paths; None keeps all.

    Raises:
      LeRobotFormatError: If a metadata file is missing, malformed or inconsistent, or two
        features map to one step field.
      SpecMismatchError: If `step_fields` names a field the steps do not have.
    """
    info = lerobot_meta.read_info(root)
    where = f'{root / lerobot_meta.INFO}'
    record = info.record.get(_RECORD_FIELDS, {})
    warnings = []
    fields = []
    for feature in info.features.values():
        if feature.name in _NOT_FIELDS:
            continue
        if feature.dtype == lerobot_meta.LANGUAGE:
            warnings.append(f'{where}: the language annotation {feature.name!r} is not read.')
            continue
        fields.append(_make_field(feature, record, where=where))
    paths = [f.path for f in fields]
    derived = tuple(
        name for name in (types.REWARD, types.DISCOUNT) if not any(p[0] == name for p in paths)
    )
    clash = [p for p in paths if p[0] in _MADE_HERE]
    if clash:
        raise LeRobotFormatError(
            f'{where}: feature {lerobot_meta.to_feature_name(clash[0])!r} is a step field the '
            'reader makes itself (the flags, from next.done; language_instruction, from tasks).'
        )
    _check_paths(paths + [(name,) for name in (*_MADE_HERE, *derived)], where=where)
    if types.REWARD in derived:
        warnings.append(
            f'The LeRobot dataset {root} has no {lerobot_meta.NEXT_REWARD!r} feature: the '
            'steps get reward 0.0.'
        )
    fields, language = _select(fields, derived, step_fields, where=f'the LeRobot dataset {root}')
    episodes = lerobot_meta.read_episodes(info)
    data_paths = tuple(lerobot_meta.list_parquet(root / lerobot_meta.DATA_DIR))
    layout = Layout(
        info=info,
        tasks=tuple(lerobot_meta.read_tasks(root)),
        episodes=episodes,
        data_paths=data_paths,
        fields=tuple(fields),
        language=language,
        derived=derived,
        episode_fields=_episode_fields(info),
        warnings=tuple(warnings),
    )
    _check_files(layout)
    return layout


def _check_files(layout: Layout) -> None:
    """Raises unless the data files hold every frame with every column, and every video the
    episodes table names is there (from the files' footers and names: no data read)."""
    info = layout.info
    rows = lerobot_data.ParquetRows(layout.data_paths, layout.columns, where=layout.where)
    if rows.rows != info.total_frames:
        raise LeRobotFormatError(
            f'The data files of {info.root} ({lerobot_meta.DATA_DIR}/*/*.parquet: '
            f'{len(layout.data_paths)} files) hold {rows.rows} frames; {lerobot_meta.INFO} '
            f'says total_frames {info.total_frames}. A data file is missing or truncated.'
        )
    for key, places in layout.episodes.videos.items():
        if not any(f.feature.name == key for f in layout.fields):
            continue
        for chunk, file in sorted(
            set(zip(places.chunks.tolist(), places.files.tolist(), strict=True))
        ):
            path = info.root / str(info.video_path).format(
                video_key=key, chunk_index=chunk, file_index=file
            )
            if not path.is_file():
                episode = int(np.flatnonzero((places.chunks == chunk) & (places.files == file))[0])
                raise LeRobotFormatError(
                    f'{path} is missing: the episodes table puts camera {key!r} of episode '
                    f'{episode} in it (videos/{key}/chunk_index {chunk}, file_index {file}).'
                )


def _select(fields: list[Field], derived, paths, *, where: str) -> tuple[list[Field], bool]:
    """Returns the fields `paths` keeps (all for None), and whether the tasks are kept."""
    if paths is None:
        return fields, True
    spec: dict = {}
    for field in fields:
        _put(spec, field.path, field)
    for name in (*_MADE_HERE, *derived):
        _put(spec, (name,), name)
    kept = step_fields.select_step_fields(spec, paths, where=where)
    leaves = tf.nest.flatten(kept)
    return [f for f in fields if any(f is leaf for leaf in leaves)], (
        types.LANGUAGE_INSTRUCTION in kept
    )


def _episode_fields(info: Info) -> tuple[EpisodeField, ...]:
    found = []
    for column, spec in info.record.get(_RECORD_EPISODE_FIELDS, {}).items():
        path = tuple(column[len(lerobot_meta.EPISODE_FIELD_PREFIX) :].split('/'))
        found.append(EpisodeField(column, path, spec['dtype'], tuple(spec['shape'])))
    return tuple(found)
