"""Where a LeRobot dataset is built, what is done so far, and how it is published.

A conversion writes into a hidden sibling of the target, `.<name>.lerobot-partial/`
(0700 while it fills), segment by segment (`lerobot_segment`). After each segment the
manifest, `.rlds_reverb/manifest.json` inside it, records the segment (its source episodes,
episodes, frames, tasks so far, video quality), replaced whole (`core.files.replace_file`),
so a process killed at any instant leaves a manifest that lists only complete segments. Run
again with the same source and options (the manifest's fingerprint says so), a conversion
resumes after the last complete segment and ends with the same files as a run that was never
interrupted; files of unlisted segments are written again from their start.

`publish` writes the metadata LeRobot reads (`meta/info.json`, `meta/stats.json` folded
from every episode's statistics in order, `meta/tasks.parquet`) and our record
(`meta/rlds_reverb.json`), then renames the directory into place: a directory holding
`meta/info.json` is a complete dataset. Files follow the umask, never world-writable
(`core.files`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from rlds_reverb.core import files
from rlds_reverb.core.errors import LeRobotExportError
from rlds_reverb.export import lerobot_segment, lerobot_stats
from rlds_reverb.export.lerobot_schema import Plan
from rlds_reverb.export.lerobot_video import Quality, describe_video
from rlds_reverb.read import lerobot_meta as meta
from rlds_reverb.version import __version__

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

PARTIAL_SUFFIX = '.lerobot-partial'
_OWN_DIR = '.rlds_reverb'
_MANIFEST = 'manifest.json'
_FORMAT = 1
_DATA_FILES_SIZE_IN_MB, _VIDEO_FILES_SIZE_IN_MB = 100, 200


def fingerprint(values: Mapping[str, Any]) -> str:
    """A short hash of a conversion's source and options (what a resume must match)."""
    text = json.dumps(values, sort_keys=True, default=str).encode()
    return hashlib.sha256(text).hexdigest()[:24]


@dataclasses.dataclass(frozen=True)
class SegmentRecord:
    """A complete segment, as the manifest lists it.

    Fields:
      number: The segment.
      source: The source episodes it consumed (start, stop): skipped invalid ones included.
      episodes: The episodes it holds (start, stop).
      frames: Its frames' global indices (start, stop).
      tasks: The task table after it.
      quality: Per video camera, the `Quality.as_dict()` of its file.
    """

    number: int
    source: tuple[int, int]
    episodes: tuple[int, int]
    frames: tuple[int, int]
    tasks: tuple[str, ...]
    quality: Mapping[str, dict] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict:
        """JSON-ready."""
        return {**dataclasses.asdict(self), 'tasks': list(self.tasks)}

    @classmethod
    def from_dict(cls, data: Mapping) -> SegmentRecord:
        """The record `as_dict` gave."""
        return cls(
            data['number'],
            tuple(data['source']),
            tuple(data['episodes']),
            tuple(data['frames']),
            tuple(data['tasks']),
            dict(data.get('quality', {})),
        )


def segment_stats_path(root: pathlib.Path, number: int) -> pathlib.Path:
    """Where segment `number`'s episode statistics are saved in staging directory `root`."""
    return root / _OWN_DIR / f'stats-{number:06d}.npz'


class Staging:
    """The hidden directory a conversion builds its dataset in, and its manifest.

    Args:
      target: The dataset directory to publish.
      key: The conversion's fingerprint: a staging directory with another is not resumed.

    Raises:
      LeRobotExportError: If a staging directory of another conversion (another
        fingerprint) is there.
    """

    def __init__(self, target: pathlib.Path, key: str):
        self.target = target
        self.root = target.parent / f'.{target.name}{PARTIAL_SUFFIX}'
        self._key = key
        files.make_shared_dirs(target.parent)
        self.segments: dict[int, SegmentRecord] = {}
        manifest = self.root / _OWN_DIR / _MANIFEST
        if manifest.is_file():
            data = json.loads(manifest.read_text(encoding='utf-8'))
            if data.get('fingerprint') != key:
                raise LeRobotExportError(
                    f'{self.root} holds an unfinished conversion of another source or with '
                    f'other options (fingerprint {data.get("fingerprint")}, this one {key}); '
                    'remove that directory to start this one.'
                )
            self.segments = {
                s['number']: SegmentRecord.from_dict(s) for s in data.get('segments', [])
            }
        files.make_private_dirs(self.root / _OWN_DIR)

    @property
    def resumed(self) -> bool:
        """Whether segments of an earlier run are kept."""
        return bool(self.segments)

    def stats_path(self, number: int) -> pathlib.Path:
        """Where segment `number`'s episode statistics are saved."""
        return segment_stats_path(self.root, number)

    def keep_prefix(self) -> list[SegmentRecord]:
        """Keeps the complete segments 0 .. k - 1 (forgets any after a gap); returns them."""
        kept: list[SegmentRecord] = []
        while len(kept) in self.segments:
            kept.append(self.segments[len(kept)])
        self.segments = {s.number: s for s in kept}
        return kept

    def add(self, record: SegmentRecord) -> None:
        """Lists a complete segment in the manifest (written whole, atomically)."""
        self.segments[record.number] = record
        listed = [self.segments[n].as_dict() for n in sorted(self.segments)]
        content = {'format': _FORMAT, 'fingerprint': self._key, 'segments': listed}
        with files.replace_file(self.root / _OWN_DIR / _MANIFEST, text=True) as out:
            json.dump(content, out, indent=1, ensure_ascii=False)

    def describe(self) -> str:
        """A sentence on what the staging directory holds, for notes on errors."""
        done = sorted(self.segments.values(), key=lambda s: s.number)
        episodes = sum(s.episodes[1] - s.episodes[0] for s in done)
        return (
            f'{episodes} episode(s) in {len(done)} complete segment(s) are kept in {self.root} '
            f'(not a dataset yet): run the same conversion again to resume after them, or '
            f'remove that directory. {self.target} is as it was.'
        )


def discard(staging: Staging) -> None:
    """Removes a staging directory that holds no complete segment."""
    shutil.rmtree(staging.root, ignore_errors=True)


def fold_stats(staging: Staging, plan: Plan) -> dict[str, dict]:
    """Returns the dataset's statistics: every episode's, folded in episode order."""
    total: dict[str, Any] = {}
    for number in sorted(staging.segments):
        saved = lerobot_segment.read_segment_stats(staging.stats_path(number))
        for episode in sorted(saved):
            for name, stats in saved[episode].items():
                total[name] = lerobot_stats.aggregate(total.get(name), stats)
    order = [name for name, _ in lerobot_segment.stats_features(plan)]
    return {name: lerobot_stats.to_lists(total[name]) for name in order if name in total}


def _write_json(path: pathlib.Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with files.replace_file(path, text=True) as out:
        json.dump(value, out, indent=4, ensure_ascii=False)


def write_tasks(path: pathlib.Path, tasks: Sequence[str]) -> None:
    """Writes tasks.parquet as LeRobot does: `task` the pandas index, rows by task_index."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pandas = {
        'index_columns': [meta.TASK],
        'column_indexes': [
            {
                'name': None,
                'field_name': None,
                'pandas_type': 'unicode',
                'numpy_type': 'object',
                'metadata': {'encoding': 'UTF-8'},
            }
        ],
        'columns': [
            {
                'name': name,
                'field_name': name,
                'pandas_type': kind,
                'numpy_type': numpy,
                'metadata': None,
            }
            for name, kind, numpy in (
                (meta.TASK_INDEX, 'int64', 'int64'),
                (meta.TASK, 'unicode', 'object'),
            )
        ],
        'attributes': {},
        'creator': {'library': 'pyarrow', 'version': pa.__version__},
        'pandas_version': '2.3.3',
    }
    table = pa.table(
        {
            meta.TASK_INDEX: pa.array(range(len(tasks)), pa.int64()),
            meta.TASK: pa.array(list(tasks), pa.string()),
        }
    ).replace_schema_metadata({'pandas': json.dumps(pandas)})
    pq.write_table(table, path)


@dataclasses.dataclass(frozen=True)
class Summary:
    """What the finished dataset holds (for info.json and our record)."""

    fps: int
    robot_type: str | None
    episodes: int
    frames: int
    tasks: tuple[str, ...]
    quality: Mapping[str, Quality]
    record: Mapping[str, Any]


def _info(plan: Plan, summary: Summary) -> dict:
    features = plan.features()
    for camera in plan.cameras:
        if camera.is_video:
            features[camera.name]['info'] = describe_video(camera.step_shape, summary.fps)
    video = any(c.is_video for c in plan.cameras)
    return {
        'codebase_version': meta.CODEBASE_VERSION,
        'fps': summary.fps,
        'features': features,
        'total_episodes': summary.episodes,
        'total_frames': summary.frames,
        'total_tasks': len(summary.tasks),
        'chunks_size': lerobot_segment.CHUNKS_SIZE,
        'data_files_size_in_mb': _DATA_FILES_SIZE_IN_MB,
        'video_files_size_in_mb': _VIDEO_FILES_SIZE_IN_MB,
        'data_path': meta.DATA_PATH,
        'video_path': meta.VIDEO_PATH if video else None,
        'robot_type': summary.robot_type,
        'splits': {'train': f'0:{summary.episodes}'},
    }


def publish(staging: Staging, plan: Plan, summary: Summary, *, overwrite: bool) -> pathlib.Path:
    """Writes the metadata files and renames the staging directory to the target.

    Returns:
      The dataset directory.
    """
    root = staging.root
    write_tasks(root / meta.TASKS, summary.tasks)
    _write_json(root / meta.STATS, fold_stats(staging, plan))
    record = {
        'format': _FORMAT,
        'written_by': f'rlds-reverb {__version__}',
        **summary.record,
        **plan.record(),
        'video': {name: q.as_dict() for name, q in summary.quality.items()},
    }
    _write_json(root / meta.RECORD, record)
    _write_json(root / meta.INFO, _info(plan, summary))
    shutil.rmtree(root / _OWN_DIR)
    files.remove_world_write(root)
    for directory, _, _ in os.walk(root):
        os.chmod(directory, files.compute_shared_mode())
    target = staging.target
    old = None
    if target.exists() and (overwrite or not any(target.iterdir())):
        old = pathlib.Path(tempfile.mkdtemp(prefix=f'.{target.name}.old-', dir=target.parent))
        os.replace(target, old / 'dataset')
    os.replace(root, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target


def check_target(target: pathlib.Path, *, overwrite: bool, source_path: pathlib.Path | None):
    """Raises unless `target` may be written: new, empty, or a LeRobot dataset to overwrite.

    Raises:
      NotADirectoryError: If `target` is a file.
      FileExistsError: If it is not empty and `overwrite` is false, or `overwrite` would
        remove something other than a LeRobot dataset.
      ValueError: If `target` is the source, or holds it.
    """
    real = target.resolve()
    if source_path is not None and (real == source_path or real in source_path.parents):
        raise ValueError(f'The output {target} is (or holds) the source {source_path}.')
    if not target.exists():
        return
    if not target.is_dir():
        raise NotADirectoryError(f'The output {target} exists and is not a directory.')
    entries = sorted(p.name for p in target.iterdir())
    if not entries:
        return
    if not overwrite:
        raise FileExistsError(
            f'The output directory {target} exists and is not empty (it holds {entries[:5]}); '
            'choose a new directory, or pass overwrite=True (--overwrite) to replace the '
            'LeRobot dataset in it.'
        )
    if not (target / meta.INFO).is_file():
        raise FileExistsError(
            f'overwrite=True replaces a LeRobot dataset only, and {target} holds no '
            f'{meta.INFO} (it holds {entries[:5]}); remove it yourself.'
        )


def describe_source(source: Any) -> tuple[str, pathlib.Path | None]:
    """Returns how messages name the source, and its absolute path when it is one."""
    import tensorflow as tf

    if isinstance(source, tf.data.Dataset):
        return 'the given tf.data.Dataset', None
    if not isinstance(source, str | os.PathLike):
        return repr(source), None
    path = pathlib.Path(os.fspath(source)).expanduser()
    return (str(path.resolve()), path.resolve()) if path.exists() else (str(source), None)
