"""Fast pushes of RLDS episodes into Reverb tables.

Each episode is validated and turned into *rows* and item *windows* as whole tensors in a
parallel, prefetched `tf.data` map (`rlds_reverb.items`); Python then only appends rows to
a Reverb writer:

* constant priorities and items expressible as patterns (two-step, n-step, dropped-tail
  sequences) use `reverb.StructuredWriter`, whose configs create the items in C++;
* other items (padded or truncated windows, episodes, stream windows) and per-item
  priorities use the `TrajectoryWriter`, creating each item as a slice of the shared rows.

Either way each step is stored once and overlapping items reference the same steps. An
episode is written whole: its items are created, then the writer's `end_episode` waits
until the server confirms them. If anything fails part way, `PushError` says exactly how
many episodes were fully written.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np
import reverb
import tensorflow as tf
import tree
from tf_agents.replay_buffers import reverb_utils

from rlds_reverb import convert, observers, specs, tables, types, validation
from rlds_reverb import episodes as episodes_lib
from rlds_reverb import items as items_lib
from rlds_reverb.errors import (
    EpisodeTooLongError,
    InvalidEpisodeError,
    PushError,
    ReverbConnectionError,
    TableTooSmallError,
)
from rlds_reverb.specs import PolicyInfoFn

PriorityFn = Callable[[types.Nest], tf.Tensor]
ProgressFn = Callable[[int, int], None]

DEFAULT_TIMEOUT_MS = 60_000
# Below the 50 pending items at which Reverb logs "pending items is alarmingly high" on every
# tenth item; as fast here as 1,000 (benchmarks/push.py).
DEFAULT_MAX_IN_FLIGHT_ITEMS = 48


@dataclasses.dataclass
class PushStats:
    """What a push wrote: episodes, steps and items per table, skipped episodes, seconds."""

    episodes: int = 0
    steps: int = 0
    items: dict[str, int] = dataclasses.field(default_factory=dict)
    skipped_episodes: int = 0
    seconds: float = 0.0

    @property
    def steps_per_second(self) -> float:
        """Steps of written episodes per second of push."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    def merge(self, other: PushStats) -> PushStats:
        """Returns the sum of two pushes' stats (seconds: the longer one, as run in parallel)."""
        items = dict(self.items)
        for table, count in other.items.items():
            items[table] = items.get(table, 0) + count
        return PushStats(
            episodes=self.episodes + other.episodes,
            steps=self.steps + other.steps,
            items=items,
            skipped_episodes=self.skipped_episodes + other.skipped_episodes,
            seconds=max(self.seconds, other.seconds),
        )


def connect(server: str | reverb.Client) -> reverb.Client:
    """Returns a client for an address 'host:port' or the given client.

    Raises:
      ReverbConnectionError: If `server` is neither a client nor a 'host:port' string.
    """
    if isinstance(server, reverb.Client):
        return server
    if not isinstance(server, str) or ':' not in server or not server.rsplit(':', 1)[1].isdigit():
        raise ReverbConnectionError(
            f"server={server!r} is not valid; expected 'host:port' or a reverb.Client."
        )
    return reverb.Client(server)


def _gather_items(rows: types.Nest, starts, sizes, *, span: int, squeeze: bool) -> types.Nest:
    """Returns the items as a batch: `[N, span, ...]` leaves, zeros past each item's end."""
    if squeeze:
        return tf.nest.map_structure(lambda x: tf.gather(x, starts), rows)
    offsets = tf.range(span)[None, :]
    valid = offsets < sizes[:, None]
    last = tf.maximum(tf.shape(tree.flatten(rows)[0])[0] - 1, 0)
    index = tf.minimum(starts[:, None] + offsets, last)

    def _gather(x):
        gathered = tf.gather(x, index)
        mask = tf.reshape(
            valid, tf.concat([tf.shape(valid), tf.ones([x.shape.rank - 1], tf.int32)], 0)
        )
        return tf.where(mask, gathered, tf.zeros_like(gathered))

    return tf.nest.map_structure(_gather, rows)


def make_episode_plans(
    episodes: tf.data.Dataset,
    item: items_lib.ItemKind,
    *,
    priority: float | PriorityFn = 1.0,
    policy_info_fn: PolicyInfoFn = None,
) -> tf.data.Dataset:
    """Returns, per episode, its length, problem masks, rows, item windows (and priorities).

    Computed in a parallel, prefetched `tf.data` map on whole-episode tensors.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.types`).
      item: The item kind.
      priority: A constant, or `fn(item_batch) -> [N]` priorities.
      policy_info_fn: Optional policy info function (two-step items).

    Returns:
      A dataset of dicts with the episode's validation summary (`length`, `masks`,
      `terminal`, `shapes`), its `rows`, item `starts` and `sizes` and, for a priority
      function, `priorities`.
    """
    prepared = item.prepare_episodes(episodes)

    def _plan(steps):
        rows = item.compute_rows(steps, policy_info_fn=policy_info_fn)
        starts, sizes = item.compute_windows(steps)
        plan = {
            **validation.summarize_episode(steps),
            'rows': rows,
            'starts': tf.cast(starts, tf.int32),
            'sizes': tf.cast(sizes, tf.int32),
        }
        if callable(priority):
            batch = _gather_items(rows, starts, sizes, span=item.max_span, squeeze=item.squeeze)
            plan['priorities'] = tf.reshape(tf.cast(priority(batch), tf.float64), [-1])
        return plan

    tensors = episodes_lib.to_episode_tensors(prepared)
    plans = tensors.map(
        episodes_lib.without_autograph(_plan),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return plans.prefetch(tf.data.AUTOTUNE)


def count_items(episodes: tf.data.Dataset, item: items_lib.ItemKind) -> int:
    """Returns how many items a push of `episodes` writes (all episodes assumed valid).

    Example:
      >>> table = tables.uniform('replay', max_size=count_items(episodes, items.TwoStep()))
    """
    tensors = episodes_lib.to_episode_tensors(item.prepare_episodes(episodes))
    if item.crosses_episodes:
        total = sum(int(n) for n in tensors.map(episodes_lib.episode_length))
        starts, _ = items_lib.compute_sequence_windows(
            tf.constant(total), item.length, item.period, types.EndBehavior.PAD
        )
        return int(tf.size(starts))
    counts = tensors.map(
        lambda steps: tf.size(item.compute_windows(steps)[0]),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return int(sum(int(n) for n in counts.as_numpy_iterator()))


@dataclasses.dataclass(frozen=True)
class _FlushSchedule:
    """Every `every` rows, wait until at most `bound` items are pending.

    So at most `every + bound` items are ever pending. Short waits for a few confirmations
    keep more items in flight on average than waiting for half of them: with 48 in flight,
    every 8 rows down to 40 measured 15% faster than every 24 rows down to 24.
    """

    every: int
    bound: int

    @classmethod
    def for_max_in_flight(cls, max_in_flight_items: int) -> _FlushSchedule:
        every = max(1, max_in_flight_items // 6)
        return cls(every, max_in_flight_items - every)

    def is_due(self, rows_appended: int) -> bool:
        return rows_appended % self.every == 0


def _list_rows(flat_rows: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Returns one list of leaves per row (pybind takes lists faster than tuples)."""
    return [list(row) for row in zip(*flat_rows, strict=True)]


class _StructuredEngine:
    """Appends rows to a `StructuredWriter`; its configs create the items in C++."""

    def __init__(self, client, configs, *, max_in_flight_items: int, timeout_ms: int):
        self._writer = client.structured_writer(configs)
        # The rows are flat already: the public `append` would flatten each again (15% of
        # the push time here).
        self._append = getattr(self._writer, '_writer', self._writer).Append
        self._flush = _FlushSchedule.for_max_in_flight(max_in_flight_items)
        self._timeout_ms = timeout_ms

    def write_episode(self, flat_rows: list[np.ndarray], plan: dict) -> int:
        """Appends one episode's rows, ends the episode; returns the items per table."""
        append, flush = self._append, self._flush
        for index, row in enumerate(_list_rows(flat_rows), start=1):
            append(row)
            if flush.is_due(index):
                self._writer.flush(block_until_num_items=flush.bound, timeout_ms=self._timeout_ms)
        self._writer.end_episode(timeout_ms=self._timeout_ms)
        return len(plan['starts'])  # The configs create exactly the planned windows.

    def finish(self) -> int:
        """Nothing is pending after `end_episode`; returns 0 items."""
        return 0


class _TrajectoryEngine:
    """Appends rows to a `TrajectoryWriter` and creates each item as a slice of them."""

    def __init__(self, client, item, table_names, *, priority, max_in_flight_items, timeout_ms):
        self._writer = client.trajectory_writer(item.max_span + 1, validate_items=False)
        self._item = item
        self._tables = list(table_names)
        self._priority = priority
        self._flush = _FlushSchedule.for_max_in_flight(max_in_flight_items)
        self._timeout_ms = timeout_ms
        self._columns = None
        self._appended = 0  # Rows appended since the writer's buffers were last cleared.
        self._last_row = None
        self._created = 0  # Items created (per table) since the last count was taken.

    def _take_count(self) -> int:
        count, self._created = self._created, 0
        return count

    def _append(self, row) -> None:
        self._writer.append(row)
        if self._columns is None:
            self._columns = tree.flatten(self._writer.history)
        self._appended += 1
        if self._flush.is_due(self._appended):
            self._writer.flush(block_until_num_items=self._flush.bound, timeout_ms=self._timeout_ms)

    def _create_item(self, start: int, size: int, priority: float) -> None:
        # Relative (negative) indices: history slices ending at the newest row need them.
        first, stop = start - self._appended, start + size - self._appended
        if self._item.squeeze:
            trajectory = [column[first] for column in self._columns]
        else:
            trajectory = [column[first : stop or None] for column in self._columns]
        for table in self._tables:
            self._writer.create_item(table, priority, trajectory)
        self._created += 1

    def write_episode(self, flat_rows: list[np.ndarray], plan: dict) -> int:
        """Appends one episode's rows and its items, ends the episode; returns the items."""
        offset = self._appended
        starts, sizes = plan['starts'], plan['sizes']
        priorities = plan.get('priorities')
        order = np.argsort(starts + sizes, kind='stable')
        ends = (starts + sizes)[order]
        pointer = 0
        for index, row in enumerate(_list_rows(flat_rows)):
            self._append(row)
            while pointer < len(order) and ends[pointer] == index + 1:
                i = order[pointer]
                priority = self._priority if priorities is None else float(priorities[i])
                self._create_item(offset + int(starts[i]), int(sizes[i]), priority)
                pointer += 1
            if self._item.crosses_episodes:
                self._create_stream_item()
        if len(flat_rows[0]):
            self._last_row = [np.zeros_like(column[0]) for column in flat_rows]
        keep = self._item.crosses_episodes
        self._writer.end_episode(clear_buffers=not keep, timeout_ms=self._timeout_ms)
        if not keep:
            self._appended = 0
        return self._take_count()

    def _create_stream_item(self) -> None:
        """Creates the stream window (CONTINUE) ending at the row just appended, if any."""
        length, period = self._item.length, self._item.period
        start = self._appended - length
        if start >= 0 and start % period == 0:
            self._create_item(start, length, self._priority)

    def finish(self) -> int:
        """Pads the stream's tail window (CONTINUE) and writes it; returns its items."""
        if not self._item.crosses_episodes or self._last_row is None:
            return 0
        total = self._appended
        starts, _ = items_lib.compute_sequence_windows(
            tf.constant(total), self._item.length, self._item.period, types.EndBehavior.PAD
        )
        tail = [int(s) for s in starts.numpy() if int(s) + self._item.length > total]
        if not tail:
            return 0
        for _ in range(self._item.length - 1):
            self._writer.append(self._last_row)
            self._appended += 1
        for start in tail:
            self._create_item(start, self._item.length, self._priority)
        self._writer.end_episode(timeout_ms=self._timeout_ms)
        return self._take_count()


def _make_engine(client, item, table_names, plans, *, priority, max_in_flight_items, timeout_ms):
    """Returns the StructuredWriter engine when configs can create the items, else the other."""
    if not callable(priority):
        leaves = len(tree.flatten(plans.element_spec['rows']))
        row_structure = [None] * leaves
        configs = [item.make_configs(row_structure, t, float(priority)) for t in table_names]
        if all(c is not None for c in configs):
            flat = [config for table_configs in configs for config in table_configs]
            return _StructuredEngine(
                client, flat, max_in_flight_items=max_in_flight_items, timeout_ms=timeout_ms
            )
    return _TrajectoryEngine(
        client,
        item,
        table_names,
        priority=None if callable(priority) else float(priority),
        max_in_flight_items=max_in_flight_items,
        timeout_ms=timeout_ms,
    )


def _check_options(item, priority, timeout_ms, max_in_flight_items) -> None:
    """Raises ValueError naming the first invalid push option."""
    if not isinstance(item, items_lib.ItemKind):
        raise ValueError(
            f'item={item!r} is not valid; expected items.TwoStep(), items.NStep(n, gamma), '
            'items.Sequence(length, period, end) or items.Episode(max_length).'
        )
    if callable(priority):
        if item.crosses_episodes:
            raise ValueError(
                'A priority function needs per-episode items; CONTINUE sequences '
                'take a constant priority.'
            )
    elif (
        isinstance(priority, bool)
        or not isinstance(priority, int | float)
        or not (np.isfinite(priority) and priority >= 0)
    ):
        raise ValueError(
            f'priority={priority!r} is not valid; expected a finite number >= 0 '
            'or a function of the item batch.'
        )
    for name, value in (('timeout_ms', timeout_ms), ('max_in_flight_items', max_in_flight_items)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f'{name}={value!r} is not valid; expected an integer >= 1.')


@dataclasses.dataclass
class _Pusher:
    """The per-episode loop of a push: validate, check room, write, count."""

    engine: object
    checker: validation.EpisodeChecker
    table_names: list[str]
    mode: types.ValidationMode
    free_slots: int
    allow_eviction: bool
    progress: ProgressFn | None
    stats: PushStats
    address: str

    def _fail(self, index: int, error: Exception) -> PushError:
        written = self.stats.episodes
        items = self.stats.items.get(self.table_names[0], 0)
        return PushError(
            f'Push to {self.address} failed at episode {index}: {error}. {written} episode(s) '
            f'were fully written ({items} items per table); episode {index} may be partly '
            'written (its items up to the failure).',
            episodes_written=written,
            items_written=items,
        )

    def _check_episode(self, index: int, plan: dict | Exception, item) -> bool:
        """Returns whether to write the episode; raises for invalid data in raise mode.

        `plan` is the error raised while reading the episode when it could not be decoded.
        """
        problems = self.checker.find_problems(index, plan)
        if problems:
            if self.mode is types.ValidationMode.SKIP:
                self.stats.skipped_episodes += 1
                return False
            error = InvalidEpisodeError(index, problems)
            error.add_note(f'{self.stats.episodes} episode(s) before it were fully written.')
            error.episodes_written = self.stats.episodes
            raise error
        reason = item.describe_length_problem(int(plan['length']))
        if reason:
            raise EpisodeTooLongError(
                f'Episode {index}: {reason}. {self.stats.episodes} episode(s) were fully '
                'written before it.',
                episodes_written=self.stats.episodes,
                items_written=self.stats.items.get(self.table_names[0], 0),
            )
        return True

    def _check_room(self, index: int, count: int) -> None:
        written = self.stats.items.get(self.table_names[0], 0)
        if self.allow_eviction or written + count <= self.free_slots:
            return
        raise TableTooSmallError(
            f'Table(s) {self.table_names} at {self.address} have room for {self.free_slots} '
            f'more item(s) before evicting any; episode {index} would bring this push to '
            f'{written + count} items. {self.stats.episodes} episode(s) were fully written '
            f'({written} items). Use a larger max_size, or pass allow_eviction=True.',
            episodes_written=self.stats.episodes,
            items_written=written,
        )

    def _add_items(self, count: int) -> None:
        for table in self.table_names:
            self.stats.items[table] = self.stats.items.get(table, 0) + count

    def run(self, plans: tf.data.Dataset, item) -> None:
        index = -1
        for index, plan in validation.read_episodes(plans):
            if not self._check_episode(index, plan, item):
                continue
            self._check_room(index, len(plan['starts']))
            flat_rows = tree.flatten(plan['rows'])
            try:
                count = self.engine.write_episode(flat_rows, plan)
            except (reverb.errors.ReverbError, RuntimeError, ValueError) as e:
                raise self._fail(index, e) from e
            self._add_items(count)
            self.stats.episodes += 1
            self.stats.steps += int(plan['length'])
            if self.progress is not None:
                self.progress(1, int(plan['length']))
        try:
            self._add_items(self.engine.finish())
        except (reverb.errors.ReverbError, RuntimeError, ValueError) as e:
            raise self._fail(index + 1, e) from e


def push(
    episodes: tf.data.Dataset,
    server: str | reverb.Client,
    table: str | list[str],
    *,
    item: items_lib.ItemKind | None = None,
    priority: float | PriorityFn = 1.0,
    on_invalid: types.ValidationMode | str = types.ValidationMode.RAISE,
    policy_info_fn: PolicyInfoFn = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    max_in_flight_items: int = DEFAULT_MAX_IN_FLIGHT_ITEMS,
    allow_eviction: bool = False,
    progress: ProgressFn | None = None,
) -> PushStats:
    """Validates RLDS episodes and writes them into Reverb table(s) as items, fast.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.types`).
      server: A 'host:port' address or a `reverb.Client`.
      table: The table name, or several names (each gets every item).
      item: The item kind (`rlds_reverb.items`); default `items.TwoStep()`.
      priority: A constant >= 0, or `fn(item_batch) -> [N]` computed per episode on the
        batch of its items (`[N, span, ...]` leaves; `[N, ...]` for n-step items).
      on_invalid: `'raise'` (InvalidEpisodeError naming all of the episode's problems) or
        `'skip'` (drop invalid episodes whole; counted in `skipped_episodes`).
      policy_info_fn: Optional `fn(current_step, next_step)` (two-step items).
      timeout_ms: The most any wait on the server may take (connect, flush, end episode).
      max_in_flight_items: The most items pending on the server; the writer waits for
        confirmations before more would be.
      allow_eviction: Whether the push may make the table remove items (default: error).
      progress: Optional `fn(episodes, steps)` called after each episode is written.

    Returns:
      `PushStats`; `items[table]` is exactly the number of items the table gained.

    Raises:
      ValueError: If an option is invalid, or the dataset holds no RLDS steps.
      ReverbConnectionError: If the server does not answer within `timeout_ms`.
      TableError: If a table does not exist (lists those that do).
      SpecMismatchError: If a table signature differs from the items (leaf-by-leaf diff).
      TableTooSmallError: If the items would not fit without eviction.
      InvalidEpisodeError: In `'raise'` mode, at the first invalid episode.
      EpisodeTooLongError: If an episode exceeds `items.Episode(max_length)`.
      PushError: If writing fails part way; says how many episodes were fully written.

    Example:
      >>> stats = rlds_reverb.push(episodes, 'localhost:8000', 'replay',
      ...                          item=items.NStep(3, 0.99), on_invalid='skip')
    """
    started = time.perf_counter()
    item = items_lib.TwoStep() if item is None else item
    _check_options(item, priority, timeout_ms, max_in_flight_items)
    mode = types.as_enum(types.ValidationMode, on_invalid, argument='on_invalid')
    if mode is types.ValidationMode.REPORT:
        raise ValueError("on_invalid='report' writes nothing; call rlds_reverb.validate().")
    step_spec = specs.get_step_spec(episodes)
    validation.check_step_spec(step_spec)  # Before the server is contacted.
    table_names = [table] if isinstance(table, str) else list(table)
    client = connect(server)
    item_spec = item.compute_item_spec(episodes, policy_info_fn=policy_info_fn)
    free_slots = None
    for name in table_names:
        info = tables.fetch_table_info(client, name, timeout_ms=timeout_ms)
        tables.check_signature(info, item_spec)
        slots = tables.count_free_slots(info)
        free_slots = slots if free_slots is None else min(free_slots, slots)
    plans = make_episode_plans(episodes, item, priority=priority, policy_info_fn=policy_info_fn)
    engine = _make_engine(
        client,
        item,
        table_names,
        plans,
        priority=priority,
        max_in_flight_items=max_in_flight_items,
        timeout_ms=timeout_ms,
    )
    stats = PushStats(items=dict.fromkeys(table_names, 0))
    pusher = _Pusher(
        engine=engine,
        checker=validation.EpisodeChecker(step_spec),
        table_names=table_names,
        mode=mode,
        free_slots=free_slots,
        allow_eviction=allow_eviction,
        progress=progress,
        stats=stats,
        address=client.server_address,
    )
    pusher.run(plans, item)
    stats.seconds = time.perf_counter() - started
    return stats


def _find_fast_path(observer) -> tuple[list[str], float] | None:
    """Returns (tables, priority) when `observer` writes plain two-step items, else None.

    True for this package's and TF-Agents' `ReverbAddTrajectoryObserver` with
    `sequence_length=2`, `stride_length=1`, no padding or tails and an empty cache.
    """
    kinds = (observers.ReverbAddTrajectoryObserver, reverb_utils.ReverbAddTrajectoryObserver)
    if type(observer) not in kinds:
        return None
    plain = (
        getattr(observer, '_sequence_length', None) == 2
        and getattr(observer, '_stride_length', None) == 1
        and not getattr(observer, '_pad_end_of_episodes', True)
        and not getattr(observer, '_keep_tails', False)
        and getattr(observer, '_cached_steps', 1) == 0
    )
    return (list(observer._table_names), float(observer._priority)) if plain else None


def push_rlds_to_reverb(
    rlds_data: tf.data.Dataset, reverb_observer, policy_info_fn: PolicyInfoFn = None
) -> int:
    """Pushes RLDS data to Reverb as TF-Agents trajectories (drop-in for TF-Agents').

    Same signature, items and return value as `tf_agents.replay_buffers.rlds_to_reverb.
    push_rlds_to_reverb`. When the observer writes plain two-step items (a
    `ReverbAddTrajectoryObserver` with `sequence_length=2`, `stride_length=1`, no padding),
    the fast `push` path writes to its client and tables; otherwise each trajectory is
    passed to the observer, as TF-Agents does.

    Args:
      rlds_data: An RLDS dataset (see `rlds_reverb.types`).
      reverb_observer: A Reverb observer (TF-Agents' or `rlds_reverb.observers`').
      policy_info_fn: Optional `fn(current_step, next_step) -> policy_info`.

    Returns:
      The number of trajectories (steps) pushed.

    Raises:
      ValueError: If no RLDS steps exist in `rlds_data`, or the observer's table signature
        does not match the data (a `SpecMismatchError` with a leaf-by-leaf diff).
      InvalidArgumentError: If an episode is invalid (`InvalidEpisodeError`).

    Example:
      >>> observer = reverb_utils.ReverbAddTrajectoryObserver(client, 'replay', 2)
      >>> steps = rlds_reverb.push_rlds_to_reverb(episodes, observer)
    """
    expected = specs.add_outer_dim(
        specs.create_trajectory_data_spec(rlds_data, policy_info_fn=policy_info_fn)
    )
    specs.check_specs_match(
        expected,
        reverb_observer.get_table_signature(),
        what='Replay buffer table signature spec should match RLDS data spec',
    )
    fast = _find_fast_path(reverb_observer)
    if fast is not None:
        tables_to_write, priority = fast
        stats = push(
            rlds_data,
            reverb_observer.py_client,
            tables_to_write,
            priority=priority,
            policy_info_fn=policy_info_fn,
            allow_eviction=True,  # TF-Agents does not check table sizes.
        )
        return stats.steps
    steps = 0
    for entry in convert.convert_rlds_to_trajectories(rlds_data, policy_info_fn):
        reverb_observer(entry)
        steps += 1
    return steps
