"""Fixed-length windows of steps (docs/semantics.md §6).

Windows of `length` steps start every `period` steps of an episode (at 0, period,
2 period, ...). Every step inside the episode is covered by full windows except perhaps a
tail; `end` (a `types.EndBehavior`) decides what happens to that tail. For an episode of 7
steps (0..6), `length=3`, `period=3`:

    TRUNCATE  [0 1 2] [3 4 5] [6]           the last window is shorter (the default)
    PAD       [0 1 2] [3 4 5] [6 _ _]       null steps (zeros, flags false), `mask` false
    DROP      [0 1 2] [3 4 5]               the tail starts no window
    LAST      [0 1 2] [3 4 5] [4 5 6]       the last `length` steps; padded when the
                                            episode is shorter than `length`
    CONTINUE  [0 1 2] [3 4 5] [6 0' 1'] ... windows cross into the next episode (its first
                                            step has `is_first`); the stream's own tail is
                                            padded as PAD does

With `period < length` windows overlap, and the tail is the first window that does not fit,
kept only if it holds steps no full window covers (`length=3`, `period=2`, 8 steps:
[0 1 2] [2 3 4] [4 5 6] then the tail [6 7]).

Burn-in: the first `burn_in` steps of every window have `is_burn_in` true (a recurrent
learner unrolls through them to warm its state and trains on the rest). `period` defaults
to `length - burn_in`, so that the trained parts tile the episode and consecutive windows
overlap by exactly `burn_in` steps; the first `burn_in` steps of an episode are only ever
burn-in. For 8 steps, `length=4`, `burn_in=2` (so `period=2`), `*` marking burn-in:

    [0* 1* 2  3 ]
          [2* 3* 4  5 ]
                [4* 5* 6  7 ]

Every window is a dict of `[length, ...]` tensors (shorter for TRUNCATE) holding the step
fields plus `mask` (true on real steps, false on padding) and `is_burn_in`. The discount of
the transition into a terminal step, and of the terminal step itself, is 0 whatever the
data says (docs/semantics.md §1), as in two-step trajectories. Episode-level
fields of RLDS episodes are not carried into windows.
"""

from __future__ import annotations

import tensorflow as tf

from adders import _episode
from rlds_reverb.core import checks, episodes, types

__all__ = [
    'sequences',
]


def sequences(
    length: int,
    period: int | None = None,
    *,
    end: types.EndBehavior | str = types.EndBehavior.TRUNCATE,
    burn_in: int = 0,
):
    """Returns a transform from episodes to a dataset of fixed-length step windows.

    TRUNCATE is the default because it drops no step and invents none; PAD (fixed shapes)
    and LAST are the choices when a learner needs `[length, ...]` windows.

    Example:
      >>> windows = episodes.apply(adders.sequences(80, end='pad', burn_in=40))

    Args:
      length: Steps per window, >= 1 (burn-in steps included).
      period: Steps between window starts, >= 1; defaults to `length - burn_in`.
      end: What happens at the end of an episode: a `types.EndBehavior` or its name.
      burn_in: Leading steps of each window marked `is_burn_in`, in [0, length).

    Returns:
      A function from an RLDS (or episode-tensor) dataset to a dataset of windows.

    Raises:
      ValueError: If `length` < 1, `period` < 1, `burn_in` is outside [0, length), `end`
        names no `EndBehavior`, or (when applied) the steps already hold `mask` or
        `is_burn_in`.
    """
    length = checks.check_int_at_least(length, 1, argument='length')
    burn_in = checks.check_int_at_least(burn_in, 0, argument='burn_in')
    if burn_in >= length:
        raise ValueError(
            f'burn_in={burn_in} is not valid; expected 0 <= burn_in < length={length}.'
        )
    period = length - burn_in if period is None else period
    period = checks.check_int_at_least(period, 1, argument='period')
    behavior = types.as_enum(types.EndBehavior, end, argument='end')

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        spec = _episode.get_step_spec(dataset, transform='sequences')
        _episode.refuse_overwrite(spec, (types.MASK, types.IS_BURN_IN), transform='sequences')
        if behavior is types.EndBehavior.CONTINUE:
            return _continue_windows(dataset, length, period, burn_in)
        windows = _episode.to_steps_tensors(dataset).map(
            lambda steps: episode_windows(
                episodes.apply_terminal_discounts(steps), length, period, behavior, burn_in
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        windows = windows.unbatch()
        if behavior is types.EndBehavior.TRUNCATE:
            windows = windows.map(episodes.without_autograph(_truncate_padding))
        return windows

    return _transform


def compute_window_starts(
    size: tf.Tensor, length: int, period: int, end: types.EndBehavior
) -> tf.Tensor:
    """Returns the start of each window of an episode of `size` steps (not CONTINUE).

    Windows start every `period` steps; the first one that does not fit is kept only if it
    covers steps no full window covers (see `_is_kept`). DROP drops it; LAST moves it back
    to end at the episode's end (to 0 when the episode is shorter than `length`); TRUNCATE
    and PAD keep it where it is, to be shortened or padded.

    Example:
      >>> compute_window_starts(tf.constant(7), 3, 3, EndBehavior.LAST)  # [0, 3, 4]
    """
    starts = tf.range(0, size, period)
    sizes = tf.minimum(length, size - starts)
    keep = _is_kept(starts, sizes, length, period)
    starts = tf.boolean_mask(starts, keep)
    full = tf.boolean_mask(sizes, keep) >= length
    if end is types.EndBehavior.DROP:
        return tf.boolean_mask(starts, full)
    if end is types.EndBehavior.LAST:
        return tf.where(full, starts, tf.maximum(size - length, 0))
    return starts


def episode_windows(
    steps: types.Step, length: int, period: int, end: types.EndBehavior, burn_in: int
) -> types.Step:
    """Returns all windows of one episode as `[W, length, ...]` tensors, with mask/burn-in."""
    size = tf.shape(steps[types.IS_FIRST])[0]
    starts = compute_window_starts(size, length, period, end)
    index = starts[:, None] + tf.range(length)[None, :]
    return gather_window_steps(steps, index, size, burn_in)


def gather_window_steps(
    steps: types.Step, index: tf.Tensor, size: tf.Tensor, burn_in: int
) -> types.Step:
    """Returns steps at `[W, length]` indices; indices >= size become null steps."""
    valid = index < size
    windows = episodes.gather_windows(steps, tf.where(valid, index, tf.zeros_like(index)), valid)
    position = tf.broadcast_to(tf.range(tf.shape(index)[1])[None, :], tf.shape(index))
    return {**windows, types.MASK: valid, types.IS_BURN_IN: position < burn_in}


def _is_kept(starts, sizes, length: int, period: int) -> tf.Tensor:
    """Whether windows (by start and size in steps) are emitted before `end` is applied.

    Full windows are; so is the first window that does not fit, if it covers steps that no
    full window does: it starts the episode, or it is longer than the overlap of windows.
    """
    return tf.logical_or(
        tf.logical_or(tf.equal(sizes, length), sizes > length - period), tf.equal(starts, 0)
    )


def _truncate_padding(window: types.Step) -> types.Step:
    """Cuts a window's padded tail off (TRUNCATE windows are shorter, not padded)."""
    size = tf.reduce_sum(tf.cast(window[types.MASK], tf.int32))
    return tf.nest.map_structure(lambda x: x[:size], window)


def _continue_windows(
    dataset: tf.data.Dataset, length: int, period: int, burn_in: int
) -> tf.data.Dataset:
    """Windows over the stream of all steps, crossing episode boundaries (CONTINUE)."""
    # Each episode's discounts follow its flags before the episodes become one stream.
    tensors = _episode.to_steps_tensors(dataset).map(
        episodes.without_autograph(episodes.apply_terminal_discounts),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    stream = tensors.flat_map(tf.data.Dataset.from_tensor_slices)
    windows = stream.window(length, shift=period, drop_remainder=False)
    windows = windows.flat_map(
        episodes.without_autograph(lambda w: tf.data.Dataset.zip(w).batch(length))
    )

    @episodes.without_autograph
    def _keep(index: tf.Tensor, window: types.Step) -> tf.Tensor:
        size = tf.shape(window[types.IS_FIRST])[0]
        return _is_kept(index * period, size, length, period)

    def _pad(window: types.Step) -> types.Step:
        size = tf.shape(window[types.IS_FIRST])[0]
        return gather_window_steps(window, tf.range(length)[None, :], size, burn_in)

    pad = episodes.without_autograph(lambda _, w: _pad(w))
    return windows.enumerate().filter(_keep).map(pad).unbatch()
