"""Record: a TF-Agents driver -> RldsRecorder -> rlds_reverb.load -> validate, n-step checked.

Real CartPole environments (TF-Agents' suite_gym, with its TimeLimit), real PyDrivers and
policies; the n-step transitions of the recorded data are compared with those computed
here, in NumPy, from the trajectories the driver emitted.
"""

from __future__ import annotations

import numpy as np
import pytest
import tree
from tf_agents.drivers import py_driver
from tf_agents.environments import batched_py_environment, suite_gym
from tf_agents.policies import random_py_policy

import adders
from rlds_reverb.core import types
from rlds_reverb.core.errors import SourceNotFoundError
from rlds_reverb.data.loading import load
from rlds_reverb.data.validation import validate
from rlds_reverb.export import collect, recorder
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


def test_an_empty_dataset_is_refused_and_a_closed_writer_too(tmp_path):
    from rlds_reverb.data import tfds_writer

    writer = tfds_writer.RldsDatasetWriter(
        tmp_path / 'toy' / '1.0.0', features=builders.step_features(), name='toy'
    )
    with pytest.raises(ValueError, match='No episode was added'):
        writer.close()
    assert not (tmp_path / 'toy' / '1.0.0').exists()
    with pytest.raises(RuntimeError, match='is closed'):
        writer.add_episode({types.STEPS: builders.episode(2)})
