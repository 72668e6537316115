"""Pushing an RLDS TFDS dataset into one or several Reverb servers with Apache Beam.

The same pipeline runs on Beam's DirectRunner on one machine and on Flink, Spark or
Dataflow in a cluster (README, "Beyond one machine"). Its stages:

Episodes are numbered in shard order (`routing`: the first shard file's episodes, then the
second's), and every stage reads an index range the same way (`job.read_range`: a split slice
read one shard after the other), so the count and the writers see the same episode under
the same index. (A read of the whole split interleaves shards 16 episodes at a time unless
the dataset disables shuffling, TFDS' default; its positions are not these indices.)

1. **Count** (`counting`; parallel by groups of neighbouring shard files, two per
   worker): each worker scans its group's records
   (`builder.info.splits[split].file_instructions`) from their bytes in bulk, decoding no
   step (`record_checks.summarize_records`: step counts and the validation rules), and
   counts their items from their lengths. Only episodes the scan finds invalid or cannot
   decide are decoded here, so a valid episode is decoded once in the whole pipeline, by
   its writer. Invalid episodes raise (`on_invalid='raise'`: before anything is written,
   as the writers wait for every count) or are counted and dropped (`'skip'`). The Beam
   counters of what was read come back in `BeamPushResult.reads`.
2. **Route**: the episodes are cut into one consecutive index range per server by
   `routing.assign_servers` (balanced item counts, a function of the dataset, split, item
   kind and server list only). Only this metadata (index, steps, items) crosses Beam's
   shuffle, never the episodes' data.
3. **Write** (`writing`; one writer per (server, table) partition): the writer reads its
   own index range only (so the writers together read the dataset once, whatever the number of
   servers), plans the episodes (rows, item windows, priorities) and writes them in index
   order with `push`'s writer engines, streaming as `push` does (memory stays flat in the
   dataset's size). The writer first reads the table's insert count and skips what the
   table already holds, down to single items of a partly written episode
   (`rlds_reverb.write.resume.find_resume_point`), and reads from there. A replayed bundle,
   a worker killed part way, or a server restarted from a checkpoint followed by a re-run
   therefore leave every item in its server exactly once.

`runner` wires the stages, runs them on the runner the options name and reads back what
the writers and the servers report (`results`); the job every worker gets is `job.BeamJob`.

Exactly once assumes: one pipeline at a time writes the table (no concurrent speculative
attempts of a partition's writer), the table holds only this dataset's items for this
split, item kind and server list, and building items is deterministic (the same plans on
every attempt).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import reverb
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions

from rlds_reverb.check import validation
from rlds_reverb.core import errors, specs, types
from rlds_reverb.distribute import job as job_lib
from rlds_reverb.distribute import routing, runner
from rlds_reverb.distribute.results import BeamPushResult, ReadCounts, ServerCounts
from rlds_reverb.read import loading
from rlds_reverb.serve import table_info
from rlds_reverb.transform import carry
from rlds_reverb.write import options as options_lib

__all__ = [
    'BeamPushResult',
    'DistributedPushError',
    'ProgressFn',
    'ReadCounts',
    'ServerCounts',
    'push_with_beam',
]

ProgressFn = types.ItemProgressFn  # fn(items) about every 0.5 s.

# Shard groups per worker: enough to balance the workers, few enough that each read's fixed
# set-up (opening the dataset, tracing) is paid a handful of times, not once per shard.
_GROUPS_PER_WORKER = 2

# Defined in `rlds_reverb.core.errors` (importable from here too).
DistributedPushError = errors.DistributedPushError


def push_with_beam(
    source: str | os.PathLike,
    servers: str | Sequence[str],
    table: str,
    *,
    split: str = 'train',
    data_dir: str | os.PathLike | None = None,
    pipeline_options: PipelineOptions | Sequence[str] | None = None,
    result_dir: str | None = None,
    progress: ProgressFn | None = None,
    options: options_lib.PushOptions | None = None,
    **overrides: Any,
) -> BeamPushResult:
    """Pushes a TFDS RLDS dataset into one table on one or several Reverb servers, on Beam.

    Args:
      source: A TFDS dataset directory, or a TFDS name found in `data_dir`.
      servers: 'host:port' addresses (a list, or one string, comma-separated).
      table: The table, on every server; this pipeline must be its only writer.
      split: A split name (no slicing: the pipeline reads whole shards).
      data_dir: Where to look a TFDS name up.
      pipeline_options: Beam options (`PipelineOptions` or flags such as
        `['--runner=DirectRunner', '--direct_num_workers=2',
        '--direct_running_mode=multi_processing']`); default: the DirectRunner (run on
        Beam's FnApiRunner, see `runner._make_runner`).
      result_dir: Where writers leave their counts (a directory every worker and this
        process can reach, e.g. `gs://...` on Dataflow; kept); default: a private (0700) local
        temp dir, removed when the push ends.
      progress: Optional `fn(items)`, called about every 0.5 s with the items the servers
        gained so far.
      options: The write options (`PushOptions`). Here `on_invalid='raise'` fails the
        pipeline before anything is written; `add_ids` gives every item its episode's index
        in the split, in shard order (its position in `load`'s order when no shard holds
        more than 16 episodes or the dataset disables shuffling); `resume` does not matter
        (the pipeline always resumes); items that cross episodes and `checkpoint_every`
        need one writer (`options.check_writers`).
      **overrides: Options of `PushOptions` by name, without `options`
        (`item=items.NStep(3, 0.99)`).

    Returns:
      `BeamPushResult`: episodes, steps, items and skipped episodes per server, with what
      each server reports (`inserted`); the items equal the servers' insert counts.

    Raises:
      TypeError: If a keyword is not an option of `PushOptions`.
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
    options = options_lib.merge_options(options, **overrides)
    options_lib.check_writers(options, options_lib.Writers.BEAM)
    addresses = _parse_servers(servers)
    for address in addresses:  # A dead server is named before the dataset is opened.
        _connect(address, addresses)
    builder = loading.open_builder(source, data_dir=data_dir)
    beam_options = runner.make_pipeline_options(pipeline_options)
    shards = routing.group_shard_ranges(
        routing.list_shard_ranges(builder, split),
        _GROUPS_PER_WORKER * runner.count_workers(beam_options),
    )
    step_spec, item_spec = _check_episodes(loading.load(builder.data_dir, split=split), options)
    before = _check_servers(addresses, table, item_spec, options.timeout_ms)
    # Our own result directory (mkdtemp: mode 0700) goes when the push ends, also on failure.
    own_result_dir: str | None = None
    if not result_dir:
        result_dir = own_result_dir = tempfile.mkdtemp(prefix='rlds_reverb_beam_')
    job = job_lib.BeamJob(
        dataset_dir=os.fspath(builder.data_dir),
        split=split,
        servers=tuple(addresses),
        table=table,
        options=options,
        result_dir=result_dir,
        step_spec=step_spec,
    )
    try:
        result = runner.run_pipeline(job, beam_options, shards, before, progress)
    finally:
        if own_result_dir:
            shutil.rmtree(own_result_dir, ignore_errors=True)
    result.seconds = time.perf_counter() - started
    return result


def _parse_servers(servers: str | Sequence[str]) -> list[str]:
    """Returns the distinct 'host:port' addresses of `servers`."""
    addresses = [s.strip() for s in servers.split(',')] if isinstance(servers, str) else servers
    addresses = [str(a) for a in addresses]
    if not addresses or len(set(addresses)) != len(addresses):
        raise ValueError(f'servers={servers!r} is not valid; expected distinct host:port values.')
    return addresses


def _check_episodes(
    episodes: tf.data.Dataset, options: options_lib.PushOptions
) -> tuple[dict, types.SpecNest]:
    """Returns the step spec of the episodes as written (carried fields too), and the items'.

    Raises:
      ValueError: If a carried field is not an episode-level field, or the steps are not
        RLDS steps.
    """
    episodes = carry.carry_episode_fields(  # Checks features, shards and carried fields.
        episodes, options.episode_fields, add_ids=options.add_ids
    )
    step_spec = specs.get_step_spec(episodes)
    validation.check_step_spec(step_spec)
    item_spec = options.item.compute_signature(episodes, policy_info_fn=options.policy_info_fn)
    return step_spec, item_spec


def _connect(address: str, servers: Sequence[str]) -> reverb.Client:
    """Returns a client of `address`; a server that does not answer is named at once."""
    try:
        return table_info.connect(address)
    except errors.ReverbConnectionError as e:
        raise errors.ReverbConnectionError(
            f'{e} Nothing was read or written; the servers were {", ".join(servers)}.'
        ) from e


def _check_servers(
    servers: Sequence[str], table: str, item_spec: types.SpecNest, timeout_ms: int
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
