"""Collect episodes with a TF-Agents driver and record them (the `record` command's engine).

Policies for `rlds-reverb record`: `random` (TF-Agents' `RandomPyPolicy`) and `scripted`
(the CartPole controller of the embedded dataset, `rlds_reverb.examples.cartpole`, with its
score as policy info).

Episodes end at the environment's time limit as truncations
(`rlds_reverb.export.gym_envs.load_gym_env`).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable
from typing import Any

import numpy as np
from tf_agents.drivers import py_driver
from tf_agents.policies import py_policy, random_py_policy
from tf_agents.specs import array_spec
from tf_agents.trajectories import policy_step

from rlds_reverb.core import checks
from rlds_reverb.examples import cartpole
from rlds_reverb.export import gym_envs
from rlds_reverb.export import recorder as recorder_lib

__all__ = [
    'PolicyName',
    'SCORE',
    'ScriptedCartPolePolicy',
    'make_policy',
    'record_episodes',
]

SCORE = 'score'  # The scripted controller's policy info: the score it thresholds.


class PolicyName(enum.Enum):
    """The policies `rlds-reverb record --policy` can run."""

    RANDOM = 'random'
    SCRIPTED = 'scripted'


class ScriptedCartPolePolicy(py_policy.PyPolicy):
    """Pushes right when `gains @ observation > 0` (CartPole's balancing controller).

    Its policy info is `{'score': gains @ observation}` (float32), recorded as a step field.

    Example:
      >>> policy = ScriptedCartPolePolicy(env.time_step_spec(), env.action_spec())
    """

    def __init__(self, time_step_spec, action_spec):
        info_spec = {SCORE: array_spec.ArraySpec((), np.float32, name=SCORE)}
        super().__init__(time_step_spec, action_spec, info_spec=info_spec)

    def _action(self, time_step, policy_state):
        score = np.asarray(time_step.observation, np.float64) @ cartpole.CONTROLLER_GAINS
        action = np.asarray(score > 0, self.action_spec.dtype)
        info = {SCORE: np.asarray(score, np.float32)}
        return policy_step.PolicyStep(action, policy_state, info)


def make_policy(name: PolicyName | str, env, *, seed: int = 0) -> py_policy.PyPolicy:
    """Returns the named policy for `env`.

    Raises:
      ValueError: If `name` names no policy, or `scripted` is asked of an environment whose
        observations are not CartPole's.
    """
    from rlds_reverb.core import types

    name = types.as_enum(PolicyName, name, argument='policy')
    if name is PolicyName.RANDOM:
        return random_py_policy.RandomPyPolicy(env.time_step_spec(), env.action_spec(), seed=seed)
    if tuple(env.observation_spec().shape) != cartpole.CONTROLLER_GAINS.shape:
        raise ValueError(
            f'--policy scripted is the CartPole controller; this environment observes '
            f'{env.observation_spec().shape}. Use --policy random.'
        )
    return ScriptedCartPolePolicy(env.time_step_spec(), env.action_spec())


def record_episodes(
    directory: os.PathLike | str,
    *,
    env_name: str = 'CartPole-v1',
    num_episodes: int,
    policy: PolicyName | str = PolicyName.RANDOM,
    seed: int = 0,
    max_episode_steps: int | None = None,
    progress: Callable[[recorder_lib.RecordStats], None] | None = None,
) -> recorder_lib.RecordStats:
    """Runs a TF-Agents `PyDriver` for `num_episodes` episodes and records them as RLDS.

    Args:
      directory: The dataset (version) directory to write.
      env_name: A Gym environment id (loaded with `gym_envs.load_gym_env`).
      num_episodes: Episodes to record, >= 1.
      policy: A `PolicyName`.
      seed: Seeds the environment and the random policy.
      max_episode_steps: The time limit, >= 1 (None: the environment's own); its end is
        recorded as a truncation (`is_last` without `is_terminal`).
      progress: Optional `fn(stats)` called after each step of the driver.

    Returns:
      The `RecordStats`.

    Raises:
      ValueError: If `num_episodes` < 1, `max_episode_steps` < 1, or the policy does not
        fit the environment.

    Example:
      >>> record_episodes('/tmp/cartpole_rlds/1.0.0', num_episodes=10, policy='scripted')
    """
    checks.check_int_at_least(num_episodes, 1, argument='num_episodes')
    env = gym_envs.load_gym_env(env_name, max_episode_steps=max_episode_steps)
    try:
        env.seed(seed)
        agent_policy = make_policy(policy, env, seed=seed)
        metadata = {'env': env_name, 'policy': str(getattr(policy, 'value', policy)), 'seed': seed}
        with recorder_lib.RldsRecorder(
            directory, agent_policy.trajectory_spec, metadata=metadata
        ) as recorder:
            observers: list[Callable[[Any], None]] = [recorder]
            if progress is not None:
                observers.append(lambda _: progress(recorder.stats))
            driver = py_driver.PyDriver(env, agent_policy, observers, max_episodes=num_episodes)
            driver.run(env.reset())
        return recorder.stats
    finally:
        env.close()
