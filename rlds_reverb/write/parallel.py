"""Pushing one dataset from several processes into one Reverb table (`push --workers N`).

The dataset is split into `workers` disjoint parts (TFDS split slicing, `train[0%:50%]` and
`train[50%:100%]`, so each worker reads only its part; `Dataset.shard` for a split that is
already sliced or not a TFDS dataset), and each part is pushed by its own process
(`multiprocessing`'s spawn start method) through the one episode loop
(`rlds_reverb.write.loop.push_episodes`) with the same `PushOptions`. Each episode lands in
the table once; the order of items between parts is not fixed, so options that number or
order the episodes of one stream (`add_ids`, `resume`, `checkpoint_every`, items that cross
episodes) need one writer (`rlds_reverb.write.options.check_writers`).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
from multiprocessing import connection
from typing import cast

from rlds_reverb.core import checks, compat, errors
from rlds_reverb.read import loading
from rlds_reverb.read.options import EncodedFrames, LoadOptions
from rlds_reverb.write import loop
from rlds_reverb.write import options as options_lib
from rlds_reverb.write.options import PushOptions

__all__ = [
    'ParallelPushResult',
    'ParallelSource',
    'check_parallel_options',
    'push_in_parallel',
]


@dataclasses.dataclass(frozen=True)
class ParallelSource:
    """What the workers read: a TFDS dataset directory or name, a split, a data dir, and the
    frame fields kept encoded (`LoadOptions.encoded_frames`)."""

    source: str
    split: str = 'train'
    data_dir: str | None = None
    encoded_frames: EncodedFrames = None

    def load_part(self, index: int, count: int):
        """Opens part `index` of `count` disjoint parts of the split (all of it for one)."""
        if count == 1:
            return self._load(self.split)
        if '[' not in self.split:  # TFDS split slicing reads only this worker's part.
            low, high = 100 * index // count, 100 * (index + 1) // count
            try:
                return self._load(f'{self.split}[{low}%:{high}%]')
            except errors.SourceError:
                pass
        return self._load(self.split).shard(count, index)

    def _load(self, split: str):
        options = LoadOptions(
            split=split, data_dir=self.data_dir, encoded_frames=self.encoded_frames
        )
        return loading.load(self.source, options=options)


@dataclasses.dataclass
class ParallelPushResult:
    """What the workers wrote together (`stats`), and one line per worker that failed."""

    stats: loop.PushStats
    failures: list[str]


def check_parallel_options(options: PushOptions, workers: int) -> int:
    """Returns `workers` after checking the options can be pushed by that many processes.

    Raises:
      ValueError: If `workers` is not an integer >= 1, or with more than one worker, the
        options need one writer (`options.check_writers`: items across episodes, `add_ids`,
        `resume`, `checkpoint_every`).
    """
    workers = checks.check_int_at_least(workers, 1, argument='workers')
    if workers > 1:
        options_lib.check_writers(options, options_lib.Writers.PROCESSES)
    return workers


def push_in_parallel(
    source: ParallelSource,
    server: str,
    table: str,
    options: PushOptions,
    *,
    workers: int,
    progress: loop.ProgressFn | None = None,
) -> ParallelPushResult:
    """Pushes `source` into `table` from `workers` processes, one part of the split each.

    Every worker runs the one episode loop with `options` (which must pickle: no lambdas
    as priority or policy info functions). With one worker, the push runs in this process.

    Args:
      source: The dataset to read.
      server: The server's 'host:port' address.
      table: The table.
      options: The write options.
      workers: How many processes.
      progress: Optional `fn(episodes, steps)`, called as the workers write episodes.

    Returns:
      The workers' stats merged (seconds: the longest), and a line per failed worker.

    Raises:
      ValueError: If `workers` or the options are not valid for a parallel push.
      Anything `push` raises, with one worker (it runs here).

    Example:
      >>> push_in_parallel(ParallelSource('/data/cartpole/1.0.0'), 'localhost:8000',
      ...                  'replay', PushOptions(), workers=2)
    """
    workers = check_parallel_options(options, workers)
    if workers == 1:
        stats = loop.push_episodes(
            source.load_part(0, 1), server, [table], options, progress=progress
        )
        return ParallelPushResult(stats, [])
    context = multiprocessing.get_context('spawn')
    # One pipe per worker, not a Queue: no semaphore, no feeder thread, and a worker that
    # dies shows as the end of its pipe.
    readers, processes = {}, []
    for index in range(workers):
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(
            target=_run_worker, args=(source, server, table, options, index, workers, writer)
        )
        process.start()
        writer.close()
        readers[reader] = index
        processes.append(process)
    total, failures = loop.PushStats(items={table: 0}), []
    while readers:
        for ready in connection.wait(list(readers)):
            pipe = cast(connection.Connection, ready)
            try:
                kind, first, second = pipe.recv()
            except EOFError:
                kind, second = 'failed', f'worker {readers[pipe]} exited without a result'
            if kind == 'progress':
                if progress is not None:
                    progress(first, second)
                continue
            if kind == 'done':
                total = total.merge(first)
            else:
                failures.append(second)
            del readers[pipe]
            pipe.close()
    for process in processes:
        process.join()
    compat.stop_resource_tracker()  # Spawning started it: leave no process behind.
    return ParallelPushResult(total, failures)


def _run_worker(source, server, table, options, index: int, count: int, pipe) -> None:
    """Pushes part `index` of `count` in a worker process; reports through `pipe`."""
    try:
        stats = loop.push_episodes(
            source.load_part(index, count),
            server,
            [table],
            options,
            progress=lambda episodes, steps: pipe.send(('progress', episodes, steps)),
        )
        pipe.send(('done', stats, None))
    except Exception as error:  # Reported by the parent as one line.
        pipe.send(('failed', None, f'{type(error).__name__}: {error}'))
    finally:
        pipe.close()
