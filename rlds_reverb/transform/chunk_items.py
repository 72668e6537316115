"""The chunk item kind: observation histories and action chunks in Reverb (docs/semantics.md §12).

`items.Chunk` (defined here, public in `rlds_reverb.transform.items`): one item per step,
the history and the chunk referencing different rows of one window, so that overlapping
items share every stored step.

TODO(export): `export_table` has no rebuilder for chunk items yet; it refuses their tables
(they hold no `mask` field). A rebuilder would read items pushed with `add_ids=True`: the
step fields of step t are the item's own (no time axis), its observation history position
W - 1 and chunk position 0 (a_t). That rebuilds every step under RECORDED; under IGNORED
the last step has no item, so o_L and its flags are in no item (export would need the
last step carried, e.g. as an extra item or field). To be placed with export/'s
restructuring (its kind detection, `detect_export_kind`).
"""

from __future__ import annotations

import dataclasses
import functools

import tensorflow as tf
import tree

from adders import _episode
from adders.chunks import (
    MASK_FIELDS,
    ChunkOptions,
    compute_chunk_indices,
    compute_terminal_discounts,
    fill_padding,
)
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import specs, types
from rlds_reverb.transform.item_base import ItemKind
from rlds_reverb.transform.item_rows import make_null_rows

# Public through `rlds_reverb.transform.items` too (`items.Chunk`).
__all__ = [
    'Chunk',
]


def _pad_rows(rows: types.Nest, before: int, after: int) -> types.Nest:
    """Returns `rows` between `before` and `after` null rows."""
    padded = [make_null_rows(rows, before), rows, make_null_rows(rows, after)]
    return tf.nest.map_structure(lambda *parts: tf.concat(parts, 0), *padded)


@dataclasses.dataclass(frozen=True)
class ColumnSlice:
    """The rows of an item's window one row field references.

    Attributes:
      offset: The first row, counted from the window's start.
      length: The number of rows (a time axis), or None for the one row at `offset`
        without a time axis.
    """

    offset: int
    length: int | None = None


def _reference_slice(column, first: int, columns: ColumnSlice):
    """Returns a writer column's references for a window that starts at row `first` (< 0,
    counted from the newest row)."""
    start = first + columns.offset
    if columns.length is None:
        return column[start]
    return column[start : start + columns.length or None]


def _gather_slice(x: tf.Tensor, starts: tf.Tensor, columns: ColumnSlice) -> tf.Tensor:
    """Returns one field's slice of every window: `[N, length, ...]`, or `[N, ...]`."""
    if columns.length is None:
        return tf.gather(x, starts + columns.offset)
    return tf.gather(x, starts[:, None] + columns.offset + tf.range(columns.length)[None, :])


def _with_time_axis(spec: types.SpecNest, length: int) -> types.SpecNest:
    return tf.nest.map_structure(lambda s: tf.TensorSpec([length, *s.shape], s.dtype), spec)


@dataclasses.dataclass(frozen=True)
class Chunk(ItemKind):
    """Observation histories and action chunks (docs/semantics.md §12), one item per step.

    An item is what `adders.chunks` gives one step with the same options: history fields
    `[W, ...]`, chunk fields `[H, ...]`, the step's other fields and the four masks. The
    steps whose chunk starts with a real action give one: every step under
    `final_action='recorded'`, every step but the last under 'ignored'.

    Rows are the steps with their masks, between W - 1 null rows before and H - 1 after;
    the item of step t references history rows t .. t + W - 1, chunk rows t + W - 1 ..
    t + W + H - 2 and the rest of row t + W - 1, so no step is stored twice. Padded
    positions arrive as zeros (under 'ignored', the last step's action too): `fill_padding`
    gives them the values of `adders.chunks` (pass it as a `LearnerDataset`'s
    `experience_fn`, or map it over sampled items); with `fill='zero'` they already are.

    Args:
      history: W, the steps of each history, >= 1.
      horizon: H, the steps of each chunk, >= 1.
      history_fields: The step fields given a history (default `observation`).
      chunk_fields: The step fields given a chunk (default `action`).
      final_action: `types.FinalAction` or its name ('ignored', the default; 'recorded').
      fill: `types.PadFill` or its name ('edge', the default; 'zero').

    Raises:
      ValueError: If an option is invalid (see `adders.ChunkOptions`).

    Example:
      >>> item = items.Chunk(2, 8, final_action='recorded')
      >>> rlds_reverb.push(episodes, address, 'chunks', item=item)
      >>> learner = LearnerDataset(address, 'chunks', batch_size=64, sequence_length=None,
      ...                          data_spec=tables.signature_for(item, episodes),
      ...                          experience_fn=item.fill_padding)
    """

    history: int = 1
    horizon: int = 1
    history_fields: str | tuple[str, ...] = (types.OBSERVATION,)
    chunk_fields: str | tuple[str, ...] = (types.ACTION,)
    final_action: types.FinalAction | str = types.FinalAction.IGNORED
    fill: types.PadFill | str = types.PadFill.EDGE

    def __post_init__(self):
        options = self.options  # Checked, and the names and enums normalized, by ChunkOptions.
        for field in dataclasses.fields(ChunkOptions):
            object.__setattr__(self, field.name, getattr(options, field.name))

    @property
    def options(self) -> ChunkOptions:
        """The options, as `adders.chunks` takes them."""
        return ChunkOptions(
            self.history,
            self.horizon,
            self.history_fields,
            self.chunk_fields,
            self.final_action,
            self.fill,
        )

    @property
    def _ignores_final_action(self) -> bool:
        return self.final_action is types.FinalAction.IGNORED

    def compute_rows(self, steps, *, policy_info_fn=None):
        del policy_info_fn
        bounds = _episode.episode_bounds(steps)
        _, _, masks = compute_chunk_indices(bounds, self.options)
        rows = {**compute_terminal_discounts(steps, bounds), **masks}
        if self._ignores_final_action:  # a_L is padding: stored as zeros, as padding is.
            is_last = tf.equal(bounds.t, bounds.last)
            for field in self.chunk_fields:
                rows[field] = tf.nest.map_structure(
                    lambda x: tf.where(episodes_lib.expand_like(is_last, x), tf.zeros_like(x), x),
                    rows[field],
                )
        return _pad_rows(rows, self.history - 1, self.horizon - 1)

    def compute_windows(self, steps):
        size = tf.shape(steps[types.IS_FIRST])[0]
        count = tf.maximum(size - 1, 0) if self._ignores_final_action else size
        return tf.range(count), tf.fill([count], self.max_span)

    def compute_item_spec(self, episodes, *, policy_info_fn=None):
        del policy_info_fn
        spec = dict(specs.get_step_spec(episodes))
        for field in self.history_fields:
            spec[field] = _with_time_axis(spec[field], self.history)
        for field in self.chunk_fields:
            spec[field] = _with_time_axis(spec[field], self.horizon)
        spec[types.HISTORY_IS_PAD] = tf.TensorSpec([self.history], tf.bool)
        for mask in MASK_FIELDS[1:]:
            spec[mask] = tf.TensorSpec([self.horizon], tf.bool)
        return spec

    @property
    def max_span(self) -> int:
        return self.history + self.horizon - 1

    def _slice_field(self, field: str) -> ColumnSlice:
        """Returns the rows of an item's window the row field `field` references."""
        if field in self.history_fields:
            return ColumnSlice(0, self.history)
        if field in self.chunk_fields:
            return ColumnSlice(self.history - 1, self.horizon)
        return ColumnSlice(self.history - 1)

    def reference_item(self, columns, first, stop):
        del stop  # Every window spans `max_span` rows.
        return {
            field: tree.map_structure(
                functools.partial(_reference_slice, first=first, columns=self._slice_field(field)),
                value,
            )
            for field, value in columns.items()
        }

    def gather_items(self, rows, starts, sizes):
        del sizes
        return {
            field: tf.nest.map_structure(
                functools.partial(_gather_slice, starts=starts, columns=self._slice_field(field)),
                value,
            )
            for field, value in rows.items()
        }

    def fill_padding(self, experience: types.Nest) -> types.Nest:
        """Returns sampled items (one, or a `[B, ...]` batch) with padding as `adders.chunks`
        fills it (`adders.fill_padding`).

        Example:
          >>> dataset.map(lambda sample: item.fill_padding(sample.data))
        """
        return fill_padding(experience, self.options)
