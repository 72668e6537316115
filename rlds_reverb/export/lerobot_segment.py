"""One segment of a LeRobot dataset: consecutive episodes sharing one file of each kind.

A segment k holds episodes a .. b - 1 in `data/chunk-C/file-F.parquet` (one row group per
episode, as LeRobot writes), `videos/<camera>/chunk-C/file-F.mp4` (video mode) and
`meta/episodes/chunk-C/file-F.parquet`, with (C, F) = divmod(k, chunks_size); LeRobot reads
each episode's files from the episodes table, so files need not be aligned, and aligning
them lets a segment be written, resumed or given to another process on its own
(`rlds_reverb.export.lerobot`). `SegmentWriter.add` turns one whole RLDS episode into its
frames (`lerobot_schema.Plan` says what each field becomes), their statistics
(`lerobot_stats`) and its row of the episodes table.
"""

from __future__ import annotations

import dataclasses
import io
import pathlib
from collections.abc import Mapping, Sequence
from concurrent import futures
from typing import Any

import numpy as np

from rlds_reverb.check import rules
from rlds_reverb.core import types
from rlds_reverb.core.errors import LeRobotExportError
from rlds_reverb.export import lerobot_stats, lerobot_video
from rlds_reverb.export.lerobot_schema import Column, Kind, Plan
from rlds_reverb.read import lerobot_meta as meta

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

CHUNKS_SIZE = 1000
PNG_COMPRESS_LEVEL = 6  # LeRobot's for image features: Pillow then writes the same bytes.
_STATS_SEPARATOR = '|'


class TaskTable:
    """Task strings and their indices, in order of first appearance."""

    def __init__(self, tasks: Sequence[str] = ()):
        self.tasks: list[str] = list(tasks)
        self._index = {task: i for i, task in enumerate(self.tasks)}

    def find(self, strings: Sequence[str]) -> np.ndarray:
        """Returns the index of each string, adding new ones in order."""
        indices = np.empty(len(strings), np.int64)
        for i, task in enumerate(strings):
            index = self._index.get(task)
            if index is None:
                index = self._index[task] = len(self.tasks)
                self.tasks.append(task)
            indices[i] = index
        return indices


@dataclasses.dataclass(frozen=True)
class Segment:
    """Where segment `number` starts: its first episode and first frame (global)."""

    number: int
    first_episode: int
    first_frame: int

    def path(self, template: str, **keys: Any) -> str:
        """The path of one of its files from a LeRobot path template."""
        chunk, file = divmod(self.number, CHUNKS_SIZE)
        return template.format(chunk_index=chunk, file_index=file, **keys)

    @property
    def indices(self) -> tuple[int, int]:
        """Its (chunk_index, file_index)."""
        return divmod(self.number, CHUNKS_SIZE)


def encode_png(frame: np.ndarray) -> bytes:
    """Returns one uint8 frame as PNG bytes, as LeRobot writes an image feature's."""
    from PIL import Image  # Only image mode needs it.

    image = Image.fromarray(frame[..., 0] if frame.shape[-1] == 1 else frame)
    buffer = io.BytesIO()
    image.save(buffer, format='PNG', compress_level=PNG_COMPRESS_LEVEL)
    return buffer.getvalue()


def _get(nest: Mapping, path: Sequence[str]) -> Any:
    for key in path:
        nest = nest[key]
    return nest


def _stats_lists(stats: Mapping[str, np.ndarray]) -> dict[str, list]:
    """Statistics as the episodes table stores them: floats, counts as ints."""
    return {
        name: np.asarray(stats[name], np.int64 if name == 'count' else np.float64).tolist()
        for name in lerobot_stats.STAT_NAMES
    }


def episode_schema(plan: Plan, stats_features: Sequence[tuple[str, bool]]) -> Any:
    """The Arrow schema of the episodes table (LeRobot's columns, then episode fields)."""
    import pyarrow as pa

    integer, real = pa.int64(), pa.float64()
    fields = [
        ('episode_index', integer),
        (meta.TASKS_COLUMN, pa.list_(pa.string())),
        (meta.LENGTH, integer),
        ('data/chunk_index', integer),
        ('data/file_index', integer),
        (meta.FROM_INDEX, integer),
        (meta.TO_INDEX, integer),
    ]
    for camera in plan.cameras:
        if camera.is_video:
            key = camera.name
            fields += [(meta.VIDEO_CHUNK.format(key=key), integer)]
            fields += [(meta.VIDEO_FILE.format(key=key), integer)]
            fields += [(meta.VIDEO_FROM.format(key=key), real)]
            fields += [(meta.VIDEO_TO.format(key=key), real)]
    for name, is_camera in stats_features:
        value = pa.list_(pa.list_(pa.list_(real))) if is_camera else pa.list_(real)
        for stat in lerobot_stats.STAT_NAMES:
            fields.append((f'stats/{name}/{stat}', pa.list_(integer) if stat == 'count' else value))
    fields += [('meta/episodes/chunk_index', integer), ('meta/episodes/file_index', integer)]
    for column in plan.episode_columns:
        value = pa.string() if column.dtype == meta.STRING else pa.from_numpy_dtype(column.dtype)
        fields.append((column.column, pa.list_(value) if column.shape else value))
    return pa.schema(fields)


def stats_features(plan: Plan) -> list[tuple[str, bool]]:
    """The features with statistics, in info.json's order: (name, is a camera)."""
    named = [(c.name, c.kind is Kind.CAMERA) for c in plan.columns if c.kind is not Kind.STRING]
    return named + [(name, False) for name in meta.DEFAULT_FEATURES]


class SegmentWriter:
    """Writes the episodes of one segment into a staging directory.

    Args:
      root: The dataset being written (its staging directory).
      plan: What each field becomes.
      segment: Which segment.
      fps: Frames per second.
      tasks: The task table (shared across segments; grows as tasks appear).
      default_task: Every frame's task when the plan has no task field.
      pool: Threads that encode PNG frames (image mode), or None.
    """

    def __init__(
        self,
        root: pathlib.Path,
        plan: Plan,
        segment: Segment,
        *,
        fps: int,
        tasks: TaskTable,
        default_task: str,
        pool: futures.Executor | None = None,
    ):
        self._root, self._plan, self.segment = root, plan, segment
        self._fps, self._tasks, self._default_task, self._pool = fps, tasks, default_task, pool
        self._data: Any = None
        self._videos: dict[str, lerobot_video.VideoWriter] = {}
        self._rows: list[dict] = []
        self._stats: dict[str, np.ndarray] = {}
        self.frames = 0

    @property
    def episodes(self) -> int:
        """Episodes added so far."""
        return len(self._rows)

    def _open(self) -> Any:
        """Opens the segment's data file (returned) and video files."""
        import pyarrow.parquet as pq

        path = self._root / self.segment.path(meta.DATA_PATH)
        path.parent.mkdir(parents=True, exist_ok=True)
        schema = self._plan.data_schema()
        data = pq.ParquetWriter(path, schema, compression='snappy', use_dictionary=True)
        for camera in self._plan.cameras:
            if camera.is_video:
                video = self._root / self.segment.path(meta.VIDEO_PATH, video_key=camera.name)
                video.parent.mkdir(parents=True, exist_ok=True)
                self._videos[camera.name] = lerobot_video.VideoWriter(
                    video, fps=self._fps, shape=camera.step_shape, camera=camera.name
                )
        return data

    def add(self, episode: Mapping[str, Any]) -> None:
        """Writes one whole episode (NumPy `[T, ...]` steps) after the ones added before."""
        import pyarrow as pa

        if self._data is None:
            self._data = self._open()
        steps = episode[types.STEPS]
        length = len(steps[types.IS_FIRST])
        index = self.segment.first_episode + self.episodes
        first = self.segment.first_frame + self.frames
        time, time_for_stats = self._timestamps(steps, length)  # Checked before encoding.
        columns, stats = self._frame_columns(steps, length)
        task_index = self._tasks.find(self._task_strings(steps, length))
        defaults = {
            meta.TIMESTAMP: time_for_stats,
            meta.FRAME_INDEX: np.arange(length, dtype=np.int64),
            meta.EPISODE_INDEX: np.full(length, index, np.int64),
            meta.INDEX: np.arange(first, first + length, dtype=np.int64),
            meta.TASK_INDEX: task_index,
        }
        arrays = [*columns, pa.array(time, pa.float32())]
        arrays += [pa.array(defaults[name], pa.int64()) for name in meta.DEFAULT_FEATURES[1:]]
        self._data.write_table(pa.Table.from_arrays(arrays, schema=self._plan.data_schema()))
        stats.update({name: lerobot_stats.numeric_stats(v) for name, v in defaults.items()})
        self._record(index, first, length, task_index, stats, episode)
        self.frames += length

    def _frame_columns(self, steps: Mapping, length: int) -> tuple[list, dict]:
        """Returns the Arrow arrays of the stored features, and every feature's stats."""
        import pyarrow as pa

        arrays, stats = [], {}
        for column in self._plan.columns:
            values = np.asarray(_get(steps, column.path))
            if column.kind is Kind.CAMERA:
                stats[column.name] = lerobot_stats.image_stats(values)
                if column.is_video:
                    self._videos[column.name].add(values)
                else:
                    arrays.append(self._images(values))
                continue
            if column.kind is Kind.STRING:
                arrays.append(pa.array([_text(v) for v in values], pa.string()))
                continue
            flat = values.reshape(length, -1) if column.shape != [1] else values.reshape(length)
            stats[column.name] = lerobot_stats.numeric_stats(flat)
            arrays.append(_numeric_array(flat, column))
        return arrays, stats

    def _images(self, frames: np.ndarray) -> Any:
        import pyarrow as pa

        blobs = list(self._pool.map(encode_png, frames) if self._pool else map(encode_png, frames))
        paths = [f'frame-{i:06d}.png' for i in range(len(frames))]
        return pa.StructArray.from_arrays(
            [pa.array(blobs, pa.binary()), pa.array(paths, pa.string())], names=['bytes', 'path']
        )

    def _timestamps(self, steps: Mapping, length: int) -> tuple[np.ndarray, np.ndarray]:
        """Returns the stored float32 timestamps, and the values LeRobot's stats would see."""
        exact = np.arange(length) / self._fps  # LeRobot's: frame / fps in float64.
        if self._plan.timestamp_path is None:
            return exact.astype(np.float32), exact
        given = np.asarray(_get(steps, self._plan.timestamp_path), np.float32)
        same = np.array_equal(given, exact.astype(np.float32))
        off = np.abs(given.astype(np.float64) - exact)
        if self._videos and off.max(initial=0.0) >= lerobot_video.TOLERANCE_S / 2:
            raise LeRobotExportError(
                f'Episode {self.segment.first_episode + self.episodes}: its timestamp field '
                f'differs from frame / fps by up to {off.max():.6f} s (at frame '
                f'{int(off.argmax())}); video mode places frame k at k / fps, where LeRobot '
                'looks frames up by timestamp. Write image mode, or drop the field.'
            )
        return given, exact if same else given

    def _task_strings(self, steps: Mapping, length: int) -> list[str]:
        if self._plan.task_path is None:
            return [self._default_task] * length
        return [_text(v) for v in np.asarray(_get(steps, self._plan.task_path))]

    def _record(self, index, first, length, task_index, stats, episode) -> None:
        chunk, file = self.segment.indices
        row: dict[str, Any] = {
            'episode_index': index,
            meta.TASKS_COLUMN: [self._tasks.tasks[i] for i in dict.fromkeys(task_index.tolist())],
            meta.LENGTH: length,
            'data/chunk_index': chunk,
            'data/file_index': file,
            meta.FROM_INDEX: first,
            meta.TO_INDEX: first + length,
        }
        start_s = (first - self.segment.first_frame) / self._fps
        for name in self._videos:
            row[meta.VIDEO_CHUNK.format(key=name)] = chunk
            row[meta.VIDEO_FILE.format(key=name)] = file
            row[meta.VIDEO_FROM.format(key=name)] = start_s
            row[meta.VIDEO_TO.format(key=name)] = start_s + length / self._fps
        for name, _ in stats_features(self._plan):
            for stat, value in _stats_lists(stats[name]).items():
                row[f'stats/{name}/{stat}'] = value
                self._stats[_STATS_SEPARATOR.join((str(index), name, stat))] = stats[name][stat]
        row['meta/episodes/chunk_index'], row['meta/episodes/file_index'] = chunk, file
        for column in self._plan.episode_columns:
            found = np.asarray(_get(episode, column.path))
            row[column.column] = _episode_value(found, column.dtype)
        self._rows.append(row)

    def close(self, stats_path: pathlib.Path) -> dict[str, lerobot_video.Quality]:
        """Finishes the segment's files; saves its episodes' statistics to `stats_path`.

        Returns:
          Each video camera's `Quality`.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._data is None:
            return {}
        self._data.close()
        quality = {name: video.close() for name, video in self._videos.items()}
        path = self._root / self.segment.path(meta.EPISODES_PATH)
        path.parent.mkdir(parents=True, exist_ok=True)
        schema = episode_schema(self._plan, stats_features(self._plan))
        pq.write_table(pa.Table.from_pylist(self._rows, schema=schema), path, compression='snappy')
        with open(stats_path, 'wb') as out:
            np.savez(out, **self._stats)
        return quality

    def abort(self) -> None:
        """Closes what is open, after an error (the segment is written again later)."""
        if self._data is not None:
            self._data.close()
        for video in self._videos.values():
            video.abort()


def read_segment_stats(path: pathlib.Path) -> dict[int, dict[str, dict[str, np.ndarray]]]:
    """Returns the per-episode statistics a segment saved: {episode: {feature: stats}}."""
    found: dict[int, dict[str, dict[str, np.ndarray]]] = {}
    with np.load(path, allow_pickle=False) as saved:
        for key in saved.files:
            episode, name, stat = key.split(_STATS_SEPARATOR)
            found.setdefault(int(episode), {}).setdefault(name, {})[stat] = saved[key]
    return found


def _text(value: Any) -> str:
    return value.decode('utf-8') if isinstance(value, bytes) else str(value)


def _numeric_array(values: np.ndarray, column: Column) -> Any:
    import pyarrow as pa

    dtype = np.dtype(column.dtype)
    if column.shape == [1]:
        return pa.array(values.astype(dtype, copy=False))
    flat = pa.array(values.astype(dtype, copy=False).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, column.shape[0])


def _episode_value(value: np.ndarray, dtype: str) -> Any:
    if dtype == meta.STRING:
        texts = [_text(v) for v in value.reshape(-1)]
        return texts if value.ndim else texts[0]
    return value.reshape(-1).tolist() if value.ndim else value.item()


def find_problem(steps: dict, index: int) -> str | None:
    """Returns the first way an episode breaks the validation rules, or None if valid."""
    length = len(steps[types.IS_FIRST])
    if length == 0:
        return f'episode {index} has no step (rule {rules.Rule.NON_EMPTY.rule_id})'
    at = rules.StepIndex(np.arange(length), length - 1)
    checked = rules.list_step_checks(steps)
    masks = rules.evaluate_step_checks(rules.NUMPY, at, steps)
    for (rule, field), mask in zip(checked, masks, strict=True):
        broken = np.flatnonzero(np.asarray(mask))
        if broken.size:
            return rules.format_problem(index, f'step {broken[0]}', field, rule, rule.hint)
    return None
