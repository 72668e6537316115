"""Learner datasets: batches sampled from Reverb tables, ready for a TF-Agents `train`.

`LearnerDataset` builds one `tf.data` pipeline per table on `reverb.TrajectoryDataset`
(parallel workers, several batches in flight, prefetch) and zips them into batches of
`SampleBatch(experience, info, table_index, weights)`:

* **Mixing.** `tables` is one name or a `{table: ratio}` mix. Every batch takes exactly
  `counts[table]` items from each table, where the counts are the ratios scaled to
  `batch_size` and rounded by the largest-remainder method: each table gets
  floor(ratio / Σ ratios × batch_size) items and the items left over go, one each, to the
  tables with the largest fractional parts (ties: the table listed first), so the counts
  sum to `batch_size`. A table whose count is 0 is not sampled.
* **Importance weights.** w_i = (N_k · P_k(i))^(−β) / max_j w_j, with P_k(i) the probability
  of sample i in its table k and N_k that table's size at sampling time, normalized by the
  batch maximum (Tianshou's convention, see `rlds_reverb.learn.priorities`). β is read (from a
  float, a `tf.Variable` or a schedule) when the batch is built, so with prefetching it
  may lag the train step by a few steps.
* **Staleness.** With `staleness=StalenessFilter(version, max_staleness=k)`, items carry a
  `types.DATA_VERSION` field; a sample whose version is below `version - k` is dropped
  before batching (so the per-table counts stay exact) and counted in `filter.dropped`.
* **Priorities.** `update_priorities(keys, td_errors, ...)` sends (|δ| + ε)^exponent to the
  table each key came from, inside a `tf.function` train step, refusing NaN, infinite and
  negative priorities first.
* **Order.** A table with a FIFO sampler (a queue) is read by one worker per iterator, which
  keeps the insertion order. Give queues a `rate_limiter_timeout_ms`: Reverb cannot cancel
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
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import reverb
import tensorflow as tf
import tree

from rlds_reverb.core import checks, types
from rlds_reverb.core.errors import EmptyTableError, TableError
from rlds_reverb.learn import priorities
from rlds_reverb.serve import table_info

# Maps a batch of items (leaves `[B, ...]`) to the experience the agent trains on.
ExperienceFn = Callable[[types.Nest], types.Nest]

DEFAULT_SERVER_INFO_TIMEOUT_S = 30
# Sampling workers per table iterator. Reverb's automatic choice (-1) measured 33,600
# samples/s on 2 cores; 4 workers 60,000, 8 workers 65,000 (benchmarks/sample.py).
DEFAULT_WORKERS_PER_ITERATOR = 8
# Samples each worker requests at once, in per-table batches (Reverb's rule of thumb is 2 to
# 3), and at least the minimum: fewer round trips, at the price of sampling from a slightly
# older snapshot of the priorities. Two batches measured 5% faster than one here.
IN_FLIGHT_BATCHES_PER_WORKER = 2
MIN_IN_FLIGHT_SAMPLES_PER_WORKER = 256
# Starts the message of the error a timed-out table raises inside the pipeline.
EMPTY_TABLE_MARKER = 'Reverb table'


class SampleBatch(NamedTuple):
    """One learner batch.

    Fields:
      experience: The items (or `experience_fn` of them), leaves `[B, ...]`.
      info: `reverb.replay_sample.SampleInfo` of `[B]` tensors: key, probability, table
        size, priority, times sampled.
      table_index: int32 `[B]`: the position in `LearnerDataset.tables` of each sample's table.
      weights: float32 `[B]` importance weights (ones without `beta`).
    """

    experience: types.Nest
    info: reverb.replay_sample.SampleInfo
    table_index: tf.Tensor
    weights: tf.Tensor


def _check_ratio(table: object, ratio: object) -> float:
    if not isinstance(table, str) or not table:
        raise ValueError(f'Table names must be non-empty strings; got {table!r}.')
    if isinstance(ratio, bool) or not isinstance(ratio, int | float):
        raise ValueError(f'The ratio of table {table!r} must be a number; got {ratio!r}.')
    if not math.isfinite(ratio) or ratio < 0:
        raise ValueError(f'The ratio of table {table!r} must be finite and >= 0; got {ratio!r}.')
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
    exact = {table: ratio / total * batch_size for table, ratio in ratios.items()}
    counts = {table: math.floor(value) for table, value in exact.items()}
    left_over = batch_size - sum(counts.values())
    by_remainder = sorted(exact, key=lambda t: -(exact[t] - counts[t]))  # Stable: ties keep order.
    for table in by_remainder[:left_over]:
        counts[table] += 1
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


def _make_empty_table_error(table: str, timeout_ms: int, element_spec: Any) -> tf.data.Dataset:
    """Returns a one-element dataset whose element fails with a "table is empty" error.

    Appended after a table's sample stream, it turns the silent end of a timed-out
    `TrajectoryDataset` into an error that names the table.
    """
    message = (
        f'{EMPTY_TABLE_MARKER} {table} gave no sample within rate_limiter_timeout_ms={timeout_ms}: '
        'the table is empty (or its rate limiter blocks sampling, for example min_size_to_sample '
        'not reached or every item sampled max_times_sampled times). Push items first.'
    )

    def fail(_: tf.Tensor) -> Any:
        with tf.control_dependencies([tf.debugging.Assert(tf.constant(False), [message])]):
            return tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), element_spec)

    return tf.data.Dataset.range(1).map(fail)


def _concat_batches(parts: tuple) -> tuple:
    """Concatenates per-table `(sample, table_index)` batches along the batch axis."""
    if len(parts) == 1:
        return parts[0]
    return tf.nest.map_structure(lambda *xs: tf.concat(xs, axis=0), *parts)


class LearnerDataset:
    """Batches of prioritized samples from one Reverb table or a `{table: ratio}` mix.

    See the module docstring for mixing, importance weights, staleness and timeouts.

    Args:
      server_address: The Reverb server, `'host:port'`.
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
      num_workers_per_iterator: Reverb sampling workers per table (None:
        `DEFAULT_WORKERS_PER_ITERATOR`; FIFO tables always use 1).
      max_in_flight_samples_per_worker: Samples requested per round trip (None:
        `IN_FLIGHT_BATCHES_PER_WORKER` times the largest per-table count, at least
        `MIN_IN_FLIGHT_SAMPLES_PER_WORKER`).
      prefetch_batches: Batches prepared ahead (`tf.data.AUTOTUNE` by default).
      rate_limiter_timeout_ms: How long a table may block sampling before the iterator
        fails with "table is empty"; -1 waits forever.
      server_info_timeout_s: Timeout of the server-info call made here.

    Raises:
      ValueError: If the ratios are invalid (negative, not finite, or not summing to a
        positive number), β is a number outside [0, 1], or another option is invalid.
      TableError: If a table does not exist (the message lists those that do), or more than
        one worker is asked for on a FIFO table.
      SpecMismatchError: If a table's signature differs from the expected items; the
        message shows the difference leaf by leaf.

    Example:
      >>> learner = LearnerDataset(address, 'replay', data_spec=agent.collect_data_spec,
      ...                          batch_size=256, beta=0.4)
      >>> batch = next(iter(learner.as_dataset()))
    """

    def __init__(
        self,
        server_address: str,
        tables: str | Mapping[str, float],
        *,
        data_spec: types.SpecNest,
        batch_size: int,
        sequence_length: int | None = 2,
        beta: priorities.Beta | None = None,
        experience_fn: ExperienceFn | None = None,
        staleness: StalenessFilter | None = None,
        num_workers_per_iterator: int | None = None,
        max_in_flight_samples_per_worker: int | None = None,
        prefetch_batches: int = tf.data.AUTOTUNE,
        rate_limiter_timeout_ms: int = -1,
        server_info_timeout_s: int = DEFAULT_SERVER_INFO_TIMEOUT_S,
    ):
        priorities.check_beta(beta)
        if sequence_length is not None:
            checks.check_int_at_least(sequence_length, 1, argument='sequence_length')
        if rate_limiter_timeout_ms < -1:
            raise ValueError(f'rate_limiter_timeout_ms={rate_limiter_timeout_ms} must be >= -1.')
        all_counts = compute_mix_counts(tables, batch_size)
        self.counts = {table: count for table, count in all_counts.items() if count > 0}
        self.tables = list(self.counts)
        self.server_address = server_address
        self.batch_size = batch_size
        self.item_spec = _make_item_spec(data_spec, sequence_length)
        self.beta = beta
        self.experience_fn = experience_fn
        self.staleness = staleness
        self.prefetch_batches = prefetch_batches
        self.rate_limiter_timeout_ms = rate_limiter_timeout_ms
        client = table_info.connect(server_address)
        self.table_info = table_info.fetch_tables_info(
            client, list(all_counts), timeout_ms=1000 * server_info_timeout_s
        )
        for info in self.table_info.values():
            table_info.check_signature(info, self.item_spec, found="the learner's items")
        self.num_workers = {
            t: _choose_num_workers(self.table_info[t], num_workers_per_iterator)
            for t in self.tables
        }
        self.max_in_flight = max_in_flight_samples_per_worker or max(
            MIN_IN_FLIGHT_SAMPLES_PER_WORKER,
            IN_FLIGHT_BATCHES_PER_WORKER * max(self.counts.values()),
        )
        if staleness is not None:
            staleness.find_version_path(self.item_spec)
        self._tf_client = reverb.TFClient(server_address)

    def make_table_dataset(self, index: int) -> tf.data.Dataset:
        """Returns the batches of `(ReplaySample, table_index)` of one table of the mix.

        Example:
          >>> batches = learner.make_table_dataset(0)
        """
        table = self.tables[index]
        samples = reverb.TrajectoryDataset(
            server_address=self.server_address,
            table=table,
            dtypes=tf.nest.map_structure(lambda s: s.dtype, self.item_spec),
            shapes=tf.nest.map_structure(lambda s: s.shape, self.item_spec),
            max_in_flight_samples_per_worker=self.max_in_flight,
            num_workers_per_iterator=self.num_workers[table],
            rate_limiter_timeout_ms=self.rate_limiter_timeout_ms,
        )
        if self.staleness is not None:
            samples = samples.filter(self.staleness.make_predicate(self.item_spec))
        if self.rate_limiter_timeout_ms >= 0:
            samples = samples.concatenate(
                _make_empty_table_error(table, self.rate_limiter_timeout_ms, samples.element_spec)
            )
        count = self.counts[table]
        # A sequential batch keeps a FIFO table's order, and measured 3% faster here than a
        # parallel one for the other tables too (the workers already sample in parallel).
        batches = samples.batch(count, drop_remainder=True)
        return batches.map(lambda sample: (sample, tf.fill([count], tf.constant(index, tf.int32))))

    def make_batch(self, sample: reverb.ReplaySample, table_index: tf.Tensor) -> SampleBatch:
        """Returns the `SampleBatch` of a concatenated batch of samples.

        Example:
          >>> batch = learner.make_batch(sample, table_index)
        """
        info = sample.info
        if self.beta is None:
            weights = tf.ones([self.batch_size], tf.float32)
        else:
            weights = priorities.compute_importance_weights(
                info.probability, info.table_size, self.beta
            )
        experience = sample.data if self.experience_fn is None else self.experience_fn(sample.data)
        return SampleBatch(experience, info, table_index, weights)

    def as_dataset(self) -> tf.data.Dataset:
        """Returns the `tf.data.Dataset` of `SampleBatch`es (endless unless a table times out).

        Raises (while iterating):
          tf.errors.InvalidArgumentError: If a table gives no sample within
            `rate_limiter_timeout_ms` ("table is empty"), or β is outside [0, 1].

        Example:
          >>> batches = iter(learner.as_dataset())
        """
        per_table = tuple(self.make_table_dataset(i) for i in range(len(self.tables)))
        zipped = per_table[0] if len(per_table) == 1 else tf.data.Dataset.zip(per_table)
        batches = zipped.map(lambda *parts: self.make_batch(*_concat_batches(_as_parts(parts))))
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
        epsilon: float = 1e-3,
        exponent: float = 1.0,
    ) -> tf.Operation:
        """Sets priorities (|δ| + ε)^exponent of sampled items; usable inside a `tf.function`.

        Args:
          keys: uint64 `[B]` keys (`batch.info.key`).
          td_errors: `[B]` TD errors.
          table_index: int32 `[B]` (`batch.table_index`); required for a mix of tables.
          epsilon: ε >= 0 added to |δ|.
          exponent: The exponent (> 0); keep 1 for prioritized tables (they apply their own).

        Returns:
          The update op (a group of one update per table).

        Raises:
          ValueError: If `table_index` is missing for a mix, or ε / exponent are invalid.
          tf.errors.InvalidArgumentError: If a priority is NaN, infinite or negative; names
            the table, the keys and the priorities.

        Example:
          >>> learner.update_priorities(batch.info.key, loss_info.extra.td_error,
          ...                           table_index=batch.table_index)
        """
        if len(self.tables) == 1:
            return priorities.update_priorities(
                self._tf_client, self.tables[0], keys, td_errors, epsilon=epsilon, exponent=exponent
            )
        if table_index is None:
            raise ValueError(
                f'table_index is required to update priorities in a mix of tables {self.tables}; '
                'pass batch.table_index.'
            )
        updates = []
        for index, table in enumerate(self.tables):
            mine = tf.equal(table_index, index)
            updates.append(
                priorities.update_priorities(
                    self._tf_client,
                    table,
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


def _as_parts(parts: tuple) -> tuple:
    """Returns per-table `(sample, index)` pairs from a `map` over one or zipped datasets."""
    if len(parts) == 2 and isinstance(parts[0], reverb.ReplaySample):
        return (parts,)
    return parts
