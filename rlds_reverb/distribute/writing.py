"""Stage 3 of the Beam push: one writer per (server, table), resuming from its insert count.

The writer reads its own index range only (so the writers together read the dataset once,
whatever the number of servers), plans the episodes (rows, item windows, priorities) and
writes them in index order through the one episode loop of every push
(`rlds_reverb.write.loop.EpisodeLoop`), streaming as `push` does. It first reads the
table's insert count and skips what the table already holds, down to single items of a
partly written episode (`rlds_reverb.write.resume_points.find_resume_point`), so a
replayed bundle, a worker killed part way, or a server restarted from a checkpoint
followed by a re-run leave every item in its server exactly once.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
import reverb
import tensorflow as tf
from apache_beam.io.filesystems import FileSystems

from rlds_reverb.check import validation
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import errors, files
from rlds_reverb.distribute import job as job_lib
from rlds_reverb.distribute import results
from rlds_reverb.serve import table_info
from rlds_reverb.transform import carry
from rlds_reverb.transform.plans import make_episode_plans
from rlds_reverb.write import loop, resume_points

# Helpers of `rlds_reverb.distribute` only.
__all__: list[str] = []


class WritePartition(beam.DoFn):
    """Writes one server's episodes in index order, resuming from the table's insert count."""

    def __init__(self, job: job_lib.BeamJob):
        self._job = job

    def process(self, element):
        position, group = element
        job = self._job
        address = job.servers[position]
        ordered = sorted(group, key=lambda e: e.index)
        written = [e for e in ordered if e.valid]
        counts = results.ServerCounts(
            address,
            episodes=len(written),
            steps=sum(e.length for e in written),
            items=sum(e.num_items for e in written),
            skipped_episodes=len(ordered) - len(written),
        )
        done = {'episodes': 0, 'items': 0, 'before': None}
        try:
            _write_episodes(job, address, written, done)
        except Exception as e:
            message = _describe_write_failure(job, address, e, done)
            raise RuntimeError(f'{job_lib.WORKER_ERROR}{message}') from e
        _write_result(job_lib.result_path(job.result_dir, position), counts)
        yield counts


def _write_result(path: str, counts: results.ServerCounts) -> None:
    """Writes a writer's counts; a local file as every file of the toolkit (core/files.py)."""
    data = json.dumps(dataclasses.asdict(counts)).encode()
    if FileSystems.get_scheme(path) is None:
        # FileSystems.create makes missing directories; a caller's result_dir may not exist.
        files.make_shared_dirs(os.path.dirname(path))
        with files.replace_file(path) as f:
            f.write(data)
        return
    with FileSystems.create(path) as f:
        f.write(data)


def _plan_episodes(
    job: job_lib.BeamJob, indices: Sequence[int], decoded: tf.Variable
) -> tf.data.Dataset:
    """Returns the plans of the split's episodes at `indices` (ascending), in that order.

    The writer reads only the index range from its first episode to its last (one range
    per server, `routing.assign_servers`) and drops the skipped episodes in it; the shuffle
    never carries episode data. `decoded` counts the episodes read (skipped ones included).
    """
    first = indices[0]
    wanted = np.zeros(indices[-1] - first + 1, dtype=bool)
    wanted[np.asarray(indices) - first] = True
    wanted = tf.constant(wanted)
    loaded = carry.carry_episode_fields(
        job_lib.read_range(job, first, len(wanted)),
        job.options.episode_fields,
        add_ids=job.options.add_ids,
        first_id=first,  # Ids are the episodes' indices in the split (shard order).
    )
    picked = (
        episodes_lib.to_whole_episodes(loaded)
        .map(episodes_lib.without_autograph(lambda episode: _count_episode(decoded, episode)))
        .enumerate()
        .filter(episodes_lib.without_autograph(lambda i, _: wanted[i]))
        .map(episodes_lib.without_autograph(lambda _, episode: episode))
    )
    return make_episode_plans(
        episodes_lib.from_whole_episodes(picked),
        job.item,
        priority=job.options.priority,
        policy_info_fn=job.options.policy_info_fn,
    )


def _count_episode(decoded: tf.Variable, episode: dict) -> dict:
    """Returns `episode` once `decoded` counts it (in graph: the writer's read counter)."""
    with tf.control_dependencies([decoded.assign_add(1)]):
        return tf.nest.map_structure(tf.identity, episode)


def _read_plans(job: job_lib.BeamJob, episodes: list[job_lib.CountedEpisode]):
    """Yields `(index, plan)` of `episodes`; fails if one no longer reads as it was counted."""
    decoded = tf.Variable(0, dtype=tf.int64, trainable=False)
    try:
        yield from _check_plans(job, episodes, decoded)
    finally:
        job_lib.count_read(job_lib.DECODED_TO_WRITE, int(decoded.numpy()))


def _check_plans(
    job: job_lib.BeamJob, episodes: list[job_lib.CountedEpisode], decoded: tf.Variable
):
    plans = validation.read_episodes(_plan_episodes(job, [e.index for e in episodes], decoded))
    for episode in episodes:
        _, plan = next(plans, (None, None))
        if plan is None:
            found = 'the dataset has fewer episodes.'
        elif isinstance(plan, validation.UnreadableEpisode):
            found = job_lib.describe_in_one_line(plan.error_message)
        else:
            found = f'{plan.num_items} items' if plan.num_items != episode.num_items else ''
        if found:
            raise errors.PushError(
                f'Episode {episode.index} reads differently than when it was counted '
                f'({episode.num_items} items; now {found}). Was the dataset changed during '
                'the push?',
                episodes_written=0,
                items_written=0,
            )
        yield episode.index, plan


def _write_episodes(
    job: job_lib.BeamJob, address: str, episodes: list[job_lib.CountedEpisode], done: dict
) -> None:
    """Writes what the table lacks of `episodes` (in order); updates `done` as it goes.

    The table's insert count says where to start (`resume_points.find_resume_point`); the write goes
    through the one episode loop of every push (`rlds_reverb.write.loop.EpisodeLoop`).
    """
    client = reverb.Client(address)
    info = table_info.fetch_table_info(client, job.table, timeout_ms=job.options.timeout_ms)
    inserted = table_info.count_inserted(info)
    done['before'] = inserted
    counts = np.array([e.num_items for e in episodes], dtype=np.int64)
    point = resume_points.find_resume_point(inserted, counts)
    done['episodes'], done['items'] = point.episode, inserted
    if not episodes or point.episode == len(episodes):
        return
    writer = loop.EpisodeLoop(
        client,
        [job.table],
        job.options,
        step_spec=job.step_spec,
        free_slots=table_info.count_free_slots(info),
        start=resume_points.ResumePoint(episodes[point.episode].index, point.items),
    )
    writer.check_room_ahead(int(counts.sum()) - inserted, advice='this server')
    try:
        writer.run(_read_plans(job, episodes[point.episode :]))
    finally:
        done['episodes'] = point.episode + writer.stats.episodes
        done['items'] = inserted + writer.items_written


def _describe_write_failure(
    job: job_lib.BeamJob, address: str, error: Exception, done: dict
) -> str:
    before = done['before']
    held = (
        'nothing (it could not be read)'
        if before is None
        else f'{before} items before this attempt, and had {done["items"]} items in '
        f'{done["episodes"]} whole episode(s) of this server when it failed (the next '
        'episode may be partly written; a re-run completes it item by item)'
    )
    return (
        f'Writing to the Reverb server at {address} (table {job.table!r}) failed: '
        f'{job_lib.describe_in_one_line(error)} The table held {held}.'
    )
