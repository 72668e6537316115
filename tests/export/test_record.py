"""Record: a TF-Agents driver -> RldsRecorder -> rlds_reverb.load -> validate, n-step checked.

Real CartPole environments (TF-Agents' suite_gym), real PyDrivers and policies; the n-step
transitions of the recorded data are compared with those computed here, in NumPy, from the
trajectories the driver emitted. Time limits are tested at CartPole-v1's own (500 steps),
imposed by gym's `TimeLimit`, by TF-Agents' `TimeLimit` and by both stacked.
"""

from __future__ import annotations

import gym
import numpy as np
import pytest
import tree
from tf_agents.drivers import py_driver
from tf_agents.environments import (
    batched_py_environment,
    gym_wrapper,
    random_py_environment,
    suite_gym,
    wrappers,
)
from tf_agents.policies import random_py_policy

import adders
from rlds_reverb import cli
from rlds_reverb.check.validation import validate
from rlds_reverb.core import types
from rlds_reverb.core.errors import SourceNotFoundError
from rlds_reverb.examples import collect
from rlds_reverb.export import gym_envs, recorder
from rlds_reverb.read.loading import load
from tests import builders

GAMMA, N = 0.9, 3


def split_episodes(trajectories: list) -> list[list]:
    """Returns the trajectories of each ended episode, its boundary trajectory last."""
    episodes, current = [], None
    for trajectory in trajectories:
        if int(trajectory.step_type) == 0:
            current = []
        if current is None:
            continue
        current.append(trajectory)
        if int(trajectory.step_type) == 2:
            episodes.append(current)
            current = None
    return episodes


def n_step_by_hand(episode: list) -> dict:
    """N-step returns, discounts and next observations straight from the trajectories."""
    length = len(episode) - 1  # L: the boundary trajectory holds o_L.
    rewards = np.array([t.reward for t in episode[:-1]], np.float64)
    discounts = np.array([t.discount for t in episode[:-1]], np.float64)
    observations = np.stack([t.observation for t in episode])
    out = {'return': [], 'discount': [], 'next': []}
    for t in range(length):
        k = min(N, length - t)
        weights = GAMMA ** np.arange(k) * np.concatenate(
            [[1.0], np.cumprod(discounts[t : t + k - 1])]
        )
        out['return'].append(np.sum(weights * rewards[t : t + k]))
        out['discount'].append(GAMMA ** (k - 1) * np.prod(discounts[t : t + k]))
        out['next'].append(observations[t + k])
    return {k: np.asarray(v) for k, v in out.items()}


def run_driver(env, policy, directory, *, max_episodes: int):
    collected = []
    with recorder.RldsRecorder(directory, policy.trajectory_spec) as rec:
        driver = py_driver.PyDriver(env, policy, [rec, collected.append], max_episodes=max_episodes)
        driver.run(env.reset())
    return rec.stats, collected


def test_recorded_episodes_validate_and_match_the_driver_n_step(tmp_path):
    env = suite_gym.load('CartPole-v1', max_episode_steps=40)
    env.seed(1)
    policy = collect.ScriptedCartPolePolicy(env.time_step_spec(), env.action_spec())
    noisy = random_py_policy.RandomPyPolicy(env.time_step_spec(), env.action_spec(), seed=3)
    stats, collected = run_driver(env, policy, tmp_path / 'a', max_episodes=2)
    more, collected_more = run_driver(env, noisy, tmp_path / 'b', max_episodes=3)
    assert (stats.truncated, more.episodes) == (2, 3) and more.terminated  # Both endings.

    for directory, trajectories, count in (
        (tmp_path / 'a', collected, 2),
        (tmp_path / 'b', collected_more, 3),
    ):
        episodes = load(directory)
        report = validate(episodes, on_invalid='report')
        assert report.valid == count and report.ok
        recorded = builders.read_episodes(episodes)
        by_hand = split_episodes(trajectories)
        nstep = builders.read_episodes(episodes.apply(adders.n_step(N, GAMMA)))
        for steps, expected, transitions in zip(recorded, by_hand, nstep, strict=True):
            length = len(expected) - 1
            terminal = float(expected[-2].discount) == 0.0
            assert steps[types.IS_LAST].tolist() == [False] * length + [True]
            assert steps[types.IS_TERMINAL].tolist() == [False] * length + [terminal]
            np.testing.assert_array_equal(steps[types.OBSERVATION][-1], expected[-1].observation)
            want = n_step_by_hand(expected)
            np.testing.assert_allclose(
                transitions[types.N_STEP_RETURN][:length], want['return'], rtol=1e-6
            )
            np.testing.assert_allclose(
                transitions[types.N_STEP_DISCOUNT][:length], want['discount'], rtol=1e-6
            )
            np.testing.assert_array_equal(
                transitions[types.NEXT_OBSERVATION][:length], want['next']
            )
    # Policy info is a step field.
    scores = builders.read_episodes(load(tmp_path / 'a'))[0][collect.SCORE]
    np.testing.assert_allclose(
        scores[:-1], [t.policy_info[collect.SCORE] for t in collected[: len(scores) - 1]]
    )


def test_batched_driver_keeps_environments_apart(tmp_path):
    envs = [suite_gym.load('CartPole-v1', max_episode_steps=25) for _ in range(2)]
    for seed, env in enumerate(envs):
        env.seed(seed)
    env = batched_py_environment.BatchedPyEnvironment(envs, multithreading=False)
    policy = random_py_policy.RandomPyPolicy(
        env.time_step_spec(), env.action_spec(), seed=0, outer_dims=(2,)
    )
    stats, collected = run_driver(env, policy, tmp_path / 'out', max_episodes=5)
    per_env = [
        split_episodes([tree.map_structure(lambda x, i=i: x[i], t) for t in collected])
        for i in range(2)
    ]
    expected = [e for episodes in per_env for e in episodes]
    recorded = builders.read_episodes(load(tmp_path / 'out'))
    assert len(recorded) == stats.episodes == len(expected) >= 5
    remaining = [np.stack([t.observation for t in e]) for e in expected]
    for steps in recorded:
        match = [
            i
            for i, obs in enumerate(remaining)
            if obs.shape == steps[types.OBSERVATION].shape
            and np.array_equal(obs, steps[types.OBSERVATION])
        ]
        assert match, 'a recorded episode mixes environments'
        remaining.pop(match[0])
    assert validate(load(tmp_path / 'out'), on_invalid='report').valid == len(recorded)


def test_an_error_keeps_the_whole_episodes_and_a_kill_is_named(tmp_path):
    env = suite_gym.load('CartPole-v1', max_episode_steps=10)
    policy = random_py_policy.RandomPyPolicy(env.time_step_spec(), env.action_spec(), seed=0)
    calls = []

    def fail_late(trajectory):
        calls.append(trajectory)
        if len(calls) == 25:
            raise RuntimeError('collector crashed')

    rec = recorder.RldsRecorder(tmp_path / 'out', policy.trajectory_spec)
    with pytest.raises(RuntimeError, match='collector crashed') as caught, rec:
        py_driver.PyDriver(env, policy, [rec, fail_late], max_episodes=100).run(env.reset())
    assert rec.stats.episodes >= 1 and rec.stats.partial_episodes == 1
    assert f'holds the {rec.stats.episodes} whole episode(s)' in str(caught.value.__notes__)
    episodes = load(tmp_path / 'out')
    assert validate(episodes, on_invalid='report').valid == rec.stats.episodes
    # A process killed before closing leaves a hidden staging directory; load names it.
    killed = recorder.RldsRecorder(tmp_path / 'killed', policy.trajectory_spec)
    py_driver.PyDriver(env, policy, [killed], max_episodes=1).run(env.reset())
    with pytest.raises(SourceNotFoundError, match='was interrupted before it completed'):
        load(tmp_path / 'killed')
    killed.close()
    assert len(list(load(tmp_path / 'killed'))) == 1


def test_policy_info_named_like_a_step_field_is_refused():
    env = suite_gym.load('CartPole-v1')
    spec = collect.ScriptedCartPolePolicy(env.time_step_spec(), env.action_spec()).trajectory_spec
    spec = spec._replace(policy_info={types.REWARD: spec.reward})
    with pytest.raises(ValueError, match=r"\['reward'\] have the names of RLDS step fields"):
        recorder.RldsRecorder('/tmp/never', spec)


def test_record_episodes_refuses_bad_options(tmp_path):
    with pytest.raises(ValueError, match='num_episodes=0 must be at least 1'):
        collect.record_episodes(tmp_path / 'out', num_episodes=0)
    with pytest.raises(ValueError, match='--policy scripted is the CartPole controller'):
        collect.record_episodes(
            tmp_path / 'out', env_name='MountainCar-v0', num_episodes=1, policy='scripted'
        )
    with pytest.raises(ValueError, match="policy='greedy' is not valid"):
        collect.record_episodes(tmp_path / 'out', num_episodes=1, policy='greedy')
    with pytest.raises(ValueError, match='max_episode_steps=0 is not valid; expected an int'):
        collect.record_episodes(tmp_path / 'out', num_episodes=1, max_episode_steps=0)


def test_an_empty_dataset_is_refused_and_a_closed_writer_too(tmp_path):
    from rlds_reverb.storage import tfds_writer

    writer = tfds_writer.RldsDatasetWriter(
        tmp_path / 'toy' / '1.0.0', features=builders.step_features(), name='toy'
    )
    with pytest.raises(ValueError, match='No episode was added'):
        writer.close()
    assert not (tmp_path / 'toy' / '1.0.0').exists()
    with pytest.raises(RuntimeError, match='is closed'):
        writer.add_episode({types.STEPS: builders.episode(2)})


# --- Time limits: truncations, whichever wrapper imposed them -------------------------------

CARTPOLE_LIMIT = 500  # CartPole-v1's own time limit (gym's registry).


def read_endings(directory) -> list[tuple[int, bool, float]]:
    """Each recorded episode's (transitions, is_terminal, discount into o_L), validated."""
    episodes = load(directory)
    report = validate(episodes, on_invalid='report')
    assert report.ok, report.format()
    endings = []
    for steps in builders.read_episodes(episodes):
        length = len(steps[types.IS_LAST]) - 1
        assert steps[types.IS_LAST].tolist() == [False] * length + [True]
        assert not steps[types.IS_TERMINAL][:-1].any()
        # The last step repeats the discount of the transition into o_L (§11).
        assert steps[types.DISCOUNT][-1] == steps[types.DISCOUNT][-2]
        endings.append(
            (length, bool(steps[types.IS_TERMINAL][-1]), float(steps[types.DISCOUNT][-1]))
        )
    return endings


def time_limits(env) -> tuple[int | None, int | None]:
    """(gym's TimeLimit, TF-Agents' TimeLimit) of `env`, None where absent."""
    tf_agents_limit, inner = None, env
    while not isinstance(inner, gym_wrapper.GymWrapper):
        if isinstance(inner, wrappers.TimeLimit):
            tf_agents_limit = inner.duration
        inner = inner.wrapped_env()
    gym_limit, gym_env = None, inner.gym
    while isinstance(gym_env, gym.Wrapper):
        if isinstance(gym_env, gym.wrappers.TimeLimit):
            gym_limit = gym_env._max_episode_steps
        gym_env = gym_env.env
    return gym_limit, tf_agents_limit


def cartpole_without_gyms_limit() -> gym.Env:
    return gym.make('CartPole-v1').env  # gym.make's outermost wrapper is its TimeLimit.


TRUNCATE = [gym_envs.GymTimeLimitTruncation]
# name: (environment, (gym's limit, TF-Agents' limit), the limit that fires, its discount)
WRAPPINGS = {
    'gym TimeLimit only': (
        lambda: suite_gym.load('CartPole-v1', max_episode_steps=0, env_wrappers=TRUNCATE),
        (CARTPOLE_LIMIT, None),
        CARTPOLE_LIMIT,
        1.0,
    ),
    'gym TimeLimit only, discount 0.9': (
        lambda: suite_gym.wrap_env(
            gym.wrappers.TimeLimit(cartpole_without_gyms_limit(), 100),
            discount=0.9,
            env_wrappers=TRUNCATE,
        ),
        (100, None),
        100,
        np.float32(0.9),
    ),
    "TF-Agents' TimeLimit only": (
        lambda: suite_gym.wrap_env(
            cartpole_without_gyms_limit(), max_episode_steps=100, env_wrappers=TRUNCATE
        ),
        (None, 100),
        100,
        1.0,
    ),
    'both at 500 (suite_gym.load default)': (
        lambda: suite_gym.load('CartPole-v1', env_wrappers=TRUNCATE),
        (CARTPOLE_LIMIT, CARTPOLE_LIMIT),
        CARTPOLE_LIMIT,
        1.0,
    ),
    "both, TF-Agents' fires": (
        lambda: suite_gym.load('CartPole-v1', max_episode_steps=120, env_wrappers=TRUNCATE),
        (CARTPOLE_LIMIT, 120),
        120,
        1.0,
    ),
    "both, gym's fires": (
        lambda: suite_gym.load('CartPole-v1', max_episode_steps=600, env_wrappers=TRUNCATE),
        (CARTPOLE_LIMIT, 600),
        CARTPOLE_LIMIT,
        1.0,
    ),
    'gym_envs.load_gym_env': (
        lambda: gym_envs.load_gym_env('CartPole-v1'),
        (None, CARTPOLE_LIMIT),
        CARTPOLE_LIMIT,
        1.0,
    ),
}


@pytest.mark.parametrize('wrapping', list(WRAPPINGS))
def test_a_time_limit_is_a_truncation_whichever_wrapper_imposed_it(tmp_path, wrapping):
    make_env, limits, limit, discount = WRAPPINGS[wrapping]
    env = make_env()
    assert time_limits(env) == limits
    env.seed(0)
    scripted = collect.ScriptedCartPolePolicy(env.time_step_spec(), env.action_spec())
    noisy = random_py_policy.RandomPyPolicy(
        env.time_step_spec(), env.action_spec(), seed=0, info_spec=scripted.info_spec
    )
    with recorder.RldsRecorder(tmp_path / 'out', scripted.trajectory_spec) as rec:
        for policy in (scripted, noisy, noisy):
            py_driver.PyDriver(env, policy, [rec], max_episodes=1).run(env.reset())
    assert (rec.stats.terminated, rec.stats.truncated) == (2, 1)
    truncated, *terminated = read_endings(tmp_path / 'out')
    assert truncated == (limit, False, discount)  # The scripted controller keeps the pole up.
    assert [(is_terminal, d) for _, is_terminal, d in terminated] == [(True, 0.0)] * 2
    assert all(length < limit for length, _, _ in terminated)


@pytest.mark.parametrize('which', ['gym', 'tf_agents'])
def test_a_fall_on_the_limit_step_is_a_termination(tmp_path, which):
    def record(limit: int | None, name: str) -> list:
        base = cartpole_without_gyms_limit()
        if which == 'gym' and limit is not None:
            env = suite_gym.wrap_env(gym.wrappers.TimeLimit(base, limit), env_wrappers=TRUNCATE)
        else:
            env = suite_gym.wrap_env(base, max_episode_steps=limit, env_wrappers=TRUNCATE)
        env.seed(5)
        policy = random_py_policy.RandomPyPolicy(env.time_step_spec(), env.action_spec(), seed=5)
        run_driver(env, policy, tmp_path / name, max_episodes=1)
        return read_endings(tmp_path / name)

    ((fall, is_terminal, _),) = record(None, 'free')  # Falls by itself after `fall` steps.
    assert is_terminal
    assert record(fall, 'at') == [(fall, True, 0.0)]
    assert record(fall - 1, 'before') == [(fall - 1, False, 1.0)]


def test_the_truncation_wrapper_refuses_an_environment_without_gym():
    env = random_py_environment.RandomPyEnvironment(
        suite_gym.load('CartPole-v1').observation_spec(),
        suite_gym.load('CartPole-v1').action_spec(),
    )
    with pytest.raises(
        TypeError, match=r'TimeLimit wraps no TF-Agents GymWrapper \(found RandomPyEnvironment\)'
    ):
        gym_envs.GymTimeLimitTruncation(wrappers.TimeLimit(env, 10))
    with pytest.raises(TypeError, match='wraps no TF-Agents GymWrapper'):
        gym_envs.find_gym_wrapper(env)


@pytest.mark.parametrize('max_episode_steps', [None, 40, 600])
def test_record_episodes_truncates_at_the_time_limit(tmp_path, max_episode_steps):
    """Scripted episodes reach the limit: CartPole-v1's own 500, or one below or above it."""
    stats = collect.record_episodes(
        tmp_path / 'out', num_episodes=2, policy='scripted', max_episode_steps=max_episode_steps
    )
    limit = max_episode_steps or CARTPOLE_LIMIT
    assert (stats.terminated, stats.truncated, stats.steps) == (0, 2, 2 * (limit + 1))
    assert read_endings(tmp_path / 'out') == [(limit, False, 1.0)] * 2
    falls = collect.record_episodes(tmp_path / 'random', num_episodes=3, policy='random')
    assert (falls.terminated, falls.truncated) == (3, 0)
    assert all(
        is_terminal and d == 0.0 and n < CARTPOLE_LIMIT
        for n, is_terminal, d in read_endings(tmp_path / 'random')
    )


def test_the_record_command_reports_and_writes_truncations(tmp_path, run_cli):
    out = tmp_path / 'rec' / '1.0.0'
    code, printed, _ = run_cli(
        'record', '--episodes', 2, '--policy', 'scripted', '--no-progress', out
    )
    assert code == 0
    assert '(1002 steps: 0 terminated, 2 truncated) of CartPole-v1' in printed
    assert read_endings(out) == [(CARTPOLE_LIMIT, False, 1.0)] * 2
    code, _, err = run_cli('record', '--episodes', 1, '--max-episode-steps', 0, tmp_path / 'x')
    assert (
        code == cli.EXIT_ERROR
        and 'error: --max-episode-steps=0 is not valid; expected an int' in err
    )
