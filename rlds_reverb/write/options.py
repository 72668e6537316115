"""`PushOptions`: every option of a write into Reverb, defined once with its default and check.

`push`, `push_resumable`, `push_with_beam`, the multi-process push and the command line all
build one `PushOptions` and hand it to the one episode loop (`rlds_reverb.write.loop`), so an
option means the same, is checked the same and fails with the same message on every path.
The value is frozen: `dataclasses.replace(options, ...)` makes a changed copy, and a caller's
value is never changed.
"""

from __future__ import annotations

import dataclasses
import enum
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlds_reverb.core import checks, specs, timeouts, types
from rlds_reverb.transform import items as items_lib
from rlds_reverb.transform.plans import PriorityFn
from rlds_reverb.write import engines

__all__ = [
    'DEFAULT_MAX_IN_FLIGHT_ITEMS',
    'DEFAULT_TIMEOUT_MS',
    'PushOptions',
    'merge_options',
]

DEFAULT_TIMEOUT_MS = timeouts.PUSH_MS
# Below the 50 pending items at which Reverb logs "pending items is alarmingly high" on every
# tenth item; as fast here as 1,000 (benchmarks/push.py).
DEFAULT_MAX_IN_FLIGHT_ITEMS = 48


@dataclasses.dataclass(frozen=True, kw_only=True)
class PushOptions:
    """How episodes are written into Reverb: one value for every write path.

    Attributes:
      item: The item kind (`rlds_reverb.items`); None means `items.TwoStep()`.
      priority: A constant >= 0, or `fn(item_batch) -> [N]` computed per episode on the
        batch of its items (`[N, span, ...]` leaves; `[N, ...]` for n-step items).
      on_invalid: `'raise'` (`InvalidEpisodeError` naming all of the episode's problems) or
        `'skip'` (drop invalid episodes whole; counted in `skipped_episodes`).
      policy_info_fn: Optional `fn(current_step, next_step)` (two-step items).
      timeout_ms: The most any wait on a live server may take (server info, flush, end
        episode); a dead server is named sooner (`engines.wait_on_server`).
      max_in_flight_items: The most items pending on the server per writer; the writer
        waits for confirmations before more would be.
      allow_eviction: Whether the write may make the table remove items (default: error).
      engine: Which Reverb writer (`engines.EngineKind`); `'auto'` picks the fastest that
        can create the items. Both write the same items.
      episode_fields: Episode-level fields (outside `steps`) copied into every item of their
        episode; by default items hold step fields only.
      add_ids: Also give every item the `episode_id` (int64, the episode's position in the
        pushed dataset) and `step_index` (int64) of its steps.
      resume: Start at the first item the table lacks, found from its insert count (the
        table must hold a prefix of this push's items: `rlds_reverb.write.resume`).
      checkpoint_every: Checkpoint the server after every this many episodes (None: never).

    Raises:
      ValueError: Naming the first invalid option and what is expected.

    Example:
      >>> options = PushOptions(item=items.NStep(3, 0.99), on_invalid='skip')
      >>> rlds_reverb.push(episodes, 'localhost:8000', 'replay', options=options)
    """

    item: items_lib.ItemKind | None = None
    priority: float | PriorityFn = 1.0
    on_invalid: types.ValidationMode | str = types.ValidationMode.RAISE
    policy_info_fn: specs.PolicyInfoFn = None
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    max_in_flight_items: int = DEFAULT_MAX_IN_FLIGHT_ITEMS
    allow_eviction: bool = False
    engine: engines.EngineKind | str = engines.EngineKind.AUTO
    episode_fields: Sequence[str] = ()
    add_ids: bool = False
    resume: bool = False
    checkpoint_every: int | None = None

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
        set_field(self, 'engine', types.as_enum(engines.EngineKind, self.engine, argument='engine'))
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


def merge_options(options: PushOptions | None, **keywords: Any) -> PushOptions:
    """Returns the options of an entry point that takes `options=` and keyword options.

    Without `options`, the keywords make a new `PushOptions`. With it, keywords must be at
    their defaults (they are the entry point's signature, all passed on): an option given
    both ways would be ambiguous. `options` itself is returned, unchanged.

    Raises:
      ValueError: If an option is invalid, `options` is not a `PushOptions`, or a keyword
        other than its default is given with `options`.

    Example:
      >>> merge_options(None, item=items.NStep(3, 0.99))
    """
    if options is None:
        return PushOptions(**keywords)
    if not isinstance(options, PushOptions):
        raise ValueError(f'options={options!r} is not valid; expected a PushOptions.')
    fields = {f.name: f for f in dataclasses.fields(PushOptions)}
    both = sorted(name for name, value in keywords.items() if not _is_default(fields[name], value))
    if both:
        raise ValueError(
            f'{", ".join(both)} given both as keyword(s) and in options=; pass each option '
            'once (dataclasses.replace(options, ...) changes a copy).'
        )
    return options


def _is_default(field: dataclasses.Field, value: Any) -> bool:
    default = field.default
    if isinstance(value, str) and isinstance(default, enum.Enum):
        return value.lower() in (default.value, default.name.lower())
    if isinstance(default, tuple):
        return value is not None and not isinstance(value, str) and tuple(value) == default
    return value is default or (type(value) is type(default) and value == default)


def _check_item(item: Any) -> items_lib.ItemKind:
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
        or not (np.isfinite(priority) and priority >= 0)
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
