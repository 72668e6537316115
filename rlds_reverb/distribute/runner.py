"""Runs the Beam push: its options and runner, the stages wired together, what it reports.

`build_pipeline` wires the count stage (`counting`), the route (`routing.assign_servers`:
one consecutive index range per server, balanced; only metadata crosses Beam's shuffle) and
the write stage (`writing`). `run_pipeline` runs it on the runner the options name (the
DirectRunner on Beam's FnApiRunner, `_make_runner`), polls the servers for progress, and
reads back what the writers and the servers report; a failure names the cause and what
each server holds.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Sequence

import apache_beam as beam
import reverb
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)
from apache_beam.transforms import combiners

from rlds_reverb.core import compat, errors, timeouts
from rlds_reverb.distribute import counting, results, routing, writing
from rlds_reverb.distribute import job as job_lib
from rlds_reverb.serve import table_info

# Helpers of `rlds_reverb.distribute` only.
__all__: list[str] = []

# How often the servers are asked how many items they gained (`progress`).
_PROGRESS_PERIOD_S = 0.5
# Runner names that mean Beam's DirectRunner (`--runner` is matched case-insensitively).
_DIRECT_RUNNERS = ('direct', 'directrunner', 'switchingdirectrunner')


def probe_servers(
    servers: Sequence[str], table: str, *, timeout_ms: int = timeouts.CHECKPOINT_PROBE_MS
) -> dict[str, int | None]:
    """Returns each server's insert count now, None for one that does not answer within
    `timeout_ms`."""
    found: dict[str, int | None] = {}
    for address in servers:
        try:
            info = table_info.fetch_table_info(reverb.Client(address), table, timeout_ms=timeout_ms)
            found[address] = table_info.count_inserted(info)
        except (errors.RldsReverbError, reverb.errors.ReverbError, RuntimeError):
            found[address] = None
    return found


def _worker_message(error: BaseException) -> str:
    """Returns the worker's own error from a runner's exception text, else the text."""
    text = str(error)
    found = re.findall(re.escape(job_lib.WORKER_ERROR) + r'(.*)', text)
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
            now = probe_servers(servers, table)
            progress(sum((now[a] or before[a]) - before[a] for a in servers))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        self._thread.join()


def count_workers(options: PipelineOptions) -> int:
    """Returns how many workers the runner will use, as far as its options say."""
    direct = options.view_as(DirectOptions).direct_num_workers
    worker = options.view_as(WorkerOptions)
    flink = options.get_all_options(retain_unknown_options=True).get('parallelism')
    given = max(worker.num_workers or 0, worker.max_num_workers or 0, int(flink or 0))
    runner = options.view_as(StandardOptions).runner or 'DirectRunner'
    if 'Direct' in str(runner):
        given = direct
    return given if given and given > 0 else (os.cpu_count() or 1)


def make_pipeline_options(
    pipeline_options: PipelineOptions | Sequence[str] | None,
) -> PipelineOptions:
    """Returns the Beam options of `push_with_beam(pipeline_options=)`; default DirectRunner."""
    if pipeline_options is None:
        return PipelineOptions(['--runner=DirectRunner'])
    if isinstance(pipeline_options, PipelineOptions):
        return pipeline_options
    return PipelineOptions(list(pipeline_options))


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


def _place(counts: list[tuple[int, int]], num_servers: int) -> dict[int, int]:
    """Returns episode index -> server position for all (index, items) pairs."""
    ordered = sorted(counts)
    placement = routing.assign_servers([c for _, c in ordered], num_servers)
    return {index: int(server) for (index, _), server in zip(ordered, placement, strict=True)}


def build_pipeline(pipeline: beam.Pipeline, job: job_lib.BeamJob, shards: list[routing.ShardRange]):
    """Adds the count, route and write stages to `pipeline`; returns the written counts."""
    counted = (
        pipeline
        | 'Shards' >> beam.Create(shards)
        | 'Spread shards' >> beam.Reshuffle()
        | 'Count' >> beam.ParDo(counting.CountShard(job))
    )
    placement = (
        counted
        | 'Item counts' >> beam.Map(lambda e: (e.index, e.num_items))
        | 'All counts' >> combiners.ToList()
        | 'Place' >> beam.Map(_place, len(job.servers))
    )
    return (
        counted
        | 'Route'
        >> beam.Map(lambda e, where: (where[e.index], e), where=beam.pvalue.AsSingleton(placement))
        | 'By server' >> beam.GroupByKey()
        | 'Write' >> beam.ParDo(writing.WritePartition(job))
    )


def run_pipeline(
    job: job_lib.BeamJob, options, shards, before: dict, progress
) -> results.BeamPushResult:
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


def _query_reads(run) -> results.ReadCounts | None:
    """Returns the counters of what the workers read, or None if the runner has no metrics."""
    try:
        found = run.metrics().query(MetricsFilter().with_namespace(job_lib.METRICS_NAMESPACE))
    except (NotImplementedError, AttributeError):
        return None
    values: dict[str, int] = {}
    for counter in found['counters']:  # One result per counter and stage: summed.
        name = counter.key.metric.name
        values[name] = values.get(name, 0) + (counter.committed or 0)
    return results.ReadCounts(
        records_scanned=values.get(job_lib.RECORDS_SCANNED, 0),
        decoded_to_count=values.get(job_lib.DECODED_TO_COUNT, 0),
        decoded_to_write=values.get(job_lib.DECODED_TO_WRITE, 0),
    )


def _describe_failure(
    error: Exception, job: job_lib.BeamJob, before: dict
) -> errors.DistributedPushError:
    now = probe_servers(job.servers, job.table)  # A dead server is named, not waited for.
    held = '; '.join(
        f'{a}: not answering' if now[a] is None else f'{a}: {now[a]} items ({before[a]} before)'
        for a in job.servers
    )
    return errors.DistributedPushError(
        f'The Beam push into table {job.table!r} failed: {_worker_message(error)} What the '
        f'servers hold now: {held}. Every item there is whole and in order; re-run the same '
        'push (after restarting a dead server, from its checkpoint if it has one) to continue '
        'exactly.',
        episodes_written=0,
        items_written=sum(v - before[a] for a, v in now.items() if v is not None),
    )


def _collect(job: job_lib.BeamJob, before: dict) -> results.BeamPushResult:
    """Reads the writers' counts and what the servers report; checks they agree."""
    servers = []
    # The push's own timeout, not a liveness probe's: a slow server is not a missing count.
    now = probe_servers(job.servers, job.table, timeout_ms=job.options.timeout_ms)
    for position, address in enumerate(job.servers):
        path = job_lib.result_path(job.result_dir, position)
        if FileSystems.exists(path):
            with FileSystems.open(path) as f:
                counts = results.ServerCounts(**json.loads(f.read().decode()))
        else:  # No episode was routed here.
            counts = results.ServerCounts(address)
        inserted = now[address]
        counts.inserted = inserted if inserted is not None else -1
        counts.inserted_before = before[address]
        servers.append(counts)
    wrong = [s for s in servers if s.inserted != s.items]
    if wrong:
        detail = '; '.join(f'{s.address}: {s.inserted} inserted, {s.items} planned' for s in wrong)
        raise errors.DistributedPushError(
            f'The servers do not hold what the pipeline planned ({detail}). Was another '
            'writer using the table? Re-run the push to complete it.',
            episodes_written=0,
            items_written=sum(max(s.inserted, 0) for s in servers),
        )
    return results.BeamPushResult(job.table, servers)
