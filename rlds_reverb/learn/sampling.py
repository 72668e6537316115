"""Learner datasets: batches sampled from Reverb tables, ready for a TF-Agents `train`.

`LearnerDataset` builds one `tf.data` pipeline per (server, table) stream on
`reverb.TrajectoryDataset` (parallel iterators and workers, several batches in flight,
prefetch) and zips them into batches of
`SampleBatch(experience, info, table_index, weights, server_index)`:

* **Mixing.** `tables` is one name or a `{table: ratio}` mix. Every batch takes exactly
  `counts[table]` items from each table, where the counts are the ratios scaled to
  `batch_size` and rounded by the largest-remainder method: each table gets
  floor(ratio / Σ ratios × batch_size) items and the items left over go, one each, to the
  tables with the largest fractional parts (ties: the table listed first), so the counts
  sum to `batch_size`. A table whose count is 0 is not sampled.
* **Several servers.** `server_address` may list servers that each hold the tables: each
  table is one logical table over them. Its count per batch is split between the servers
  by largest remainder, in proportion to `server_ratios` or to the servers' sizes when
  the learner is built, fixed for every batch (`compute_server_counts`).
* **Importance weights.** w_i = (N_k · P_k(i))^(−β) / max_j w_j, with P_k(i) the probability
  of sample i in its (logical) table k and N_k that table's size at sampling time (summed
  over the servers; with several servers P_k(i) = share_s · P_s(i), see
  `LearnerDataset.compute_logical_probabilities`), normalized by the batch maximum
  (Tianshou's convention, see `rlds_reverb.learn.priorities`). β is read (from a float, a
  `tf.Variable` or a schedule) when the batch is built, so with prefetching it may lag the
  train step by a few steps.
* **Staleness.** With `staleness=StalenessFilter(version, max_staleness=k)`, items carry a
  `types.DATA_VERSION` field; a sample whose version is below `version - k` is dropped
  before batching (so the per-table counts stay exact) and counted in `filter.dropped`.
* **Priorities.** `update_priorities(keys, td_errors, ...)` sends (|δ| + ε)^exponent to the
  table and the server each key came from, inside a `tf.function` train step, refusing
  NaN, infinite and negative priorities first.
* **Order.** Each stream is read by `iterators_per_stream` Reverb iterators in parallel. A
  table with a FIFO sampler (a queue) is read by one iterator with one worker, which keeps
  the insertion order; a table that limits its samples (`max_times_sampled`, a
  sample-to-insert ratio) by one iterator. Give queues a `rate_limiter_timeout_ms`: Reverb cannot cancel
  a sample blocked on an empty queue, so without one, deleting an iterator whose prefetch
  waits on a drained queue blocks forever.
* **Timeouts.** With `rate_limiter_timeout_ms`, a table that gives no sample in time fails
  the iterator with an error saying the table is empty (or blocked), instead of hanging.

Example:
  >>> learner = LearnerDataset(address, {'offline': 0.75, 'online': 0.25},
  ...                          data_spec=agent.collect_data_spec, batch_size=256, beta=0.4)
  >>> for batch in learner.as_dataset().take(10):
  ...     loss = agent.train(batch.experience, weights=batch.weights)
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import reverb
import tensorflow as tf
import tree

from rlds_reverb.core import checks, timeouts, types
from rlds_reverb.core.episodes import without_autograph
from rlds_reverb.core.errors import EmptyTableError, TableError
from rlds_reverb.learn import priorities
from rlds_reverb.serve import table_info

__all__ = [
    'DEFAULT_ITERATORS_PER_STREAM',
    'DEFAULT_WORKERS_PER_ITERATOR',
    'ExperienceFn',
    'LearnerDataset',
    'SampleBatch',
    'StalenessFilter',
]

# Maps a batch of items (leaves `[B, ...]`) to the experience the agent trains on.
ExperienceFn = Callable[[types.Nest], types.Nest]

# How long the server-info call made when a learner is built may take, per server.
DEFAULT_SERVER_INFO_TIMEOUT_MS = timeouts.LEARNER_SERVER_INFO_MS
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
# Starts the message of the error a timed-out table raises inside the pipeline.


class SampleBatch(NamedTuple):
    """One learner batch.

    Fields:
      experience: The items (or `experience_fn` of them), leaves `[B, ...]`.
      info: `reverb.replay_sample.SampleInfo` of `[B]` tensors: key, probability, table
        size, priority, times sampled.
      table_index: int32 `[B]`: the position in `LearnerDataset.tables` of each sample's table.
      weights: float32 `[B]` importance weights (ones without `beta`).
      server_index: int32 `[B]`: the position in `LearnerDataset.server_addresses` of each
        sample's server (all 0 with one server).
    """

    experience: types.Nest
    info: reverb.replay_sample.SampleInfo
    table_index: tf.Tensor
    weights: tf.Tensor
    server_index: tf.Tensor


def _check_ratio(table: object, ratio: object, *, what: str = 'table') -> float:
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
    ratios = {table: _check_ratio(table, ratio) for table, ratio in tables.items()}
    total = sum(ratios.values())
    if not ratios or not total > 0:
        raise ValueError(
            f'Table ratios {dict(tables)} must sum to a positive number; give at least one '
            'table a ratio > 0.'
        )
    return dict(
        zip(ratios, _split_largest_remainder(list(ratios.values()), batch_size), strict=True)
    )


def _split_largest_remainder(ratios: Sequence[float], total: int) -> list[int]:
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


@dataclasses.dataclass
class StalenessFilter:
    """Drops samples whose data version is older than `current_version - max_staleness`.

    Items must carry an integer `types.DATA_VERSION` field (anywhere in the item nest, for
    example `policy_info['data_version']`); for sequence items the oldest step counts.

    Args:
      current_version: A scalar integer `tf.Variable` holding the learner's current version
        (for example the policy's training iteration); read for every sample.
      max_staleness: The largest accepted `current_version - version`, >= 0.
      field: The field name holding the version.

    Attributes:
      dropped: An int64 variable counting the samples dropped so far.

    Example:
      >>> staleness = StalenessFilter(version_variable, max_staleness=2)
    """

    current_version: tf.Variable
    max_staleness: int
    field: str = types.DATA_VERSION
    dropped: tf.Variable = dataclasses.field(init=False)

    def __post_init__(self):
        if not isinstance(self.current_version, tf.Variable):
            raise ValueError(
                f'current_version must be a tf.Variable; got {type(self.current_version)}.'
            )
        checks.check_int_at_least(self.max_staleness, 0, argument='max_staleness')
        self.dropped = tf.Variable(0, dtype=tf.int64, trainable=False, name='dropped_stale')

    def find_version_path(self, item_spec: types.SpecNest) -> tuple:
        """Returns the path of the version leaf in `item_spec`.

        Raises:
          ValueError: If no leaf, or more than one, is named `field`, or it is not integer.

        Example:
          >>> staleness.find_version_path(item_spec)
        """
        paths = [
            (path, spec)
            for path, spec in tree.flatten_with_path(item_spec)
            if path and path[-1] == self.field
        ]
        if len(paths) != 1:
            raise ValueError(
                f'Staleness needs exactly one {self.field!r} field in the items; found '
                f'{len(paths)} in the item spec {item_spec}.'
            )
        path, spec = paths[0]
        if not spec.dtype.is_integer:
            raise ValueError(f'The {self.field!r} field must be an integer; found {spec.dtype}.')
        return path

    def make_predicate(self, item_spec: types.SpecNest) -> Callable[[Any], tf.Tensor]:
        """Returns a `tf.data` filter predicate on `ReplaySample`s that counts what it drops.

        Example:
          >>> samples.filter(staleness.make_predicate(item_spec))
        """
        path = self.find_version_path(item_spec)

        def keep(sample: reverb.ReplaySample) -> tf.Tensor:
            leaf = _get_path(sample.data, path)
            oldest = tf.cast(tf.reduce_min(leaf), tf.int64)
            fresh = oldest >= tf.cast(self.current_version, tf.int64) - self.max_staleness
            self.dropped.assign_add(tf.cast(tf.logical_not(fresh), tf.int64))
            return fresh

        return keep


def _get_path(nest: Any, path: tuple) -> Any:
    for key in path:
        nest = (
            getattr(nest, key) if isinstance(key, str) and hasattr(nest, '_fields') else nest[key]
        )
    return nest


def _make_item_spec(data_spec: types.SpecNest, sequence_length: int | None) -> types.SpecNest:
    """Returns the spec of one item: `data_spec` with a leading `[sequence_length]`, or as is."""
    if sequence_length is None:
        return tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape, s.dtype), data_spec)
    return tf.nest.map_structure(
        lambda s: tf.TensorSpec([sequence_length, *s.shape], s.dtype), data_spec
    )


def _choose_num_workers(info: reverb.reverb_types.TableInfo, requested: int | None) -> int:
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


def _limits_samples(info: reverb.reverb_types.TableInfo) -> bool:
    """Whether the table bounds how often it may be sampled (max_times_sampled or a limiter
    whose samples may not run ahead of inserts, as `SampleToInsertRatio`)."""
    return info.max_times_sampled > 0 or info.rate_limiter_info.max_diff < sys.float_info.max


def _make_empty_table_error(table: str, timeout_ms: int, element_spec: Any) -> tf.data.Dataset:
    """Returns a one-element dataset whose element fails with a "table is empty" error.

    Appended after a table's sample stream, it turns the silent end of a timed-out
    `TrajectoryDataset` into an error that names the table. `table` may name the server too.
    The placeholder element never reaches the learner (the assertion fails first); its
    unknown dimensions (an `Image()` of shape `(None, None, 3)`) are 0.
    """
    message = (
        f'Reverb table {table} gave no sample within rate_limiter_timeout_ms={timeout_ms}: '
        'the table is empty (or its rate limiter blocks sampling, for example min_size_to_sample '
        'not reached or every item sampled max_times_sampled times). Push items first.'
    )

    def fail(_: tf.Tensor) -> Any:
        with tf.control_dependencies([tf.debugging.Assert(tf.constant(False), [message])]):
            return tf.nest.map_structure(
                lambda s: tf.zeros(_make_placeholder_shape(s.shape), s.dtype), element_spec
            )

    return tf.data.Dataset.range(1).map(without_autograph(fail))


def _make_placeholder_shape(shape: tf.TensorShape) -> list[int]:
    """Returns a fully known shape compatible with `shape`: unknown dimensions are 0."""
    if shape.rank is None:
        return []
    return [0 if size is None else size for size in shape.as_list()]


def _check_addresses(server_address: str | Sequence[str]) -> list[str]:
    """Returns the server addresses as a list; refuses an empty list and repeated addresses."""
    addresses = [server_address] if isinstance(server_address, str) else list(server_address)
    if not addresses or not all(isinstance(a, str) and a for a in addresses):
        raise ValueError(
            f"server_address={server_address!r} must be 'host:port' or a non-empty list of them."
        )
    if len(set(addresses)) != len(addresses):
        raise ValueError(
            f'server_address={addresses} names a server twice; give each server once (use '
            'server_ratios to weight servers).'
        )
    return addresses


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
            _check_ratio(str(i), ratio, what='server (server_ratios) at position')
            for i, ratio in enumerate(ratios)
        ]
        if not sum(weights) > 0:
            raise ValueError(
                f'server_ratios={list(ratios)} must sum to a positive number; give at least '
                'one server a ratio > 0.'
            )
    return _split_largest_remainder(weights, count)


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


class LearnerDataset:
    """Batches of prioritized samples from one Reverb table or a `{table: ratio}` mix.

    The table (or each table of the mix) may be spread over several servers: one logical
    table, sampled from every server in fixed per-batch proportions (see the module
    docstring for mixing, servers, importance weights, staleness and timeouts).

    Args:
      server_address: The Reverb server, `'host:port'`, or a list of servers that each
        hold the tables (one logical table spread over them).
      tables: One table name, or `{table: ratio}` (ratios >= 0, positive sum).
      data_spec: The spec of one step of an item, without the time axis (for two-step
        trajectories `agent.collect_data_spec`; for n-step transitions the item spec).
      batch_size: Items per batch.
      sequence_length: Steps per item (2 for two-step trajectories), or None for items
        without a time axis (n-step transitions).
      beta: The importance-sampling exponent β: a float in [0, 1], a `tf.Variable` or a
        zero-argument schedule (see `priorities.linear_beta_schedule`); None gives weights 1.
      experience_fn: Maps a batch of items to the agent's experience (identity if None).
      staleness: Drops stale samples (see `StalenessFilter`).
      server_ratios: With several servers, the share of each table's items per batch taken
        from each server (one ratio per server, normalized); None: in proportion to the
        table's size on each server when the learner is built.
      iterators_per_stream: Reverb iterators reading each (server, table) stream in
        parallel, each giving a fixed part of the stream's count per batch (None:
        `DEFAULT_ITERATORS_PER_STREAM`; FIFO tables always use 1).
      num_workers_per_iterator: Reverb sampling workers per iterator (None:
        `DEFAULT_WORKERS_PER_ITERATOR`; FIFO tables always use 1).
      max_in_flight_samples_per_worker: Samples requested per round trip (None:
        `IN_FLIGHT_BATCHES_PER_WORKER` times the largest per-iterator count, at least
        `MIN_IN_FLIGHT_SAMPLES_PER_WORKER`).
      prefetch_batches: Batches prepared ahead (`tf.data.AUTOTUNE` by default).
      rate_limiter_timeout_ms: How long a table may block sampling before the iterator
        fails with "table is empty"; -1 waits forever.
      server_info_timeout_ms: Timeout of the server-info call made here (per server).

    Raises:
      ValueError: If the ratios are invalid (negative, not finite, or not summing to a
        positive number), a server is listed twice, `server_ratios` does not give one ratio
        per server, β is a number outside [0, 1], or another option is invalid.
      ReverbConnectionError: If a server does not answer; names it.
      TableError: If a table does not exist on a server (the message lists those that do),
        or more than one worker or iterator is asked for on a FIFO table.
      SpecMismatchError: If a table's signature differs from the expected items; the
        message shows the difference leaf by leaf.

    Example:
      >>> learner = LearnerDataset(['host1:8000', 'host2:8000'], 'replay',
      ...                          data_spec=agent.collect_data_spec, batch_size=256, beta=0.4)
      >>> batch = next(iter(learner.as_dataset()))
    """

    def __init__(
        self,
        server_address: str | Sequence[str],
        tables: str | Mapping[str, float],
        *,
        data_spec: types.SpecNest,
        batch_size: int,
        sequence_length: int | None = 2,
        beta: priorities.Beta | None = None,
        experience_fn: ExperienceFn | None = None,
        staleness: StalenessFilter | None = None,
        server_ratios: Sequence[float] | None = None,
        iterators_per_stream: int | None = None,
        num_workers_per_iterator: int | None = None,
        max_in_flight_samples_per_worker: int | None = None,
        prefetch_batches: int = tf.data.AUTOTUNE,
        rate_limiter_timeout_ms: int = -1,
        server_info_timeout_ms: int = DEFAULT_SERVER_INFO_TIMEOUT_MS,
    ):
        priorities.check_beta(beta)
        if sequence_length is not None:
            checks.check_int_at_least(sequence_length, 1, argument='sequence_length')
        checks.check_int_at_least(rate_limiter_timeout_ms, -1, argument='rate_limiter_timeout_ms')
        self.server_addresses = _check_addresses(server_address)
        self.server_address = self.server_addresses[0]
        all_counts = compute_mix_counts(tables, batch_size)
        if server_ratios is not None:  # Checked before any server is asked.
            compute_server_counts(1, sizes=[0] * len(self.server_addresses), ratios=server_ratios)
        if iterators_per_stream is not None:
            checks.check_int_at_least(iterators_per_stream, 1, argument='iterators_per_stream')
        self.counts = {table: count for table, count in all_counts.items() if count > 0}
        self.tables = list(self.counts)
        self.batch_size = batch_size
        self.item_spec = _make_item_spec(data_spec, sequence_length)
        self.beta = beta
        self.experience_fn = experience_fn
        self.staleness = staleness
        self.prefetch_batches = prefetch_batches
        self.rate_limiter_timeout_ms = rate_limiter_timeout_ms
        # Per server: {table: TableInfo}, every table checked against the items.
        self.server_table_info = []
        for address in self.server_addresses:
            infos = table_info.fetch_tables_info(
                table_info.connect(address),
                list(all_counts),
                timeout_ms=server_info_timeout_ms,
            )
            for info in infos.values():
                table_info.check_signature(info, self.item_spec, found="the learner's items")
            self.server_table_info.append(infos)
        self.table_info = self.server_table_info[0]
        self.sources, self.unsampled_sizes = self._plan_sources(server_ratios)
        self.num_workers = [
            _choose_num_workers(
                self.server_table_info[s.server_index][self.tables[s.table_index]],
                num_workers_per_iterator,
            )
            for s in self.sources
        ]
        # Per source: the count each of its iterators gives per batch (FIFO: one iterator).
        self.iterator_counts = [
            [
                count
                for count in _split_largest_remainder(
                    [1.0] * self._choose_num_iterators(source, iterators_per_stream),
                    source.count,
                )
                if count
            ]
            for source in self.sources
        ]
        self.max_in_flight = max_in_flight_samples_per_worker or max(
            MIN_IN_FLIGHT_SAMPLES_PER_WORKER,
            IN_FLIGHT_BATCHES_PER_WORKER * max(max(c) for c in self.iterator_counts),
        )
        if staleness is not None:
            staleness.find_version_path(self.item_spec)
        self._tf_clients = [reverb.TFClient(address) for address in self.server_addresses]

    def _plan_sources(self, server_ratios: Sequence[float] | None) -> tuple[list[Source], list]:
        """Returns the sampled (server, table) streams, and per table the unsampled size."""
        sources, unsampled = [], []
        for table_index, table in enumerate(self.tables):
            sizes = [infos[table].current_size for infos in self.server_table_info]
            counts = compute_server_counts(self.counts[table], sizes=sizes, ratios=server_ratios)
            for server_index, count in enumerate(counts):
                if count:
                    share = count / self.counts[table]
                    sources.append(Source(server_index, table_index, count, share))
            unsampled.append(
                sum(size for size, count in zip(sizes, counts, strict=True) if not count)
            )
        return sources, unsampled

    def _choose_num_iterators(self, source: Source, requested: int | None) -> int:
        """Returns the iterators of a stream: 1 for a FIFO sampler (keeps order) or a table
        that limits samples (`max_times_sampled`, or a rate limiter bounding samples per
        insert): no sample allowed is held back in another iterator's buffer.

        Raises:
          TableError: If more than one iterator is requested for a FIFO table.
        """
        info = self.server_table_info[source.server_index][self.tables[source.table_index]]
        if _limits_samples(info) and not info.sampler_options.fifo:
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

    def _describe_source(self, source: Source) -> str:
        table = self.tables[source.table_index]
        if len(self.server_addresses) == 1:
            return table
        return f'{table} on server {self.server_addresses[source.server_index]}'

    def make_source_dataset(self, index: int) -> tf.data.Dataset:
        """Returns the batches of `ReplaySample`s of one (server, table) stream.

        Each element holds `self.sources[index].count` samples.

        Example:
          >>> batches = learner.make_source_dataset(0)
        """
        parts = tuple(
            self._make_iterator_dataset(index, count) for count in self.iterator_counts[index]
        )
        if len(parts) == 1:
            return parts[0]
        # Each part batches in its own thread (prefetch), in parallel with the others.
        return tf.data.Dataset.zip(tuple(part.prefetch(1) for part in parts)).map(
            without_autograph(lambda *samples: _concat_samples(samples))
        )

    def _make_iterator_dataset(self, index: int, count: int) -> tf.data.Dataset:
        """Returns batches of `count` samples of source `index` from one Reverb iterator."""
        source = self.sources[index]
        table = self.tables[source.table_index]
        samples = reverb.TrajectoryDataset(
            server_address=self.server_addresses[source.server_index],
            table=table,
            dtypes=tf.nest.map_structure(lambda s: s.dtype, self.item_spec),
            shapes=tf.nest.map_structure(lambda s: s.shape, self.item_spec),
            max_in_flight_samples_per_worker=self.max_in_flight,
            num_workers_per_iterator=self.num_workers[index],
            rate_limiter_timeout_ms=self.rate_limiter_timeout_ms,
        )
        if self.staleness is not None:
            samples = samples.filter(
                without_autograph(self.staleness.make_predicate(self.item_spec))
            )
        if self.rate_limiter_timeout_ms >= 0:
            samples = samples.concatenate(
                _make_empty_table_error(
                    self._describe_source(source),
                    self.rate_limiter_timeout_ms,
                    samples.element_spec,
                )
            )
        # A sequential batch keeps a FIFO table's order, and measured 3% faster here than a
        # parallel one for the other tables too (the workers already sample in parallel).
        return samples.batch(count, drop_remainder=True)

    def compute_logical_probabilities(self, info: reverb.replay_sample.SampleInfo) -> tuple:
        """Returns each sample's probability and table size in its logical table.

        For a sample i drawn from server s's part of table t (sources in order, as
        concatenated in a batch): P(i) = share_s · P_s(i), with share_s the fixed fraction
        of table t's batch slots filled from server s and P_s(i) Reverb's probability on
        that server; N_i = the table's size summed over its servers: server s's size with
        sample i, the other sampled servers' largest size in the same batch, and the
        servers given no slot (a count of 0) with their size when the learner was built.
        With one server this is Reverb's own (P(i), N).

        Returns:
          `(probabilities float64 [B], table_sizes int64 [B])`.

        Example:
          >>> probability, size = learner.compute_logical_probabilities(sample.info)
        """
        if len(self.server_addresses) == 1:
            return info.probability, info.table_size
        sizes = tf.cast(info.table_size, tf.int64)
        offsets = [0]
        for source in self.sources[:-1]:
            offsets.append(offsets[-1] + source.count)
        largest = [
            tf.reduce_max(sizes[o : o + s.count])
            for o, s in zip(offsets, self.sources, strict=True)
        ]
        totals = []
        for table_index, unsampled in enumerate(self.unsampled_sizes):
            mine = [
                n
                for n, s in zip(largest, self.sources, strict=True)
                if s.table_index == table_index
            ]
            totals.append(tf.add_n(mine) + unsampled)
        logical_sizes = tf.concat(
            [
                sizes[o : o + s.count] - n + totals[s.table_index]
                for o, s, n in zip(offsets, self.sources, largest, strict=True)
            ],
            axis=0,
        )
        shares = tf.constant(
            [s.share for s in self.sources for _ in range(s.count)], dtype=tf.float64
        )
        return tf.cast(info.probability, tf.float64) * shares, logical_sizes

    def make_batch(self, sample: reverb.ReplaySample) -> SampleBatch:
        """Returns the `SampleBatch` of a batch of samples concatenated in source order.

        Example:
          >>> batch = learner.make_batch(sample)
        """
        info = sample.info
        if self.beta is None:
            weights = tf.ones([self.batch_size], tf.float32)
        else:
            probability, size = self.compute_logical_probabilities(info)
            weights = priorities.compute_importance_weights(probability, size, self.beta)
        experience = sample.data if self.experience_fn is None else self.experience_fn(sample.data)
        table_index = tf.constant(
            [s.table_index for s in self.sources for _ in range(s.count)], dtype=tf.int32
        )
        server_index = tf.constant(
            [s.server_index for s in self.sources for _ in range(s.count)], dtype=tf.int32
        )
        return SampleBatch(experience, info, table_index, weights, server_index)

    def as_dataset(self) -> tf.data.Dataset:
        """Returns the `tf.data.Dataset` of `SampleBatch`es (endless unless a table times out).

        Raises (while iterating):
          tf.errors.InvalidArgumentError: If a table gives no sample within
            `rate_limiter_timeout_ms` ("table is empty"), or β is outside [0, 1].

        Example:
          >>> batches = iter(learner.as_dataset())
        """
        parts = tuple(self.make_source_dataset(i) for i in range(len(self.sources)))
        if len(parts) == 1:
            batches = parts[0].map(without_autograph(self.make_batch))
        else:
            batches = tf.data.Dataset.zip(parts).map(
                without_autograph(lambda *samples: self.make_batch(_concat_samples(samples)))
            )
        return batches.prefetch(self.prefetch_batches)

    def __iter__(self) -> Iterator[SampleBatch]:
        """Yields batches eagerly; a timed-out table raises `EmptyTableError`.

        Raises:
          EmptyTableError: If a table gives no sample within `rate_limiter_timeout_ms`.

        Example:
          >>> for batch in learner: ...
        """
        try:
            yield from self.as_dataset()
        except tf.errors.InvalidArgumentError as e:
            if 'rate_limiter_timeout_ms' not in e.message:
                raise
            raise EmptyTableError(_extract_assert_message(e.message)) from e

    def update_priorities(
        self,
        keys: tf.Tensor,
        td_errors: tf.Tensor,
        *,
        table_index: tf.Tensor | None = None,
        server_index: tf.Tensor | None = None,
        epsilon: float = 1e-3,
        exponent: float = 1.0,
    ) -> tf.Operation:
        """Sets priorities (|δ| + ε)^exponent of sampled items; usable inside a `tf.function`.

        Each key goes to the table and the server its sample came from: Reverb ignores,
        without an error, keys that a server does not hold.

        Args:
          keys: uint64 `[B]` keys (`batch.info.key`).
          td_errors: `[B]` TD errors.
          table_index: int32 `[B]` (`batch.table_index`); required for a mix of tables.
          server_index: int32 `[B]` (`batch.server_index`); required with several servers.
          epsilon: ε >= 0 added to |δ|.
          exponent: The exponent (> 0); keep 1 for prioritized tables (they apply their own).

        Returns:
          The update op (a group of one update per (server, table) stream).

        Raises:
          ValueError: If `table_index` is missing for a mix, `server_index` is missing with
            several servers, or ε / exponent are invalid.
          tf.errors.InvalidArgumentError: If a priority is NaN, infinite or negative; names
            the table, the keys and the priorities.

        Example:
          >>> learner.update_priorities(batch.info.key, loss_info.extra.td_error,
          ...                           table_index=batch.table_index,
          ...                           server_index=batch.server_index)
        """
        if len(self.tables) > 1 and table_index is None:
            raise ValueError(
                f'table_index is required to update priorities in a mix of tables {self.tables}; '
                'pass batch.table_index.'
            )
        if len(self.server_addresses) > 1 and server_index is None:
            raise ValueError(
                'server_index is required to update priorities across servers '
                f'{self.server_addresses}: a key sent to another server than its own is '
                'silently ignored by Reverb; pass batch.server_index.'
            )
        if len(self.sources) == 1:
            source = self.sources[0]
            return priorities.update_priorities(
                self._tf_clients[source.server_index],
                self.tables[source.table_index],
                keys,
                td_errors,
                epsilon=epsilon,
                exponent=exponent,
            )
        updates = []
        for source in self.sources:
            mine = tf.ones(tf.shape(keys), tf.bool)
            if len(self.tables) > 1:
                mine = tf.logical_and(mine, tf.equal(table_index, source.table_index))
            if len(self.server_addresses) > 1:
                mine = tf.logical_and(mine, tf.equal(server_index, source.server_index))
            updates.append(
                priorities.update_priorities(
                    self._tf_clients[source.server_index],
                    self.tables[source.table_index],
                    tf.boolean_mask(keys, mine),
                    tf.boolean_mask(td_errors, mine),
                    epsilon=epsilon,
                    exponent=exponent,
                )
            )
        return tf.group(updates)


def _extract_assert_message(message: str) -> str:
    """Returns the text of a `tf.debugging.Assert` message without TF's decorations."""
    start = message.find('[') + 1
    end = message.find(']', message.find('rate_limiter_timeout_ms'))
    return message[start:end] if 0 < start < end else message


def _concat_samples(samples: tuple) -> reverb.ReplaySample:
    """Concatenates per-stream batches of `ReplaySample`s along the batch axis."""
    return tf.nest.map_structure(lambda *xs: tf.concat(xs, axis=0), *samples)
