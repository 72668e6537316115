"""The one episode loop of every write into Reverb: check, make room, write, count, checkpoint.

`push`, `push_resumable`, the Beam writer stage (`rlds_reverb.distribute.writing`), the
multi-process push (`rlds_reverb.write.parallel`) and the command line all write through
`EpisodeLoop`, configured by one `PushOptions`:

* each episode is checked before any of its rows is appended: invalid episodes are skipped
  whole or raise (`on_invalid`), an episode too long for its item kind raises, and the
  table must have room for its items unless `allow_eviction`;
* one writer engine (`rlds_reverb.write.engines`) is opened at the first episode written
  and closed on every path, success or failure;
* `PushStats` counts the episodes, steps and items written, and the episodes skipped; every
  error raised part way says how many episodes were fully written;
* a write may start part way through the dataset (`ResumePoint`, found from the table's
  insert count by `rlds_reverb.write.resume`), completing a partly written episode item by
  item first, and may checkpoint the server every `checkpoint_every` episodes.

`push_episodes` is the whole of a push from a `tf.data` dataset: carry episode fields,
check the tables, find the resume point (`rlds_reverb.write.resume_points`), plan the
episodes and run the loop.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

import reverb
import tensorflow as tf

from rlds_reverb.check import validation
from rlds_reverb.core import specs, types
from rlds_reverb.core.errors import (
    CheckpointError,
    EpisodeTooLongError,
    InvalidEpisodeError,
    PushError,
    ReverbConnectionError,
    TableTooSmallError,
)
from rlds_reverb.serve import checkpoints, table_info
from rlds_reverb.transform import carry
from rlds_reverb.transform import plans as plans_lib
from rlds_reverb.transform.plans import EpisodePlan
from rlds_reverb.write import engines
from rlds_reverb.write.options import PushOptions
from rlds_reverb.write.resume_points import (
    ResumePoint,
    count_resume_point,
    write_remaining_items,
)

__all__ = [
    'EpisodeLoop',
    'ProgressFn',
    'PushStats',
    'push_episodes',
]

ProgressFn = types.EpisodeProgressFn  # fn(episodes, steps) after each episode written.

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


_START = ResumePoint(0)


# --- The loop --------------------------------------------------------------------------------


class EpisodeLoop:
    """Writes checked episodes, in order, through one writer engine; counts what it wrote.

    Args:
      client: The Reverb client.
      table_names: The tables that get every item.
      options: The write options.
      step_spec: The dataset's step spec (validation of each episode).
      free_slots: Items the tables take before evicting any (`table_info.count_free_slots`).
      progress: Optional `fn(episodes, steps)` called after each episode is written.
      start: Where the write starts in the dataset (its episodes are numbered from there);
        `start.items` items of that episode are already in the (single) table.
      restate_errors: Whether errors part way also say what of the whole dataset is written
        (resumable writes, whose counts start at `start`).

    Raises:
      SpecMismatchError: If flags are not bool, or rewards/discounts not numeric.
    """

    def __init__(
        self,
        client: reverb.Client,
        table_names: list[str],
        options: PushOptions,
        *,
        step_spec: dict,
        free_slots: int,
        progress: ProgressFn | None = None,
        start: ResumePoint = _START,
        restate_errors: bool = False,
    ):
        self.client = client
        self.table_names = list(table_names)
        self.options = options
        self.free_slots = free_slots
        self.start = start
        self.stats = PushStats(items=dict.fromkeys(self.table_names, 0))
        self._checker = validation.EpisodeChecker(step_spec)
        self._progress = progress
        self._restate = restate_errors
        self._address = client.server_address
        self._engine: engines.WriterEngine | None = None
        self._since_checkpoint = 0
        if start.items and len(self.table_names) != 1:
            raise ValueError('Resuming part way through an episode needs exactly one table.')

    @property
    def items_written(self) -> int:
        """Items this loop wrote into each table."""
        return self.stats.items.get(self.table_names[0], 0)

    @property
    def episodes_passed(self) -> int:
        """Episodes written or skipped by this loop."""
        return self.stats.episodes + self.stats.skipped_episodes

    # --- Refusals before an episode ---

    def _check_episode(
        self, index: int, plan: EpisodePlan | validation.UnreadableEpisode
    ) -> EpisodePlan | None:
        """Returns the plan to write, None to skip it; raises for invalid data in raise mode.

        `plan` is an `UnreadableEpisode` when the episode could not be decoded.
        """
        summary: validation.EpisodeSummary | validation.UnreadableEpisode = (
            plan if isinstance(plan, validation.UnreadableEpisode) else plan.summary
        )
        problems = self._checker.find_problems(index, summary)
        # An unreadable episode has a problem.
        if problems or isinstance(plan, validation.UnreadableEpisode):
            if self.options.on_invalid is types.ValidationMode.SKIP:
                self.stats.skipped_episodes += 1
                return None
            raise InvalidEpisodeError(index, problems, episodes_written=self.stats.episodes)
        reason = self.options.item.describe_length_problem(plan.length)
        if reason:
            raise EpisodeTooLongError(
                f'Episode {index}: {reason}. {self.stats.episodes} episode(s) were fully '
                'written before it.',
                episodes_written=self.stats.episodes,
                items_written=self.items_written,
            )
        return plan

    def _check_room(self, index: int, count: int) -> None:
        written = self.items_written
        if self.options.allow_eviction or written + count <= self.free_slots:
            return
        raise TableTooSmallError(
            f'Table(s) {self.table_names} at {self._address} have room for {self.free_slots} '
            f'more item(s) before evicting any; episode {index} would bring this push to '
            f'{written + count} items. {self.stats.episodes} episode(s) were fully written '
            f'({written} items). Use a larger max_size, or pass allow_eviction=True.',
            episodes_written=self.stats.episodes,
            items_written=written,
        )

    def check_room_ahead(self, needed: int, *, advice: str) -> None:
        """Refuses, before writing anything, `needed` items the tables have no room for.

        Raises:
          TableTooSmallError: If they do not fit (unless `allow_eviction`).
        """
        if self.options.allow_eviction or needed <= self.free_slots:
            return
        names = ', '.join(repr(t) for t in self.table_names)
        raise TableTooSmallError(
            f'Table {names} has room for {self.free_slots} more item(s) before evicting any; '
            f'{advice} needs {needed} more. Use a larger max_size, more servers, or '
            'allow_eviction=True.',
            episodes_written=0,
            items_written=0,
        )

    # --- Writing ---

    def _fail(self, index: int, error: Exception) -> PushError:
        written = self.stats.episodes
        items = self.items_written
        return PushError(
            f'Push to {self._address} failed at episode {index}: {str(error).rstrip(".")}. '
            f'{written} episode(s) were fully written ({items} items per table); episode '
            f'{index} may be partly written (its items up to the failure).',
            episodes_written=written,
            items_written=items,
        )

    def _open_engine(self, row_structure: types.Nest) -> engines.WriterEngine:
        if self._engine is None:
            self._engine = engines.make_engine(
                self.client,
                self.options.item,
                self.table_names,
                row_structure=row_structure,
                priority=self.options.constant_priority,
                kind=self.options.engine,
                max_in_flight_items=self.options.max_in_flight_items,
                timeout_ms=self.options.timeout_ms,
            )
        return self._engine

    def _write(self, index: int, plan: EpisodePlan, held: int) -> None:
        """Writes the episode (its items the table lacks, when it holds `held`); counts it."""
        self._check_room(index, plan.num_items - held)
        engine = None
        if not held:
            engine = self._engine or self._open_engine(plan.rows)
        try:
            if engine is None:
                table = self.table_names[0]
                count = write_remaining_items(self.client, table, plan, held, options=self.options)
            else:
                count = engine.write_episode(plan)
        except _WRITE_ERRORS as e:
            raise self._fail(index, e) from e
        self._add_items(count)
        self.stats.episodes += 1
        self.stats.steps += plan.length
        if self._progress is not None:
            self._progress(1, plan.length)

    def _add_items(self, count: int) -> None:
        for table in self.table_names:
            self.stats.items[table] += count

    def _finish_engine(self, next_index: int) -> None:
        """Writes what the end of the stream completes and lets go of the writer."""
        if self._engine is None:
            return
        try:
            self._add_items(self._engine.finish())
        except _WRITE_ERRORS as e:
            raise self._fail(next_index, e) from e
        finally:
            self.close()

    def close(self) -> None:
        """Lets go of the writer (bounded in time); the loop opens a new one if it goes on."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    def _episode_done(self, next_index: int) -> None:
        every = self.options.checkpoint_every
        self._since_checkpoint += 1
        if every and self._since_checkpoint >= every:
            self._finish_engine(next_index)  # A checkpoint holds whole episodes only.
            self._checkpoint(next_index)

    def _checkpoint(self, next_index: int) -> None:
        """Checkpoints the server; a failure is a `PushError` saying what is fully written."""
        self._since_checkpoint = 0
        try:
            checkpoints.checkpoint_server(self.client)
        except (CheckpointError, ReverbConnectionError) as e:
            raise PushError(
                f'{e} [episodes 0..{next_index - 1} of the dataset are fully written; those '
                'after the latest checkpoint are lost if the server restarts from it; run the '
                'resumable push again to continue.]',
                episodes_written=next_index,
                items_written=sum(self.stats.items.values()),
                counts_from_dataset_start=True,  # Not restated by `run`.
            ) from e

    def _restated(self, error: PushError) -> PushError:
        """Returns `error` restated with counts from episode 0 of the dataset."""
        first = self.start.episode
        written = first + self.episodes_passed
        return type(error)(
            f'{error} [This push started at episode {first} of the dataset: episodes '
            f'0..{written - 1} of the dataset are fully written; run the resumable push '
            f'again to continue from episode {written}.]',
            episodes_written=written,
            items_written=sum(self.stats.items.values()),
            counts_from_dataset_start=True,
        )

    def run(
        self,
        indexed_plans: Iterable[tuple[int, EpisodePlan | validation.UnreadableEpisode]],
        *,
        row_structure: types.Nest = None,
    ) -> PushStats:
        """Writes the episodes `(index, plan)` in order; returns the stats of this loop.

        A plan may be an `UnreadableEpisode` (`validation.read_episodes`): an episode that
        could not be decoded, so invalid. The writer is closed on every path.

        Args:
          indexed_plans: The episodes' indices in the dataset and their plans, in order.
          row_structure: The nest of an episode's rows (their spec); when given, the writer
            is opened before the first episode (an engine that cannot write the items fails
            before anything is read).

        Raises:
          InvalidEpisodeError: In raise mode, at the first invalid episode.
          EpisodeTooLongError: If an episode exceeds the item kind's length.
          TableTooSmallError: If the items would not fit without eviction.
          PushError: If writing fails part way (also when the server dies, or a checkpoint
            fails); says how many episodes and items were fully written.
        """
        try:
            if row_structure is not None:
                self._open_engine(row_structure)
            self._run(indexed_plans)
        except PushError as e:
            if not self._restate or e.counts_from_dataset_start:
                raise
            raise self._restated(e) from e
        finally:
            self.close()
        return self.stats

    def _run(self, indexed_plans) -> None:
        held, index = self.start.items, self.start.episode - 1
        for index, element in indexed_plans:
            plan = self._check_episode(index, element)
            if plan is not None:
                self._write(index, plan, held)
            held = 0
            self._episode_done(index + 1)
        self._finish_engine(index + 1)
        if self.options.checkpoint_every and self._since_checkpoint:
            self._checkpoint(index + 1)


# --- A push from a dataset -------------------------------------------------------------------


def push_episodes(
    episodes: tf.data.Dataset,
    server: str | reverb.Client,
    table_names: list[str],
    options: PushOptions,
    *,
    progress: ProgressFn | None = None,
    start: ResumePoint | None = None,
) -> PushStats:
    """Writes an RLDS dataset into Reverb table(s) through `EpisodeLoop`: a whole push.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`), from its first episode
        (ids count from it, also when the write starts later).
      server: A 'host:port' address or a `reverb.Client`.
      table_names: The tables that get every item.
      options: The write options (`options.resume`: start where the table's insert count
        says, unless `start` is given).
      progress: Optional `fn(episodes, steps)` called after each episode is written.
      start: Where to start (the rest of a partly written episode first); None: at episode
        0, or where the insert count says with `options.resume`.

    Returns:
      `PushStats` of what this call wrote; `items[table]` is what each table gained.

    Raises:
      As `rlds_reverb.push`, and `ResumeError` if the table holds more items than the
      dataset gives (with `options.resume`).
    """
    started = time.perf_counter()
    episodes = carry.carry_episode_fields(episodes, options.episode_fields, add_ids=options.add_ids)
    step_spec = specs.get_step_spec(episodes)
    validation.check_step_spec(step_spec)  # Before the server is contacted.
    client = table_info.connect(server)
    item_spec = options.item.compute_signature(episodes, policy_info_fn=options.policy_info_fn)
    infos = table_info.fetch_tables_info(client, table_names, timeout_ms=options.timeout_ms)
    for info in infos.values():
        table_info.check_signature(info, item_spec, found='the items pushed')
    free_slots = min(table_info.count_free_slots(info) for info in infos.values())
    resumable = options.resume or options.checkpoint_every is not None or start is not None
    if start is None and options.resume:
        if len(table_names) != 1:
            raise ValueError(f'resume=True needs one table; got {table_names}.')
        inserted = table_info.count_inserted(infos[table_names[0]])
        start, _ = count_resume_point(episodes, inserted, options.item)
    start = start or ResumePoint(0)
    part = episodes.skip(start.episode) if start.episode else episodes
    plans = plans_lib.make_episode_plans(
        part, options.item, priority=options.priority, policy_info_fn=options.policy_info_fn
    )
    writer = EpisodeLoop(
        client,
        table_names,
        options,
        step_spec=step_spec,
        free_slots=free_slots,
        progress=progress,
        start=start,
        restate_errors=resumable,
    )
    indexed = ((start.episode + i, plan) for i, plan in validation.read_episodes(plans))
    stats = writer.run(indexed, row_structure=plans.element_spec.rows)
    stats.seconds = time.perf_counter() - started
    return stats
