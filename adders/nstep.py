"""N-step transitions as new step fields (docs/semantics.md §4).

For each step t < L of an episode (L the index of its last step), with k = min(n, L - t):

    n_step_return    R_t = sum_{i<k} gamma^i (prod_{j<i} d_{t+j}) r_{t+i}
    n_step_discount  D_t = gamma^(k-1) prod_{i<k} d_{t+i}
    next_observation o_{t+k}
    n_step_length    k (int32)

D has one gamma fewer than the full bootstrap factor: the learner multiplies by gamma once
more (Acme's convention, and TF-Agents' `to_n_step_transition`). When the episode is
terminal (`is_terminal` on its last step), d_{L-1} is taken as 0 whatever the data says, so
no transition bootstraps from a terminal state; a truncated episode bootstraps from o_L.

The last step of each episode is kept but starts no transition: its `n_step_length` is 0
and its other new fields are zeros. Filter on `n_step_length > 0` to keep transitions only.
"""

from __future__ import annotations

import tensorflow as tf

from adders import _broadcast, _episode
from rlds_reverb.core import checks, episodes, types
from rlds_reverb.core.frames import FrameFormat

__all__ = [
    'add_n_step_fields',
    'add_next_frame_formats',
    'n_step',
]

_ADDED_FIELDS = (
    types.N_STEP_RETURN,
    types.N_STEP_DISCOUNT,
    types.NEXT_OBSERVATION,
    types.N_STEP_LENGTH,
)


def n_step(n: int, gamma: float, *, episodes_per_call: int = 1):
    """Returns a transform adding n-step transition fields to every step of every episode.

    Each step keeps all of its fields and gains `n_step_return`, `n_step_discount`,
    `next_observation` and `n_step_length` (see the module docstring for the maths).
    Reward and discount may be nested or vector-valued; a single discount broadcasts to the
    reward's structure and shape. The work is O(n T) per episode: one gather per reward
    leaf and n whole-tensor updates.

    Example:
      >>> transitions = episodes.apply(adders.n_step(3, 0.99))

    Args:
      n: The number of steps, >= 1 (1 gives ordinary one-step transitions).
      gamma: The discount factor, in [0, 1].
      episodes_per_call: Episodes processed together in one TF call, >= 1: a speed knob
        that amortizes TF's per-op cost over short episodes, at the price of batching
        copies (for 1,000-step episodes one per call measured fastest); the output is the
        same.

    Returns:
      A function from an RLDS (or episode-tensor) dataset to one of the same form.

    Raises:
      ValueError: If `n` < 1, `gamma` is outside [0, 1], `episodes_per_call` < 1, or
        (when applied) the steps lack `observation`, `reward` or `is_terminal`, or already
        hold an added field.
    """
    n = checks.check_int_at_least(n, 1, argument='n')
    gamma = checks.check_unit_interval(gamma, argument='gamma')
    episodes_per_call = checks.check_int_at_least(
        episodes_per_call, 1, argument='episodes_per_call'
    )

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        spec = _episode.get_step_spec(dataset, transform='n_step')
        _episode.require_fields(
            spec, (types.OBSERVATION, types.REWARD, types.IS_TERMINAL), transform='n_step'
        )
        _episode.refuse_overwrite(spec, _ADDED_FIELDS, transform='n_step')
        _episode.warn_if_no_discount(spec, transform='n_step')
        return _episode.map_episodes(
            dataset,
            lambda steps, bounds: compute_n_step_fields(steps, bounds, n, gamma),
            episodes_per_call=episodes_per_call,
            frames_fn=add_next_frame_formats,
        )

    return _transform


def add_next_frame_formats(formats: dict[str, FrameFormat]) -> dict[str, FrameFormat]:
    """Returns `formats` with `next_observation/...` beside each `observation/...` frame
    field: `next_observation` holds the same encoded frames (empty past the last step)."""
    prefix = types.OBSERVATION
    added = {
        types.NEXT_OBSERVATION + path[len(prefix) :]: fmt
        for path, fmt in formats.items()
        if path == prefix or path.startswith(prefix + '/')
    }
    return {**formats, **added}


def add_n_step_fields(steps: types.Step, n: int, gamma: float) -> types.Step:
    """Returns one whole episode's `steps` (`[T, ...]` tensors) with the n-step fields."""
    return compute_n_step_fields(steps, _episode.episode_bounds(steps), n, gamma)


def compute_n_step_fields(
    steps: types.Step, bounds: _episode.Bounds, n: int, gamma: float
) -> types.Step:
    """Returns a flat stream of whole episodes (`[N, ...]`) with the n-step fields added."""
    t, last = bounds.t, bounds.last
    discount = steps.get(types.DISCOUNT, tf.ones_like(steps[types.IS_FIRST], tf.float32))
    rewards, discounts = _broadcast.broadcast_rewards(steps[types.REWARD], discount)
    length = tf.where(t < last, tf.minimum(n, last - t), 0)
    # d_{L-1} := 0 on terminal episodes: nothing bootstraps from a terminal state.
    cut = tf.logical_and(bounds.terminal, tf.equal(t, last - 1))
    # Term i of step t reads step t + i: one `[N, n]` gather per field, not n shifted copies
    # (fewer ops to trace). Indices past the stream's end are clipped, and masked.
    offsets = tf.range(n)
    inside = offsets[None, :] < length[:, None]
    index = tf.minimum(t[:, None] + offsets[None, :], tf.shape(t)[0] - 1)
    pairs = [
        _n_step_return(r, d, cut, inside, index, length, n, gamma)
        for r, d in zip(tf.nest.flatten(rewards), tf.nest.flatten(discounts), strict=True)
    ]
    valid = length > 0
    next_index = tf.where(valid, t + length, t)
    next_observation = episodes.gather_windows(steps[types.OBSERVATION], next_index, valid)
    return {
        **steps,
        types.N_STEP_RETURN: tf.nest.pack_sequence_as(rewards, [p[0] for p in pairs]),
        types.N_STEP_DISCOUNT: tf.nest.pack_sequence_as(rewards, [p[1] for p in pairs]),
        types.NEXT_OBSERVATION: next_observation,
        types.N_STEP_LENGTH: length,
    }


def _n_step_return(r, d, cut, inside, index, length, n, gamma):
    """Returns (R, D) for one reward leaf; `[N, ...]` r and d of equal shape.

    `inside` (`[N, n]`) marks the terms that belong to each step's transition and `index`
    (`[N, n]`) the steps they read.
    """
    d = tf.where(episodes.expand_like(cut, d), tf.zeros_like(d), d)
    # Term i of every step at once: columns of one gather (a scan along a size-n axis
    # measured slower than these n element-wise updates).
    rewards = tf.unstack(tf.gather(r, index), n, axis=1)
    factors = tf.unstack(tf.gather(d, index), n, axis=1)
    total = tf.zeros_like(r)
    weight = tf.ones_like(r)  # gamma^i prod_{j<i} d_{t+j}
    product = tf.ones_like(d)  # prod_{j<i} d_{t+j}
    for i, term_inside in enumerate(tf.unstack(inside, n, axis=1)):
        term_inside = episodes.expand_like(term_inside, r)
        total += tf.where(term_inside, weight * rewards[i], tf.zeros_like(r))
        d_i = tf.where(term_inside, factors[i], tf.ones_like(d))
        product *= d_i
        weight *= gamma * d_i
    exponent = tf.cast(episodes.expand_like(tf.maximum(length - 1, 0), r), r.dtype)
    discount = tf.pow(tf.constant(gamma, r.dtype), exponent) * product
    discount = tf.where(episodes.expand_like(length > 0, d), discount, tf.zeros_like(d))
    return total, discount
