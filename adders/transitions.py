"""N-step fields -> TF-Agents `Transition`s for `DqnAgent(n_step_update=n)`.

`DqnAgent` turns a `Trajectory` of n + 1 frames into an n-step `Transition` with
`trajectory.to_n_step_transition`: next reward sum_{i<n} gamma^i (prod_{j<i} d) r and next
discount gamma^(n-1) prod d, then forms the target next_reward + gamma * next_discount *
Q(next observation). Given a `Transition` it converts nothing, only checks the spec. So the
transitions built here carry `n_step_return` as the next reward and `n_step_discount` (one
gamma fewer) as the next discount, which makes the agent's target exactly
R + gamma^k prod_{i<k} d_{t+i} Q(o_{t+k}), right also for the shorter transitions at the end
of an episode (k < n, which a `Trajectory` of n + 1 frames cannot express) and 0-bootstrap
on terminal episodes. Build the agent with the same `gamma` as `adders.n_step`; its
`n_step_update` only validates `Trajectory` inputs and plays no part here.
"""

from __future__ import annotations

import tensorflow as tf
from tf_agents.trajectories import policy_step, trajectory
from tf_agents.trajectories import time_step as ts

from adders import _episode
from rlds_reverb.core import types

__all__ = [
    'make_n_step_transitions',
    'to_dqn_transitions',
]

_NEEDED = (
    types.OBSERVATION,
    types.ACTION,
    types.REWARD,
    types.DISCOUNT,
    types.IS_FIRST,
    types.IS_LAST,
    types.N_STEP_RETURN,
    types.N_STEP_DISCOUNT,
    types.NEXT_OBSERVATION,
    types.N_STEP_LENGTH,
)


def to_dqn_transitions():
    """Returns a transform from `n_step` output to a dataset of TF-Agents `Transition`s.

    One unbatched `Transition` per step that starts a transition (`n_step_length > 0`; the
    last step of each episode starts none). `time_step` holds step t (its reward and
    discount are unknown and zero, as in `trajectory.to_transition`), `action_step` its
    action, `next_time_step` the observation o_{t+k} with reward `n_step_return` and
    discount `n_step_discount`, step type LAST when o_{t+k} is the episode's last step.

    Example:
      >>> data = episodes.apply(adders.n_step(3, 0.99)).apply(adders.to_dqn_transitions())
      >>> agent = dqn_agent.DqnAgent(..., n_step_update=3, gamma=0.99)
      >>> agent.train(next(iter(data.batch(64))))

    Returns:
      A function from an RLDS (or episode-tensor) dataset, output of `adders.n_step`, to
      a dataset of `Transition`s.

    Raises:
      ValueError: When applied, if the steps lack the n-step fields or RLDS step fields.
    """

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        spec = _episode.get_step_spec(dataset, transform='to_dqn_transitions')
        _episode.require_fields(spec, _NEEDED, transform='to_dqn_transitions (after n_step)')
        episodes = _episode.to_steps_tensors(dataset)
        transitions = episodes.map(
            episode_transitions, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        return transitions.unbatch()

    return _transform


def _step_types(is_first: tf.Tensor, is_last: tf.Tensor) -> tf.Tensor:
    return tf.where(
        is_first, ts.StepType.FIRST, tf.where(is_last, ts.StepType.LAST, ts.StepType.MID)
    )


def make_n_step_transitions(
    observation: types.Nest,
    action: types.Nest,
    n_step_return: types.Nest,
    n_step_discount: types.Nest,
    next_observation: types.Nest,
    *,
    step_type: tf.Tensor | None = None,
    next_step_type: tf.Tensor | None = None,
    discount: tf.Tensor | None = None,
) -> trajectory.Transition:
    """Returns the TF-Agents `Transition`s of a batch of n-step transitions (`[N, ...]`).

    The one builder of n-step `Transition`s: `to_dqn_transitions` (from episodes) and the
    demo learner (from Reverb items) both use it. The next time step carries
    `n_step_return` as reward and `n_step_discount` (one gamma fewer, float32) as discount,
    so `DqnAgent`'s target R + gamma * D * Q(o') is the n-step target.

    Args:
      observation: o_t.
      action: a_t.
      n_step_return: R.
      n_step_discount: D.
      next_observation: o_{t+k}.
      step_type: The step type of o_t (MID when None).
      next_step_type: The step type of o_{t+k} (MID when None).
      discount: The (unknown, zero) discount of the first time step; zeros shaped like D
        when None.

    Returns:
      A `Transition` of `[N, ...]` leaves.

    Example:
      >>> make_n_step_transitions(obs, action, ret, disc, next_obs)
    """
    next_discount = tf.nest.map_structure(lambda d: tf.cast(d, tf.float32), n_step_discount)
    mid = tf.fill(tf.shape(tf.nest.flatten(n_step_return)[0])[:1], ts.StepType.MID)
    time_step = ts.TimeStep(
        step_type=mid if step_type is None else step_type,
        reward=tf.nest.map_structure(tf.zeros_like, n_step_return),
        discount=tf.nest.map_structure(tf.zeros_like, next_discount)
        if discount is None
        else discount,
        observation=observation,
    )
    next_time_step = ts.TimeStep(
        step_type=mid if next_step_type is None else next_step_type,
        reward=n_step_return,
        discount=next_discount,
        observation=next_observation,
    )
    action_step = policy_step.PolicyStep(action=action, state=(), info=())
    return trajectory.Transition(time_step, action_step, next_time_step)


def episode_transitions(steps: types.Step) -> trajectory.Transition:
    """Returns the `[N, ...]` `Transition`s of one episode's `[T, ...]` n-step steps."""
    starts = steps[types.N_STEP_LENGTH] > 0
    t = tf.range(tf.shape(starts)[0])
    last = tf.shape(starts)[0] - 1
    next_is_last = tf.equal(t + steps[types.N_STEP_LENGTH], last)
    transition = make_n_step_transitions(
        steps[types.OBSERVATION],
        steps[types.ACTION],
        steps[types.N_STEP_RETURN],
        steps[types.N_STEP_DISCOUNT],
        steps[types.NEXT_OBSERVATION],
        step_type=_step_types(steps[types.IS_FIRST], steps[types.IS_LAST]),
        next_step_type=tf.where(next_is_last, ts.StepType.LAST, ts.StepType.MID),
        discount=tf.zeros_like(tf.cast(steps[types.DISCOUNT], tf.float32)),
    )
    return tf.nest.map_structure(lambda x: tf.boolean_mask(x, starts), transition)
