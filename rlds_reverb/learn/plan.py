"""The sampling plan of a learner: what each batch takes from which table on which server.

Computed from the tables' infos alone (`reverb.reverb_types.TableInfo`, as the servers gave
them when the learner was built), with no server contact, so every number here can be
checked without a server:

* **Mixing.** `tables` is one name or a `{table: ratio}` mix. Every batch takes exactly
  `counts[table]` items from each table, where the counts are the ratios scaled to
  `batch_size` and rounded by the largest-remainder method: each table gets
  floor(ratio / Σ ratios × batch_size) items and the items left over go, one each, to the
  tables with the largest fractional parts (ties: the table listed first), so the counts
  sum to `batch_size`. A table whose count is 0 is not sampled.
* **Several servers.** Each table is one logical table over the servers that hold it. Its
  count per batch is split between the servers by largest remainder, in proportion to
  `server_ratios` or to the servers' sizes when the learner is built, fixed for every
  batch (`compute_server_counts`). One (server, table) pair with a count is a `Source`.
* **Readers.** Each source is read by `iterators_per_stream` Reverb iterators of
  `num_workers_per_iterator` workers, each iterator giving a fixed part of the source's
  count per batch; a FIFO table by one iterator with one worker (its order), and a table
  that limits its samples (`max_times_sampled`, a sample-to-insert ratio) by one iterator.
* **Large items.** An item of at least `LARGE_ITEM_BYTES` (camera frames, from the tables'
  signatures: `estimate_item_bytes`) is read by one iterator per stream (a second one's
  batches would be concatenated: one more copy of every frame), and each worker keeps at
  most `IN_FLIGHT_BYTES_PER_ITERATOR` of items in flight per iterator instead of
  `MIN_IN_FLIGHT_SAMPLES_PER_WORKER` samples (1 GB of decoded frames at 0.49 MB an item).
  Measured on 256x320 frames: half the CPU per delivered sample with set-up counted, 14%
  less in steady state, and +9 MB of client memory instead of +1 GB (issue 31's finding,
  benchmarks/frames.py). Explicit `iterators_per_stream` and
  `max_in_flight_samples_per_worker` win.
* **Slices.** A source whose table gives every sample back (`max_times_sampled` 0), read
  without a `rate_limiter_timeout_ms`, waits on its rate limiter in slices, so that a
  learner asked to stop notices within one (`rlds_reverb.learn.stopping`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import tree

from rlds_reverb.core import checks
from rlds_reverb.core.errors import TableError

__all__ = [
    'DEFAULT_ITERATORS_PER_STREAM',
    'DEFAULT_WORKERS_PER_ITERATOR',
    'SamplingPlan',
    'Source',
    'check_ratio',
    'compute_mix_counts',
    'compute_server_counts',
    'estimate_item_bytes',
    'make_sampling_plan',
]

# Each (server, table) stream is read by this many Reverb iterators in parallel, each batching
# its part of the stream's count in its own thread, so that no single thread (the one
# turning samples into tensors and copying them into the batch) bounds the stream. On a
# shared 2-core machine two iterators gained 10% to 30% over one, and used more of the CPU
# when other processes competed for it (benchmarks/sample.py).
DEFAULT_ITERATORS_PER_STREAM = 2
# Sampling workers per Reverb iterator (8 per stream with the default two iterators).
# Reverb's automatic choice (-1) measured 33,600 samples/s on 2 cores; 8 workers in one
# iterator 65,000 (benchmarks/sample.py).
DEFAULT_WORKERS_PER_ITERATOR = 4
# Samples each worker requests at once, in per-table batches (Reverb's rule of thumb is 2 to
# 3), and at least the minimum: fewer round trips, at the price of sampling from a slightly
# older snapshot of the priorities. Two batches measured 5% faster than one here.
IN_FLIGHT_BATCHES_PER_WORKER = 2
MIN_IN_FLIGHT_SAMPLES_PER_WORKER = 256
# Items of at least this size (two 256x320x3 frames are 480 KiB) are read by one iterator
# per stream, with at most `IN_FLIGHT_BYTES_PER_ITERATOR` in flight per iterator.
LARGE_ITEM_BYTES = 64 * 1024
IN_FLIGHT_BYTES_PER_ITERATOR = 64 * 1024 * 1024
# A string leaf's size is unknown from a spec; encoded frames are counted at this much too
# (a table of JPEG bytes is sampled as small items: its frames are decoded after sampling).
STRING_BYTES_ESTIMATE = 64


def check_ratio(table: object, ratio: object, *, what: str = 'table') -> float:
    """Returns `ratio` as a float; refuses a bad table name or a negative or non-finite ratio.

    Raises:
      ValueError: Naming the table (or server position) and the rule broken.

    Example:
      >>> check_ratio('offline', 0.75)
      0.75
    """
    if not isinstance(table, str) or not table:
        raise ValueError(f'Table names must be non-empty strings; got {table!r}.')
    if isinstance(ratio, bool) or not isinstance(ratio, int | float):
        raise ValueError(f'The ratio of {what} {table!r} must be a number; got {ratio!r}.')
    if not math.isfinite(ratio) or ratio < 0:
        raise ValueError(f'The ratio of {what} {table!r} must be finite and >= 0; got {ratio!r}.')
    return float(ratio)


def compute_mix_counts(tables: str | Mapping[str, float], batch_size: int) -> dict[str, int]:
    """Returns how many items of each batch come from each table (largest remainder).

    Args:
      tables: One table name (all of the batch), or `{table: ratio}` with ratios >= 0 and a
        positive sum (they need not sum to 1; they are normalized).
      batch_size: Items per batch, >= 1.

    Returns:
      `{table: count}` with counts summing to `batch_size`, in the order given.

    Raises:
      ValueError: If `batch_size` < 1, a ratio is negative or not finite, or the ratios
        do not sum to a positive number.

    Example:
      >>> compute_mix_counts({'a': 1, 'b': 1, 'c': 1}, 256)
      {'a': 86, 'b': 85, 'c': 85}
    """
    checks.check_int_at_least(batch_size, 1, argument='batch_size')
    if isinstance(tables, str):
        tables = {tables: 1.0}
    ratios = {table: check_ratio(table, ratio) for table, ratio in tables.items()}
    total = sum(ratios.values())
    if not ratios or not total > 0:
        raise ValueError(
            f'Table ratios {dict(tables)} must sum to a positive number; give at least one '
            'table a ratio > 0.'
        )
    return dict(
        zip(ratios, split_largest_remainder(list(ratios.values()), batch_size), strict=True)
    )


def split_largest_remainder(ratios: Sequence[float], total: int) -> list[int]:
    """Returns integer shares of `total` proportional to `ratios` (positive sum), by largest remainder.

    Each share is floor(ratio / Σ ratios × total); the units left over go one each to the
    largest fractional parts (ties: the earlier ratio), so the shares sum to `total`.
    """
    scale = sum(ratios)
    exact = [ratio / scale * total for ratio in ratios]
    counts = [math.floor(value) for value in exact]
    left_over = total - sum(counts)
    by_remainder = sorted(range(len(exact)), key=lambda i: -(exact[i] - counts[i]))  # Stable.
    for i in by_remainder[:left_over]:
        counts[i] += 1
    return counts


def compute_server_counts(
    count: int, *, sizes: Sequence[int], ratios: Sequence[float] | None = None
) -> list[int]:
    """Returns how many of a table's `count` items per batch come from each server.

    The counts are proportional to `ratios` if given, else to the servers' table `sizes`
    (equal shares if every size is 0), rounded by the largest-remainder method as for
    table mixing, so they sum to `count`; a server whose count is 0 is not sampled.

    Args:
      count: The table's items per batch (>= 1).
      sizes: The table's size on each server.
      ratios: Optional per-server ratios (>= 0, finite, positive sum), one per server.

    Returns:
      One count per server, summing to `count`.

    Raises:
      ValueError: If `ratios` has the wrong length, a negative or non-finite ratio, or no
        positive ratio.

    Example:
      >>> compute_server_counts(256, sizes=[15_000, 5_000])
      [192, 64]
    """
    checks.check_int_at_least(count, 1, argument='count')
    if ratios is None:
        weights = [float(size) for size in sizes]
        if not sum(weights) > 0:
            weights = [1.0] * len(sizes)
    else:
        if len(ratios) != len(sizes):
            raise ValueError(
                f'server_ratios={list(ratios)} must give one ratio per server ({len(sizes)}).'
            )
        weights = [
            check_ratio(str(i), ratio, what='server (server_ratios) at position')
            for i, ratio in enumerate(ratios)
        ]
        if not sum(weights) > 0:
            raise ValueError(
                f'server_ratios={list(ratios)} must sum to a positive number; give at least '
                'one server a ratio > 0.'
            )
    return split_largest_remainder(weights, count)


@dataclasses.dataclass(frozen=True)
class Source:
    """One (server, table) stream of a `LearnerDataset` and its fixed share of each batch.

    Attributes:
      server_index: The position of the server in `LearnerDataset.server_addresses`.
      table_index: The position of the table in `LearnerDataset.tables`.
      count: Items per batch from this server's table.
      share: `count` / the table's items per batch: the probability that a batch slot of
        this table is filled from this server.
    """

    server_index: int
    table_index: int
    count: int
    share: float


@dataclasses.dataclass(frozen=True)
class SamplingPlan:
    """What a learner samples, per batch, computed from table infos (`make_sampling_plan`).

    Attributes:
      tables: The sampled tables (count > 0), in the order given.
      counts: `{table: items per batch}` of the sampled tables.
      sources: The sampled (server, table) streams, in batch order.
      unsampled_sizes: Per table, its summed size on the servers given no slot.
      num_workers: Per source, Reverb workers per iterator.
      iterator_counts: Per source, the count each of its Reverb iterators gives per batch.
      max_in_flight: Samples each worker requests at once.
      sliced: Per source, whether it waits on its rate limiter in slices (stop checks).
    """

    tables: list[str]
    counts: dict[str, int]
    sources: list[Source]
    unsampled_sizes: list[int]
    num_workers: list[int]
    iterator_counts: list[list[int]]
    max_in_flight: int
    sliced: list[bool]

    def list_slot_values(self, field: str) -> list[Any]:
        """Returns, per batch slot in order, the named field of the slot's source.

        Example:
          >>> plan.list_slot_values('table_index')
        """
        return [getattr(s, field) for s in self.sources for _ in range(s.count)]


def make_sampling_plan(
    counts: Mapping[str, int],
    server_infos: Sequence[Mapping[str, Any]],
    *,
    server_ratios: Sequence[float] | None,
    iterators_per_stream: int | None,
    num_workers_per_iterator: int | None,
    max_in_flight_samples_per_worker: int | None,
    rate_limiter_timeout_ms: int,
    item_spec: Any = None,
) -> SamplingPlan:
    """Returns the sampling plan of a mix, from each server's `{table: TableInfo}`.

    Args:
      counts: `{table: items per batch}` (`compute_mix_counts`); tables of count 0 are left out.
      server_infos: Per server, the infos of (at least) the sampled tables.
      server_ratios: As in `SamplingOptions`.
      iterators_per_stream: As in `SamplingOptions`.
      num_workers_per_iterator: As in `SamplingOptions`.
      max_in_flight_samples_per_worker: As in `SamplingOptions`.
      rate_limiter_timeout_ms: As in `SamplingOptions`.
      item_spec: The spec of one item, sized when a table has no signature (the
        signatures size the items otherwise: `estimate_item_bytes`).

    Raises:
      TableError: If more than one worker or iterator is asked for on a FIFO table.

    Example:
      >>> plan = make_sampling_plan({'replay': 256}, [infos], server_ratios=None, ...)
    """
    sampled = {table: count for table, count in counts.items() if count > 0}
    tables = list(sampled)
    sources, unsampled = _plan_sources(tables, sampled, server_infos, server_ratios)
    infos = [server_infos[s.server_index][tables[s.table_index]] for s in sources]
    item_bytes = max(_size_item(info, item_spec) for info in infos)
    large = item_bytes >= LARGE_ITEM_BYTES
    if large and iterators_per_stream is None:
        iterators_per_stream = 1  # No second iterator, so no concat copying every frame.
    num_workers = [_choose_num_workers(info, num_workers_per_iterator) for info in infos]
    iterator_counts = [
        [
            count
            for count in split_largest_remainder(
                [1.0] * _choose_num_iterators(info, iterators_per_stream), source.count
            )
            if count
        ]
        for info, source in zip(infos, sources, strict=True)
    ]
    max_in_flight = max_in_flight_samples_per_worker or _choose_max_in_flight(
        iterator_counts, num_workers, item_bytes if large else None
    )
    return SamplingPlan(
        tables=tables,
        counts=sampled,
        sources=sources,
        unsampled_sizes=unsampled,
        num_workers=num_workers,
        iterator_counts=iterator_counts,
        max_in_flight=max_in_flight,
        sliced=[rate_limiter_timeout_ms < 0 and info.max_times_sampled <= 0 for info in infos],
    )


def estimate_item_bytes(spec: Any) -> int:
    """Returns the bytes of one item of `spec` (a table signature, or an item spec).

    Unknown dimensions count 1, and a string (encoded frames too)
    `STRING_BYTES_ESTIMATE` bytes: a lower bound, enough to tell items of decoded frames
    from vectors.

    Example:
      >>> estimate_item_bytes({'image': tf.TensorSpec([2, 256, 320, 3], tf.uint8)})
      491520
    """
    total = 0
    for leaf in tree.flatten(spec):
        dims = [1 if d is None else d for d in leaf.shape.as_list()] if leaf.shape.rank else []
        size = STRING_BYTES_ESTIMATE if leaf.dtype.name == 'string' else leaf.dtype.size
        total += math.prod(dims) * size
    return total


def _size_item(info: Any, item_spec: Any) -> int:
    """Returns the bytes of one item of a table: from its signature, else from `item_spec`."""
    spec = getattr(info, 'signature', None) or item_spec
    return 0 if spec is None else estimate_item_bytes(spec)


def _choose_max_in_flight(
    iterator_counts: list[list[int]], num_workers: list[int], large_item_bytes: int | None
) -> int:
    """Returns the samples each worker keeps in flight: two batches of the largest iterator
    count, at least `MIN_IN_FLIGHT_SAMPLES_PER_WORKER`; for large items at most
    `IN_FLIGHT_BYTES_PER_ITERATOR` per iterator (yet more than one batch)."""
    largest = max(max(c) for c in iterator_counts)
    by_count = max(MIN_IN_FLIGHT_SAMPLES_PER_WORKER, IN_FLIGHT_BATCHES_PER_WORKER * largest)
    if large_item_bytes is None:
        return by_count
    workers = max(max(num_workers), 1)  # Reverb's own choice (-1) counts as one.
    by_bytes = IN_FLIGHT_BYTES_PER_ITERATOR // (large_item_bytes * workers)
    return min(by_count, max(largest // workers + 1, by_bytes))


def _plan_sources(
    tables: list[str],
    counts: Mapping[str, int],
    server_infos: Sequence[Mapping[str, Any]],
    server_ratios: Sequence[float] | None,
) -> tuple[list[Source], list[int]]:
    """Returns the sampled (server, table) streams, and per table the unsampled size."""
    sources, unsampled = [], []
    for table_index, table in enumerate(tables):
        sizes = [infos[table].current_size for infos in server_infos]
        server_counts = compute_server_counts(counts[table], sizes=sizes, ratios=server_ratios)
        for server_index, count in enumerate(server_counts):
            if count:
                sources.append(Source(server_index, table_index, count, count / counts[table]))
        unsampled.append(
            sum(size for size, count in zip(sizes, server_counts, strict=True) if not count)
        )
    return sources, unsampled


def limits_samples(info: Any) -> bool:
    """Whether the table bounds how often it may be sampled (max_times_sampled or a limiter
    whose samples may not run ahead of inserts, as `SampleToInsertRatio`)."""
    return info.max_times_sampled > 0 or info.rate_limiter_info.max_diff < sys.float_info.max


def _choose_num_workers(info: Any, requested: int | None) -> int:
    """Returns the workers per iterator: 1 for a FIFO sampler (keeps order), else `requested`.

    None gives `DEFAULT_WORKERS_PER_ITERATOR`.

    Raises:
      TableError: If more than one worker is requested for a FIFO table.
    """
    if info.sampler_options.fifo:
        if requested not in (None, 1):
            raise TableError(
                f'Table {info.name!r} has a FIFO sampler: it must be read by 1 worker per '
                f'iterator to keep the order, not num_workers_per_iterator={requested}.'
            )
        return 1
    return DEFAULT_WORKERS_PER_ITERATOR if requested is None else requested


def _choose_num_iterators(info: Any, requested: int | None) -> int:
    """Returns the iterators of a stream: 1 for a FIFO sampler (keeps order) or a table
    that limits samples (`max_times_sampled`, or a rate limiter bounding samples per
    insert): no sample allowed is held back in another iterator's buffer.

    Raises:
      TableError: If more than one iterator is requested for a FIFO table.
    """
    if limits_samples(info) and not info.sampler_options.fifo:
        # When samples are limited, a second iterator could hold the last ones allowed in
        # its buffer while the first waits for them (a stall, or an early timeout).
        return 1
    if not info.sampler_options.fifo:
        return DEFAULT_ITERATORS_PER_STREAM if requested is None else requested
    if requested not in (None, 1):
        raise TableError(
            f'Table {info.name!r} has a FIFO sampler: it must be read by 1 iterator to '
            f'keep the order, not iterators_per_stream={requested}.'
        )
    return 1
