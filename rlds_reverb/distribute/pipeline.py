"""Pushing an RLDS TFDS dataset into one or several Reverb servers with Apache Beam.

The same pipeline runs on Beam's DirectRunner on one machine and on Flink, Spark or
Dataflow in a cluster (README, "Beyond one machine"). Its stages:

Episodes are numbered in shard order (`routing`: the first shard file's episodes, then the
second's), and every stage reads an index range the same way (`_read_range`: a split slice
read one shard after the other), so the count and the writers see the same episode under
the same index. (A read of the whole split interleaves shards 16 episodes at a time unless
the dataset disables shuffling, TFDS' default; its positions are not these indices.)

1. **Count** (parallel by groups of neighbouring shard files, two per worker): each worker
   scans its group's records (`builder.info.splits[split].file_instructions`) from their
   bytes in bulk, decoding no step (`record_checks.summarize_records`: step counts and
   the validation rules), and counts their items from their lengths. Only episodes the
   scan finds invalid or cannot decide are decoded here (`_count_range`), so a valid
   episode is decoded once in the whole pipeline, by its writer. Invalid episodes
   raise (`on_invalid='raise'`: before anything is written, as the writers wait for every
   count) or are counted and dropped (`'skip'`). The Beam counters of what was read come
   back in `BeamPushResult.reads`.
2. **Route**: the episodes are cut into one consecutive index range per server by
   `routing.assign_servers` (balanced item counts, a function of the dataset, split, item
   kind and server list only). Only this metadata (index, steps, items) crosses Beam's
   shuffle, never the episodes' data.
3. **Write** (one writer per (server, table) partition): the writer reads its own index
   range only (so the writers together read the dataset once, whatever the number of
   servers), plans the episodes (rows, item windows, priorities) and writes them in index
   order with `push`'s writer engines, streaming as `push` does (memory stays flat in the
   dataset's size). The writer first reads the table's insert count and skips what the
   table already holds, down to single items of a partly written episode
   (`rlds_reverb.write.resume.find_resume_point`), and reads from there. A replayed bundle,
   a worker killed part way, or a server restarted from a checkpoint followed by a re-run
   therefore leave every item in its server exactly once.

Exactly once assumes: one pipeline at a time writes the table (no concurrent speculative
attempts of a partition's writer), the table holds only this dataset's items for this
split, item kind and server list, and building items is deterministic (the same plans on
every attempt).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
import tree
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)

from rlds_reverb.check import record_checks, validation
from rlds_reverb.core import compat, errors, files, specs, timeouts, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.distribute import routing
from rlds_reverb.read import loading, records
from rlds_reverb.serve import table_info
from rlds_reverb.transform import carry
from rlds_reverb.transform import items as items_lib
from rlds_reverb.transform.plans import PriorityFn, make_episode_plans, summarize_episodes
from rlds_reverb.write import engines, loop
from rlds_reverb.write import options as options_lib

__all__ = [
    'BeamPushResult',
    'DistributedPushError',
    'ProgressFn',
    'ReadCounts',
    'ServerCounts',
    'push_with_beam',
]

ProgressFn = types.ItemProgressFn  # The 0.1 name.

# What a worker's error starts with, so that the driver finds it in the runner's traceback.
_WORKER_ERROR = '[rlds-reverb worker] '
_PROGRESS_PERIOD_S = 0.5
# How long a server may take to answer the progress poll and the failure report.
# Shard groups per worker: enough to balance the workers, few enough that each read's fixed
# set-up (opening the dataset, tracing) is paid a handful of times, not once per shard.
_GROUPS_PER_WORKER = 2
# Records the count stage scans at a time: the parser's per-call cost vanishes, memory stays
# flat in the dataset's size.
_SCAN_RECORDS = 64
# The Beam counters of what the stages read (`ReadCounts`).
_METRICS_NAMESPACE = 'rlds_reverb'
_RECORDS_SCANNED = 'records_scanned'
_DECODED_TO_COUNT = 'episodes_decoded_to_count'
_DECODED_TO_WRITE = 'episodes_decoded_to_write'


# Defined in `rlds_reverb.core.errors` (importable from here too).
DistributedPushError = errors.DistributedPushError


@dataclasses.dataclass(frozen=True)
class _Job:
    """Everything a worker needs (pickled to every worker)."""

    dataset_dir: str
    split: str
    servers: tuple[str, ...]
    table: str
    options: options_lib.PushOptions
    result_dir: str
    step_spec: dict  # Of the episodes as written (with carried fields).

    @property
    def item(self) -> items_lib.ItemKind:
        return self.options.item

    @property
    def mode(self) -> types.ValidationMode:
        return self.options.on_invalid


@dataclasses.dataclass
class _Episode:
    """One counted episode on its way to its server (only metadata crosses the shuffle)."""

    index: int
    length: int
    num_items: int
    valid: bool


@dataclasses.dataclass
class ServerCounts:
    """What one server got: episodes, steps, items, skipped episodes; what it reports.

    `inserted` is the table's insert count after the pipeline, as the server reports it;
    `inserted_before` the count before. After a successful push, `inserted == items`.
    """

    address: str
    episodes: int = 0
    steps: int = 0
    items: int = 0
    skipped_episodes: int = 0
    inserted: int = 0
    inserted_before: int = 0


@dataclasses.dataclass
class ReadCounts:
    """What the pipeline's workers read, summed from its Beam counters.

    Attributes:
      records_scanned: Records the count stage parsed from their bytes in bulk (steps not
        decoded: lengths, flags, rewards and discounts read as plain numbers).
      decoded_to_count: Episodes the count stage decoded (those the bulk scan found invalid
        or could not decide; every episode of a dataset it cannot scan, such as images).
      decoded_to_write: Episodes the writers decoded, each writer its own index range.
    """

    records_scanned: int = 0
    decoded_to_count: int = 0
    decoded_to_write: int = 0

    @property
    def decoded(self) -> int:
        """Episodes decoded by every worker together."""
        return self.decoded_to_count + self.decoded_to_write


@dataclasses.dataclass
class BeamPushResult:
    """What a Beam push wrote, per server and in total.

    `reads` is what the workers read (`ReadCounts`), None when the runner reports no metrics.
    """

    table: str
    servers: list[ServerCounts]
    seconds: float = 0.0
    reads: ReadCounts | None = None

    @property
    def episodes(self) -> int:
        return sum(s.episodes for s in self.servers)

    @property
    def steps(self) -> int:
        return sum(s.steps for s in self.servers)

    @property
    def items(self) -> int:
        return sum(s.items for s in self.servers)

    @property
    def skipped_episodes(self) -> int:
        return sum(s.skipped_episodes for s in self.servers)

    @property
    def spread(self) -> float:
        """The largest server's items over the mean, minus one (0.0: perfectly even)."""
        return routing.compute_spread([s.items for s in self.servers])

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    def format(self) -> str:
        """Returns one line per server and a total line."""
        lines = [
            f'  {s.address}: {s.episodes} episodes, {s.steps} steps, {s.items} items, '
            f'{s.skipped_episodes} skipped (the server reports {s.inserted} inserted)'
            for s in self.servers
        ]
        lines.append(
            f'Pushed {self.items} items ({self.episodes} episodes, {self.steps} steps, '
            f'{self.skipped_episodes} skipped) into {self.table!r} on {len(self.servers)} '
            f'server(s) in {self.seconds:.2f} s; '
            + routing.describe_spread([s.items for s in self.servers])
            + '.'
        )
        return '\n'.join(lines)


def _count_read(name: str, value: int) -> None:
    """Adds `value` to the Beam counter `name` (`ReadCounts`)."""
    Metrics.counter(_METRICS_NAMESPACE, name).inc(value)


def _read_range(job: _Job, first: int, count: int) -> tf.data.Dataset:
    """Returns the split's episodes `first..first+count-1` (shard order), as every stage reads.

    A split slice reads the shards it spans one after the other (interleave cycle of 1),
    so the i-th episode read is episode `first + i` whatever the dataset's shuffling
    setting. No autocache: memory stays flat in the dataset's size.
    """
    return loading.load(
        job.dataset_dir,
        split=f'{job.split}[{first}:{first + count}]',
        check_files=False,
        read_config=tfds.ReadConfig(interleave_cycle_length=1, try_autocache=False),
    )


# --- Stage 1: count each shard's episodes --------------------------------------------------


class _CountShard(beam.DoFn):
    """Counts one shard group's episodes: steps, items, valid or not (`_count_range`)."""

    def __init__(self, job: _Job):
        self._job = job

    def process(self, shard: routing.ShardRange):
        try:
            yield from _count_range(self._job, shard)
        except Exception as e:
            raise RuntimeError(
                f'{_WORKER_ERROR}Reading shard {shard.filename} (episodes {shard.first}..'
                f'{shard.first + shard.count - 1}) failed: {_one_line(e)} Nothing was written '
                '(writers start after every episode is counted).'
            ) from e


def _count_range(job: _Job, shard: routing.ShardRange):
    """Yields an `_Episode` per episode of `shard`, in order, decoding as few as it can.

    The records are scanned from their bytes in bulk (`record_checks.summarize_records`:
    step counts and the rules on flags, rewards and discounts, no step decoded); the item
    counts follow from the step counts. Only the episodes the scan finds invalid, or cannot
    decide, are decoded here, by runs of neighbours, to decide and name their problems
    exactly as `validate` does; so a valid episode is decoded once in the whole pipeline,
    by its writer. A dataset the scan cannot read (encoded step fields such as images,
    per-step shapes that vary, item kinds of one's own, unreadable shards) is decoded here
    whole, as `_count_decoded` does.
    """
    episodes = _read_range(job, shard.first, shard.count)  # Not read: the step spec.
    step_spec = specs.get_step_spec(episodes)
    checker = validation.EpisodeChecker(step_spec)
    scanned = _scan_range(job, shard, step_spec)
    items = None if scanned is None else _count_items_by_length(job.item, scanned[0], step_spec)
    if items is None:
        yield from _count_decoded(job, episodes, shard.first, checker)
        return
    lengths, clean = scanned
    local = 0
    while local < shard.count:
        if not clean[local]:  # A run of undecided neighbours, decoded together.
            end = local + int(np.argmax(np.append(clean[local:], True)))
            first = shard.first + local
            undecided = _read_range(job, first, end - local)
            yield from _count_decoded(job, undecided, first, validation.EpisodeChecker(step_spec))
            local = end
            continue
        index, length = shard.first + local, int(lengths[local])
        _check_length(job, index, length)
        yield _Episode(index, length, int(items[local]), valid=True)
        local += 1


def _check_length(job: _Job, index: int, length: int) -> None:
    reason = job.item.describe_length_problem(length)
    if reason:
        raise errors.EpisodeTooLongError(
            f'Episode {index}: {reason}.', episodes_written=0, items_written=0
        )


def _count_decoded(job: _Job, episodes: tf.data.Dataset, first: int, checker):
    """Yields an `_Episode` per episode of `episodes` (numbered from `first`), decoding each.

    Invalid episodes raise (`on_invalid='raise'`) or are counted as skipped.
    """
    counted = summarize_episodes(episodes, job.item)
    for local, element in validation.read_episodes(counted):
        _count_read(_DECODED_TO_COUNT, 1)
        index = first + local
        unreadable = isinstance(element, validation.UnreadableEpisode)
        summary, count = (element, 0) if unreadable else element
        problems = checker.find_problems(index, summary)
        if problems:
            if job.mode is types.ValidationMode.RAISE:
                raise errors.InvalidEpisodeError(index, problems)
            length = 0 if unreadable else int(summary.length)
            yield _Episode(index, length, 0, valid=False)
            continue
        _check_length(job, index, int(summary.length))
        yield _Episode(index, int(summary.length), int(count), valid=True)


def _scan_range(
    job: _Job, shard: routing.ShardRange, step_spec: dict
) -> tuple[np.ndarray, np.ndarray] | None:
    """Returns (steps, certainly valid) per episode of `shard`, from the records' bytes.

    None when the records cannot be scanned (see `_count_range`): the caller decodes them.
    """
    builder = loading.open_builder(job.dataset_dir)
    serialized_steps = builder.info.features[types.STEPS].get_serialized_info()
    plan = record_checks.plan_record_checks(serialized_steps, step_spec)
    if plan is None:
        return None
    split = f'{job.split}[{shard.first}:{shard.first + shard.count}]'
    instructions = builder.info.splits[split].file_instructions
    source = records.RecordSource(
        tuple((os.fspath(i.filename), int(i.skip), int(i.take)) for i in instructions),
        serialized_steps,
    )
    lengths, clean = [], []
    try:
        for batch in records.read_serialized_batches(source, batch_records=_SCAN_RECORDS):
            _count_read(_RECORDS_SCANNED, len(batch))
            summary = record_checks.summarize_records(batch, plan)
            lengths.append(summary.lengths)
            clean.append(summary.clean)
    except (tf.errors.OpError, ValueError):
        return None  # Decoding names the shard, record and field.
    if sum(len(c) for c in clean) != shard.count:
        return None
    return np.concatenate(lengths), np.concatenate(clean)


def _count_items_by_length(
    item: items_lib.ItemKind, lengths: np.ndarray, step_spec: dict
) -> np.ndarray | None:
    """Returns each episode's item count from its step count, or None if that cannot say.

    The item kinds of `rlds_reverb.items` place their windows by the episode's length
    alone (`compute_windows`), so one traced call per distinct length counts them; an
    item kind of one's own may look at the data, and is counted from decoded episodes.
    """
    kind = type(item)
    if kind.__module__ != items_lib.__name__ or (
        kind.prepare_episodes is not items_lib.ItemKind.prepare_episodes
    ):
        return None
    signature = tree.map_structure(lambda s: tf.TensorSpec([None, *s.shape], s.dtype), step_spec)
    count = tf.function(
        lambda steps: tf.size(item.compute_windows(steps)[0]),
        input_signature=[signature],
        autograph=False,
    )

    def _count_for(length: int) -> int:
        steps = tree.map_structure(lambda s: tf.zeros([length, *s.shape], s.dtype), step_spec)
        return int(count(steps))

    distinct, where = np.unique(lengths, return_inverse=True)
    per_length = np.array([_count_for(n) for n in distinct.tolist()], dtype=np.int64)
    return per_length[where].reshape(-1)


# --- Stage 2: route -------------------------------------------------------------------------


def _place(counts: list[tuple[int, int]], num_servers: int) -> dict[int, int]:
    """Returns episode index -> server position for all (index, items) pairs."""
    ordered = sorted(counts)
    placement = routing.assign_servers([c for _, c in ordered], num_servers)
    return {index: int(server) for (index, _), server in zip(ordered, placement, strict=True)}


# --- Stage 3: one writer per (server, table) -------------------------------------------------


def _one_line(error: BaseException | str) -> str:
    text = ' '.join(str(error).split())
    return text if text.endswith(('.', '?', '!')) else text + '.'


def _result_path(result_dir: str, position: int) -> str:
    return FileSystems.join(result_dir, f'server-{position:05d}.json')


def _write_result(path: str, counts: ServerCounts) -> None:
    """Writes a writer's counts; a local file as every file of the toolkit (core/files.py)."""
    data = json.dumps(dataclasses.asdict(counts)).encode()
    if FileSystems.get_scheme(path) is None:
        with files.replace_file(path) as f:
            f.write(data)
        return
    with FileSystems.create(path) as f:
        f.write(data)


class _WritePartition(beam.DoFn):
    """Writes one server's episodes in index order, resuming from the table's insert count."""

    def __init__(self, job: _Job):
        self._job = job

    def process(self, element):
        position, group = element
        job = self._job
        address = job.servers[position]
        ordered = sorted(group, key=lambda e: e.index)
        written = [e for e in ordered if e.valid]
        counts = ServerCounts(
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
            raise RuntimeError(f'{_WORKER_ERROR}{message}') from e
        _write_result(_result_path(job.result_dir, position), counts)
        yield counts


def _plan_episodes(job: _Job, indices: Sequence[int], decoded: tf.Variable) -> tf.data.Dataset:
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
        _read_range(job, first, len(wanted)),
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


def _read_plans(job: _Job, episodes: list[_Episode]):
    """Yields `(index, plan)` of `episodes`; fails if one no longer reads as it was counted."""
    decoded = tf.Variable(0, dtype=tf.int64, trainable=False)
    try:
        yield from _check_plans(job, episodes, decoded)
    finally:
        _count_read(_DECODED_TO_WRITE, int(decoded.numpy()))


def _check_plans(job: _Job, episodes: list[_Episode], decoded: tf.Variable):
    plans = validation.read_episodes(_plan_episodes(job, [e.index for e in episodes], decoded))
    for episode in episodes:
        _, plan = next(plans, (None, None))
        if plan is None:
            found = 'the dataset has fewer episodes.'
        elif isinstance(plan, validation.UnreadableEpisode):
            found = _one_line(plan.error_message)
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


def _write_episodes(job: _Job, address: str, episodes: list[_Episode], done: dict) -> None:
    """Writes what the table lacks of `episodes` (in order); updates `done` as it goes.

    The table's insert count says where to start (`loop.find_resume_point`); the write goes
    through the one episode loop of every push (`rlds_reverb.write.loop.EpisodeLoop`).
    """
    client = reverb.Client(address)
    info = table_info.fetch_table_info(client, job.table, timeout_ms=job.options.timeout_ms)
    inserted = table_info.count_inserted(info)
    done['before'] = inserted
    counts = np.array([e.num_items for e in episodes], dtype=np.int64)
    point = loop.find_resume_point(inserted, counts)
    done['episodes'], done['items'] = point.episode, inserted
    if not episodes or point.episode == len(episodes):
        return
    writer = loop.EpisodeLoop(
        client,
        [job.table],
        job.options,
        step_spec=job.step_spec,
        free_slots=table_info.count_free_slots(info),
        start=loop.ResumePoint(episodes[point.episode].index, point.items),
    )
    writer.check_room_ahead(int(counts.sum()) - inserted, advice='this server')
    try:
        writer.run(_read_plans(job, episodes[point.episode :]))
    finally:
        done['episodes'] = point.episode + writer.stats.episodes
        done['items'] = inserted + writer.items_written


def _describe_write_failure(job: _Job, address: str, error: Exception, done: dict) -> str:
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
        f'{_one_line(error)} The table held {held}.'
    )


# --- The driver ------------------------------------------------------------------------------


def _connect(address: str, servers: Sequence[str]) -> reverb.Client:
    """Returns a client of `address`; a server that does not answer is named at once."""
    try:
        return table_info.connect(address)
    except errors.ReverbConnectionError as e:
        raise errors.ReverbConnectionError(
            f'{e} Nothing was read or written; the servers were {", ".join(servers)}.'
        ) from e


def _check_servers(
    servers: Sequence[str], table: str, item_spec, timeout_ms: int
) -> dict[str, int]:
    """Checks every server and table before any work; returns their insert counts."""
    inserted = {}
    for address in servers:
        client = _connect(address, servers)
        try:
            info = table_info.fetch_table_info(client, table, timeout_ms=timeout_ms)
        except errors.ReverbConnectionError as e:
            raise errors.ReverbConnectionError(
                f'{e} Nothing was read or written; the servers were {", ".join(servers)}.'
            ) from e
        table_info.check_signature(info, item_spec, found=f'the items pushed to {address}')
        inserted[address] = table_info.count_inserted(info)
    return inserted


def _probe_servers(servers: Sequence[str], table: str) -> dict[str, int | None]:
    """Returns each server's insert count now, None for one that does not answer."""
    found = {}
    for address in servers:
        try:
            info = table_info.fetch_table_info(
                reverb.Client(address), table, timeout_ms=timeouts.CHECKPOINT_PROBE_MS
            )
            found[address] = table_info.count_inserted(info)
        except (errors.RldsReverbError, reverb.errors.ReverbError, RuntimeError):
            found[address] = None
    return found


def _worker_message(error: BaseException) -> str:
    """Returns the worker's own error from a runner's exception text, else the text."""
    text = str(error)
    found = re.findall(re.escape(_WORKER_ERROR) + r'(.*)', text)
    if found:
        return found[-1].strip().rstrip('\'"')
    return ' '.join(text.split())[-2000:]


class _ProgressPoller:
    """Calls `progress(items)` with the items the servers gained, every half second."""

    def __init__(self, servers, table, before, progress):
        self._args = servers, table, before, progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        servers, table, before, progress = self._args
        while not self._stop.wait(_PROGRESS_PERIOD_S):
            now = _probe_servers(servers, table)
            progress(sum((now[a] or before[a]) - before[a] for a in servers))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        self._thread.join()


def _count_workers(options: PipelineOptions) -> int:
    """Returns how many workers the runner will use, as far as its options say."""
    direct = options.view_as(DirectOptions).direct_num_workers
    worker = options.view_as(WorkerOptions)
    flink = options.get_all_options(retain_unknown_options=True).get('parallelism')
    given = max(worker.num_workers or 0, worker.max_num_workers or 0, int(flink or 0))
    runner = options.view_as(StandardOptions).runner or 'DirectRunner'
    if 'Direct' in str(runner):
        given = direct
    return given if given and given > 0 else (os.cpu_count() or 1)


def _make_options(pipeline_options) -> PipelineOptions:
    if pipeline_options is None:
        return PipelineOptions(['--runner=DirectRunner'])
    if isinstance(pipeline_options, PipelineOptions):
        return pipeline_options
    return PipelineOptions(list(pipeline_options))


# Runner names that mean Beam's DirectRunner (`--runner` is matched case-insensitively).
_DIRECT_RUNNERS = ('direct', 'directrunner', 'switchingdirectrunner')


def _make_runner(options: PipelineOptions):
    """Returns the FnApiRunner for the DirectRunner (or no runner named); else None.

    Beam 2.77's DirectRunner first tries its Prism runner, which downloads a binary from
    GitHub on every run until cached and leaves folders in the temp directory, and falls
    back to the FnApiRunner (also without a network). The pipeline runs, and is tested, on
    the FnApiRunner, built as the DirectRunner builds it (`direct_num_workers`,
    `direct_running_mode` and the other DirectRunner options apply); `--runner=PrismRunner`
    still chooses Prism.
    """
    runner = options.view_as(StandardOptions).runner
    if runner is not None and (
        not isinstance(runner, str) or runner.lower() not in _DIRECT_RUNNERS
    ):
        return None
    return compat.make_fn_api_runner(options)


def build_pipeline(pipeline: beam.Pipeline, job: _Job, shards: list[routing.ShardRange]):
    """Adds the count, route and write stages to `pipeline`; returns the written counts."""
    counted = (
        pipeline
        | 'Shards' >> beam.Create(shards)
        | 'Spread shards' >> beam.Reshuffle()
        | 'Count' >> beam.ParDo(_CountShard(job))
    )
    placement = (
        counted
        | 'Item counts' >> beam.Map(lambda e: (e.index, e.num_items))
        | 'All counts' >> beam.combiners.ToList()
        | 'Place' >> beam.Map(_place, len(job.servers))
    )
    return (
        counted
        | 'Route'
        >> beam.Map(lambda e, where: (where[e.index], e), where=beam.pvalue.AsSingleton(placement))
        | 'By server' >> beam.GroupByKey()
        | 'Write' >> beam.ParDo(_WritePartition(job))
    )


def push_with_beam(
    source: str | os.PathLike,
    servers: str | Sequence[str],
    table: str,
    *,
    split: str = 'train',
    data_dir: str | os.PathLike | None = None,
    item: items_lib.ItemKind | None = None,
    priority: float | PriorityFn = 1.0,
    on_invalid: types.ValidationMode | str = types.ValidationMode.RAISE,
    policy_info_fn: specs.PolicyInfoFn = None,
    timeout_ms: int = options_lib.DEFAULT_TIMEOUT_MS,
    max_in_flight_items: int = options_lib.DEFAULT_MAX_IN_FLIGHT_ITEMS,
    allow_eviction: bool = False,
    engine: engines.EngineKind | str = engines.EngineKind.AUTO,
    pipeline_options: PipelineOptions | Sequence[str] | None = None,
    result_dir: str | None = None,
    progress: ProgressFn | None = None,
    episode_fields: Sequence[str] = (),
    add_ids: bool = False,
    options: options_lib.PushOptions | None = None,
) -> BeamPushResult:
    """Pushes a TFDS RLDS dataset into one table on one or several Reverb servers, on Beam.

    Args:
      source: A TFDS dataset directory, or a TFDS name found in `data_dir`.
      servers: 'host:port' addresses (a list, or one string, comma-separated).
      table: The table, on every server; this pipeline must be its only writer.
      split: A split name (no slicing: the pipeline reads whole shards).
      data_dir: Where to look a TFDS name up.
      item: The item kind (`rlds_reverb.items`), not crossing episodes; default TwoStep.
      priority: A constant >= 0, or `fn(item_batch) -> [N]` (as for `push`).
      on_invalid: `'raise'` (the pipeline fails before writing anything) or `'skip'`
        (invalid episodes are dropped whole and counted in `skipped_episodes`).
      policy_info_fn: Optional `fn(current_step, next_step)` (two-step items).
      timeout_ms: The most any wait on a server may take.
      max_in_flight_items: The most items pending on a server per writer.
      allow_eviction: Whether a table may remove items to make room.
      engine: Which Reverb writer (`engines.EngineKind`).
      pipeline_options: Beam options (`PipelineOptions` or flags such as
        `['--runner=DirectRunner', '--direct_num_workers=2',
        '--direct_running_mode=multi_processing']`); default: the DirectRunner (run on
        Beam's FnApiRunner, see `_make_runner`).
      result_dir: Where writers leave their counts (a directory every worker and this
        process can reach, e.g. `gs://...` on Dataflow; kept); default: a private (0700) local
        temp dir, removed when the push ends.
      progress: Optional `fn(items)`, called about every 0.5 s with the items the servers
        gained so far.
      episode_fields: Episode-level fields to copy into every item of their episode (as
        for `push`).
      add_ids: Also give every item `episode_id` (the episode's index in the split, in
        shard order, which is its position in `load`'s order when no shard holds more than
        16 episodes or the dataset disables shuffling) and `step_index`.
      options: The write options as one `PushOptions` (then pass none of them as
        keywords); its `resume` does not matter (the pipeline always resumes) and
        `checkpoint_every` must be None.

    Returns:
      `BeamPushResult`: episodes, steps, items and skipped episodes per server, with what
      each server reports (`inserted`); the items equal the servers' insert counts.

    Raises:
      ValueError: If an option is invalid (including items that cross episodes, and
        `checkpoint_every`), or an `episode_fields` name is not an episode-level field.
      SourceError: If the source is not a prepared TFDS RLDS dataset.
      ReverbConnectionError: If a server does not answer at start (named; nothing written).
      TableError: If the table is missing on a server (lists the tables that exist).
      SpecMismatchError: If a table's signature differs from the items.
      DistributedPushError: If the pipeline fails (an invalid episode in raise mode, a server
        dying mid-way, a table too small): names the cause and what each server holds.

    Example:
      >>> result = push_with_beam('/data/cartpole_v1/1.0.0', ['h1:8000', 'h2:8000'], 'replay',
      ...                         pipeline_options=['--direct_num_workers=2',
      ...                                           '--direct_running_mode=multi_processing'])
      >>> print(result.format())
    """
    started = time.perf_counter()
    options = options_lib.merge_options(
        options,
        item=item,
        priority=priority,
        on_invalid=on_invalid,
        policy_info_fn=policy_info_fn,
        timeout_ms=timeout_ms,
        max_in_flight_items=max_in_flight_items,
        allow_eviction=allow_eviction,
        engine=engine,
        episode_fields=episode_fields,
        add_ids=add_ids,
    )
    item = options.item
    if item.crosses_episodes:
        raise ValueError(
            f'{item} items cross episodes; the Beam pipeline writes per-episode items only.'
        )
    if options.checkpoint_every is not None:
        raise ValueError(
            'checkpoint_every is not valid for push_with_beam: the pipeline resumes from the '
            "tables' insert counts; checkpoint the servers themselves."
        )
    addresses = [s.strip() for s in servers.split(',')] if isinstance(servers, str) else servers
    addresses = [str(a) for a in addresses]
    if not addresses or len(set(addresses)) != len(addresses):
        raise ValueError(f'servers={servers!r} is not valid; expected distinct host:port values.')
    for address in addresses:  # A dead server is named before the dataset is opened.
        _connect(address, addresses)
    builder = loading.open_builder(source, data_dir=data_dir)
    beam_options = _make_options(pipeline_options)
    shards = routing.group_shard_ranges(
        routing.list_shard_ranges(builder, split), _GROUPS_PER_WORKER * _count_workers(beam_options)
    )
    episodes = carry.carry_episode_fields(  # Checks features, shards and carried fields.
        loading.load(builder.data_dir, split=split),
        options.episode_fields,
        add_ids=options.add_ids,
    )
    step_spec = specs.get_step_spec(episodes)
    validation.check_step_spec(step_spec)
    item_spec = item.compute_item_spec(episodes, policy_info_fn=options.policy_info_fn)
    before = _check_servers(addresses, table, item_spec, options.timeout_ms)
    # Our own result directory (mkdtemp: mode 0700) goes when the push ends, also on failure.
    own_result_dir = None if result_dir else tempfile.mkdtemp(prefix='rlds_reverb_beam_')
    job = _Job(
        dataset_dir=os.fspath(builder.data_dir),
        split=split,
        servers=tuple(addresses),
        table=table,
        options=options,
        result_dir=result_dir or own_result_dir,
        step_spec=step_spec,
    )
    try:
        result = _run_pipeline(job, beam_options, shards, before, progress)
    finally:
        if own_result_dir:
            shutil.rmtree(own_result_dir, ignore_errors=True)
    result.seconds = time.perf_counter() - started
    return result


def _run_pipeline(job: _Job, options, shards, before: dict, progress) -> BeamPushResult:
    """Runs the pipeline of one push; returns what the writers and the servers report."""
    pipeline = beam.Pipeline(runner=_make_runner(options), options=options)
    build_pipeline(pipeline, job, shards)
    poller = _ProgressPoller(job.servers, job.table, before, progress) if progress else None
    try:
        if poller:
            poller.__enter__()
        run = pipeline.run()  # Not `with Pipeline()`: that would run it again.
        run.wait_until_finish()
    except Exception as e:
        raise _describe_failure(e, job, before) from e
    finally:
        if poller:
            poller.__exit__()
    result = _collect(job, before)
    result.reads = _query_reads(run)
    return result


def _query_reads(run) -> ReadCounts | None:
    """Returns the counters of what the workers read, or None if the runner has no metrics."""
    try:
        found = run.metrics().query(MetricsFilter().with_namespace(_METRICS_NAMESPACE))
    except (NotImplementedError, AttributeError):
        return None
    values = {}
    for counter in found['counters']:  # One result per counter and stage: summed.
        name = counter.key.metric.name
        values[name] = values.get(name, 0) + (counter.committed or 0)
    return ReadCounts(
        records_scanned=values.get(_RECORDS_SCANNED, 0),
        decoded_to_count=values.get(_DECODED_TO_COUNT, 0),
        decoded_to_write=values.get(_DECODED_TO_WRITE, 0),
    )


def _describe_failure(error: Exception, job: _Job, before: dict) -> DistributedPushError:
    now = _probe_servers(job.servers, job.table)
    held = '; '.join(
        f'{a}: not answering' if now[a] is None else f'{a}: {now[a]} items ({before[a]} before)'
        for a in job.servers
    )
    return DistributedPushError(
        f'The Beam push into table {job.table!r} failed: {_worker_message(error)} What the '
        f'servers hold now: {held}. Every item there is whole and in order; re-run the same '
        'push (after restarting a dead server, from its checkpoint if it has one) to continue '
        'exactly.',
        episodes_written=0,
        items_written=sum(v - before[a] for a, v in now.items() if v is not None),
    )


def _collect(job: _Job, before: dict) -> BeamPushResult:
    """Reads the writers' counts and what the servers report; checks they agree."""
    servers = []
    now = _probe_servers(job.servers, job.table)
    for position, address in enumerate(job.servers):
        path = _result_path(job.result_dir, position)
        if FileSystems.exists(path):
            with FileSystems.open(path) as f:
                counts = ServerCounts(**json.loads(f.read().decode()))
        else:  # No episode was routed here.
            counts = ServerCounts(address)
        counts.inserted = now[address] if now[address] is not None else -1
        counts.inserted_before = before[address]
        servers.append(counts)
    wrong = [s for s in servers if s.inserted != s.items]
    if wrong:
        detail = '; '.join(f'{s.address}: {s.inserted} inserted, {s.items} planned' for s in wrong)
        raise DistributedPushError(
            f'The servers do not hold what the pipeline planned ({detail}). Was another '
            'writer using the table? Re-run the push to complete it.',
            episodes_written=0,
            items_written=sum(max(s.inserted, 0) for s in servers),
        )
    return BeamPushResult(job.table, servers)
