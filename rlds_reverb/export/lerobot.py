"""Save any source `rlds_reverb.load` reads as a LeRobot v3.0 dataset.

`save_as_lerobot(source, directory)` (`rlds-reverb convert SRC OUT --to lerobot`) opens the
source with `load`, reads its episodes as whole `[T, ...]` tensors one at a time, and writes
one LeRobot frame per RLDS step (docs/lerobot.md, "Writing"): the fields as LeRobot features
(`lerobot_schema`), cameras as PNG images (image mode, lossless, byte for byte the PNGs
LeRobot writes) or AV1 video (`cameras='video'`, with the PSNR of what a reader gets back
recorded and returned), `reward` as `next.reward`, `is_terminal` as `next.done`, the task
field as LeRobot's tasks, and the statistics LeRobot computes (`lerobot_stats`). LeRobot
0.6.1's `LeRobotDataset` loads the result frame for frame (checked in a scratch venv:
docs/lerobot.md, "Checked with LeRobot").

Episodes go into segments of about `frames_per_file` frames, one file of each kind per
segment (`lerobot_segment`). The dataset is built in a hidden sibling directory with a
manifest of complete segments (`lerobot_staging`): a conversion that fails or is killed
keeps them and says so, and the same conversion run again resumes after them and ends with
the same files as an uninterrupted run; `workers=N` writes segments in N processes, with
the same files again (`lerobot_parallel`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from collections.abc import Iterator, Mapping
from concurrent import futures
from typing import Any

import tensorflow as tf

from rlds_reverb.core import checks, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core.errors import LeRobotExportError
from rlds_reverb.export import lerobot_schema, lerobot_segment, lerobot_staging
from rlds_reverb.export.lerobot_segment import Segment, SegmentWriter, TaskTable
from rlds_reverb.export.lerobot_staging import SegmentRecord, Staging
from rlds_reverb.export.lerobot_video import Quality
from rlds_reverb.read import lerobot as lerobot_reader
from rlds_reverb.read import lerobot_meta, loading

__all__ = [
    'LeRobotSaveStats',
    'save_as_lerobot',
]

# Episodes read ahead of the writer (overlaps reading and writing; memory stays bounded).
_PREFETCH_EPISODES = 2


@dataclasses.dataclass
class LeRobotSaveStats:
    """What `save_as_lerobot` wrote.

    Fields:
      episodes: Episodes in the dataset.
      frames: Frames in the dataset.
      tasks: Distinct tasks.
      skipped_episodes: Invalid episodes left out (`on_invalid='skip'`).
      resumed_episodes: Episodes an interrupted run had written, kept.
      seconds: Time taken, set-up included.
      directory: The dataset directory.
      psnr_db: Per video camera, the PSNR of the frames a reader gets back (inf: exact).
      worst_frame_psnr_db: Per video camera, the PSNR of its worst frame.
      not_written: One line per source field not written as a feature, saying why.
    """

    episodes: int = 0
    frames: int = 0
    tasks: int = 0
    skipped_episodes: int = 0
    resumed_episodes: int = 0
    seconds: float = 0.0
    directory: pathlib.Path | None = None
    psnr_db: dict[str, float] = dataclasses.field(default_factory=dict)
    worst_frame_psnr_db: dict[str, float] = dataclasses.field(default_factory=dict)
    not_written: list[str] = dataclasses.field(default_factory=list)

    @property
    def frames_per_second(self) -> float:
        """Frames written per second, set-up included."""
        return self.frames / self.seconds if self.seconds > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class Conversion:
    """One conversion's source and options (what a resume must match), and its plan."""

    source: Any
    where: str
    split: str
    data_dir: str | None
    cameras: types.CameraMode
    fps: int
    task_field: str
    default_task: str
    robot_type: str | None
    frames_per_file: int
    on_invalid: types.ValidationMode
    min_psnr_db: float | None
    plan: lerobot_schema.Plan

    def fingerprint(self, element_spec: Any) -> str:
        """The hash a resume must match."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values.pop('source')
        return lerobot_staging.fingerprint({**values, 'spec': repr(element_spec)})

    def load(self) -> tf.data.Dataset:
        """Opens the source's episodes as whole-episode tensors."""
        episodes = loading.load(self.source, split=self.split, data_dir=self.data_dir)
        return episodes_lib.to_whole_episodes(episodes)


def run_segments(
    conversion: Conversion,
    staging: Staging,
    episodes: Iterator[dict],
    start: SegmentRecord | None,
    *,
    stats: LeRobotSaveStats,
    progress: Any = None,
) -> None:
    """Writes the episodes after `start` (the last complete segment) segment by segment."""
    tasks = TaskTable(start.tasks if start else ())
    number = start.number + 1 if start else 0
    position = start.source[1] if start else 0
    episode, frame = (start.episodes[1], start.frames[1]) if start else (0, 0)
    first_source, writer = position, None
    with futures.ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
        try:
            for whole in episodes:
                position += 1
                problem = lerobot_segment.find_problem(whole[types.STEPS], position - 1)
                if problem is not None:
                    if conversion.on_invalid is types.ValidationMode.RAISE:
                        raise LeRobotExportError(
                            f'{conversion.where}: {problem}. Fix the data, or pass '
                            "on_invalid='skip' (--on-invalid skip) to leave such episodes out."
                        )
                    stats.skipped_episodes += 1
                    continue
                if writer is None:
                    segment = Segment(number, episode, frame)
                    writer = SegmentWriter(
                        staging.root,
                        conversion.plan,
                        segment,
                        fps=conversion.fps,
                        tasks=tasks,
                        default_task=conversion.default_task,
                        pool=pool,
                    )
                writer.add(whole)
                length = len(whole[types.STEPS][types.IS_FIRST])
                episode, frame = episode + 1, frame + length
                if progress is not None:
                    progress(1, length)
                if writer.frames >= conversion.frames_per_file:
                    finish_segment(conversion, staging, writer, (first_source, position), tasks)
                    number, first_source, writer = number + 1, position, None
            if writer is not None:
                finish_segment(conversion, staging, writer, (first_source, position), tasks)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise


def finish_segment(
    conversion: Conversion,
    staging: Staging,
    writer: SegmentWriter,
    source: tuple[int, int],
    tasks: TaskTable,
) -> SegmentRecord:
    """Closes a segment's files and lists it in the manifest.

    Raises:
      LeRobotExportError: If a camera's PSNR is below `min_psnr_db`.
    """
    quality = writer.close(staging.stats_path(writer.segment.number))
    for name, measured in quality.items():
        if conversion.min_psnr_db is not None and measured.psnr_db < conversion.min_psnr_db:
            raise LeRobotExportError(
                f'Camera {name!r} decodes at {measured.psnr_db:.2f} dB PSNR in segment '
                f'{writer.segment.number}, below min_psnr_db={conversion.min_psnr_db}. Write '
                'image mode (lossless), or accept a lower PSNR.'
            )
    segment = writer.segment
    record = SegmentRecord(
        number=segment.number,
        source=source,
        episodes=(segment.first_episode, segment.first_episode + writer.episodes),
        frames=(segment.first_frame, segment.first_frame + writer.frames),
        tasks=tuple(tasks.tasks),
        quality={name: q.as_dict() for name, q in quality.items()},
    )
    staging.add(record)
    return record


def remove_unlisted(staging: Staging) -> None:
    """Removes files of segments the manifest does not list (an interrupted one's)."""
    listed = {Segment(n, 0, 0).indices for n in staging.segments}
    for directory in ('data', 'videos', lerobot_meta.EPISODES_DIR):
        for path in (staging.root / directory).rglob('file-*.*'):
            chunk = int(path.parent.name.split('-')[-1])
            file = int(path.stem.split('-')[-1])
            if (chunk, file) not in listed:
                path.unlink()


def _find_fps(fps: Any, found: lerobot_reader.LeRobotMetadata | None, whole, where: str) -> int:
    """Returns the frame rate: given, the LeRobot source's, or the episodes' `fps` field.

    Raises:
      LeRobotExportError: If none says it, or it is not a positive whole number.
    """
    if fps is None and found is not None:
        fps = found.fps
    if fps is None and types.FPS in whole.element_spec:
        for episode in whole.take(1).as_numpy_iterator():
            fps = float(episode[types.FPS])
    if fps is None:
        raise LeRobotExportError(
            f'{where} does not say its frame rate; LeRobot needs one: pass fps= (--fps).'
        )
    if isinstance(fps, bool) or not float(fps).is_integer() or float(fps) <= 0:
        raise LeRobotExportError(f'fps={fps!r}: LeRobot takes a whole number of frames per second.')
    return int(fps)


def _order_columns(plan: lerobot_schema.Plan, names: tuple[str, ...]) -> lerobot_schema.Plan:
    """Returns the plan with its columns in the LeRobot source's feature order."""
    rank = {name: i for i, name in enumerate(names)}
    ordered = sorted(plan.columns, key=lambda c: rank.get(c.name, len(rank)))
    return dataclasses.replace(plan, columns=tuple(ordered))


def _summarize(staging: Staging, conversion: Conversion, count: int) -> lerobot_staging.Summary:
    records = [staging.segments[n] for n in sorted(staging.segments)]
    quality: dict[str, Quality] = {}
    for record in records:
        for name, figures in record.quality.items():
            quality.setdefault(name, Quality()).add(Quality.from_dict(figures))
    episodes, frames = records[-1].episodes[1], records[-1].frames[1]
    return lerobot_staging.Summary(
        fps=conversion.fps,
        robot_type=conversion.robot_type,
        episodes=episodes,
        frames=frames,
        tasks=records[-1].tasks,
        quality=quality,
        record={
            'source': conversion.where,
            'split': conversion.split,
            'skipped_episodes': count - episodes,
            'default_task': conversion.default_task if conversion.plan.task_path is None else None,
        },
    )


def _run(conversion: Conversion, staging: Staging, whole, workers: int, progress) -> int:
    """Writes every segment not written yet; returns how many source episodes were read."""
    if workers > 1:
        from rlds_reverb.export import lerobot_parallel

        remove_unlisted(staging)
        return lerobot_parallel.run_in_parallel(
            conversion, staging, whole.element_spec, workers, progress
        )
    kept = staging.keep_prefix()
    remove_unlisted(staging)
    start = kept[-1] if kept else None
    read = start.source[1] if start else 0
    counter = [read]

    def counted() -> Iterator[dict]:
        for episode in whole.skip(read).prefetch(_PREFETCH_EPISODES).as_numpy_iterator():
            counter[0] += 1
            yield episode

    run_segments(conversion, staging, counted(), start, stats=LeRobotSaveStats(), progress=progress)
    return counter[0]


def _make_conversion(
    source: Any,
    where: str,
    *,
    split,
    data_dir,
    cameras,
    fps,
    task_field,
    default_task,
    robot_type,
    names,
    frames_per_file,
    on_invalid,
    min_psnr_db,
) -> tuple[tf.data.Dataset, Conversion]:
    """Opens the source and decides what is written (the plan, the frame rate, the files)."""
    episodes = loading.load(source, split=split, data_dir=data_dir)
    found = lerobot_reader.read_lerobot_metadata(episodes)
    whole = episodes_lib.to_whole_episodes(episodes)
    plan = lerobot_schema.make_plan(
        whole.element_spec,
        video=cameras is types.CameraMode.VIDEO,
        task_field=task_field,
        names={**(found.names if found else {}), **(names or {})},
        leave_out=found.derived if found else (),
        where=where,
    )
    if found is not None:
        plan = _order_columns(plan, found.feature_names)
    conversion = Conversion(
        source=source,
        where=where,
        split=split,
        data_dir=None if data_dir is None else os.fspath(data_dir),
        cameras=cameras,
        fps=_find_fps(fps, found, whole, where),
        task_field=task_field,
        default_task=default_task,
        robot_type=robot_type or (found.robot_type if found else None),
        frames_per_file=frames_per_file or lerobot_schema.default_frames_per_file(plan),
        on_invalid=on_invalid,
        min_psnr_db=min_psnr_db,
        plan=plan,
    )
    return whole, conversion


def save_as_lerobot(
    source: loading.Source,
    directory: os.PathLike | str,
    *,
    split: str = 'train',
    data_dir: os.PathLike | str | None = None,
    cameras: types.CameraMode | str = types.CameraMode.IMAGE,
    fps: float | None = None,
    task_field: str = types.LANGUAGE_INSTRUCTION,
    default_task: str = '',
    robot_type: str | None = None,
    names: Mapping[str, Any] | None = None,
    frames_per_file: int | None = None,
    workers: int = 1,
    on_invalid: types.ValidationMode | str = types.ValidationMode.RAISE,
    min_psnr_db: float | None = None,
    overwrite: bool = False,
    progress: types.EpisodeProgressFn | None = None,
) -> LeRobotSaveStats:
    """Writes every episode of a source `rlds_reverb.load` reads as a LeRobot v3.0 dataset.

    One frame per RLDS step (module docstring; docs/lerobot.md says what each field becomes
    and what is not written). LeRobot 0.6.1's `LeRobotDataset(repo_id, root=directory)`
    loads it; `rlds_reverb.load(directory)` reads the same episodes back.

    Args:
      source: A `tf.data.Dataset` of RLDS episodes, or any source `load` reads.
      directory: The dataset directory to write; it must not exist, or be empty, unless
        `overwrite`.
      split: The source's split (TFDS' slicing syntax works).
      data_dir: Where to look up a TFDS dataset name.
      cameras: 'image' (PNG, lossless) or 'video' (AV1, lossy: the PSNR is measured).
      fps: Frames per second; by default a LeRobot source's, or the episodes' `fps` field.
      task_field: The step field (a `/` path) holding each step's task string.
      default_task: Every frame's task when the steps have no `task_field`.
      robot_type: info.json's `robot_type`; by default a LeRobot source's.
      names: Per-dimension names (joint names) by feature name or step path, for info.json;
        a LeRobot source's are kept.
      frames_per_file: Frames per data (and video) file, whole episodes; by default about
        100 MB of data or 200 MB of video per file.
      workers: Processes writing segments at once (the files are the same for any number).
      on_invalid: 'raise' (default) on an invalid episode (docs/semantics.md §2), or 'skip'.
      min_psnr_db: In video mode, fail when a camera decodes below this PSNR.
      overwrite: Replace a LeRobot dataset already in `directory` (once the new one is done).
      progress: Optional `fn(episodes, frames)` called as episodes are written.

    Returns:
      `LeRobotSaveStats`.

    Raises:
      FileExistsError: If `directory` is not empty and `overwrite` is false, or would
        replace something other than a LeRobot dataset.
      NotADirectoryError: If `directory` is a file.
      LeRobotExportError: If a field cannot be held by LeRobot, an episode is invalid
        (with `on_invalid='raise'`), the frame rate is unknown, video frames are too small,
        a camera's PSNR is below `min_psnr_db`, the source holds no episode, or an
        unfinished conversion with other options is in the staging directory.
      ValueError: If `directory` is (or holds) the source, an option is not valid, or
        `workers` > 1 with a `tf.data.Dataset`.
      SourceError: If `load` cannot open the source.

    Whatever the error, `directory` is as it was, and a note on the error says what was
    kept in the staging directory (run again to resume).

    Example:
      >>> rlds_reverb.save_as_lerobot('/data/fractal/0.1.0', '/data/fractal_lerobot', fps=3)
      >>> rlds_reverb.save_as_lerobot(episodes, '/data/out', fps=10, cameras='video')
    """
    started = time.perf_counter()
    camera_mode = types.as_enum(types.CameraMode, cameras, argument='cameras')
    invalid_mode = types.as_enum(types.ValidationMode, on_invalid, argument='on_invalid')
    if invalid_mode is types.ValidationMode.REPORT:
        raise ValueError("on_invalid='report' writes nothing; use 'raise' or 'skip'.")
    workers = checks.check_int_at_least(workers, 1, argument='workers')
    if frames_per_file is not None:
        checks.check_int_at_least(frames_per_file, 1, argument='frames_per_file')
    target = pathlib.Path(directory).expanduser().absolute()
    where, source_path = lerobot_staging.describe_source(source)
    lerobot_staging.check_target(target, overwrite=overwrite, source_path=source_path)
    whole, conversion = _make_conversion(
        source,
        where,
        split=split,
        data_dir=data_dir,
        cameras=camera_mode,
        fps=fps,
        task_field=task_field,
        default_task=default_task,
        robot_type=robot_type,
        names=names,
        frames_per_file=frames_per_file,
        on_invalid=invalid_mode,
        min_psnr_db=min_psnr_db,
    )
    plan = conversion.plan
    staging = Staging(target, conversion.fingerprint(whole.element_spec))
    stats = LeRobotSaveStats(not_written=list(plan.notes))
    stats.resumed_episodes = sum(s.episodes[1] - s.episodes[0] for s in staging.keep_prefix())
    try:
        count = _run(conversion, staging, whole, workers, progress)
        if not staging.segments:
            raise LeRobotExportError(f'{where} holds no episode to write (split={split!r}).')
        summary = _summarize(staging, conversion, count)
        stats.directory = lerobot_staging.publish(staging, plan, summary, overwrite=overwrite)
    except BaseException as error:
        if staging.segments:
            error.add_note(staging.describe())
        else:
            lerobot_staging.discard(staging)
            error.add_note(f'Nothing was written: {target} is as it was.')
        raise
    stats.episodes, stats.frames, stats.tasks = summary.episodes, summary.frames, len(summary.tasks)
    stats.skipped_episodes = count - summary.episodes
    stats.psnr_db = {name: q.psnr_db for name, q in summary.quality.items()}
    stats.worst_frame_psnr_db = {name: q.worst_psnr_db for name, q in summary.quality.items()}
    stats.seconds = time.perf_counter() - started
    return stats
