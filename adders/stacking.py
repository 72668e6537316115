"""Frame stacking (docs/semantics.md §7), as Tianshou's `stack_num`.

The observation of step t becomes the last k observations of its episode,
[o_{t-k+1}, ..., o_t], along a new *leading* axis (oldest first; `[k, ...]` per step, so
`[T, k, ...]` per episode), with o_0 repeated before the episode start. Every leaf of a
nested observation is stacked the same way. Apply it before `n_step` so that
`next_observation` is stacked too.
"""

from __future__ import annotations

import tensorflow as tf

from adders import _episode
from rlds_reverb.core import checks, types

__all__ = [
    'stack_frames',
    'stack_observations',
]


def stack_frames(k: int, *, episodes_per_call: int = 1):
    """Returns a transform replacing each observation with the stack of the last k.

    Example:
      >>> stacked = episodes.apply(adders.stack_frames(4))  # uint8[84,84,3] -> [4,84,84,3]

    Args:
      k: The number of observations per stack, >= 1.
      episodes_per_call: Episodes processed together in one TF call, >= 1 (a speed knob
        for short episodes; the output is the same).

    Returns:
      A function from an RLDS (or episode-tensor) dataset to one of the same form.

    Raises:
      ValueError: If `k` < 1, `episodes_per_call` < 1, or (when applied) the steps hold no
        `observation`.
    """
    k = checks.check_int_at_least(k, 1, argument='k')
    episodes_per_call = checks.check_int_at_least(
        episodes_per_call, 1, argument='episodes_per_call'
    )

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        spec = _episode.get_step_spec(dataset, transform='stack_frames')
        _episode.require_fields(spec, (types.OBSERVATION,), transform='stack_frames')
        return _episode.map_episodes(
            dataset,
            lambda steps, bounds: compute_stacked_observations(steps, bounds, k),
            episodes_per_call=episodes_per_call,
        )

    return _transform


def stack_observations(steps: types.Step, k: int) -> types.Step:
    """Returns one whole episode's `steps` with each observation leaf stacked to `[T, k, ...]`."""
    return compute_stacked_observations(steps, _episode.episode_bounds(steps), k)


def compute_stacked_observations(steps: types.Step, bounds: _episode.Bounds, k: int) -> types.Step:
    """Returns a flat stream of whole episodes with observations stacked to `[N, k, ...]`."""
    # Row t gathers steps t-k+1 .. t, clipped at its episode's start (o_0 repeated).
    index = tf.maximum(
        bounds.t[:, None] + tf.range(1 - k, 1)[None, :], tf.expand_dims(bounds.first, -1)
    )
    stacked = tf.nest.map_structure(lambda o: tf.gather(o, index), steps[types.OBSERVATION])
    return {**steps, types.OBSERVATION: stacked}
