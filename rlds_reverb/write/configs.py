"""StructuredWriter configs: the one place that turns windows of rows into Reverb configs.

A `reverb.StructuredWriter` creates items in C++ from configs: a pattern (which columns,
which rows back) and conditions (on the step index, or the end of an episode). `push`'s
structured engine and the trajectory observer both build their configs here, from the
same window rule: every `period` rows, once `length` rows are there, an item of the last
`length` rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import tree
from reverb import structured_writer as sw

from rlds_reverb.core import types
from rlds_reverb.transform import items as items_lib

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

# Rows every column keeps, so that Reverb's auto-tuned chunker may grow chunks that long.
# A writer's chunks are at most as long as its columns' history (2 rows for two-step
# items), and every sample unpacks one chunk per column per row range: with room for 32
# rows, push ran up to 25% faster and sampling needed about 15% less CPU per sample
# (HalfCheetah-like two-step items; benchmarks/README.md).
CHUNK_ROOM_ROWS = 32
# Columns whose rows are at most this size get constant chunks of `CHUNK_ROOM_ROWS` rows
# where the writer can set them (`engines.TrajectoryEngine`).
SMALL_ROW_BYTES = 1024


def make_chunk_room_config(structure, table: str, *, rows: int = CHUNK_ROOM_ROWS):
    """Returns a config that never creates an item but makes every column keep `rows` rows.

    A `StructuredWriter` sizes each column's history (and so the longest chunk its
    chunker may choose) from its configs' patterns; Reverb 0.14 has no other way to set it.
    """
    pattern = sw.pattern_from_transform(
        structure, lambda ref: tree.map_structure(lambda x: x[-rows:], ref)
    )
    # No step has this index, so the config never applies.
    never = sw.Condition.step_index() == 2**31 - 1
    return sw.create_config(pattern, table, conditions=[never])


def _make_pattern(structure, length: int, *, squeeze: bool):
    """Returns the pattern taking the last `length` rows of every column (or the last row)."""
    if squeeze:
        return sw.pattern_from_transform(
            structure, lambda ref: tree.map_structure(lambda x: x[-1], ref)
        )
    return sw.pattern_from_transform(
        structure, lambda ref: tree.map_structure(lambda x: x[-length:], ref)
    )


def make_window_configs(
    structure,
    tables: Sequence[str],
    *,
    length: int,
    period: int = 1,
    priority: float,
    squeeze: bool = False,
    keep_tails: bool = False,
) -> list:
    """Returns configs creating, every `period` rows, an item of the last `length` rows.

    Args:
      structure: The structure of one row (leaves are ignored; `[None] * columns` for flat
        rows).
      tables: The tables that get every item.
      length: Rows per item.
      period: Rows between item ends (the first ends at row `length - 1`).
      priority: The constant priority of every item.
      squeeze: Items are single rows without a time axis (`length` must be 1).
      keep_tails: At the end of an episode, also write the last `length` rows when no item
        ends there, and the whole episode when it is shorter than `length` (the observer's
        `keep_tails`).

    Returns:
      StructuredWriter configs, one set per table.

    Example:
      >>> configs = make_window_configs([None] * 7, ['replay'], length=2, priority=1.0)
    """
    window = _make_pattern(structure, length, squeeze=squeeze)
    index = sw.Condition.step_index()
    phase = (length - 1) % period
    # Conditions that always hold (index >= 0, index % 1 == 0) are left out.
    conditions = [index >= length - 1] if length > 1 else []
    if period > 1:
        conditions.append(index % period == phase)
    rules = [(window, conditions)]
    if keep_tails:
        if period > 1:
            rules.append(
                (
                    window,
                    [
                        sw.Condition.is_end_episode(),
                        index >= length - 1,
                        index % period != phase,
                    ],
                )
            )
        for size in range(1, length):
            short = _make_pattern(structure, size, squeeze=False)
            rules.append((short, [sw.Condition.is_end_episode(), index == size - 1]))
    fn = sw.constant_priority_fn(float(priority))
    configs = [
        sw.create_config(pattern, table, conditions=conditions, priority=fn)
        for table in tables
        for pattern, conditions in rules
    ]
    if length < CHUNK_ROOM_ROWS:
        configs.append(make_chunk_room_config(structure, tables[0]))
    return configs


def make_n_step_configs(
    row_structure: types.Nest, tables: Sequence[str], *, n: int, priority: float
) -> list:
    """Returns configs creating n-step items (`items.NStep`) from the episode's step rows.

    The item of step t is row t, with `next_observation` the observation of row t + k
    (k = min(n, L - t)): the observation columns are referenced twice, never copied. While
    the episode runs, each row i >= n ends the item of t = i - n (k = n); at its end, the
    last row ends the items of t = L - j for j = n - 1, ..., 1 (in order of t).
    """
    flat = [None] * len(tree.flatten(row_structure))

    def _item(rows_back: int):
        def _refer(refs):
            row = tree.unflatten_as(row_structure, refs)
            item = {k: tree.map_structure(lambda r: r[-1 - rows_back], v) for k, v in row.items()}
            ahead = tree.map_structure(lambda r: r[-1], row[types.OBSERVATION])
            return {**item, types.NEXT_OBSERVATION: ahead}

        return sw.pattern_from_transform(flat, _refer)

    index = sw.Condition.step_index()
    rules = [(_item(n), [index >= n])]
    rules += [(_item(j), [sw.Condition.is_end_episode(), index >= j]) for j in range(n - 1, 0, -1)]
    fn = sw.constant_priority_fn(float(priority))
    configs = [
        sw.create_config(pattern, table, conditions=conditions, priority=fn)
        for table in tables
        for pattern, conditions in rules
    ]
    if n + 1 < CHUNK_ROOM_ROWS:
        configs.append(make_chunk_room_config(flat, tables[0]))
    return configs


def make_item_configs(
    item: items_lib.ItemKind, row_structure: types.Nest, tables: Sequence[str], priority: float
) -> list | None:
    """Returns the configs creating `item`s from an episode's rows (appended flat), or None
    when configs cannot.

    Example:
      >>> make_item_configs(items.TwoStep(), plan.rows, ['replay'], 1.0)
    """
    if isinstance(item, items_lib.NStep):
        return make_n_step_configs(row_structure, tables, n=item.n, priority=priority)
    pattern = item.window_pattern
    if pattern is None:
        return None
    return make_window_configs(
        [None] * len(tree.flatten(row_structure)),
        tables,
        length=pattern.length,
        period=pattern.period,
        priority=priority,
        squeeze=pattern.squeeze,
    )
