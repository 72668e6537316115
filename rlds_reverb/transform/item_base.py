"""What an item kind is: the base class the writer, the plans and the signature checks call.

An item kind (`rlds_reverb.transform.items`) turns one episode's steps into rows and
windows of rows, one window per item. By default every field of an item references the
whole window (its first row, for kinds without a time axis); a kind may reference rows of
its own choosing (`reference_item`, `gather_items`): n-step items take `next_observation`
from the window's last row, chunk items give the history and the chunk different rows.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

import tensorflow as tf
import tree

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import frames, types
from rlds_reverb.core.frames import FrameFormat, FrameFormats
from rlds_reverb.core.specs import PolicyInfoFn
from rlds_reverb.transform.item_rows import WindowPattern

# Helpers of the package's other modules only; the kinds are public in `items`.
__all__: list[str] = []


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

    def reference_item(self, columns: types.Nest, first: int, stop: int) -> types.Nest:
        """Returns the item of the window of rows `[first, stop)` as references into the
        writer's columns (`columns`: the rows' nest of history columns; relative indices).

        A hook: each field is its column's rows of the window, or its first row for items
        without a time axis (`squeeze`).
        """
        if self.squeeze:
            return tree.map_structure(lambda column: column[first], columns)
        return tree.map_structure(lambda column: column[first : stop or None], columns)

    def make_flat_referencer(self, columns: types.Nest) -> Callable[[int, int], list]:
        """Returns `fn(first, stop)`: `reference_item(columns, first, stop)` flat, in
        `tree.flatten`'s order (what a writer's `create_item` flattens it to).

        The writer's columns are fixed for a stream, so the item's layout is worked out
        once, not nested and flattened again for every item (an n-step push spent most of
        its Python time there). Kinds that override `reference_item` get it flattened.
        """
        if type(self).reference_item is not ItemKind.reference_item:
            return lambda first, stop: tree.flatten(self.reference_item(columns, first, stop))
        flat = tree.flatten(columns)
        if self.squeeze:
            return lambda first, stop: [column[first] for column in flat]
        return lambda first, stop: [column[first : stop or None] for column in flat]

    def gather_items(self, rows: types.Nest, starts: tf.Tensor, sizes: tf.Tensor) -> types.Nest:
        """Returns the items as one batch, as the writer references them: `[N, span, ...]`
        leaves (zeros past an item's end), `[N, ...]` for items without a time axis.

        This is the batch a priority function sees (`plans.make_episode_plans`).
        """
        if self.squeeze:
            return tf.nest.map_structure(lambda x: tf.gather(x, starts), rows)
        offsets = tf.range(self.max_span)[None, :]
        last = tf.maximum(tf.shape(tf.nest.flatten(rows)[0])[0] - 1, 0)
        index = tf.minimum(starts[:, None] + offsets, last)
        return episodes_lib.gather_windows(rows, index, offsets < sizes[:, None])

    def map_frame_formats(
        self, formats: FrameFormats, *, policy_info_fn: PolicyInfoFn = None
    ) -> dict[str, FrameFormat]:
        """Returns the frame formats of the item's fields (paths in the item spec), from the
        step fields' (a hook; the same paths here: items hold the step fields)."""
        del policy_info_fn
        return dict(formats)

    def compute_signature(
        self,
        episodes: tf.data.Dataset,
        *,
        policy_info_fn: PolicyInfoFn = None,
        frame_formats: FrameFormats | None = None,
    ) -> types.SpecNest:
        """Returns the item spec with its encoded frame fields named by their format.

        Args:
          episodes: The RLDS dataset the items come from.
          policy_info_fn: The push's policy info function, if any.
          frame_formats: The step fields' frame formats; default: the dataset's
            (`core.episodes.find_frame_formats`).
        """
        if frame_formats is None:
            frame_formats = episodes_lib.find_frame_formats(episodes)
        spec = self.compute_item_spec(episodes, policy_info_fn=policy_info_fn)
        mapped = self.map_frame_formats(frame_formats, policy_info_fn=policy_info_fn)
        return frames.name_frame_specs(spec, mapped)

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
