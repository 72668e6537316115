"""Fast pushes of RLDS episodes into Reverb tables, and TF-Agents' drop-in `push_rlds_to_reverb`.

Each episode is validated and turned into an `EpisodePlan` (rows, item windows, priorities)
as whole tensors in a parallel, prefetched `tf.data` map (`rlds_reverb.transform.plans`);
Python then only appends rows to a Reverb writer (`rlds_reverb.write.engines`). An episode
is written whole: its items are created, then the writer's `end_episode` waits until the
server confirms them. If anything fails part way, `PushError` says exactly how many
episodes were fully written.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import reverb
import tensorflow as tf
import tree

from rlds_reverb.check import validation
from rlds_reverb.core import checks, specs, types
from rlds_reverb.core.errors import (
    EpisodeTooLongError,
    InvalidEpisodeError,
    PushError,
    ReverbConnectionError,
    SpecMismatchError,
    TableTooSmallError,
)
from rlds_reverb.core.specs import PolicyInfoFn
from rlds_reverb.serve import table_info
from rlds_reverb.transform import carry, convert
from rlds_reverb.transform import items as items_lib
from rlds_reverb.transform.plans import EpisodePlan, PriorityFn, make_episode_plans
from rlds_reverb.write import engines, observers

__all__ = [
    'DEFAULT_MAX_IN_FLIGHT_ITEMS',
    'DEFAULT_TIMEOUT_MS',
    'ProgressFn',
    'PushStats',
    'push',
    'push_rlds_to_reverb',
]

ProgressFn = Callable[[int, int], None]

DEFAULT_TIMEOUT_MS = 60_000
# Below the 50 pending items at which Reverb logs "pending items is alarmingly high" on every
# tenth item; as fast here as 1,000 (benchmarks/push.py).
DEFAULT_MAX_IN_FLIGHT_ITEMS = 48
# What a writer raises when the server fails it part way (a dead server: ReverbConnectionError).
_WRITE_ERRORS = (reverb.errors.ReverbError, ReverbConnectionError, RuntimeError, ValueError)


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
    checks.check_int_at_least(timeout_ms, 1, argument='timeout_ms')
    checks.check_int_at_least(max_in_flight_items, 1, argument='max_in_flight_items')


@dataclasses.dataclass
class _Pusher:
    """The per-episode loop of a push: validate, check room, write, count."""

    engine: engines.WriterEngine
    checker: validation.EpisodeChecker
    item: items_lib.ItemKind
    table_names: list[str]
    mode: types.ValidationMode
    free_slots: int
    allow_eviction: bool
    progress: ProgressFn | None
    stats: PushStats
    address: str

    def _items_written(self) -> int:
        return self.stats.items.get(self.table_names[0], 0)

    def _fail(self, index: int, error: Exception) -> PushError:
        written = self.stats.episodes
        items = self._items_written()
        return PushError(
            f'Push to {self.address} failed at episode {index}: {str(error).rstrip(".")}. '
            f'{written} episode(s) were fully written ({items} items per table); episode '
            f'{index} may be partly written (its items up to the failure).',
            episodes_written=written,
            items_written=items,
        )

    def _check_episode(self, index: int, plan: EpisodePlan | Exception) -> bool:
        """Returns whether to write the episode; raises for invalid data in raise mode.

        `plan` is the error raised while reading the episode when it could not be decoded.
        """
        problems = self.checker.find_problems(
            index, plan if isinstance(plan, Exception) else plan.summary
        )
        if problems:
            if self.mode is types.ValidationMode.SKIP:
                self.stats.skipped_episodes += 1
                return False
            error = InvalidEpisodeError(index, problems)
            error.add_note(f'{self.stats.episodes} episode(s) before it were fully written.')
            error.episodes_written = self.stats.episodes
            raise error
        reason = self.item.describe_length_problem(plan.length)
        if reason:
            raise EpisodeTooLongError(
                f'Episode {index}: {reason}. {self.stats.episodes} episode(s) were fully '
                'written before it.',
                episodes_written=self.stats.episodes,
                items_written=self._items_written(),
            )
        return True

    def _check_room(self, index: int, count: int) -> None:
        written = self._items_written()
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

    def run(self, plans: tf.data.Dataset) -> None:
        index = -1
        for index, plan in validation.read_episodes(plans):
            if not self._check_episode(index, plan):
                continue
            self._check_room(index, plan.num_items)
            try:
                count = self.engine.write_episode(plan)
            except _WRITE_ERRORS as e:
                raise self._fail(index, e) from e
            self._add_items(count)
            self.stats.episodes += 1
            self.stats.steps += plan.length
            if self.progress is not None:
                self.progress(1, plan.length)
        try:
            self._add_items(self.engine.finish())
        except _WRITE_ERRORS as e:
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
    engine: engines.EngineKind | str = engines.EngineKind.AUTO,
    progress: ProgressFn | None = None,
    episode_fields: Sequence[str] = (),
    add_ids: bool = False,
) -> PushStats:
    """Validates RLDS episodes and writes them into Reverb table(s) as items, fast.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).
      server: A 'host:port' address or a `reverb.Client`.
      table: The table name, or several names (each gets every item).
      item: The item kind (`rlds_reverb.items`); default `items.TwoStep()`.
      priority: A constant >= 0, or `fn(item_batch) -> [N]` computed per episode on the
        batch of its items (`[N, span, ...]` leaves; `[N, ...]` for n-step items).
      on_invalid: `'raise'` (InvalidEpisodeError naming all of the episode's problems) or
        `'skip'` (drop invalid episodes whole; counted in `skipped_episodes`).
      policy_info_fn: Optional `fn(current_step, next_step)` (two-step items).
      timeout_ms: The most any wait on a live server may take (server info, flush, end
        episode). A dead server is named sooner: nothing listening at once, a host that
        does not answer within `table_info.CONNECT_TIMEOUT_MS`, and a server that dies
        mid-push within about a second (`engines.wait_on_server`).
      max_in_flight_items: The most items pending on the server; the writer waits for
        confirmations before more would be.
      allow_eviction: Whether the push may make the table remove items (default: error).
      engine: Which Reverb writer (`engines.EngineKind`); `'auto'` picks the fastest that
        can create the items. Both write the same items.
      progress: Optional `fn(episodes, steps)` called after each episode is written.
      episode_fields: Episode-level fields (episode metadata, outside `steps`) to copy into
        every item of their episode. By default none is: items hold step fields only.
      add_ids: Also give every item the `episode_id` (int64, the episode's position in
        `episodes`) and `step_index` (int64) of its steps, which `rlds_reverb.export`
        needs to rebuild episodes from sequence tables, and from two-step tables that
        several writers filled at once (one writer's two-step items export without
        ids, from their insertion order). Like other extra
        step fields, carried fields go into `policy_info` of two-step items.

    Returns:
      `PushStats`; `items[table]` is exactly the number of items the table gained.

    Raises:
      ValueError: If an option is invalid, or the dataset holds no RLDS steps, or an
        `episode_fields` name is not an episode-level field (or is already a step field).
      ReverbConnectionError: If nothing answers at the server's address, or the server
        does not answer within `timeout_ms`; names the address.
      TableError: If a table does not exist (lists those that do).
      SpecMismatchError: If a table signature differs from the items (leaf-by-leaf diff).
      TableTooSmallError: If the items would not fit without eviction.
      InvalidEpisodeError: In `'raise'` mode, at the first invalid episode.
      EpisodeTooLongError: If an episode exceeds `items.Episode(max_length)`.
      PushError: If writing fails part way, also when the server dies; says how many
        episodes and items were fully written. The writer is closed first.

    Example:
      >>> stats = rlds_reverb.push(episodes, 'localhost:8000', 'replay',
      ...                          item=items.NStep(3, 0.99), on_invalid='skip')
    """
    started = time.perf_counter()
    item = items_lib.TwoStep() if item is None else item
    _check_options(item, priority, timeout_ms, max_in_flight_items)
    mode = types.parse_on_invalid(on_invalid, function='push')
    if mode is types.ValidationMode.REPORT:
        raise ValueError("on_invalid='report' writes nothing; call rlds_reverb.validate().")
    engine = types.as_enum(engines.EngineKind, engine, argument='engine')
    episodes = carry.carry_episode_fields(episodes, episode_fields, add_ids=add_ids)
    step_spec = specs.get_step_spec(episodes)
    validation.check_step_spec(step_spec)  # Before the server is contacted.
    table_names = [table] if isinstance(table, str) else list(table)
    client = table_info.connect(server)
    item_spec = item.compute_item_spec(episodes, policy_info_fn=policy_info_fn)
    infos = table_info.fetch_tables_info(client, table_names, timeout_ms=timeout_ms)
    for info in infos.values():
        table_info.check_signature(info, item_spec, found='the items pushed')
    free_slots = min(table_info.count_free_slots(info) for info in infos.values())
    plans = make_episode_plans(episodes, item, priority=priority, policy_info_fn=policy_info_fn)
    writer_engine = engines.make_engine(
        client,
        item,
        table_names,
        num_columns=len(tree.flatten(plans.element_spec.rows)),
        priority=None if callable(priority) else float(priority),
        kind=engine,
        max_in_flight_items=max_in_flight_items,
        timeout_ms=timeout_ms,
    )
    stats = PushStats(items=dict.fromkeys(table_names, 0))
    pusher = _Pusher(
        engine=writer_engine,
        checker=validation.EpisodeChecker(step_spec),
        item=item,
        table_names=table_names,
        mode=mode,
        free_slots=free_slots,
        allow_eviction=allow_eviction,
        progress=progress,
        stats=stats,
        address=client.server_address,
    )
    with writer_engine:  # Closed on every path: no writer is left to its destructor.
        pusher.run(plans)
    stats.seconds = time.perf_counter() - started
    return stats


# TF-Agents' message when the table signature does not match the data (`str(e)` of ours).
_TF_AGENTS_SIGNATURE_MESSAGE = 'Replay buffer table signature spec should match RLDS data spec.'


def _describe_signature_mismatch(signature, expected) -> SpecMismatchError:
    """Returns the error for a table signature that matches neither accepted spec.

    `str(error)` is TF-Agents' sentence; the leaf-by-leaf diff (or, for a table without a
    signature, what to do) is a note and `error.differences`.
    """
    error = SpecMismatchError(_TF_AGENTS_SIGNATURE_MESSAGE)
    if signature is None:
        error.add_note(
            "The observer's table has no signature; push_rlds_to_reverb needs one, as "
            "TF-Agents' does: create the table with signature="
            'tables.signature_for(items.TwoStep(), episodes), or call rlds_reverb.push.'
        )
        return error
    error.differences = specs.diff_specs(signature, expected)
    error.add_note(
        'Specs differ (table signature vs data):\n'
        + '\n'.join(f'  {line}' for line in error.differences)
    )
    return error


def _choose_policy_info_fn(
    signature, rlds_data: tf.data.Dataset, policy_info_fn: PolicyInfoFn, extra_fields
) -> PolicyInfoFn:
    """Returns the policy info function to write with: the table signature decides.

    Without `policy_info_fn`, the signature must match the data's spec. With it: a signature
    holding its policy info gets it; a signature matching the spec without policy info (as
    TF-Agents checks it) gets items without it, and a `UserWarning` says so, since writing
    it would make the table unreadable (docs/semantics.md §3).
    """
    with specs.use_tf_agents_messages():
        without = specs.add_outer_dim(
            specs.create_trajectory_data_spec(rlds_data, extra_fields=extra_fields)
        )
    if policy_info_fn is None:
        if signature is None or specs.diff_specs(signature, without):
            raise _describe_signature_mismatch(signature, without)
        return None
    with_info = specs.add_outer_dim(
        specs.create_trajectory_data_spec(
            rlds_data, policy_info_fn=policy_info_fn, extra_fields=extra_fields
        )
    )
    if signature is not None and not specs.diff_specs(signature, with_info):
        return policy_info_fn
    if signature is not None and not specs.diff_specs(signature, without):
        warnings.warn(
            "push_rlds_to_reverb: the observer's table signature declares no policy_info, so "
            "policy_info_fn's output is not written (TF-Agents writes it anyway, and the "
            'table can then not be read by its signature). To keep it, create the table with '
            'signature=tables.signature_for(items.TwoStep(), episodes, policy_info_fn=fn).',
            UserWarning,
            stacklevel=3,
        )
        return None
    raise _describe_signature_mismatch(signature, with_info)


def push_rlds_to_reverb(
    rlds_data: tf.data.Dataset,
    reverb_observer,
    policy_info_fn: PolicyInfoFn = None,
    *,
    extra_fields: types.ExtraFields | str = types.ExtraFields.DROP,
) -> int:
    """Pushes RLDS data to Reverb as TF-Agents trajectories (drop-in for TF-Agents').

    Same signature, items and return value as `tf_agents.replay_buffers.rlds_to_reverb.
    push_rlds_to_reverb`. When the observer writes plain two-step items (a
    `ReverbAddTrajectoryObserver` with `sequence_length=2`, `stride_length=1`, no padding),
    the fast `push` path writes to its client and tables; otherwise each trajectory is
    passed to the observer, as TF-Agents does.

    The table signature decides what is written, so the table stays readable: with a
    `policy_info_fn`, a signature that declares its policy info gets it, and a signature
    without policy info (TF-Agents' check) gets items without it, with a `UserWarning`
    (TF-Agents writes it there, and its items no longer match the signature).

    Args:
      rlds_data: An RLDS dataset (see `rlds_reverb.core.types`).
      reverb_observer: A Reverb observer (TF-Agents' or `rlds_reverb.observers`').
      policy_info_fn: Optional `fn(current_step, next_step) -> policy_info`.
      extra_fields: Without `policy_info_fn`: `'drop'` the extra step fields (default, as
        TF-Agents) or write them as `'policy_info'` (`types.ExtraFields`; the table
        signature must then declare them).

    Returns:
      The number of trajectories (steps) pushed.

    Raises:
      ValueError: If no RLDS steps exist in `rlds_data`, or the observer's table signature
        does not match the data (a `SpecMismatchError`: `str(e)` is TF-Agents' sentence, the
        leaf-by-leaf diff is a note and `e.differences`), or `extra_fields` is not valid.
      InvalidArgumentError: If an episode is invalid (`InvalidEpisodeError`).

    Example:
      >>> observer = reverb_utils.ReverbAddTrajectoryObserver(client, 'replay', 2)
      >>> steps = rlds_reverb.push_rlds_to_reverb(episodes, observer)
    """
    extra_fields = types.as_enum(types.ExtraFields, extra_fields, argument='extra_fields')
    policy_info_fn = _choose_policy_info_fn(
        reverb_observer.get_table_signature(), rlds_data, policy_info_fn, extra_fields
    )
    fast = observers.describe_two_step_writes(reverb_observer)
    if fast is not None:
        stats = push(
            rlds_data,
            reverb_observer.py_client,
            fast.table_names,
            item=items_lib.TwoStep(extra_fields=extra_fields),
            priority=fast.priority,
            policy_info_fn=policy_info_fn,
            allow_eviction=True,  # TF-Agents does not check table sizes.
        )
        return stats.steps
    steps = 0
    trajectories = convert.convert_rlds_to_trajectories(
        rlds_data, policy_info_fn, extra_fields=extra_fields
    )
    for entry in trajectories:
        reverb_observer(entry)
        steps += 1
    return steps
