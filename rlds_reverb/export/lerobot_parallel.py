"""Writing a LeRobot dataset's segments in several processes (`save_as_lerobot(workers=N)`).

The files must be the ones one process writes, so the segments and the task indices are
fixed before any is written: a first pass reads each episode's flags and task strings only
(`step_fields`: the task field and the smallest observation leaf), checks the episodes
(`lerobot_segment.find_problem`), and cuts them into segments by the rule one process follows (a
segment ends after the episode that brings it to `frames_per_file` frames); the tasks get
their indices in order of first appearance, as one process gives them. Then segment k goes
to worker k mod N (`multiprocessing`'s spawn start method), which opens the source itself,
selects the segment's episodes (`skip`/`take`: unselected episodes are not read on the
readers' fast paths) and writes its files; the parent lists each finished segment in the
manifest, so an interrupted parallel conversion resumes like any other.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import pathlib
import queue as queue_lib
import traceback
from typing import Any

import numpy as np
import tensorflow as tf

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import LeRobotExportError
from rlds_reverb.export import lerobot_staging
from rlds_reverb.export.lerobot_segment import Segment, SegmentWriter, TaskTable, find_problem
from rlds_reverb.export.lerobot_staging import SegmentRecord, Staging
from rlds_reverb.read import loading

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

_POLL_S = 0.5


@dataclasses.dataclass(frozen=True)
class PlannedSegment:
    """A segment fixed by the first pass: the source episodes it reads and where it starts."""

    segment: Segment
    source: tuple[int, int]


def _smallest_observation(spec: Any, prefix: tuple[str, ...]) -> tuple[str, ...] | None:
    """Returns the path of the observation leaf with the fewest values per step."""
    if not isinstance(spec, dict):
        return None
    leaves = []
    for path, leaf in _walk(spec, prefix):
        leaves.append((int(np.prod(leaf.shape[1:].as_list() or [1])), path))
    return min(leaves)[1] if leaves else None


def _walk(spec: dict, prefix: tuple[str, ...]):
    for key, value in spec.items():
        if isinstance(value, dict):
            yield from _walk(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def _first_pass(conversion, whole_spec: Any) -> tuple[list[int], list[bool], list[list[str]]]:
    """Returns each source episode's length, validity and task strings (reading little)."""
    kept = []
    if conversion.plan.task_path is not None:
        kept.append('/'.join(conversion.plan.task_path))
    small = _smallest_observation(whole_spec[types.STEPS].get(types.OBSERVATION), ())
    if small is not None:
        kept.append('/'.join((types.OBSERVATION, *small)))
    episodes = loading.load(
        conversion.source, split=conversion.split, data_dir=conversion.data_dir, step_fields=kept
    )
    lengths, valid, tasks = [], [], []
    for position, episode in enumerate(
        episodes_lib.to_whole_episodes(episodes).as_numpy_iterator()
    ):
        steps = episode[types.STEPS]
        problem = find_problem(steps, position)
        if problem is not None and conversion.on_invalid is types.ValidationMode.RAISE:
            raise LeRobotExportError(
                f"{conversion.where}: {problem}. Fix the data, or pass on_invalid='skip' "
                '(--on-invalid skip) to leave such episodes out.'
            )
        lengths.append(len(steps[types.IS_FIRST]))
        valid.append(problem is None)
        path = conversion.plan.task_path
        strings = [conversion.default_task] * lengths[-1]
        if path is not None:
            strings = [v.decode('utf-8') for v in _get(steps, path)]
        tasks.append(strings)
    return lengths, valid, tasks


def _get(nest: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        nest = nest[key]
    return nest


def plan_segments(conversion, whole_spec: Any) -> tuple[list[PlannedSegment], list[str], int]:
    """Returns the segments one process would write, the task table, and the source count."""
    lengths, valid, strings = _first_pass(conversion, whole_spec)
    table = TaskTable()
    planned: list[PlannedSegment] = []
    number = episode = frame = 0
    first_source, first_episode, first_frame, frames = 0, 0, 0, 0
    for position, length in enumerate(lengths):
        if not valid[position]:
            continue
        table.find(strings[position])
        episode, frame, frames = episode + 1, frame + length, frames + length
        if frames >= conversion.frames_per_file:
            segment = Segment(number, first_episode, first_frame)
            planned.append(PlannedSegment(segment, (first_source, position + 1)))
            number, frames = number + 1, 0
            first_source, first_episode, first_frame = position + 1, episode, frame
    if frames:
        segment = Segment(number, first_episode, first_frame)
        planned.append(PlannedSegment(segment, (first_source, len(lengths))))
    return planned, table.tasks, len(lengths)


def _write_segment(conversion, root: pathlib.Path, planned: PlannedSegment, tasks) -> dict:
    """Writes one planned segment (in a worker); returns its manifest record."""
    first, last = planned.source
    episodes = loading.load(conversion.source, split=conversion.split, data_dir=conversion.data_dir)
    whole = episodes_lib.to_whole_episodes(episodes.skip(first).take(last - first))
    table = TaskTable(tasks)
    writer = SegmentWriter(
        root,
        conversion.plan,
        planned.segment,
        fps=conversion.fps,
        tasks=table,
        default_task=conversion.default_task,
    )
    try:
        for position, episode in enumerate(whole.prefetch(2).as_numpy_iterator(), start=first):
            if find_problem(episode[types.STEPS], position) is None:
                writer.add(episode)
    except BaseException:
        writer.abort()
        raise
    quality = writer.close(lerobot_staging.segment_stats_path(root, planned.segment.number))
    segment = planned.segment
    return SegmentRecord(
        number=segment.number,
        source=planned.source,
        episodes=(segment.first_episode, segment.first_episode + writer.episodes),
        frames=(segment.first_frame, segment.first_frame + writer.frames),
        tasks=tuple(tasks),
        quality={name: q.as_dict() for name, q in quality.items()},
    ).as_dict()


def _work(conversion, root: str, planned: list[PlannedSegment], tasks, results) -> None:
    """A worker process: writes its segments in order, reporting each (or the error)."""
    try:
        for segment in planned:
            results.put(('done', _write_segment(conversion, pathlib.Path(root), segment, tasks)))
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which raises.
        results.put(('error', f'{type(error).__name__}: {error}\n{traceback.format_exc()}'))


def run_in_parallel(
    conversion, staging: Staging, whole_spec: Any, workers: int, progress=None
) -> int:
    """Writes the segments the manifest does not list yet, in `workers` processes.

    Returns:
      The number of source episodes read (skipped invalid ones included).

    Raises:
      ValueError: If the source is not a path or name a worker can open.
      LeRobotExportError: If a worker fails (its error is in the message), or an episode
        is invalid and `on_invalid` is 'raise'.
    """
    if isinstance(conversion.source, tf.data.Dataset):
        raise ValueError(
            'workers > 1 needs a source each worker process can open (a path or a dataset '
            'name); a tf.data.Dataset is converted with workers=1.'
        )
    planned, tasks, count = plan_segments(conversion, whole_spec)
    todo = [p for p in planned if p.segment.number not in staging.segments]
    context = multiprocessing.get_context('spawn')
    results = context.Queue()
    processes = [
        context.Process(
            target=_work,
            args=(conversion, str(staging.root), todo[w::workers], tasks, results),
            daemon=True,
        )
        for w in range(min(workers, len(todo)))
    ]
    for process in processes:
        process.start()
    try:
        _collect(staging, len(todo), results, processes, progress)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join()
    return count


def _collect(staging: Staging, expected: int, results, processes, progress) -> None:
    """Lists each segment the workers finish in the manifest; raises a worker's error."""
    done = 0
    while done < expected:
        try:
            kind, payload = results.get(timeout=_POLL_S)
        except queue_lib.Empty:
            if not any(p.is_alive() for p in processes):
                raise LeRobotExportError(
                    f'The worker processes ended with {expected - done} segment(s) unwritten '
                    '(killed, or out of memory).'
                ) from None
            continue
        if kind == 'error':
            raise LeRobotExportError(f'A worker process failed: {payload}')
        record = SegmentRecord.from_dict(payload)
        staging.add(record)
        done += 1
        if progress is not None:
            progress(record.episodes[1] - record.episodes[0], record.frames[1] - record.frames[0])
