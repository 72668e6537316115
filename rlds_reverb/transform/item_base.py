"""What an item kind is: the base class the writer and the plans call, and its window types.

An item kind (`rlds_reverb.transform.items`) turns one episode's steps into rows and
windows of rows, one window per item. By default every column of an item references the
whole window; a kind may give each column its own slice of the window (`ColumnSlice`), so
that, for example, an observation history and an action chunk of one item reference
different rows.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

import tensorflow as tf
import tree

from rlds_reverb.core import types
from rlds_reverb.core.specs import PolicyInfoFn

# Helpers of the package's other modules only; the kinds are public in `items`.
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


@dataclasses.dataclass(frozen=True)
class ColumnSlice:
    """The rows of an item's window one column references.

    Attributes:
      offset: The first row, counted from the window's start.
      length: The number of rows (a time axis), or None for the one row at `offset`
        without a time axis.
    """

    offset: int
    length: int | None = None


def list_column_fields(rows: types.Nest) -> list[str]:
    """Returns the top-level row field of each column (leaf), in `tree.flatten` order."""
    return [str(path[0]) for path, _ in tree.flatten_with_path(rows)]


class ItemKind(abc.ABC):
    """Base class: rows, windows, configs and the item spec of one kind of item.

    Subclasses fill in `compute_rows`, `compute_windows` and `compute_item_spec`; the
    writer does the rest.
    """

    # Whether an item is a single row without a time axis.
    squeeze: bool = False
    # Whether windows may cross into the next episode.
    crosses_episodes: bool = False

    def prepare_episodes(self, episodes: tf.data.Dataset) -> tf.data.Dataset:
        """Returns the RLDS dataset the rows are computed from (a hook; identity here)."""
        return episodes

    @abc.abstractmethod
    def compute_rows(self, steps: types.Nest, *, policy_info_fn: PolicyInfoFn) -> types.Nest:
        """Returns the rows to append for one episode, `[R, ...]` per leaf."""

    @abc.abstractmethod
    def compute_windows(self, steps: types.Nest) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns `(starts, sizes)`, int32 `[N]`: one window of rows per item."""

    @abc.abstractmethod
    def compute_item_spec(
        self, episodes: tf.data.Dataset, *, policy_info_fn: PolicyInfoFn
    ) -> types.SpecNest:
        """Returns the spec of one item (the table signature)."""

    @property
    @abc.abstractmethod
    def max_span(self) -> int:
        """The largest number of rows one item references."""

    @property
    def window_pattern(self) -> WindowPattern | None:
        """The items as fixed windows of the newest rows, or None when they are not."""
        return None

    @property
    def stream_window(self) -> WindowPattern | None:
        """The windows across episodes (`crosses_episodes`), placed by the writer on the
        stream of every episode's rows; None for items within episodes."""
        return None

    def describe_length_problem(self, length: int) -> str | None:
        """Returns why an episode of `length` steps cannot be written, or None."""
        del length
        return None

    def slice_columns(self, fields: Sequence[str]) -> list[ColumnSlice] | None:
        """Returns, per column of a row, the rows of an item's window it references.

        `fields` names each column's top-level row field (the leaves of a row in
        `tree.flatten` order). None (the default): every column references the whole
        window (its first row alone for `squeeze` kinds).
        """
        del fields
        return None
