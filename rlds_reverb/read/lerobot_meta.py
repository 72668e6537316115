"""A LeRobot v3.0 dataset's metadata, read in NumPy: info.json, the tasks, the episodes table.

A LeRobot dataset directory (the folder holding `meta/info.json`; docs/lerobot.md) holds:
`meta/info.json` (the format version, fps, every feature with its dtype, shape and names,
the totals and path templates), `meta/tasks.parquet` (task_index -> task string),
`meta/episodes/chunk-*/file-*.parquet` (one row per episode: its rows in the data files,
its place in each camera's video), `data/chunk-*/file-*.parquet` (one row per frame,
`rlds_reverb.read.lerobot_data`) and, in video mode, `videos/<camera>/chunk-*/file-*.mp4`
(`rlds_reverb.read.lerobot_video`). This module reads the metadata and checks it against
itself; every error is a `LeRobotFormatError` naming the file and the key or column.

It also holds the vocabulary shared with the writer (`rlds_reverb.export.lerobot`): LeRobot's
own column names and the mapping of feature names to RLDS step fields (`to_rlds_path`,
`to_feature_name`): a dotted name is a nested field (`observation.images.front` is
`observation/images/front`), `next.reward` is `reward`, `next.done` (on the last frame)
is `is_terminal`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlds_reverb.core import types
from rlds_reverb.core.errors import LeRobotFormatError

# Helpers of the package's other modules only (`load` reads LeRobot datasets): nothing public.
__all__: list[str] = []

INFO = 'meta/info.json'
LEGACY_INFO = 'meta_data/info.json'  # LeRobot's format v1.x (data as Arrow files).
TASKS = 'meta/tasks.parquet'
EPISODES_DIR = 'meta/episodes'
DATA_DIR = 'data'
STATS = 'meta/stats.json'
# Our own record beside LeRobot's files (written by the writer; LeRobot ignores it).
RECORD = 'meta/rlds_reverb.json'
DATA_PATH = 'data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet'
VIDEO_PATH = 'videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4'
EPISODES_PATH = 'meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet'
CODEBASE_VERSION = 'v3.0'

# LeRobot's own per-frame columns, in the order it writes them after the user's features.
TIMESTAMP = 'timestamp'
FRAME_INDEX = 'frame_index'
EPISODE_INDEX = 'episode_index'
INDEX = 'index'
TASK_INDEX = 'task_index'
DEFAULT_FEATURES = (TIMESTAMP, FRAME_INDEX, EPISODE_INDEX, INDEX, TASK_INDEX)
# LeRobot's RL names: the reward of a frame's transition, and the end of a terminated episode.
NEXT_REWARD = 'next.reward'
NEXT_DONE = 'next.done'
# Feature dtypes that are not NumPy dtypes.
IMAGE = 'image'
VIDEO = 'video'
STRING = 'string'
LANGUAGE = 'language'
SEPARATOR = '.'
# Columns of the episodes table.
LENGTH = 'length'
FROM_INDEX = 'dataset_from_index'
TO_INDEX = 'dataset_to_index'
TASKS_COLUMN = 'tasks'
TASK = 'task'
VIDEO_CHUNK = 'videos/{key}/chunk_index'
VIDEO_FILE = 'videos/{key}/file_index'
VIDEO_FROM = 'videos/{key}/from_timestamp'
VIDEO_TO = 'videos/{key}/to_timestamp'
# Episode-level fields of an RLDS source, as columns of the episodes table (our writer's).
EPISODE_FIELD_PREFIX = 'rlds/'

_UPGRADE = (
    'Upgrade it with LeRobot (Python >= 3.12): `pip install "lerobot[dataset]"`, then '
    '`python -m lerobot.scripts.convert_dataset_v21_to_v30 --repo-id=<any/name> '
    '--root={root} --push-to-hub=false` (it converts in place and keeps the old copy as '
    '{root}_old); a v2.0 dataset must first be converted to v2.1 with an older LeRobot '
    '(lerobot/datasets/v21/convert_dataset_v20_to_v21.py), and a v1.x dataset (meta_data/) to '
    'v2.0 before that (lerobot/common/datasets/v2/convert_dataset_v1_to_v2.py, LeRobot of '
    'late 2024).'
)


def to_rlds_path(name: str) -> tuple[str, ...]:
    """Returns the RLDS step field of a LeRobot feature (`observation.state` ->
    `('observation', 'state')`; `next.reward` -> `('reward',)`)."""
    if name == NEXT_REWARD:
        return (types.REWARD,)
    return tuple(name.split(SEPARATOR))


def to_feature_name(path: Sequence[str]) -> str:
    """Returns the LeRobot feature of an RLDS step field: the inverse of `to_rlds_path`
    (`('reward',)` -> `next.reward`, `('is_terminal',)` -> `next.done`)."""
    if tuple(path) == (types.REWARD,):
        return NEXT_REWARD
    if tuple(path) == (types.IS_TERMINAL,):
        return NEXT_DONE
    return SEPARATOR.join(path)


@dataclasses.dataclass(frozen=True)
class Feature:
    """One feature of info.json.

    Fields:
      name: Its name (`observation.images.front`).
      dtype: A NumPy dtype name, or 'image', 'video', 'string', 'language'.
      shape: Its shape as info.json gives it (`[1]` is a scalar column).
      names: Per-dimension names (joint names), as info.json gives them (or None).
      info: A video's encoding details (or None).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    names: Any = None
    info: Mapping[str, Any] | None = None

    @property
    def is_camera(self) -> bool:
        """Whether this is an image or video feature."""
        return self.dtype in (IMAGE, VIDEO)

    @property
    def is_scalar(self) -> bool:
        """Whether this is a numeric or string feature stored as a scalar column (shape [1])."""
        return not self.is_camera and self.shape == (1,)

    def frame_shape(self, *, where: str) -> tuple[int, int, int]:
        """Returns a camera's decoded frame shape (height, width, channels).

        The order of `shape` is read from `names` ('height', 'width', 'channel(s)'), else
        taken as HWC when the last dimension looks like channels, else CHW.

        Raises:
          LeRobotFormatError: If the shape is not three dimensions.
        """
        if len(self.shape) != 3:
            raise LeRobotFormatError(
                f'{where}: camera feature {self.name!r} has shape {list(self.shape)}; '
                'expected [height, width, channels].'
            )
        names = [str(n).lower() for n in self.names] if isinstance(self.names, list) else []
        if len(names) == 3 and {'height', 'width'} <= set(names):
            channel = next((n for n in names if n.startswith('channel')), None)
            if channel is not None:
                order = [names.index('height'), names.index('width'), names.index(channel)]
                height, width, channels = (self.shape[i] for i in order)
                return height, width, channels
        if self.shape[-1] in (1, 3, 4):
            return self.shape[0], self.shape[1], self.shape[2]
        return self.shape[1], self.shape[2], self.shape[0]


@dataclasses.dataclass(frozen=True)
class Info:
    """What info.json says, checked.

    Fields:
      root: The dataset directory.
      version: `codebase_version` ('v3.0').
      fps: Frames per second.
      features: Every feature, in info.json's order.
      total_episodes: Episodes in the dataset.
      total_frames: Frames in the dataset.
      data_path: The template of data file paths.
      video_path: The template of video file paths (None in image mode).
      robot_type: The robot's name, or None.
      splits: Named episode ranges ({'train': (0, total_episodes)}).
      record: Our writer's record (`meta/rlds_reverb.json`), or {} for other datasets.
    """

    root: pathlib.Path
    version: str
    fps: float
    features: Mapping[str, Feature]
    total_episodes: int
    total_frames: int
    data_path: str
    video_path: str | None
    robot_type: str | None
    splits: Mapping[str, tuple[int, int]]
    record: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def cameras(self) -> list[Feature]:
        """The image and video features, in info.json's order."""
        return [f for f in self.features.values() if f.is_camera]

    @property
    def video_keys(self) -> list[str]:
        """The names of the video features, in info.json's order."""
        return [f.name for f in self.features.values() if f.dtype == VIDEO]


def find_root(source: Any) -> pathlib.Path | None:
    """Returns the dataset directory of `source` (it, holding meta/info.json, or v1.x's
    meta_data/info.json: refused by `read_info`, naming the upgrade), else None."""
    if not isinstance(source, str | os.PathLike):
        return None
    try:
        root = pathlib.Path(source).expanduser()
        return root if (root / INFO).is_file() or (root / LEGACY_INFO).is_file() else None
    except (OSError, ValueError):
        return None


def _load_json(path: pathlib.Path) -> Any:
    try:
        return json.loads(path.read_text(encoding='utf-8'))
    except FileNotFoundError as e:
        raise LeRobotFormatError(f'{path} is missing.') from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LeRobotFormatError(f'{path} is not readable JSON ({e}).') from e


def _check_version(version: Any, root: pathlib.Path, where: str = INFO) -> str:
    """Returns a v3.x `codebase_version`; raises naming the versions read and the upgrade."""
    text = str(version)
    major = text.lstrip('v').split('.')[0]
    if major == '3':
        return text
    raise LeRobotFormatError(
        f'The LeRobot dataset {root} is format {text} ({where} codebase_version); rlds-reverb '
        f'reads format {CODEBASE_VERSION} (and later v3.x), which LeRobot >= 0.4 writes. '
        + _UPGRADE.format(root=root)
    )


def _get(info: Mapping, key: str, kind: type | tuple, path: pathlib.Path) -> Any:
    value = info.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise LeRobotFormatError(f'{path}: {key!r} is {value!r}; expected a {kind}.')
    return value


def _read_feature(name: str, spec: Any, path: pathlib.Path) -> Feature:
    if not isinstance(spec, Mapping) or not isinstance(spec.get('dtype'), str):
        raise LeRobotFormatError(f'{path}: feature {name!r} has no dtype ({spec!r}).')
    shape = spec.get('shape')
    if not isinstance(shape, list | tuple) or not all(isinstance(d, int) for d in shape):
        raise LeRobotFormatError(f'{path}: feature {name!r} has shape {shape!r}; expected ints.')
    dtype = spec['dtype']
    if dtype not in (IMAGE, VIDEO, STRING, LANGUAGE):
        try:
            np.dtype(dtype)
        except TypeError as e:
            raise LeRobotFormatError(f'{path}: feature {name!r} has dtype {dtype!r}.') from e
    if '/' in name or '' in name.split(SEPARATOR):
        raise LeRobotFormatError(
            f'{path}: feature name {name!r} has a "/" or an empty part between dots.'
        )
    return Feature(name, dtype, tuple(shape), spec.get('names'), spec.get('info'))


def _read_splits(value: Any, total: int, path: pathlib.Path) -> dict[str, tuple[int, int]]:
    splits = {'train': (0, total)}
    for name, text in (value or {}).items():
        try:
            first, last = (int(part) for part in str(text).split(':'))
        except ValueError as e:
            raise LeRobotFormatError(f'{path}: split {name!r} is {text!r}; expected "a:b".') from e
        if not 0 <= first <= last <= total:
            raise LeRobotFormatError(
                f'{path}: split {name!r} is {text!r}, outside the {total} episodes.'
            )
        splits[name] = (first, last)
    return splits


def read_info(root: pathlib.Path) -> Info:
    """Returns the dataset's info.json (and our writer's record, when there is one), checked.

    Raises:
      LeRobotFormatError: If info.json is missing or not JSON, its version is not v3.x
        (v1.x: meta_data/info.json; the message says how to upgrade), or a key is missing
        or of the wrong type.
    """
    path = root / INFO
    if not path.is_file() and (root / LEGACY_INFO).is_file():  # Format v1.x.
        legacy = _load_json(root / LEGACY_INFO)
        found = legacy.get('codebase_version') if isinstance(legacy, Mapping) else None
        _check_version(found or 'v1.x', root, LEGACY_INFO)
    raw = _load_json(path)
    if not isinstance(raw, Mapping):
        raise LeRobotFormatError(f'{path} holds {type(raw).__name__}; expected an object.')
    if 'codebase_version' not in raw:
        raise LeRobotFormatError(f'{path} has no codebase_version: it is not a LeRobot dataset.')
    version = _check_version(raw['codebase_version'], root)
    fps = _get(raw, 'fps', (int, float), path)
    if fps <= 0:
        raise LeRobotFormatError(f'{path}: fps is {fps}; expected > 0.')
    features = _get(raw, 'features', Mapping, path)
    total = _get(raw, 'total_episodes', int, path)
    frames = _get(raw, 'total_frames', int, path)
    parsed = {name: _read_feature(name, spec, path) for name, spec in features.items()}
    missing = [name for name in (INDEX, EPISODE_INDEX, TASK_INDEX) if name not in parsed]
    if missing:
        raise LeRobotFormatError(f"{path}: the features lack LeRobot's own {missing}.")
    video = raw.get('video_path') or (
        VIDEO_PATH if any(f.dtype == VIDEO for f in parsed.values()) else None
    )
    record_path = root / RECORD
    return Info(
        root=root,
        version=version,
        fps=float(fps),
        features=parsed,
        total_episodes=total,
        total_frames=frames,
        data_path=raw.get('data_path') or DATA_PATH,
        video_path=video,
        robot_type=raw.get('robot_type'),
        splits=_read_splits(raw.get('splits'), total, path),
        record=_load_json(record_path) if record_path.is_file() else {},
    )


def read_tasks(root: pathlib.Path) -> list[str]:
    """Returns the task strings by task_index (from the `task_index` column, not row order).

    Raises:
      LeRobotFormatError: If tasks.parquet is missing, lacks a column, or its task indices
        are not 0 .. n-1 once each.
    """
    import pyarrow.parquet as pq

    path = root / TASKS
    if not path.is_file():
        raise LeRobotFormatError(f'{path} is missing.')
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds on a bad file.
        raise LeRobotFormatError(f'{path} is not a readable parquet file ({e}).') from e
    for column in (TASK_INDEX, TASK):
        if column not in table.column_names:
            raise LeRobotFormatError(
                f'{path} has no {column!r} column (columns: {table.column_names}).'
            )
    indices = np.asarray(table.column(TASK_INDEX).to_numpy(zero_copy_only=False))
    tasks = [str(t) for t in table.column(TASK).to_pylist()]
    if sorted(indices.tolist()) != list(range(len(tasks))):
        raise LeRobotFormatError(
            f'{path}: column {TASK_INDEX!r} holds {sorted(indices.tolist())[:10]}; expected '
            f'0 .. {len(tasks) - 1}, each once.'
        )
    by_index = [''] * len(tasks)
    for index, task in zip(indices.tolist(), tasks, strict=True):
        by_index[index] = task
    return by_index


@dataclasses.dataclass(frozen=True)
class VideoPlaces:
    """Where each episode is in one camera's videos (arrays indexed by episode)."""

    chunks: np.ndarray
    files: np.ndarray
    from_timestamps: np.ndarray


@dataclasses.dataclass(frozen=True)
class Episodes:
    """The episodes table's structural columns, checked (arrays indexed by episode).

    Fields:
      paths: The episodes table's files, in the order read (LeRobot's: sorted).
      starts: `dataset_from_index`: each episode's first frame (global index).
      ends: `dataset_to_index`: one past its last frame.
      videos: Per video feature, where each episode is in its videos.
    """

    paths: tuple[pathlib.Path, ...]
    starts: np.ndarray
    ends: np.ndarray
    videos: Mapping[str, VideoPlaces]

    @property
    def count(self) -> int:
        """The number of episodes."""
        return len(self.starts)


def list_parquet(directory: pathlib.Path) -> list[pathlib.Path]:
    """Returns `directory/*/*.parquet`, sorted: the files LeRobot reads (its glob)."""
    return sorted(directory.glob('*/*.parquet')) if directory.is_dir() else []


def _read_columns(path: pathlib.Path, columns: list[str]) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise LeRobotFormatError(
                f'{path} has no column {missing[0]!r} (it has {schema.names[:12]}...).'
            )
        table = pq.read_table(path, columns=columns)
    except LeRobotFormatError:
        raise
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds on a bad file.
        raise LeRobotFormatError(f'{path} is not a readable parquet file ({e}).') from e
    out = {}
    for column in columns:
        values = table.column(column)
        if values.null_count:
            raise LeRobotFormatError(f'{path}: column {column!r} has {values.null_count} nulls.')
        out[column] = np.asarray(values.to_numpy())
    return out


def _check_episode_rows(
    info: Info, starts: np.ndarray, ends: np.ndarray, order: np.ndarray, where: str
) -> None:
    """Raises unless episode i is row i and the frame ranges tile 0 .. total_frames."""
    total = info.total_episodes
    if len(order) != total or not np.array_equal(order, np.arange(len(order))):
        raise LeRobotFormatError(
            f'{where}: column {EPISODE_INDEX!r} holds {order[:10].tolist()}... ({len(order)} '
            f'rows); expected the episodes 0 .. {total - 1} of {INFO} (total_episodes), one '
            'row each, in order.'
        )
    bad = np.flatnonzero(ends <= starts)
    if bad.size:
        raise LeRobotFormatError(
            f'{where}: episode {bad[0]} has {FROM_INDEX} {starts[bad[0]]} and {TO_INDEX} '
            f'{ends[bad[0]]}: no frames.'
        )
    expected_starts = np.concatenate([[0], ends[:-1]]) if total else starts
    gap = np.flatnonzero(starts != expected_starts)
    if gap.size:
        raise LeRobotFormatError(
            f'{where}: episode {gap[0]} starts at frame {starts[gap[0]]} ({FROM_INDEX}); '
            f'the episode before it ends at {expected_starts[gap[0]]} ({TO_INDEX}).'
        )
    frames = int(ends[-1]) if total else 0
    if frames != info.total_frames:
        raise LeRobotFormatError(
            f'{where}: the episodes hold {frames} frames ({TO_INDEX} of the last one); '
            f'{INFO} says total_frames {info.total_frames}.'
        )


def read_episodes(info: Info) -> Episodes:
    """Returns the episodes table's structural columns, checked against info.json.

    Raises:
      LeRobotFormatError: If there is no episodes file, a file lacks a column, the rows
        are not the episodes 0 .. n-1 in order, an episode's frames do not follow the one
        before, a `length` disagrees with its frame range, or the totals disagree with
        info.json.
    """
    paths = list_parquet(info.root / EPISODES_DIR)
    where = f'{info.root / EPISODES_DIR}'
    if not paths:
        if info.total_episodes == 0:
            return Episodes((), np.zeros([0], np.int64), np.zeros([0], np.int64), {})
        raise LeRobotFormatError(f'{where} holds no chunk-*/file-*.parquet episodes file.')
    columns = [EPISODE_INDEX, FROM_INDEX, TO_INDEX]
    for key in info.video_keys:
        columns += [c.format(key=key) for c in (VIDEO_CHUNK, VIDEO_FILE, VIDEO_FROM)]
    parts = [_read_columns(path, columns) for path in paths]
    merged = {c: np.concatenate([p[c] for p in parts]) for c in columns}
    starts, ends = merged[FROM_INDEX].astype(np.int64), merged[TO_INDEX].astype(np.int64)
    _check_episode_rows(info, starts, ends, merged[EPISODE_INDEX], where)
    lengths = [_read_columns(p, [LENGTH])[LENGTH] for p in paths if _has_column(p, LENGTH)]
    if len(lengths) == len(paths):
        wrong = np.flatnonzero(np.concatenate(lengths) != ends - starts)
        if wrong.size:
            raise LeRobotFormatError(
                f'{where}: episode {wrong[0]} has {LENGTH} {np.concatenate(lengths)[wrong[0]]} '
                f'but frames {starts[wrong[0]]} .. {ends[wrong[0]]} ({FROM_INDEX}, {TO_INDEX}).'
            )
    videos = {
        key: VideoPlaces(
            merged[VIDEO_CHUNK.format(key=key)].astype(np.int64),
            merged[VIDEO_FILE.format(key=key)].astype(np.int64),
            merged[VIDEO_FROM.format(key=key)].astype(np.float64),
        )
        for key in info.video_keys
    }
    return Episodes(tuple(paths), starts, ends, videos)


def _has_column(path: pathlib.Path, column: str) -> bool:
    import pyarrow.parquet as pq

    return column in pq.read_schema(path).names
