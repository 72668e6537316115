"""Collect episodes with a TF-Agents driver and record them (the `record` command's engine).

Policies for `rlds-reverb record`: `random` (TF-Agents' `RandomPyPolicy`) and `scripted`
(the CartPole controller of the embedded dataset, `rlds_reverb.data.cartpole`, with its
score as policy info).

Time limits (docs/semantics.md §11): a recorder marks an episode terminated when its LAST
time step has discount 0. TF-Agents' `TimeLimit` keeps the environment's discount, but
`suite_gym.load` (TF-Agents 0.19 on gym 0.23) also keeps gym's own `TimeLimit`, whose end
`GymWrapper` reports as a termination (discount 0; only gym's info says
`TimeLimit.truncated`). `GymTimeLimitTruncation` restores the discount of such an end, and
`load_gym_env` builds environments whose time limit is TF-Agents' alone.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping

import gym
import numpy as np
from tf_agents.drivers import py_driver
from tf_agents.environments import gym_wrapper, py_environment, suite_gym, wrappers
from tf_agents.policies import py_policy, random_py_policy
from tf_agents.specs import array_spec
from tf_agents.trajectories import policy_step

from rlds_reverb.core import checks
from rlds_reverb.data import cartpole
from rlds_reverb.export import recorder as recorder_lib

SCORE = 'score'  # The scripted controller's policy info: the score it thresholds.
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
      env_name: A Gym environment id (loaded with `load_gym_env`).
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
    if num_episodes < 1:
        raise ValueError(f'num_episodes={num_episodes} must be at least 1.')
    env = load_gym_env(env_name, max_episode_steps=max_episode_steps)
    try:
        env.seed(seed)
        agent_policy = make_policy(policy, env, seed=seed)
        metadata = {'env': env_name, 'policy': str(getattr(policy, 'value', policy)), 'seed': seed}
        with recorder_lib.RldsRecorder(
            directory, agent_policy.trajectory_spec, metadata=metadata
        ) as recorder:
            observers = [recorder]
            if progress is not None:
                observers.append(lambda _: progress(recorder.stats))
            driver = py_driver.PyDriver(env, agent_policy, observers, max_episodes=num_episodes)
            driver.run(env.reset())
        return recorder.stats
    finally:
        env.close()
