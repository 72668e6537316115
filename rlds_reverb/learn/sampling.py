"""Learner datasets: batches sampled from Reverb tables, ready for a TF-Agents `train`.

`LearnerDataset` builds one `tf.data` pipeline per (server, table) stream on
`reverb.TrajectoryDataset` (parallel iterators and workers, several batches in flight,
prefetch: `rlds_reverb.learn.streams`) and zips them into batches of
`SampleBatch(experience, info, table_index, weights, server_index)`. Its options are one
`SamplingOptions` value (`rlds_reverb.learn.options`); what each batch takes from which
table on which server is its `SamplingPlan` (`rlds_reverb.learn.plan`: mixing by exact
per-batch counts, several servers as one logical table, iterators and workers).

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
  sample-to-insert ratio) by one iterator.
* **Timeouts.** With `rate_limiter_timeout_ms`, a table that gives no sample in time fails
  the iterator with an error saying the table is empty (or blocked), instead of hanging.
* **Stopping.** Without it, a stream waits on its table's rate limiter in slices of
  `timeouts.LEARNER_STOP_CHECK_MS`, so that `LearnerDataset.stop()` and Ctrl-C end an
  iterator held back by the limiter within about a second (`rlds_reverb.learn.stopping`).
  A table that gives each item a bounded number of times (`max_times_sampled`, a queue)
  is waited on whole: give such tables a `rate_limiter_timeout_ms`.

Example:
  >>> learner = LearnerDataset(address, {'offline': 0.75, 'online': 0.25},
  ...                          data_spec=agent.collect_data_spec, batch_size=256, beta=0.4)
  >>> for batch in learner.as_dataset().take(10):
  ...     loss = agent.train(batch.experience, weights=batch.weights)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import reverb
import tensorflow as tf

from rlds_reverb.core import types
from rlds_reverb.core.episodes import without_autograph
from rlds_reverb.core.errors import EmptyTableError
from rlds_reverb.learn import decoding, priorities, stopping, streams
from rlds_reverb.learn import plan as plan_lib
from rlds_reverb.learn.options import ExperienceFn, SamplingOptions, merge_overrides
from rlds_reverb.learn.plan import (
    DEFAULT_ITERATORS_PER_STREAM,
    DEFAULT_WORKERS_PER_ITERATOR,
    compute_mix_counts,
    compute_server_counts,
)
from rlds_reverb.learn.staleness import StalenessFilter
from rlds_reverb.serve import table_info
from rlds_reverb.transform.image_ops import CropMode

__all__ = [
    'DEFAULT_ITERATORS_PER_STREAM',
    'DEFAULT_WORKERS_PER_ITERATOR',
    'ExperienceFn',
    'LearnerDataset',
    'SampleBatch',
    'SamplingOptions',
    'StalenessFilter',
    'compute_mix_counts',
    'compute_server_counts',
]


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


def _make_item_spec(data_spec: types.SpecNest, sequence_length: int | None) -> types.SpecNest:
    """Returns the spec of one item: `data_spec` with a leading `[sequence_length]`, or as is."""
    if sequence_length is None:
        return tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape, s.dtype), data_spec)
    return tf.nest.map_structure(
        lambda s: tf.TensorSpec([sequence_length, *s.shape], s.dtype), data_spec
    )


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


class LearnerDataset:
    """Batches of prioritized samples from one Reverb table or a `{table: ratio}` mix.

    The table (or each table of the mix) may be spread over several servers: one logical
    table, sampled from every server in fixed per-batch proportions (see the module
    docstring for importance weights, staleness, timeouts and stopping, and
    `rlds_reverb.learn.plan` for mixing and servers). A table holding encoded frames
    (its signature names them) is sampled as bytes and its frames decoded after sampling,
    in parallel, resized and cropped per camera (`rlds_reverb.learn.decoding`);
    `item_spec` is what Reverb gives, `delivered_item_spec` what a batch delivers per item.

    Args:
      server_address: The Reverb server, `'host:port'`, or a list of servers that each
        hold the tables (one logical table spread over them).
      tables: One table name, or `{table: ratio}` (ratios >= 0, positive sum).
      data_spec: The spec of one step of an item, without the time axis (for two-step
        trajectories `agent.collect_data_spec`; for n-step transitions the item spec).
      options: The sampling options (`SamplingOptions`: batch size, β, servers' shares,
        iterators, timeouts, ...).
      **overrides: Fields of `SamplingOptions` given as keywords (`batch_size=256,
        beta=0.4`): without `options` they make the options, with it they replace its
        fields in a copy.

    Raises:
      ValueError: If an option is invalid (`SamplingOptions`), a server is listed twice,
        `server_ratios` does not give one ratio per server, or the table ratios are
        invalid (negative, not finite, or not summing to a positive number).
      TypeError: If a keyword is not a field of `SamplingOptions`.
      ReverbConnectionError: If a server does not answer; names it.
      TableError: If a table does not exist on a server (the message lists those that do),
        or more than one worker or iterator is asked for on a FIFO table.
      SpecMismatchError: If a table's signature differs from the expected items; the
        message shows the difference leaf by leaf. Also if `data_spec` gives a decoded
        frame field another shape than the learner delivers.
      FrameFieldError: If `decode_frames`, `frame_sizes` or `frame_crops` names a field
        the table does not hold encoded frames in (or one not decoded).

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
        options: SamplingOptions | None = None,
        **overrides: Any,
    ):
        self.options = merge_overrides(
            SamplingOptions, options, overrides, entry_point='LearnerDataset'
        )
        self.server_addresses = _check_addresses(server_address)
        self.server_address = self.server_addresses[0]
        all_counts = compute_mix_counts(tables, self.options.batch_size)
        if self.options.server_ratios is not None:  # Checked before any server is asked.
            compute_server_counts(
                1, sizes=[0] * len(self.server_addresses), ratios=self.options.server_ratios
            )
        self.batch_size = self.options.batch_size
        # Per server: {table: TableInfo}, every table checked against the items.
        self.server_table_info = [
            self._fetch_table_info(a, all_counts) for a in self.server_addresses
        ]
        self.table_info = self.server_table_info[0]
        self._plan_items(_make_item_spec(data_spec, self.options.sequence_length))
        self.plan = plan_lib.make_sampling_plan(
            all_counts,
            self.server_table_info,
            server_ratios=self.options.server_ratios,
            iterators_per_stream=self.options.iterators_per_stream,
            num_workers_per_iterator=self.options.num_workers_per_iterator,
            max_in_flight_samples_per_worker=self.options.max_in_flight_samples_per_worker,
            rate_limiter_timeout_ms=self.options.rate_limiter_timeout_ms,
            item_spec=self.item_spec,
        )
        self.tables = self.plan.tables
        self.counts = self.plan.counts
        if self.options.staleness is not None:
            self.options.staleness.find_version_path(self.item_spec)
        self._tf_clients = [reverb.TFClient(address) for address in self.server_addresses]
        self._stop = stopping.StopSignal()

    def _fetch_table_info(self, address: str, counts: Mapping[str, int]) -> dict[str, Any]:
        """Returns a server's `{table: TableInfo}`."""
        return table_info.fetch_tables_info(
            table_info.connect(address),
            list(counts),
            timeout_ms=self.options.server_info_timeout_ms,
        )

    def _plan_items(self, requested: types.SpecNest) -> None:
        """Sets the items asked of Reverb (`item_spec`: encoded frames as bytes), how their
        frames are decoded, and what a batch delivers; checks every table against them."""
        signatures = [i.signature for s in self.server_table_info for i in s.values()]
        options = self.options
        self.item_spec, self.frame_decoding = decoding.plan_frame_decoding(
            requested,
            next((s for s in signatures if s is not None), None),
            decode_frames=options.decode_frames,
            sizes=options.frame_sizes or {},
            crops=options.frame_crops or {},
            crop_mode=CropMode(options.frame_crop_mode),
            seed=options.frame_seed,
            masks=options.frame_masks,
        )
        for infos in self.server_table_info:
            for info in infos.values():
                table_info.check_signature(info, self.item_spec, found="the learner's items")
        self.delivered_item_spec = (
            self.item_spec
            if self.frame_decoding is None
            else self.frame_decoding.make_delivered_spec(self.item_spec, self.batch_size)
        )

    @property
    def sources(self) -> list[plan_lib.Source]:
        """The sampled (server, table) streams, in batch order (`SamplingPlan.sources`)."""
        return self.plan.sources

    @property
    def num_workers(self) -> list[int]:
        """Per source, Reverb workers per iterator (`SamplingPlan.num_workers`)."""
        return self.plan.num_workers

    @property
    def iterator_counts(self) -> list[list[int]]:
        """Per source, each Reverb iterator's count per batch (`SamplingPlan.iterator_counts`)."""
        return self.plan.iterator_counts

    def make_source_dataset(self, index: int) -> tf.data.Dataset:
        """Returns the batches of `ReplaySample`s of one (server, table) stream.

        Each element holds `self.sources[index].count` samples.

        Example:
          >>> batches = learner.make_source_dataset(0)
        """
        source = self.plan.sources[index]
        table = self.plan.tables[source.table_index]
        address = self.server_addresses[source.server_index]
        return streams.SourceStream(
            address=address,
            table=table,
            description=table
            if len(self.server_addresses) == 1
            else f'{table} on server {address}',
            iterator_counts=self.plan.iterator_counts[index],
            item_spec=self.item_spec,
            num_workers=self.plan.num_workers[index],
            max_in_flight=self.plan.max_in_flight,
            rate_limiter_timeout_ms=self.options.rate_limiter_timeout_ms,
            sliced=self.plan.sliced[index],
            staleness=self.options.staleness,
            stop=self._stop,
        ).make_dataset()

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
        for table_index, unsampled in enumerate(self.plan.unsampled_sizes):
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
        shares = tf.constant(self.plan.list_slot_values('share'), dtype=tf.float64)
        return tf.cast(info.probability, tf.float64) * shares, logical_sizes

    def make_batch(self, sample: reverb.ReplaySample) -> SampleBatch:
        """Returns the `SampleBatch` of a batch of samples concatenated in source order.

        Example:
          >>> batch = learner.make_batch(sample)
        """
        info = sample.info
        beta = self.options.beta
        if beta is None:
            weights = tf.ones([self.batch_size], tf.float32)
        else:
            probability, size = self.compute_logical_probabilities(info)
            weights = priorities.compute_importance_weights(probability, size, beta)
        experience_fn = self.options.experience_fn
        experience = sample.data if experience_fn is None else experience_fn(sample.data)
        table_index = tf.constant(self.plan.list_slot_values('table_index'), dtype=tf.int32)
        server_index = tf.constant(self.plan.list_slot_values('server_index'), dtype=tf.int32)
        return SampleBatch(experience, info, table_index, weights, server_index)

    def as_dataset(self) -> tf.data.Dataset:
        """Returns the `tf.data.Dataset` of `SampleBatch`es (endless unless a table times out).

        An iterator of it ends when the learner is stopped (`stop`) while it waits on a
        rate limiter; with `stop_on_interrupt`, Ctrl-C stops the learner.

        Raises (while iterating):
          tf.errors.InvalidArgumentError: If a table gives no sample within
            `rate_limiter_timeout_ms` ("table is empty"), or β is outside [0, 1].

        Example:
          >>> batches = iter(learner.as_dataset())
        """
        if self.options.stop_on_interrupt:
            stopping.watch_interrupts(self._stop)
        parts = tuple(self.make_source_dataset(i) for i in range(len(self.plan.sources)))
        if len(parts) == 1:
            samples = parts[0]
        else:
            samples = tf.data.Dataset.zip(parts).map(
                without_autograph(lambda *parts: streams.concat_samples(parts))
            )
        if self.frame_decoding is not None:  # Every frame of a batch in parallel, in order.
            samples = self.frame_decoding.apply(samples)
        batches = samples.map(without_autograph(self.make_batch))
        return batches.prefetch(self.options.prefetch_batches)

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
            raise EmptyTableError(streams.extract_assert_message(e.message)) from e

    def stop(self) -> None:
        """Ends the iterators of this learner's datasets that wait on a rate limiter.

        An iterator blocked in `next()` because the limiter holds samples back ends
        (`StopIteration`) within about a second (`timeouts.LEARNER_STOP_CHECK_MS`), and so
        does any other iterator of a dataset made before the stop once it waits a whole
        slice; datasets made afterwards (`as_dataset()`) sample as usual. Ctrl-C calls this
        with `stop_on_interrupt` (the default). Tables that give each item a bounded number
        of times are waited on whole (module docstring).

        Example:
          >>> threading.Timer(60, learner.stop).start()
        """
        self._stop.advance()

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
