"""RLDS step fields as LeRobot features: what each becomes, refused or left out, and why.

`make_plan` reads the element spec of whole RLDS episodes and decides, field by field
(docs/lerobot.md, "Writing"):

* a nested field is a dotted feature name (`observation/images/front` ->
  `observation.images.front`; `lerobot_meta.to_feature_name`), `reward` is `next.reward`,
  `is_terminal` is `next.done` (true only on the last frame of a terminated episode);
* uint8 `[H, W, 3]` (or `[H, W, 1]` in image mode) step fields are cameras: PNG images
  in image mode, AV1 video in video mode; other numbers are numeric features, a scalar per
  step shape `[1]` (a scalar column), an array of rank 2 or more flattened (its shape kept
  in our record, `meta/rlds_reverb.json`, so the reader gives it back); `tf.string`
  scalars are 'string' features; `discount` is the feature `discount`;
* the task field (`language_instruction` by default) becomes LeRobot's task (per frame);
  a float32 `timestamp` step field (what the reader gives) becomes LeRobot's timestamp;
* `is_first` and `is_last` are not written: the episode boundaries say them;
* episode-level fields (metadata) are columns `rlds/<path>` of the episodes table, except
  the reader's own `episode_index` and `fps`;
* what cannot be held is refused, naming the field: a string array, an RGBA frame, a
  field whose per-step shape is unknown, a name with a '.', a tuple or list nest, one of
  LeRobot's own column names.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from rlds_reverb.core import types
from rlds_reverb.core.errors import LeRobotExportError
from rlds_reverb.read import lerobot_meta as meta

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

_CAMERA_NAMES = ['height', 'width', 'channels']
_RESERVED = (*meta.DEFAULT_FEATURES, meta.TASK)
_FLAGS_FROM_BOUNDARIES = (types.IS_FIRST, types.IS_LAST)
# Episode fields the LeRobot reader adds: LeRobot keeps them itself (info.json, its columns).
_READER_EPISODE_FIELDS = (types.EPISODE_INDEX, types.FPS)
# Aimed-at file sizes (LeRobot's defaults), for the default number of frames per file.
_DATA_FILE_BYTES, _VIDEO_FILE_BYTES = 100 * 2**20, 200 * 2**20
_PNG_RATIO, _VIDEO_RATIO = 2, 20  # Rough compression of camera frames, for those sizes.
_MIN_FRAMES_PER_FILE, _MAX_FRAMES_PER_FILE = 1_000, 100_000


class Kind(enum.Enum):
    """What a LeRobot feature holds."""

    NUMERIC = 'numeric'
    STRING = 'string'
    CAMERA = 'camera'


@dataclasses.dataclass(frozen=True)
class Column:
    """One LeRobot feature written from one RLDS step field.

    Fields:
      name: The feature name.
      path: The step field's key path.
      kind: What it holds.
      dtype: info.json's dtype ('float32', 'image', 'video', 'string', ...).
      step_shape: The step field's per-step shape.
      names: Per-dimension names for info.json (or None).
    """

    name: str
    path: tuple[str, ...]
    kind: Kind
    dtype: str
    step_shape: tuple[int, ...]
    names: Any = None

    @property
    def shape(self) -> list[int]:
        """The feature's shape in info.json: a camera's [H, W, C], `[1]` for a scalar."""
        if self.kind is Kind.CAMERA:
            return list(self.step_shape)
        return [int(np.prod(self.step_shape, dtype=np.int64))] if self.step_shape else [1]

    @property
    def is_video(self) -> bool:
        """Whether it is stored as video (not in the data files)."""
        return self.dtype == meta.VIDEO

    def arrow_type(self) -> Any:
        """The Arrow type of its data column (not for videos)."""
        import pyarrow as pa

        if self.dtype == meta.IMAGE:
            return pa.struct([('bytes', pa.binary()), ('path', pa.string())])
        if self.dtype == meta.STRING:
            return pa.string()
        value = pa.from_numpy_dtype(np.dtype(self.dtype))
        return value if self.shape == [1] else pa.list_(value, self.shape[0])

    def hf_feature(self) -> dict:
        """Its `datasets` feature, as LeRobot's data files describe it."""
        if self.dtype == meta.IMAGE:
            return {'_type': 'Image'}
        value = {'dtype': self.dtype, '_type': 'Value'}
        if self.shape == [1]:
            return value
        return {'feature': value, 'length': self.shape[0], '_type': 'List'}

    def feature(self) -> dict:
        """Its entry in info.json (without a video's `info`)."""
        return {'dtype': self.dtype, 'shape': self.shape, 'names': self.names}


@dataclasses.dataclass(frozen=True)
class EpisodeColumn:
    """An episode-level field written as a column of the episodes table."""

    column: str
    path: tuple[str, ...]
    dtype: str
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Plan:
    """What is written of each field of the source's episodes.

    Fields:
      columns: The features from step fields, in order (`next.done` included).
      task_path: The step field that holds the tasks, or None (every frame gets
        `default_task`).
      timestamp_path: The step field used as LeRobot's timestamp, or None (frame / fps).
      episode_columns: Episode-level fields, as columns of the episodes table.
      notes: One line per step or episode field not written as a feature, saying why.
    """

    columns: tuple[Column, ...]
    task_path: tuple[str, ...] | None
    timestamp_path: tuple[str, ...] | None
    episode_columns: tuple[EpisodeColumn, ...]
    notes: tuple[str, ...]

    @property
    def cameras(self) -> list[Column]:
        """The camera features."""
        return [c for c in self.columns if c.kind is Kind.CAMERA]

    def features(self) -> dict[str, dict]:
        """info.json's features: the columns, then LeRobot's five own ones."""
        features = {c.name: c.feature() for c in self.columns}
        features[meta.TIMESTAMP] = {'dtype': 'float32', 'shape': [1], 'names': None}
        for name in (meta.FRAME_INDEX, meta.EPISODE_INDEX, meta.INDEX, meta.TASK_INDEX):
            features[name] = {'dtype': 'int64', 'shape': [1], 'names': None}
        return features

    def data_schema(self) -> Any:
        """The Arrow schema of the data files, with LeRobot's `huggingface` metadata."""
        import pyarrow as pa

        stored = [c for c in self.columns if not c.is_video]
        fields = [pa.field(c.name, c.arrow_type()) for c in stored]
        fields.append(pa.field(meta.TIMESTAMP, pa.float32()))
        fields += [pa.field(n, pa.int64()) for n in meta.DEFAULT_FEATURES[1:]]
        hf = {c.name: c.hf_feature() for c in stored}
        hf[meta.TIMESTAMP] = {'dtype': 'float32', '_type': 'Value'}
        hf.update({n: {'dtype': 'int64', '_type': 'Value'} for n in meta.DEFAULT_FEATURES[1:]})
        described = {'info': {'features': hf}, 'fingerprint': _fingerprint(hf)}
        return pa.schema(fields, metadata={'huggingface': json.dumps(described)})

    def record(self) -> dict:
        """What our record (meta/rlds_reverb.json) says of the fields, for the reader."""
        shapes = {
            c.name: {'shape': list(c.step_shape)}
            for c in self.columns
            # Where the reader's rule (scalar for [1], else the shape) would not give it back.
            if c.kind is not Kind.CAMERA
            and c.step_shape != (() if c.shape == [1] else tuple(c.shape))
        }
        episode = {
            c.column: {'dtype': c.dtype, 'shape': list(c.shape)} for c in self.episode_columns
        }
        return {'fields': shapes, 'episode_fields': episode, 'not_written': list(self.notes)}


def _fingerprint(value: Any) -> str:
    import hashlib

    text = json.dumps(value, sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def _walk(nest: Any, prefix: tuple[str, ...], *, where: str) -> list[tuple[tuple[str, ...], Any]]:
    """Returns `(path, spec)` of every leaf of a dict nest, in the nest's order."""
    if isinstance(nest, Mapping):
        leaves = []
        for key, value in nest.items():
            if not isinstance(key, str) or meta.SEPARATOR in key or '/' in key or not key:
                raise LeRobotExportError(
                    f'{where}: field {"/".join((*prefix, str(key)))!r} has a key with a "." '
                    'or "/" (LeRobot names nest with dots): rename it before writing.'
                )
            leaves += _walk(value, (*prefix, key), where=where)
        return leaves
    if isinstance(nest, tuple | list):
        raise LeRobotExportError(
            f'{where}: field {"/".join(prefix)!r} is a {type(nest).__name__} of fields; '
            'LeRobot features are named, so use a dict.'
        )
    return [(prefix, nest)]


def _step_shape(path: tuple[str, ...], spec: tf.TensorSpec, *, where: str) -> tuple[int, ...]:
    shape = spec.shape
    if shape.rank is None or shape[1:].num_elements() is None:
        raise LeRobotExportError(
            f'{where}: step field {"/".join(path)!r} has shape {shape} per episode; a LeRobot '
            'feature has one fixed shape per frame. Give it one (tf.ensure_shape) first.'
        )
    return tuple(int(d) for d in shape[1:])


def _camera_dtype(shape: tuple[int, ...], video: bool, path: tuple[str, ...], where: str) -> str:
    channels = shape[2]
    if channels == 3 or (channels == 1 and not video):
        return meta.VIDEO if video else meta.IMAGE
    raise LeRobotExportError(
        f'{where}: step field {"/".join(path)!r} holds uint8 frames of {channels} channel(s); '
        'LeRobot cameras are RGB (or greyscale in image mode). Convert them first, or pass '
        'them as another dtype to store them as numbers.'
    )


def _make_column(
    path: tuple[str, ...], spec: tf.TensorSpec, *, video: bool, names: Any, where: str
) -> Column:
    shape = _step_shape(path, spec, where=where)
    name = meta.to_feature_name(path)
    if spec.dtype == tf.string:
        if shape:
            raise LeRobotExportError(
                f'{where}: step field {"/".join(path)!r} holds strings of shape {list(shape)} '
                'per step; LeRobot stores one string per frame. Join them first.'
            )
        return Column(name, path, Kind.STRING, meta.STRING, shape, names)
    if spec.dtype == tf.uint8 and len(shape) == 3:
        dtype = _camera_dtype(shape, video, path, where)
        return Column(name, path, Kind.CAMERA, dtype, shape, names or list(_CAMERA_NAMES))
    if not (spec.dtype.is_integer or spec.dtype.is_floating or spec.dtype.is_bool):
        raise LeRobotExportError(f'{where}: step field {"/".join(path)!r} is {spec.dtype.name}.')
    return Column(name, path, Kind.NUMERIC, spec.dtype.name, shape, names)


def _episode_columns(element_spec: Mapping, *, where: str) -> tuple[EpisodeColumn, ...]:
    found = []
    for key, value in element_spec.items():
        if key == types.STEPS or key in _READER_EPISODE_FIELDS:
            continue
        for path, spec in _walk({key: value}, (), where=where):
            if spec.shape.num_elements() is None:
                raise LeRobotExportError(
                    f'{where}: episode field {"/".join(path)!r} has shape {spec.shape}; '
                    'write episode fields of a fixed shape only.'
                )
            dtype = meta.STRING if spec.dtype == tf.string else spec.dtype.name
            column = meta.EPISODE_FIELD_PREFIX + '/'.join(path)
            found.append(EpisodeColumn(column, path, dtype, tuple(spec.shape.as_list())))
    return tuple(found)


def make_plan(
    element_spec: Mapping,
    *,
    video: bool,
    task_field: str,
    names: Mapping[str, Any],
    leave_out: Sequence[str] = (),
    where: str,
) -> Plan:
    """Returns what is written of whole episodes of `element_spec` (module docstring).

    Args:
      element_spec: Whole episodes' spec (steps as `[T, ...]` specs).
      video: Cameras as video (else PNG images).
      task_field: The step field (a `/` path) holding each step's task.
      names: Per-dimension names by feature name or step path, for info.json.
      leave_out: Step fields (`/` paths) not to write (the reader made them up).
      where: The source, for messages.

    Raises:
      LeRobotExportError: If a field cannot be held by LeRobot (the module docstring
        lists which).
    """
    task_path = tuple(task_field.strip('/').split('/'))
    columns: list[Column] = []
    notes: list[str] = []
    plan_task = plan_time = None
    for path, spec in _walk(element_spec[types.STEPS], (), where=where):
        key = '/'.join(path)
        if key in leave_out:
            notes.append(f'{key}: not written (the LeRobot reader made it up)')
        elif path in [(flag,) for flag in _FLAGS_FROM_BOUNDARIES]:
            notes.append(f'{key}: not written (the episode boundaries say it)')
        elif path == task_path and spec.dtype == tf.string and spec.shape.rank == 1:
            plan_task = path
        elif path == (types.TIMESTAMP,) and spec.dtype == tf.float32 and spec.shape.rank == 1:
            plan_time = path
        else:
            name = meta.to_feature_name(path)
            if name in _RESERVED or name in [c.name for c in columns]:
                raise LeRobotExportError(
                    f'{where}: step field {key!r} would be LeRobot feature {name!r}, which '
                    'LeRobot (or another step field) writes already; rename it first.'
                )
            given = names.get(name, names.get(key))
            column = _make_column(path, spec, video=video, names=given, where=where)
            if path == (types.IS_TERMINAL,):
                column = dataclasses.replace(column, names=None)
            columns.append(column)
    episode_columns = _episode_columns(element_spec, where=where)
    return Plan(tuple(columns), plan_task, plan_time, episode_columns, tuple(notes))


def default_frames_per_file(plan: Plan) -> int:
    """About 100 MB of data (or 200 MB of video) per file, as LeRobot aims for."""
    data = video = 0
    for column in plan.columns:
        size = (
            int(np.prod(column.shape))
            * np.dtype(
                'uint8'
                if column.kind is Kind.CAMERA
                else 'float64'
                if column.kind is Kind.STRING
                else column.dtype
            ).itemsize
        )
        if column.is_video:
            video += size // _VIDEO_RATIO
        else:
            data += size // (_PNG_RATIO if column.kind is Kind.CAMERA else 1)
    by_data = _DATA_FILE_BYTES // max(data + 40, 1)  # + LeRobot's own five columns.
    by_video = _VIDEO_FILE_BYTES // video if video else _MAX_FRAMES_PER_FILE
    return int(min(max(min(by_data, by_video), _MIN_FRAMES_PER_FILE), _MAX_FRAMES_PER_FILE))
