"""Gym environments for recording: time limits recorded as truncations, not terminations.

Time limits (docs/semantics.md §11): a recorder marks an episode terminated when its LAST
time step has discount 0. TF-Agents' `TimeLimit` keeps the environment's discount, but
`suite_gym.load` (TF-Agents 0.19 on gym 0.23) also keeps gym's own `TimeLimit`, whose end
`GymWrapper` reports as a termination (discount 0; only gym's info says
`TimeLimit.truncated`). `GymTimeLimitTruncation` restores the discount of such an end, and
`load_gym_env` builds environments whose time limit is TF-Agents' alone.
"""

from __future__ import annotations

from collections.abc import Mapping

import gym
import numpy as np
from tf_agents.environments import gym_wrapper, py_environment, suite_gym, wrappers

from rlds_reverb.core import checks

__all__ = [
    'GymTimeLimitTruncation',
    'load_gym_env',
]

GYM_TRUNCATED = 'TimeLimit.truncated'  # Gym's info key: its TimeLimit ended an episode.


def find_gym_wrapper(env: py_environment.PyEnvironment) -> gym_wrapper.GymWrapper:
    """Returns the `GymWrapper` under `env`'s TF-Agents wrappers.

    Raises:
      TypeError: If no `GymWrapper` is under `env` (it is not a Gym environment).
    """
    inner = env
    while not isinstance(inner, gym_wrapper.GymWrapper):
        if not isinstance(inner, wrappers.PyEnvironmentBaseWrapper):
            raise TypeError(
                f'{type(env).__name__} wraps no TF-Agents GymWrapper (found '
                f'{type(inner).__name__}), so it has no gym TimeLimit to read. Pass an '
                'environment from suite_gym.load or suite_gym.wrap_env.'
            )
        inner = inner.wrapped_env()
    return inner


class GymTimeLimitTruncation(wrappers.PyEnvironmentBaseWrapper):
    """Reports the end set by gym's `TimeLimit` as a truncation, not a termination.

    `GymWrapper` gives every gym `done` discount 0, also when gym's `TimeLimit` (kept by
    `suite_gym.load` on gym 0.23) ended the episode. On a LAST time step whose gym info says
    `TimeLimit.truncated`, this wrapper puts back the discount the environment gives its
    other transitions (`suite_gym.load(discount=...)`, 1.0 by default). Gym sets the flag
    only when the episode did not also terminate on that step, so a termination keeps
    discount 0. Ends set by TF-Agents' `TimeLimit` pass unchanged (they keep the discount
    already). Wrap each environment before batching them.

    Example:
      >>> env = suite_gym.load('CartPole-v1', env_wrappers=[GymTimeLimitTruncation])
      >>> with RldsRecorder(directory, policy.trajectory_spec) as recorder:
      ...     PyDriver(env, policy, [recorder], max_episodes=10).run(env.reset())
    """

    def __init__(self, env: py_environment.PyEnvironment):
        """Wraps `env`.

        Args:
          env: A TF-Agents environment with a `GymWrapper` under its wrappers.

        Raises:
          TypeError: If `env` has no `GymWrapper` under it.
        """
        super().__init__(env)
        # GymWrapper keeps the discount it gives transitions in `_discount` (TF-Agents 0.19).
        self._discount = find_gym_wrapper(env)._discount

    def _step(self, action):
        time_step = self._env.step(action)
        info = self._env.get_info()
        if time_step.is_last() and isinstance(info, Mapping) and info.get(GYM_TRUNCATED):
            discount = np.full_like(time_step.discount, self._discount)
            time_step = time_step._replace(discount=discount)
        return time_step


def load_gym_env(
    env_name: str, *, max_episode_steps: int | None = None
) -> py_environment.PyEnvironment:
    """Returns a Gym environment whose time limit ends episodes as truncations.

    Like `suite_gym.load`, but gym's own `TimeLimit` is removed, so the limit is TF-Agents'
    `TimeLimit` alone (which keeps the discount) and may exceed gym's registered one; the
    environment is also wrapped in `GymTimeLimitTruncation`, for gym limits deeper inside.

    Args:
      env_name: A Gym environment id.
      max_episode_steps: The time limit, >= 1 (None: the one registered with gym, if any).

    Returns:
      The TF-Agents environment.

    Raises:
      ValueError: If `max_episode_steps` is not None and below 1.

    Example:
      >>> env = load_gym_env('CartPole-v1')  # 500 steps, ending with discount 1.
    """
    if max_episode_steps is not None:
        checks.check_int_at_least(max_episode_steps, 1, argument='max_episode_steps')
    spec = gym.spec(env_name)
    gym_env = spec.make()
    if isinstance(gym_env, gym.wrappers.TimeLimit):
        gym_env = gym_env.env  # gym 0.23 adds it; TF-Agents' TimeLimit replaces it below.
    limit = spec.max_episode_steps if max_episode_steps is None else max_episode_steps
    return suite_gym.wrap_env(
        gym_env, max_episode_steps=limit, env_wrappers=[GymTimeLimitTruncation]
    )
