"""Numbering the episodes and steps of items read in one writer's insertion order.

Two-step items and step windows pushed without ids carry no episode or step index; read in
the table's insertion order (one writer, one episode after the other), each item continues
the previous one or starts an episode, checked field by field on the rows they share.
`TwoStepChain` and `WindowChain` give such rows the `episode_id` and `step_index` that
`rlds_reverb.export.assembly.EpisodeAssembler` rebuilds episodes from, and refuse items
that are not in one writer's order (`ExportError`: rebuilding them would mix episodes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tree

from rlds_reverb.core import types
from rlds_reverb.core.errors import ExportError
from rlds_reverb.transform import items as items_lib

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

# The ids the export numbers rows by.
ID_FIELDS = (types.EPISODE_ID, types.STEP_INDEX)


def take_rows(rows: Any, index: Any) -> Any:
    """Returns the rows of a nest of arrays at `index` (a slice, indices or a mask)."""
    return tree.map_structure(lambda x: x[index], rows)


def equal_rows(a: dict, b: dict) -> np.ndarray:
    """Returns, per row, whether every field of `a` equals `b`'s (NaN equal to NaN)."""
    pairs = list(zip(tree.flatten(a), tree.flatten(b), strict=True))
    equal = np.ones(len(pairs[0][0]), bool)
    for x, y in pairs:
        same = x == y
        if x.dtype.kind in 'fc':
            same |= np.isnan(x) & np.isnan(y)
        equal &= same.reshape(len(same), int(np.prod(same.shape[1:]))).all(axis=1)
    return equal


class TwoStepChain:
    """Numbers the episodes and steps of two-step items read in one writer's order.

    Item k holds steps (t, t + 1) of an episode. It continues the previous item when its
    first step is not FIRST, equals the previous item's second step field by field, and the
    previous item did not end its episode (second step LAST); it starts an episode when its
    first step is FIRST. An item that starts mid-episode after an ended one (FIFO eviction
    cut the episode's beginning) opens a partial episode, numbered from step 1 so that the
    assembler reports it incomplete. Anything else means the items are not in one writer's
    order, and rebuilding episodes from them would mix episodes: an `ExportError`.
    """

    def __init__(self, table: str):
        self._table = table
        self._items = 0
        self._last_row: dict | None = None  # The previous item's second step.
        self._episode = -1
        self._step = -1  # The previous item's first step index.

    def add_ids(self, rows: dict) -> dict:
        """Returns `rows` (`[2N, ...]`, items' step pairs) with `episode_id`/`step_index`."""
        first = take_rows(rows, slice(0, None, 2))
        second = take_rows(rows, slice(1, None, 2))
        count = len(first[types.IS_FIRST])
        fresh = first[types.IS_FIRST]
        # Whether item k's first step is item k - 1's second step (the previous batch's
        # last item for k = 0), and whether that item left its episode open.
        chained = np.concatenate(
            [
                np.zeros(1, bool)
                if self._last_row is None
                else equal_rows(take_rows(first, slice(0, 1)), self._last_row),
                equal_rows(take_rows(first, slice(1, None)), take_rows(second, slice(0, -1))),
            ]
        )[:count]
        open_before = self._last_row is not None and not self._last_row[types.IS_LAST][0]
        was_open = np.concatenate([[open_before], ~second[types.IS_LAST][:-1]])[:count]
        continues = ~fresh & chained & was_open
        # An open episode followed by a FIRST step was cut (the assembler reports it); one
        # followed by another episode's middle means interleaved or removed items.
        broken = ~fresh & ~chained & was_open
        if broken.any():
            k = int(np.flatnonzero(broken)[0])
            raise ExportError(
                f'Cannot export table {self._table!r} as two-step items in insertion order: '
                f'item {self._items + k} does not continue the episode of item '
                f'{self._items + k - 1}, which had not ended. The items are not one episode '
                'after the other (several writers, such as push --workers N, or items removed '
                'by sampling); push with add_ids=True to export such a table. Nothing was '
                'written.'
            )
        starts = ~continues
        positions = np.arange(count)
        last_start = np.maximum.accumulate(np.where(starts, positions, -1))
        episode = self._episode + np.cumsum(starts)
        offset = np.where(fresh, 0, 1)[np.maximum(last_start, 0)]
        step = np.where(last_start < 0, self._step + 1 + positions, positions - last_start + offset)
        if count:
            self._items += count
            self._last_row = take_rows(second, slice(count - 1, count))
            self._episode, self._step = int(episode[-1]), int(step[-1])
        ids = {
            types.EPISODE_ID: np.stack([episode, episode], axis=1).reshape(-1),
            types.STEP_INDEX: np.stack([step, step + 1], axis=1).reshape(-1),
        }
        return {**rows, **ids}


def find_window_period(item: items_lib.ItemKind) -> int:
    """Returns the steps between the starts of an episode's windows of `item`.

    Raises:
      ValueError: If `item` is not an `items.Sequence` or `items.Episode`, or its windows
        cannot be placed from the insertion order (`end='last'` or `'continue'`).
    """
    if isinstance(item, items_lib.Episode):
        return item.max_length
    if not isinstance(item, items_lib.Sequence):
        raise ValueError(
            f'item={item} is not valid here: item= names the items.Sequence or items.Episode '
            'a table of step windows without ids was pushed with.'
        )
    end = types.as_enum(types.EndBehavior, item.end, argument='end')
    if end in (types.EndBehavior.LAST, types.EndBehavior.CONTINUE):
        raise ValueError(
            f"item={item}: windows of end='{end.value}' cannot be placed without ids "
            '(the last window is moved back, or windows cross episodes, by amounts the table '
            'does not hold); push them with add_ids=True to export them.'
        )
    return item.length if item.period is None else item.period  # `Sequence`'s own default.


class WindowChain:
    """Numbers the steps of windows (`Sequence`, `Episode` chunks) read in one writer's order.

    An episode's windows start `period` steps apart, its first at step 0 (FIRST). A window
    whose first step is FIRST starts an episode; any other continues the previous window's
    episode `period` steps further on, its rows overlapping that window's checked field by
    field, while that episode has not ended (no LAST yet). One that does not start with
    FIRST after an ended episode (FIFO eviction cut the beginning) opens a partial episode,
    numbered from step 1 so that the assembler reports it incomplete. A window that
    contradicts the previous one means the items are not one writer's windows in order: an
    `ExportError`.
    """

    def __init__(self, table: str, *, period: int):
        self._table = table
        self._period = period
        self._items = 0
        self._previous: dict | None = None  # The previous window's real rows.
        self._start = 0  # Its first step's index.
        self._episode = -1
        self._open = False  # Whether its episode had not ended.

    def add_ids(self, rows: dict, valid: np.ndarray, count: int) -> dict:
        """Returns `rows` (`count` windows laid end to end) with `episode_id`/`step_index`.

        Padding rows (not `valid`) get ids -1.
        """
        span = len(valid) // count if count else 0
        episode_ids = np.full(len(valid), -1, np.int64)
        step_ids = np.full(len(valid), -1, np.int64)
        for k in range(count):
            part = np.flatnonzero(valid[k * span : (k + 1) * span]) + k * span
            if not part.size:
                continue
            window = take_rows(rows, part)
            self._place(window, k)
            episode_ids[part] = self._episode
            step_ids[part] = self._start + np.arange(part.size)
            self._previous = window
            self._open = not window[types.IS_LAST].any()
        self._items += count
        return {**rows, types.EPISODE_ID: episode_ids, types.STEP_INDEX: step_ids}

    def _place(self, window: dict, k: int) -> None:
        """Sets the episode and first step index of the next window."""
        index = self._items + k
        if window[types.IS_FIRST][1:].any():
            raise ExportError(
                f'Cannot export table {self._table!r} as windows in insertion order: item '
                f'{index} holds the first step of an episode after its own first row '
                "(windows across episodes, end='continue'); push with add_ids=True to export "
                'such a table. Nothing was written.'
            )
        if window[types.IS_FIRST][0]:
            self._episode, self._start = self._episode + 1, 0
            return
        if not self._open or self._previous is None:  # Its beginning was evicted: partial.
            self._episode, self._start = self._episode + 1, 1
            return
        start = self._start + self._period
        overlap = min(
            len(self._previous[types.IS_FIRST]) - self._period, len(window[types.IS_FIRST])
        )
        if (
            overlap > 0
            and not equal_rows(
                take_rows(window, slice(0, overlap)),
                take_rows(self._previous, slice(self._period, self._period + overlap)),
            ).all()
        ):
            raise ExportError(
                f'Cannot export table {self._table!r} as windows in insertion order: item '
                f'{index} does not continue the episode of item {index - 1} {self._period} '
                "steps on (their common steps differ). The items are not one writer's "
                'windows in order (several writers, items removed by sampling, or an item= '
                'other than the one pushed); push with add_ids=True to export such a table. '
                'Nothing was written.'
            )
        self._start = start
