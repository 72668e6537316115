"""Observation histories and action chunks, with three masks (docs/semantics.md §12).

For step t of an episode whose last step is L, a history of W steps and a chunk of H:

    history position i = 0 .. W-1 reads step s = t - W + 1 + i   (oldest first; W-1 is t)
    chunk position   j = 0 .. H-1 reads step s = t + j           (0 is t)

Each history field (default `observation`) becomes `[W, ...]` and each chunk field
(default `action`) `[H, ...]`; every other field stays step t's. With E the last real
action (L - 1 under `FinalAction.IGNORED`, RLDS' definition and the default; L under
`RECORDED`, as Octo and LeRobot take it), four masks are added, true where a position
holds no real data:

    history_is_pad       [W]  s < 0: before the episode's start
    chunk_is_pad         [H]  s > E: past the last real action
    chunk_is_truncated   [H]  s > E, the episode cut by a time limit (`is_last` without
                              `is_terminal`): a learner bootstraps from o_L
    chunk_is_terminated  [H]  s > E, the episode terminated: nothing to bootstrap

so `chunk_is_pad = chunk_is_truncated | chunk_is_terminated`; a history position is never
truncated or terminated (it lies at or before t). A padded position holds, by `PadFill`:
EDGE (the default, as Octo and LeRobot fill them) the nearest real value, o_0 before the
start and a_E after the end (a_0 when the episode has no real action); ZERO zeros.

T = 4 (L = 3), terminated, W = 2, H = 3, IGNORED, EDGE (`*` marks padding):

    t   history     history_is_pad   chunk             chunk_is_pad = chunk_is_terminated
    0   [o0* o0]    [1 0]            [a0  a1  a2 ]     [0 0 0]
    1   [o0  o1]    [0 0]            [a1  a2  a2*]     [0 0 1]
    2   [o1  o2]    [0 0]            [a2  a2* a2*]     [0 1 1]
    3   [o2  o3]    [0 0]            [a2* a2* a2*]     [1 1 1]

Every step keeps its place (T steps in, T out): filter on `chunk_is_pad[0]` to keep the
steps whose chunk starts with a real action. The discount follows the flags (0 into and
on a terminal step), as in `sequences`. Encoded frames (`tf.string` leaves) are gathered
as bytes, so a decode applied afterwards decodes only the frames the windows hold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import cast

import numpy as np
import tensorflow as tf

from adders import _episode
from rlds_reverb.core import checks, episodes, types

__all__ = [
    'ChunkOptions',
    'chunks',
    'fill_padding',
]

MASK_FIELDS = (
    types.HISTORY_IS_PAD,
    types.CHUNK_IS_PAD,
    types.CHUNK_IS_TRUNCATED,
    types.CHUNK_IS_TERMINATED,
)


def _as_fields(value: str | Sequence[str], *, argument: str) -> tuple[str, ...]:
    """Returns step field names as a tuple (one name may be given alone)."""
    fields = (value,) if isinstance(value, str) else tuple(value)
    if not all(isinstance(f, str) and f for f in fields):
        raise ValueError(f'{argument}={value!r} is not valid; expected step field names.')
    return fields


@dataclasses.dataclass(frozen=True)
class ChunkOptions:
    """What a chunk holds: its sizes, its fields, where actions end and how padding is filled.

    The one value the `chunks` adder and the `items.Chunk` item kind share (see the module
    docstring for the meaning of each option).

    Args:
      history: W, the steps of each history, >= 1.
      horizon: H, the steps of each chunk, >= 1.
      history_fields: The step fields given a history (a name or names).
      chunk_fields: The step fields given a chunk (a name or names).
      final_action: A `types.FinalAction` or its name.
      fill: A `types.PadFill` or its name.

    Raises:
      ValueError: If `history` or `horizon` < 1, a field list holds something other than
        names, a field is in both lists, or an enum value names no member.

    Example:
      >>> ChunkOptions(2, 8, final_action='recorded')
    """

    history: int = 1
    horizon: int = 1
    history_fields: Sequence[str] = (types.OBSERVATION,)
    chunk_fields: Sequence[str] = (types.ACTION,)
    final_action: types.FinalAction | str = types.FinalAction.IGNORED
    fill: types.PadFill | str = types.PadFill.EDGE

    def __post_init__(self):
        checks.check_int_at_least(self.history, 1, argument='history')
        checks.check_int_at_least(self.horizon, 1, argument='horizon')
        history_fields = _as_fields(self.history_fields, argument='history_fields')
        chunk_fields = _as_fields(self.chunk_fields, argument='chunk_fields')
        both = sorted(set(history_fields) & set(chunk_fields))
        if both:
            raise ValueError(
                f'Fields {both} are in both history_fields and chunk_fields; a field gets a '
                'history or a chunk, not both (copy it into a new step field first).'
            )
        final = types.as_enum(types.FinalAction, self.final_action, argument='final_action')
        fill = types.as_enum(types.PadFill, self.fill, argument='fill')
        for name, value in (
            ('history_fields', history_fields),
            ('chunk_fields', chunk_fields),
            ('final_action', final),
            ('fill', fill),
        ):
            object.__setattr__(self, name, value)


def chunks(
    history: int = 1,
    horizon: int = 1,
    *,
    history_fields: str | Sequence[str] = (types.OBSERVATION,),
    chunk_fields: str | Sequence[str] = (types.ACTION,),
    final_action: types.FinalAction | str = types.FinalAction.IGNORED,
    fill: types.PadFill | str = types.PadFill.EDGE,
    episodes_per_call: int = 1,
):
    """Returns a transform giving every step a history of W steps and a chunk of H steps.

    Each step keeps its fields; history fields become `[W, ...]`, chunk fields `[H, ...]`,
    and `history_is_pad`, `chunk_is_pad`, `chunk_is_truncated`, `chunk_is_terminated` are
    added (see the module docstring). One gather per leaf, per episode, made in the
    per-episode map of the input's source when it has one (what `load` returns).

    Example:
      >>> windows = episodes.apply(adders.chunks(2, 8, final_action='recorded'))

    Args:
      history: W, the steps of each history (t - W + 1 .. t), >= 1.
      horizon: H, the steps of each chunk (t .. t + H - 1), >= 1.
      history_fields: The step fields given a history (default `observation`; a nested
        field is windowed leaf by leaf).
      chunk_fields: The step fields given a chunk (default `action`).
      final_action: Whether the last step's action is real: `types.FinalAction` or its
        name ('ignored', RLDS' definition and the default; 'recorded', as Octo and LeRobot).
      fill: What padded positions hold: `types.PadFill` or its name ('edge', 'zero').
      episodes_per_call: Episodes processed together in one TF call, >= 1 (a speed knob
        for short episodes; the output is the same).

    Returns:
      A function from an RLDS (or episode-tensor) dataset to one of the same form.

    Raises:
      ValueError: If an option is invalid (see `ChunkOptions`), `episodes_per_call` < 1,
        or (when applied) the steps lack a named field or already hold a mask field.
    """
    options = ChunkOptions(history, horizon, history_fields, chunk_fields, final_action, fill)
    episodes_per_call = checks.check_int_at_least(
        episodes_per_call, 1, argument='episodes_per_call'
    )

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        spec = _episode.get_step_spec(dataset, transform='chunks')
        needed = (*options.history_fields, *options.chunk_fields, types.IS_TERMINAL)
        _episode.require_fields(spec, needed, transform='chunks')
        _episode.refuse_overwrite(spec, MASK_FIELDS, transform='chunks')
        return _episode.map_episodes(
            dataset,
            lambda steps, bounds: compute_chunks(steps, bounds, options),
            episodes_per_call=episodes_per_call,
            # Some 25 small ops a call, no control flow: in the source's decoding map.
            stage=_episode.Stage.SOURCE_MAP,
        )

    return _transform


def _column(x: tf.Tensor) -> tf.Tensor:
    """Returns `[N]` bounds as `[N, 1]`, to broadcast over positions; scalars as they are."""
    return x if x.shape.rank == 0 else tf.expand_dims(x, -1)


def compute_chunk_indices(
    bounds: _episode.Bounds, options: ChunkOptions
) -> tuple[tf.Tensor, tf.Tensor, dict[str, tf.Tensor]]:
    """Returns the steps each position reads and the masks, for a flat stream of episodes.

    Returns:
      `(history_index [N, W], chunk_index [N, H], masks)`: the indices clamped into each
      step's episode as EDGE fills them (the nearest real step), and the four mask fields.
    """
    # Few traced ops: each costs per episode (offsets are constants, scalar bounds of one
    # episode broadcast as they are).
    first, last = _column(bounds.first), _column(bounds.last)
    recorded = options.final_action is types.FinalAction.RECORDED
    # E, the last real action; values clamp to it, at least to the episode's first step.
    end = last if recorded else last - 1
    t = tf.expand_dims(bounds.t, 1)
    history_index = t + np.arange(1 - options.history, 1, dtype=np.int32)[None, :]
    chunk_index = t + np.arange(options.horizon, dtype=np.int32)[None, :]
    past_end = chunk_index > end
    terminal = _column(bounds.terminal)
    masks = {
        types.HISTORY_IS_PAD: history_index < first,
        types.CHUNK_IS_PAD: past_end,
        types.CHUNK_IS_TRUNCATED: tf.logical_and(past_end, tf.logical_not(terminal)),
        types.CHUNK_IS_TERMINATED: tf.logical_and(past_end, terminal),
    }
    history_index = tf.maximum(history_index, first)
    chunk_index = tf.minimum(chunk_index, tf.maximum(end, first))
    return history_index, chunk_index, masks


def compute_terminal_discounts(steps: types.Step, bounds: _episode.Bounds) -> types.Step:
    """Returns `steps` with discount 0 into and on a terminal step (none without `discount`).

    The flat-stream form of `episodes.compute_terminal_discounts`: the bounds, not the next
    row's flag, say where each episode ends.
    """
    if types.DISCOUNT not in steps:
        return steps
    zero = tf.logical_and(bounds.terminal, bounds.t >= bounds.last - 1)

    def _discount(d: tf.Tensor) -> tf.Tensor:
        return tf.where(episodes.expand_like(zero, d), tf.zeros_like(d), d)

    return {**steps, types.DISCOUNT: tf.nest.map_structure(_discount, steps[types.DISCOUNT])}


def _gather(nest: types.Nest, index: tf.Tensor, pad: tf.Tensor, fill: types.PadFill):
    """Returns `nest` gathered at `[N, P]` indices; padded positions zeroed for ZERO."""
    if fill is types.PadFill.ZERO:
        return episodes.gather_windows(nest, index, tf.logical_not(pad))
    return tf.nest.map_structure(lambda x: tf.gather(x, index), nest)


def compute_chunks(steps: types.Step, bounds: _episode.Bounds, options: ChunkOptions) -> types.Step:
    """Returns a flat stream of whole episodes with histories, chunks and their masks.

    Example:
      >>> compute_chunks(steps, _episode.episode_bounds(steps), ChunkOptions(2, 4))
    """
    history_index, chunk_index, masks = compute_chunk_indices(bounds, options)
    out = compute_terminal_discounts(steps, bounds)
    fill = cast(types.PadFill, options.fill)  # Made an enum by ChunkOptions.
    for field in options.history_fields:
        out[field] = _gather(steps[field], history_index, masks[types.HISTORY_IS_PAD], fill)
    for field in options.chunk_fields:
        out[field] = _gather(steps[field], chunk_index, masks[types.CHUNK_IS_PAD], fill)
    return {**out, **masks}


def _fill_positions(x: tf.Tensor, index: tf.Tensor, pad: tf.Tensor, fill: types.PadFill):
    """Returns `x` (`[..., P, ...]`) with padded positions refilled: gathered or zeroed."""
    x = tf.convert_to_tensor(x)
    if fill is types.PadFill.ZERO:
        return tf.where(episodes.expand_like(pad, x), tf.zeros_like(x), x)
    axis = pad.shape.rank - 1
    return tf.gather(x, index, axis=axis, batch_dims=axis)


def fill_padding(chunked: types.Nest, options: ChunkOptions) -> types.Nest:
    """Refills the padded positions of chunks as `options.fill` says, from the masks alone.

    Items of `items.Chunk` store padding as zeros (no step is copied into Reverb); this
    gives them the values `chunks(...)` gives (EDGE: the first real history position, the
    last real chunk position). Works on one item or a batch (`[B, ...]` leaves), so it
    serves as a `LearnerDataset` `experience_fn`. A chunk with no real position (the last
    step's under IGNORED, which no item holds) is left as it is.

    Args:
      chunked: Steps with histories, chunks and the masks, any leading batch dimensions.
      options: The options the chunks were made with.

    Returns:
      The same nest, padded positions refilled.

    Example:
      >>> batch = fill_padding(sample.data, item.options)
    """
    history_pad = tf.convert_to_tensor(chunked[types.HISTORY_IS_PAD])
    chunk_pad = tf.convert_to_tensor(chunked[types.CHUNK_IS_PAD])
    # Padding is a prefix of a history and a suffix of a chunk.
    before = tf.reduce_sum(tf.cast(history_pad, tf.int32), -1, keepdims=True)
    history_index = tf.minimum(tf.maximum(tf.range(options.history), before), options.history - 1)
    real = options.horizon - tf.reduce_sum(tf.cast(chunk_pad, tf.int32), -1, keepdims=True)
    positions = tf.range(options.horizon)
    chunk_index = tf.where(real > 0, tf.minimum(positions, real - 1), positions)
    fill = cast(types.PadFill, options.fill)  # Made an enum by ChunkOptions.
    out = dict(chunked)
    for field in options.history_fields:
        out[field] = tf.nest.map_structure(
            lambda x: _fill_positions(x, history_index, history_pad, fill), chunked[field]
        )
    for field in options.chunk_fields:
        out[field] = tf.nest.map_structure(
            lambda x: _fill_positions(x, chunk_index, chunk_pad, fill), chunked[field]
        )
    return out
