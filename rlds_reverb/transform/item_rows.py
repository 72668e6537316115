"""Rows and windows the item kinds share: fixed windows of rows, padding, masked step rows.

`rlds_reverb.transform.items` defines the item kinds; these are the pieces several of them
(and the writer engines) use: a `WindowPattern` a `reverb.StructuredWriter` can create
alone, the windows of sequence items, and step rows with a `mask`, padded with null rows.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from adders.sequences import compute_window_starts
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import specs, types

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []


@dataclasses.dataclass(frozen=True)
class WindowPattern:
    """Items a `reverb.StructuredWriter` can create alone: fixed windows of the newest rows.

    Every `period` rows (once `length` rows are there) an item of the last `length` rows
    is created; with `squeeze`, `length` is 1 and the item is that row without a time axis.
    `rlds_reverb.write.configs` turns this into StructuredWriter configs.
    """

    length: int
    period: int = 1
    squeeze: bool = False


def make_null_rows(rows: types.Nest, count: int) -> types.Nest:
    """Returns `count` zero rows shaped like `rows` (flags false, `mask` false)."""
    return tf.nest.map_structure(
        lambda x: tf.zeros(tf.concat([[count], tf.shape(x)[1:]], 0), x.dtype), rows
    )


def append_null_rows(rows: types.Nest, count: int) -> types.Nest:
    """Returns `rows` followed by `count` null rows."""
    padding = make_null_rows(rows, count)
    return tf.nest.map_structure(lambda x, p: tf.concat([x, p], 0), rows, padding)


def compute_sequence_windows(
    size: tf.Tensor, length: int, period: int, end: types.EndBehavior
) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns `(starts, sizes)` of an episode's windows, as `adders.sequences` cuts them.

    TRUNCATE windows end at the episode's end; the others have `length` steps (padded past
    the end for PAD, and for LAST when T < length).
    """
    starts = compute_window_starts(size, length, period, end)
    if end is types.EndBehavior.TRUNCATE:
        return starts, tf.minimum(length, size - starts)
    return starts, tf.fill(tf.shape(starts), length)


def compute_masked_step_rows(steps: types.Nest, padding: int) -> types.Nest:
    """Returns the steps plus `mask` (true), followed by `padding` null rows.

    The discounts follow the flags, as in two-step items: 0 into and on a terminal step.
    """
    size = tf.shape(steps[types.IS_FIRST])[0]
    rows = {**episodes_lib.apply_terminal_discounts(steps), types.MASK: tf.ones([size], tf.bool)}
    return append_null_rows(rows, padding) if padding else rows


def compute_masked_step_spec(episodes: tf.data.Dataset, length: int | None) -> dict:
    step_spec = specs.get_step_spec(episodes)
    spec = {**step_spec, types.MASK: tf.TensorSpec([], tf.bool)}
    return tf.nest.map_structure(lambda s: tf.TensorSpec([length, *s.shape], s.dtype), spec)
