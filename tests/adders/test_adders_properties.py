"""Every adder against a plain NumPy loop on random episodes, and against TF-Agents.

The references below are deliberately naive (one Python step at a time, straight from the
formulas of docs/semantics.md §4-§7) so that they are obviously right.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.agents.dqn import dqn_agent
from tf_agents.networks import q_network
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.trajectories import trajectory
from tf_agents.utils import common, value_ops

import adders
from rlds_reverb.core import types
from tests import builders

# --- Random episodes -----------------------------------------------------------------------


def _observations(rng, size, kind):
    if kind == 'float':
        return rng.normal(size=(size, 3)).astype(np.float32)
    if kind == 'image':
        return rng.integers(0, 256, size=(size, 4, 4, 3), dtype=np.uint8)
    return {
        'pos': rng.normal(size=(size, 2)).astype(np.float32),
        'pixels': rng.integers(0, 256, size=(size, 2, 2), dtype=np.uint8),
    }


def random_episodes(seed, *, obs='float', reward='scalar', count=6):
    """Returns random valid episodes, one of them single-step, some terminated."""
    rng = np.random.default_rng(seed)
    episodes = []
    for i in range(count):
        size = 1 if i == 1 else int(rng.integers(2, 15))
        shape = (size,) if reward == 'scalar' else (size, 2)
        discount = np.where(rng.random(size) < 0.7, 1.0, rng.random(size)).astype(np.float32)
        terminal = bool(rng.random() < 0.5)
        episodes.append(
            builders.episode(
                size,
                observation=_observations(rng, size, obs),
                action=rng.integers(0, 2, size=size).astype(np.int64),
                reward=rng.normal(size=shape).astype(np.float32),
                discount=discount,
                value=rng.normal(size=shape).astype(np.float32),
                ending='terminated' if terminal else 'truncated',
            )
        )
    return episodes


# --- NumPy references ----------------------------------------------------------------------


def _leaf_at(nest, t):
    return tf.nest.map_structure(lambda x: x[t], nest)


def _paired_leaves(reward, discount):
    """Reward and discount leaves paired as docs/semantics.md §1 pairs them, and the output nest.

    A single discount leaf is repeated to the reward's structure (a single reward leaf to
    the discount's); two nests must have the same structure.
    """
    if not tf.nest.is_nested(discount):
        rewards = tf.nest.flatten(reward)
        return rewards, [discount] * len(rewards), reward
    if not tf.nest.is_nested(reward):
        discounts = tf.nest.flatten(discount)
        return [reward] * len(discounts), discounts, discount
    tf.nest.assert_same_structure(reward, discount)
    return tf.nest.flatten(reward), tf.nest.flatten(discount), reward


def _n_step_leaf(r, disc, n, gamma, terminal):
    """One reward leaf's n-step return and discount, `[T, ...]` (numpy-style broadcast)."""
    # Per-step shapes are aligned on the right: size-1 axes go after the time axis.
    r = r.reshape(r.shape + (1,) * (disc.ndim - r.ndim))
    disc = disc.reshape(disc.shape + (1,) * (r.ndim - disc.ndim))
    shape = np.broadcast_shapes(r.shape, disc.shape)
    dtype = r.dtype if np.issubdtype(r.dtype, np.floating) else np.float32
    n_step_return, n_step_discount = np.zeros(shape, dtype), np.zeros(shape, dtype)
    last = shape[0] - 1
    for t in range(last):
        k = min(n, last - t)
        total, product = np.zeros(shape[1:], dtype), np.ones(shape[1:], dtype)
        for i in range(k):
            total = total + gamma**i * product * r[t + i]
            d = 0.0 if (terminal and t + i == last - 1) else disc[t + i]
            product = product * d
        n_step_return[t] = total
        n_step_discount[t] = gamma ** (k - 1) * product
    return n_step_return, n_step_discount


def reference_n_step(steps, n, gamma):
    size = len(steps[types.IS_FIRST])
    last, terminal = size - 1, bool(steps[types.IS_TERMINAL][-1])
    rewards, discounts, structure = _paired_leaves(steps[types.REWARD], steps[types.DISCOUNT])
    leaves = [
        _n_step_leaf(r, d, n, gamma, terminal) for r, d in zip(rewards, discounts, strict=True)
    ]
    out = {
        types.N_STEP_RETURN: tf.nest.pack_sequence_as(structure, [ret for ret, _ in leaves]),
        types.N_STEP_DISCOUNT: tf.nest.pack_sequence_as(structure, [d for _, d in leaves]),
        types.N_STEP_LENGTH: np.zeros(size, np.int32),
        types.NEXT_OBSERVATION: tf.nest.map_structure(np.zeros_like, steps[types.OBSERVATION]),
    }
    for t in range(last):
        k = min(n, last - t)
        out[types.N_STEP_LENGTH][t] = k
        for leaf, source in zip(
            tf.nest.flatten(out[types.NEXT_OBSERVATION]),
            tf.nest.flatten(steps[types.OBSERVATION]),
            strict=True,
        ):
            leaf[t] = source[t + k]
    return out


def reference_gae(steps, gamma, lambda_):
    size = len(steps[types.IS_FIRST])
    last = size - 1
    r, d = steps[types.REWARD], steps[types.DISCOUNT]
    if r.ndim == 2:
        d = d[:, None] * np.ones_like(r)
    value = steps[types.VALUE].copy()
    if steps[types.IS_TERMINAL][-1]:
        value[last] = 0.0
    advantage = np.zeros_like(r)
    for t in reversed(range(last)):
        delta = r[t] + gamma * d[t] * value[t + 1] - value[t]
        advantage[t] = delta + gamma * lambda_ * d[t] * advantage[t + 1]
    return {types.ADVANTAGE: advantage, types.RETURN: advantage + value, types.VALUE: value}


def reference_stack(steps, k):
    size = len(steps[types.IS_FIRST])
    return tf.nest.map_structure(
        lambda o: np.stack(
            [np.stack([o[max(t - k + 1 + j, 0)] for j in range(k)]) for t in range(size)]
        ),
        steps[types.OBSERVATION],
    )


def _window(steps, start, length, available):
    """Steps [start, start + length) of `steps`, null steps past `available`, with a mask."""
    index = np.arange(start, start + length)
    valid = index < available
    window = tf.nest.map_structure(
        lambda x: np.where(
            valid.reshape((-1,) + (1,) * (x.ndim - 1)), x[np.minimum(index, available - 1)], 0
        ).astype(x.dtype),
        steps,
    )
    return window, valid


def _terminal_discounts(steps):
    """The flags decide: discount 0 into and on the terminal step (docs/semantics.md §3)."""
    if not steps[types.IS_TERMINAL][-1]:
        return steps
    discount = tf.nest.map_structure(np.copy, steps[types.DISCOUNT])
    for leaf in tf.nest.flatten(discount):
        leaf[-2:] = 0
    return {**steps, types.DISCOUNT: discount}


def reference_sequences(episodes, length, period, end, burn_in):
    episodes = [_terminal_discounts(steps) for steps in episodes]
    if end == 'continue':
        episodes = [tf.nest.map_structure(lambda *xs: np.concatenate(xs), *episodes)]
    windows = []
    for steps in episodes:
        size = len(steps[types.IS_FIRST])
        starts = list(range(0, size - length + 1, period))
        tail_start = starts[-1] + period if starts else 0
        covered = starts[-1] + length if starts else 0
        spans = [(s, length) for s in starts]
        if tail_start < size and covered < size:
            if end == 'truncate':
                spans.append((tail_start, size - tail_start))
            elif end in ('pad', 'continue'):
                spans.append((tail_start, length))
            elif end == 'last':
                spans.append((max(size - length, 0), length))
        for start, span in spans:
            window, valid = _window(steps, start, span, size)
            window[types.MASK] = valid
            window[types.IS_BURN_IN] = np.arange(span) < burn_in
            windows.append(window)
    return windows


# --- The transforms against the references -------------------------------------------------

_CONFIGS = [
    # (observation kind, reward kind, dataset form, episodes per call)
    ('float', 'scalar', 'rlds', 1),
    ('image', 'vector', 'tensors', 4),
    ('dict', 'scalar', 'tensors', 1),
    ('dict', 'vector', 'rlds', 3),
]


@pytest.mark.parametrize(
    'obs,reward,form,per_call,n',
    [config + (n,) for config, n in zip(_CONFIGS, (1, 3, 5, 2), strict=True)],
)
def test_n_step_equals_numpy_reference(obs, reward, form, per_call, n):
    episodes = random_episodes(n, obs=obs, reward=reward)
    out = builders.run_transform(adders.n_step(n, 0.9, episodes_per_call=per_call), episodes, form)
    for given, steps in zip(episodes, out, strict=True):
        expected = reference_n_step(given, n, 0.9)
        for name, value in expected.items():
            tf.nest.map_structure(
                lambda a, e: np.testing.assert_allclose(a.astype(np.float64), e, atol=1e-5),
                steps[name],
                value,
            )
        tf.nest.map_structure(
            np.testing.assert_array_equal, steps[types.OBSERVATION], given[types.OBSERVATION]
        )


@pytest.mark.parametrize('lambda_', [0.0, 0.95, 1.0])
@pytest.mark.parametrize('obs,reward,form,per_call', _CONFIGS[:2])
def test_gae_equals_numpy_reference(obs, reward, form, per_call, lambda_):
    episodes = random_episodes(7, obs=obs, reward=reward)
    out = builders.run_transform(
        adders.gae(0.9, lambda_, episodes_per_call=per_call), episodes, form
    )
    for given, steps in zip(episodes, out, strict=True):
        for name, value in reference_gae(given, 0.9, lambda_).items():
            np.testing.assert_allclose(steps[name], value, atol=1e-4, err_msg=name)


@pytest.mark.parametrize(
    'size,reward,ending', [(1000, 'scalar', 'terminated'), (1025, 'vector', 'truncated')]
)
def test_long_episode_functions_equal_numpy_reference(size, reward, ending):
    """One long episode through the one-episode functions (scalar bounds, 10+ doubling passes)."""
    rng = np.random.default_rng(size)
    shape = (size,) if reward == 'scalar' else (size, 2)
    discount = np.where(rng.random(size) < 0.9, 1.0, rng.random(size)).astype(np.float32)
    discount[rng.integers(0, size, 3)] = 0.0  # exact zeros stop the recurrence
    given = builders.episode(
        size,
        observation=rng.normal(size=(size, 3)).astype(np.float32),
        reward=rng.normal(size=shape).astype(np.float32),
        discount=discount,
        value=rng.normal(size=shape).astype(np.float32),
        ending=ending,
    )
    steps = tf.nest.map_structure(tf.constant, given)
    got = tf.function(
        lambda s: {
            'n_step': adders.add_n_step_fields(s, 3, 0.99),
            'gae': adders.add_gae_fields(s, 0.99, 0.95, value_field=types.VALUE),
            'stack': adders.stack_observations(s, 2),
        },
        autograph=False,
    )(steps)
    for name, value in reference_n_step(given, 3, 0.99).items():
        np.testing.assert_allclose(got['n_step'][name], value, atol=1e-5, err_msg=name)
    for name, value in reference_gae(given, 0.99, 0.95).items():
        np.testing.assert_allclose(got['gae'][name], value, atol=1e-3, rtol=1e-4, err_msg=name)
    np.testing.assert_array_equal(got['stack'][types.OBSERVATION], reference_stack(given, 2))


@pytest.mark.parametrize('obs,form,per_call', [('dict', 'rlds', 1), ('image', 'tensors', 4)])
def test_stack_frames_equals_numpy_reference(obs, form, per_call):
    episodes = random_episodes(3, obs=obs)
    out = builders.run_transform(adders.stack_frames(3, episodes_per_call=per_call), episodes, form)
    for given, steps in zip(episodes, out, strict=True):
        tf.nest.map_structure(
            np.testing.assert_array_equal, steps[types.OBSERVATION], reference_stack(given, 3)
        )


@pytest.mark.parametrize(
    'end,length,period,burn_in,form',
    [
        ('truncate', 4, 3, 0, 'rlds'),
        ('pad', 4, None, 1, 'tensors'),
        ('drop', 3, 5, 0, 'tensors'),
        ('last', 5, 2, 2, 'rlds'),
        ('continue', 4, 3, 1, 'rlds'),
    ],
)
def test_sequences_equal_numpy_reference(end, length, period, burn_in, form):
    episodes = random_episodes(11, obs='dict')
    windows = builders.dataset(episodes, form).apply(
        adders.sequences(length, period, end=end, burn_in=burn_in)
    )
    actual = [tf.nest.map_structure(lambda x: x.numpy(), w) for w in windows]
    period = length - burn_in if period is None else period
    expected = reference_sequences(episodes, length, period, end, burn_in)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, a, e)


# --- Against TF-Agents ---------------------------------------------------------------------


def test_gae_on_terminated_episodes_equals_tf_agents():
    episodes = [e for e in random_episodes(5, count=10) if e[types.IS_TERMINAL][-1]]
    episodes = [e for e in episodes if len(e[types.REWARD]) > 1]
    assert episodes
    out = builders.run_transform(adders.gae(0.9, 0.8), episodes, 'tensors')
    for given, steps in zip(episodes, out, strict=True):
        last = len(given[types.REWARD]) - 1
        theirs = value_ops.generalized_advantage_estimation(
            values=given[types.VALUE][None, :last],
            final_value=np.zeros([1], np.float32),
            discounts=0.9 * given[types.DISCOUNT][None, :last],
            rewards=given[types.REWARD][None, :last],
            td_lambda=0.8,
            time_major=False,
        )
        np.testing.assert_allclose(steps[types.ADVANTAGE][:last], theirs[0], atol=1e-5)


def test_gae_on_truncated_episodes_bootstraps_where_tf_agents_ppo_does_not():
    """TF-Agents' PPO zeroes the discount of every transition into a LAST step.

    `PPOAgent.compute_return_and_advantage` multiplies discounts by
    `common.get_episode_mask(next_time_steps)`, so a truncated episode (time limit, discount
    1) is treated as terminated: A_{L-1} = r - V_{L-1}, and every earlier advantage misses
    the discounted V(o_L). A time limit is not a terminal state (Pardo et al., 2018): the
    return beyond it is V(o_L), which we add, exactly as GAE with `final_value = V(o_L)`.
    """
    size, gamma, lambda_ = 6, 0.9, 0.8
    rng = np.random.default_rng(0)
    steps = builders.episode(
        observation=np.zeros((size, 1), np.float32),
        reward=rng.normal(size=size).astype(np.float32),
        value=rng.normal(size=size).astype(np.float32) + 5.0,
        ending='truncated',
    )
    (ours,) = builders.run_transform(adders.gae(gamma, lambda_), [steps], 'rlds')
    last = size - 1
    values, rewards = steps[types.VALUE][None, :last], steps[types.REWARD][None, :last]
    next_step_types = np.where(np.arange(1, size) == last, ts.StepType.LAST, ts.StepType.MID)
    next_time_steps = ts.TimeStep(
        step_type=tf.constant(next_step_types[None]),
        reward=rewards,
        discount=steps[types.DISCOUNT][None, :last],
        observation=(),
    )
    ppo_discounts = (
        gamma * steps[types.DISCOUNT][None, :last] * common.get_episode_mask(next_time_steps)
    )
    final_value = steps[types.VALUE][None, last]
    ppo = value_ops.generalized_advantage_estimation(
        values, final_value, ppo_discounts, rewards, lambda_, time_major=False
    )[0].numpy()
    bootstrapped = value_ops.generalized_advantage_estimation(
        values,
        final_value,
        gamma * steps[types.DISCOUNT][None, :last],
        rewards,
        lambda_,
        time_major=False,
    )[0].numpy()
    np.testing.assert_allclose(ours[types.ADVANTAGE][:last], bootstrapped, atol=1e-5)
    # The gap is gamma V(o_L) at t = L-1, carried back by (gamma lambda)^(L-1-t).
    gap = gamma * steps[types.VALUE][last] * (gamma * lambda_) ** np.arange(last - 1, -1, -1)
    np.testing.assert_allclose(ours[types.ADVANTAGE][:last] - ppo, gap, atol=1e-5)


def _dqn_agent(gamma, n):
    obs_spec = tensor_spec.TensorSpec([2], tf.float32)
    action_spec = tensor_spec.BoundedTensorSpec([], tf.int64, 0, 1)
    network = q_network.QNetwork(obs_spec, action_spec, fc_layer_params=(8,))
    agent = dqn_agent.DqnAgent(
        ts.time_step_spec(obs_spec),
        action_spec,
        q_network=network,
        optimizer=tf.keras.optimizers.SGD(0.0),
        n_step_update=n,
        gamma=gamma,
    )
    agent.initialize()
    return agent


def test_dqn_transitions_match_dqn_agent_n_step_trajectories():
    gamma, n, size = 0.9, 3, 9
    rng = np.random.default_rng(1)
    steps = builders.episode(
        observation=rng.normal(size=(size, 2)).astype(np.float32),
        action=rng.integers(0, 2, size=size).astype(np.int64),
        reward=rng.normal(size=size).astype(np.float32),
        discount=np.where(np.arange(size) == 3, 0.5, 1.0).astype(np.float32),
        ending='terminated',
    )
    agent = _dqn_agent(gamma, n)
    data = builders.dataset([steps], 'rlds').apply(adders.n_step(n, gamma))
    transitions = list(data.apply(adders.to_dqn_transitions()).batch(64))[0]
    assert transitions.next_time_step.reward.shape == (size - 1,)
    # Windows of n + 1 frames that fit before the last step: what DqnAgent gets as input.
    starts = np.arange(size - n)
    frames = starts[:, None] + np.arange(n + 1)[None, :]
    step_type = np.where(steps[types.IS_FIRST], 0, np.where(steps[types.IS_LAST], 2, 1))
    discount = steps[types.DISCOUNT].copy()
    discount[size - 2] = 0.0  # the transition into the terminal state
    windows = trajectory.Trajectory(
        step_type=tf.constant(step_type[frames], tf.int32),
        observation=steps[types.OBSERVATION][frames],
        action=steps[types.ACTION][frames],
        policy_info=(),
        next_step_type=tf.constant(step_type[np.minimum(frames + 1, size - 1)], tf.int32),
        reward=steps[types.REWARD][frames],
        discount=discount[frames],
    )
    windows = tf.nest.map_structure(tf.convert_to_tensor, windows)
    theirs = agent._loss(windows, gamma=gamma).extra.td_error
    head = tf.nest.map_structure(lambda x: x[: len(starts)], transitions)
    ours = agent._loss(head, gamma=gamma).extra.td_error
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    agent.train(transitions)  # the whole batch, tail transitions included, is valid input
