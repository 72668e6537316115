"""`PushOptions`: every option of a write into Reverb, defined once with its default and check.

`push`, `push_resumable`, `push_with_beam`, `seed_server`, the multi-process push and the
command line all take one `PushOptions`, or its fields as keyword overrides
(`merge_options`), and hand it to the one episode loop (`rlds_reverb.write.loop`), so an
option means the same, is checked the same and fails with the same message on every path.
Each field also says how the command line gives it (`Flag`, in the field's metadata):
`rlds-reverb push` and `serve` build their flags and their `PushOptions` from the fields, so
a new option reaches every path from here. The options that need one writer are checked
in one place too (`check_writers`).

The value is frozen: `dataclasses.replace(options, ...)` makes a changed copy, and a caller's
value is never changed. This module loads without TensorFlow (the command line's parser
reads it); the item kinds load when an options value is made.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rlds_reverb.core import checks, flags, timeouts, types
from rlds_reverb.core.flags import Flag

if TYPE_CHECKING:
    from rlds_reverb.core.specs import PolicyInfoFn
    from rlds_reverb.transform import items as items_lib
    from rlds_reverb.transform.plans import PriorityFn

__all__ = [
    'DEFAULT_MAX_IN_FLIGHT_ITEMS',
    'DEFAULT_TIMEOUT_MS',
    'EngineKind',
    'Flag',
    'PushOptions',
    'Writers',
    'check_writers',
    'merge_options',
]

DEFAULT_TIMEOUT_MS = timeouts.PUSH_MS
# Below the 50 pending items at which Reverb logs "pending items is alarmingly high" on every
# tenth item; as fast here as 1,000 (benchmarks/push.py).
DEFAULT_MAX_IN_FLIGHT_ITEMS = 48


class EngineKind(enum.Enum):
    """Which Reverb writer a push uses (`rlds_reverb.write.engines`).

    AUTO: the StructuredWriter when configs can create the items (two-step and dropped-tail
      sequence items with a constant priority), else the TrajectoryWriter. N-step items use
      the TrajectoryWriter: under the StructuredWriter's auto-tuned chunks the server holds
      about 10% more per step (benchmarks/README.md).
    STRUCTURED: the StructuredWriter (an error for items it cannot create).
    TRAJECTORY: the TrajectoryWriter, which writes every item kind.
    """

    AUTO = 'auto'
    STRUCTURED = 'structured'
    TRAJECTORY = 'trajectory'


def _flag(help: str, **how: Any) -> dict[str, Flag]:
    """Returns a field's metadata: how the command line gives the option (`Flag`)."""
    return flags.make_flag(help, **how)


def _make_two_step() -> items_lib.ItemKind:
    from rlds_reverb.transform import items as items_lib  # Late: items load TensorFlow.

    return items_lib.TwoStep()


@dataclasses.dataclass(frozen=True, kw_only=True)
class PushOptions:
    """How episodes are written into Reverb: one value for every write path.

    Attributes:
      item: The item kind (`rlds_reverb.items`); default (or None) `items.TwoStep()`. On the
        command line: `--item` and its parameters (`items.parse_item`).
      priority: A constant >= 0, or `fn(item_batch) -> [N]` computed per episode on the
        batch of its items (`[N, span, ...]` leaves; `[N, ...]` for n-step items).
      on_invalid: `'raise'` (`InvalidEpisodeError` naming all of the episode's problems) or
        `'skip'` (drop invalid episodes whole; counted in `skipped_episodes`).
      policy_info_fn: Optional `fn(current_step, next_step)` (two-step items).
      timeout_ms: The most any wait on a live server may take (server info, flush, end
        episode). A dead server is named sooner: nothing listening at once, a host that
        does not answer within `table_info.CONNECT_TIMEOUT_MS`, and a server that dies
        mid-push within about a second (`engines.wait_on_server`).
      max_in_flight_items: The most items pending on the server per writer; the writer
        waits for confirmations before more would be.
      allow_eviction: Whether the write may make the table remove items (default: error).
      engine: Which Reverb writer (`EngineKind`); `'auto'` picks the fastest that can
        create the items. Both write the same items.
      episode_fields: Episode-level fields (episode metadata, outside `steps`) copied into
        every item of their episode; by default items hold step fields only. Like other
        extra step fields, they go into `policy_info` of two-step items.
      add_ids: Also give every item the `episode_id` (int64, the episode's position in the
        pushed dataset) and `step_index` (int64) of its steps, which `rlds_reverb.export`
        needs to rebuild episodes from sequence tables, and from two-step tables that
        several writers filled at once (one writer's two-step items export without ids,
        from their insertion order).
      resume: Start at the first item the table lacks, found from its insert count (the
        table must hold a prefix of this push's items: `rlds_reverb.write.resume`).
      checkpoint_every: Checkpoint the server after every this many episodes (None: never).

    Raises:
      ValueError: Naming the first invalid option and what is expected.

    Example:
      >>> options = PushOptions(item=items.NStep(3, 0.99), on_invalid='skip')
      >>> rlds_reverb.push(episodes, 'localhost:8000', 'replay', options=options)
    """

    item: items_lib.ItemKind = dataclasses.field(default_factory=_make_two_step)
    priority: float | PriorityFn = dataclasses.field(
        default=1.0, metadata=_flag('the priority of every item', type=float)
    )
    on_invalid: types.ValidationMode | str = dataclasses.field(
        default=types.ValidationMode.RAISE,
        metadata=_flag(
            'an invalid episode stops the push (raise) or is left out whole (skip)',
            choices=tuple(
                m.value for m in types.ValidationMode if m is not types.ValidationMode.REPORT
            ),
        ),
    )
    policy_info_fn: PolicyInfoFn = None
    timeout_ms: int = dataclasses.field(
        default=DEFAULT_TIMEOUT_MS,
        metadata=_flag('the most any wait on the server may take, in ms', type=int),
    )
    max_in_flight_items: int = dataclasses.field(
        default=DEFAULT_MAX_IN_FLIGHT_ITEMS,
        metadata=_flag('the most items pending on the server per writer', type=int),
    )
    allow_eviction: bool = dataclasses.field(
        default=False, metadata=_flag('let the table remove items to make room (default: error)')
    )
    engine: EngineKind | str = dataclasses.field(
        default=EngineKind.AUTO,
        metadata=_flag(
            'the Reverb writer (auto: the fastest that can create the items)',
            choices=tuple(m.value for m in EngineKind),
        ),
    )
    episode_fields: Sequence[str] = dataclasses.field(
        default=(),
        metadata=_flag(
            'an episode-level field to carry into every item (repeatable)',
            name='--episode-field',
            repeat=True,
        ),
    )
    add_ids: bool = dataclasses.field(
        default=False,
        metadata=_flag(
            'add episode_id and step_index to every item (what export needs for two-step '
            'and sequence items)'
        ),
    )
    resume: bool = dataclasses.field(
        default=False,
        metadata=_flag(
            'start at the first episode the table lacks (from its insert count)', push_only=True
        ),
    )
    checkpoint_every: int | None = dataclasses.field(
        default=None,
        metadata=_flag(
            'checkpoint the server after every N episodes (so a restart can --resume)',
            type=int,
            push_only=True,
        ),
    )

    def __post_init__(self) -> None:
        # Normalized once here, so every path sees members and tuples, never strings.
        set_field = object.__setattr__
        set_field(self, 'item', _check_item(self.item))
        _check_priority(self.priority, self.item)
        checks.check_int_at_least(self.timeout_ms, 1, argument='timeout_ms')
        checks.check_int_at_least(self.max_in_flight_items, 1, argument='max_in_flight_items')
        mode = types.as_enum(types.ValidationMode, self.on_invalid, argument='on_invalid')
        if mode is types.ValidationMode.REPORT:
            raise ValueError("on_invalid='report' writes nothing; call rlds_reverb.validate().")
        set_field(self, 'on_invalid', mode)
        set_field(self, 'engine', types.as_enum(EngineKind, self.engine, argument='engine'))
        set_field(self, 'episode_fields', _check_names(self.episode_fields))
        for name in ('allow_eviction', 'add_ids', 'resume'):
            set_field(self, name, checks.check_bool(getattr(self, name), argument=name))
        if self.checkpoint_every is not None:
            checks.check_int_at_least(self.checkpoint_every, 1, argument='checkpoint_every')

    @property
    def constant_priority(self) -> float | None:
        """The constant priority, or None when a function gives per-item priorities."""
        return None if callable(self.priority) else float(self.priority)

    @property
    def carries_fields(self) -> bool:
        """Whether items get episode fields or ids beyond the step fields."""
        return bool(self.episode_fields) or self.add_ids

    @staticmethod
    def flag_of(field: dataclasses.Field) -> Flag | None:
        """Returns how the command line gives the option `field`, None if it does not.

        Example:
          >>> [PushOptions.flag_of(f) for f in dataclasses.fields(PushOptions)]
        """
        return flags.find_flag(field)

    @staticmethod
    def flag_name(option: str) -> str:
        """Returns the command line's flag for the option named `option` (`--timeout-ms`).

        Example:
          >>> PushOptions.flag_name('episode_fields')
          '--episode-field'
        """
        return flags.name_flag(_FIELDS[option])


_FIELDS = {field.name: field for field in dataclasses.fields(PushOptions)}


def merge_options(options: PushOptions | None, **overrides: Any) -> PushOptions:
    """Returns the options of an entry point that takes `options=` and keyword overrides.

    Every write entry point (`push`, `push_resumable`, `push_with_beam`, `seed_server`)
    takes `options=` and any option of `PushOptions` by name as a keyword. Without
    `options`, the keywords make a new `PushOptions`; with it, a keyword must be at its
    default (the option would be given twice) and `options` itself is returned, unchanged.

    Raises:
      TypeError: If a keyword is not an option of `PushOptions` (lists those that are).
      ValueError: If an option is invalid, `options` is not a `PushOptions`, or a keyword
        other than its default is given with `options`.

    Example:
      >>> merge_options(None, item=items.NStep(3, 0.99))
    """
    unknown = sorted(set(overrides) - set(_FIELDS))
    if unknown:
        raise TypeError(
            f'unexpected keyword argument(s) {", ".join(map(repr, unknown))}: not write '
            f'options; the options (PushOptions) are {", ".join(_FIELDS)}.'
        )
    if options is None:
        return PushOptions(**overrides)
    if not isinstance(options, PushOptions):
        raise ValueError(f'options={options!r} is not valid; expected a PushOptions.')
    both = sorted(name for name, value in overrides.items() if not _is_default(name, value))
    if both:
        raise ValueError(
            f'{", ".join(both)} given both as keyword(s) and in options=; pass each option '
            'once (dataclasses.replace(options, ...) changes a copy).'
        )
    return options


def _is_default(name: str, value: Any) -> bool:
    """Whether `value`, checked and normalized as the option `name`, is its default."""
    given = getattr(PushOptions(**{name: value}), name)
    return given == getattr(PushOptions(), name)


class Writers(enum.Enum):
    """Who writes a push's episodes, for the options that need one writer (`check_writers`).

    ONE: one writer, the dataset's episodes in order (`push`, `push_resumable`, `seed_server`).
    PROCESSES: several processes, one part of the dataset each (`push --workers N`).
    BEAM: the Beam pipeline (`push_with_beam`): one writer per server, of consecutive
      episodes numbered by their index in the split, that resumes from its table's insert
      count by itself; so it honours `add_ids` and `resume`.
    """

    ONE = 'one writer'
    PROCESSES = 'several processes'
    BEAM = 'the Beam pipeline'


# Options that need one writer, in groups that share a reason: whether each is asked for.
_NEEDS_ONE_WRITER: dict[str, Callable[[PushOptions], bool]] = {
    'item': lambda options: options.item.crosses_episodes,
    'add_ids': lambda options: options.add_ids,
    'resume': lambda options: options.resume,
    'checkpoint_every': lambda options: options.checkpoint_every is not None,
}
_ONE_WRITER_GROUPS: tuple[tuple[tuple[str, ...], str], ...] = (
    (('item',), 'they cross episodes: one stream of every episode'),
    (('add_ids',), '{} numbers the episodes of one dataset in order'),
    (
        ('resume', 'checkpoint_every'),
        "the table's insert count must count whole episodes of one dataset, written in order",
    ),
)
_HONOURED = {
    Writers.ONE: frozenset(_NEEDS_ONE_WRITER),
    Writers.PROCESSES: frozenset(),
    Writers.BEAM: frozenset({'add_ids', 'resume'}),
}


def check_writers(options: PushOptions, writers: Writers, *, as_flags: bool = False) -> None:
    """Refuses options that need one writer when `writers` is not one: the one such check.

    Items that cross episodes need one stream of every episode; `add_ids` numbers the
    episodes of one dataset in order; `resume` and `checkpoint_every` need the table's
    insert count to count whole episodes written in order. Several processes honour none
    of them; the Beam pipeline honours `add_ids` and `resume` (`Writers`).

    Args:
      options: The write options.
      writers: Who writes.
      as_flags: Name the options as the command line's flags (`--add-ids`).

    Raises:
      ValueError: Naming each option that needs one writer, why, and what to do.

    Example:
      >>> check_writers(PushOptions(add_ids=True), Writers.PROCESSES)  # ValueError
    """
    honoured = _HONOURED[writers]
    spell: Callable[[str], str] = str
    if as_flags:
        spell = PushOptions.flag_name
    reasons = []
    for names, reason in _ONE_WRITER_GROUPS:
        refused = [name for name in names if name not in honoured]
        if not any(_NEEDS_ONE_WRITER[name](options) for name in refused):
            continue
        plural = len(refused) > 1 or refused == ['item']
        subject = (
            f'{options.item} items'
            if refused == ['item']
            else ' and '.join(spell(name) for name in refused)
        )
        verb = 'need' if plural else 'needs'
        reasons.append(f'{subject} {verb} one writer ({reason.format(subject)})')
    if reasons:
        raise ValueError(f'{"; ".join(reasons)}; {_advise(writers, as_flags)}.')


def _advise(writers: Writers, as_flags: bool) -> str:
    if writers is Writers.BEAM:
        return (
            "the Beam pipeline has one writer per server and resumes from the tables' insert "
            'counts by itself: push from one process instead, or checkpoint the servers yourself'
        )
    return 'use --workers 1' if as_flags else 'use workers=1'


def _check_item(item: Any) -> items_lib.ItemKind:
    from rlds_reverb.transform import items as items_lib  # Late: items load TensorFlow.

    if item is None:
        return items_lib.TwoStep()
    if not isinstance(item, items_lib.ItemKind):
        raise ValueError(
            f'item={item!r} is not valid; expected items.TwoStep(), items.NStep(n, gamma), '
            'items.Sequence(length, period, end) or items.Episode(max_length).'
        )
    return item


def _check_priority(priority: Any, item: items_lib.ItemKind) -> None:
    if callable(priority):
        if item.crosses_episodes:
            raise ValueError(
                'A priority function needs per-episode items; CONTINUE sequences '
                'take a constant priority.'
            )
        return
    if (
        isinstance(priority, bool)
        or not isinstance(priority, numbers.Real)
        or not (math.isfinite(priority) and float(priority) >= 0)
    ):
        raise ValueError(
            f'priority={priority!r} is not valid; expected a finite number >= 0 '
            'or a function of the item batch.'
        )


def _check_names(names: Any) -> tuple[str, ...]:
    names = (names,) if isinstance(names, str) else names
    try:
        names = tuple(names)
    except TypeError:
        names = (names,)
    for name in names:
        if not isinstance(name, str):
            raise ValueError(
                f'episode_fields={names!r} is not valid; expected names of episode-level fields.'
            )
    return names
