"""`adders.relabel_goals` against hand-computed draws, the NumPy reference and its distributions.

The sampler (`compute_goal_steps`) is checked on the hand cases of
`tests/cases/goal_cases.py` and, with hypothesis, against the reference's inverse
distribution functions on the same draws; the whole adder against the reference given the
draws it made (the stateless generator, keyed as the adder keys it); the empirical offsets
against the reference's probabilities by a chi-square test; the seed, the stream position
and the errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import adders
from adders import goals as goals_lib
from rlds_reverb.core import types
from rlds_reverb.read.loading import load
from tests import builders, goal_references
from tests.adders.test_chunks import assert_same, random_stream, streams
from tests.cases import goal_cases

_SETTINGS = settings(
    max_examples=20,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


def _sample(uniform, strategy, p, terminal) -> np.ndarray:
    strategy = types.as_enum(types.GoalStrategy, strategy, argument='strategy')
    steps = goals_lib.compute_goal_steps(
        tf.constant(uniform, tf.float64), tf.constant(terminal), strategy, p
    )
    return steps.numpy()


@pytest.mark.parametrize('case', goal_cases.CASES, ids=lambda c: c['testcase_name'])
def test_goal_steps_match_case(case):
    args = (case['uniform'], case['strategy'], case['p'], case['terminal'])
    np.testing.assert_array_equal(_sample(*args), case['goal_steps'])
    reference, _ = goal_references.reference_goal_steps(*args)
    np.testing.assert_array_equal(reference, case['goal_steps'])


@settings(max_examples=200, deadline=None)
@given(
    uniform=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=12),
    strategy=st.sampled_from(['future', 'geometric']),
    p=st.floats(0.01, 1.0),
    terminal=st.booleans(),
)
def test_goal_steps_equal_the_reference(uniform, strategy, p, terminal):
    p = p if strategy == 'geometric' else None
    reference, margin = goal_references.reference_goal_steps(uniform, strategy, p, terminal)
    ours = _sample(uniform, strategy, p, terminal)
    clear = margin > 1e-9  # A draw on a cumulative probability may round either way.
    np.testing.assert_array_equal(ours[clear], reference[clear])


def _draws(seed: int, index: int, size: int) -> np.ndarray:
    """The adder's draws for the episode at stream position `index`."""
    key = tf.constant([seed, index], tf.int64)
    return tf.random.stateless_uniform([size], seed=key, dtype=tf.float64).numpy()


def _reward_np(achieved, goal):
    return -np.abs(np.asarray(achieved) - np.asarray(goal)).sum(-1)


def _reward_tf(achieved, goal):
    return -tf.reduce_sum(tf.abs(achieved - goal), -1)


def _reached_np(achieved, goal):
    return np.all(np.asarray(achieved) == np.asarray(goal), -1)


def _reached_tf(achieved, goal):
    return tf.reduce_all(tf.equal(achieved, goal), -1)


@_SETTINGS
@given(
    episodes=streams(max_length=9),
    strategy=st.sampled_from(['future', 'geometric']),
    p=st.floats(0.05, 1.0),
    seed=st.integers(0, 2**31),
    form=st.sampled_from(builders.FORMS),
)
def test_relabel_goals_equals_the_reference(episodes, strategy, p, seed, form):
    p = p if strategy == 'geometric' else None
    out = builders.run_transform(adders.relabel_goals(strategy, p=p, seed=seed), episodes, form)
    for index, (steps, given_steps) in enumerate(zip(out, episodes, strict=True)):
        size = len(given_steps[types.IS_FIRST])
        terminal = bool(given_steps[types.IS_TERMINAL][-1])
        goal_steps, margin = goal_references.reference_goal_steps(
            _draws(seed, index, size), strategy, p, terminal
        )
        want = goal_references.reference_relabel(given_steps, goal_steps)
        clear = margin > 1e-9
        got_offsets = steps.pop(types.GOAL_OFFSET)
        np.testing.assert_array_equal(got_offsets[clear], want.pop(types.GOAL_OFFSET)[clear])
        # Wherever the draws agree the goals are the reference's; everywhere they are
        # the goal field at t + offset.
        mine = goal_references.reference_relabel(given_steps, np.arange(size) + got_offsets)
        mine.pop(types.GOAL_OFFSET)
        assert_same(steps, mine, where=f'episode {index}')


def test_rewards_and_success_are_recomputed_from_what_the_next_step_achieved():
    position = np.array([[0.0, 0], [1, 0], [1, 1], [2, 1]], np.float32)
    steps = builders.episode(observation={'position': position}, ending='truncated')
    relabel = adders.relabel_goals(
        seed=5,
        goal_field=(types.OBSERVATION, 'position'),
        reward_fn=_reward_tf,
        success_fn=_reached_tf,
    )
    out = builders.run_transform(relabel, [steps], 'rlds')[0]
    goal_steps = np.arange(4) + out[types.GOAL_OFFSET]
    want = goal_references.reference_relabel(
        steps,
        goal_steps,
        goal_field=(types.OBSERVATION, 'position'),
        reward_fn=_reward_np,
        success_fn=_reached_np,
    )
    assert_same(out, want)
    # Step 2's action led to position [2, 1], the last step's: reached when it is the goal.
    assert out[types.GOAL_REACHED][2] == (goal_steps[2] == 3)


@pytest.mark.parametrize('strategy,p', [('future', None), ('geometric', 0.3)])
@pytest.mark.parametrize('ending', ['terminated', 'truncated'])
def test_goal_offsets_follow_the_distribution(strategy, p, ending):
    # 3,000 episodes of 6 steps: a chi-square test per step against the exact P(k).
    episode = builders.episode(6, ending=ending, obs_dim=None)
    dataset = builders.episode_tensors([episode]).repeat(3000)
    relabel = adders.relabel_goals(strategy, p=p, seed=11)
    offsets = np.stack([o[types.GOAL_OFFSET] for o in dataset.apply(relabel).as_numpy_iterator()])
    for t in range(5):
        left = 5 - t
        counts = np.bincount(offsets[:, t], minlength=left + 1)[1:]
        want = goal_references.offset_probabilities(left, strategy, p, ending == 'terminated')
        if left == 1:
            assert counts.tolist() == [3000]
            continue
        p_value = goal_references.chi_square_p_value(counts, want)
        assert p_value > 1e-4, (t, counts, want)
    assert (offsets[:, 5] == 0).all()


def test_the_seed_and_the_stream_position_key_the_draws():
    episodes = random_stream(0, [20, 20], ['truncated', 'truncated'], 'float')

    def offsets(transform, data=None):
        data = data or builders.episode_tensors(episodes)
        return [o[types.GOAL_OFFSET] for o in data.apply(transform).as_numpy_iterator()]

    first = offsets(adders.relabel_goals(seed=1))
    np.testing.assert_array_equal(np.stack(first), np.stack(offsets(adders.relabel_goals(seed=1))))
    assert not np.array_equal(np.stack(first), np.stack(offsets(adders.relabel_goals(seed=2))))
    assert not np.array_equal(first[0], first[1])  # two positions, two sets of draws
    # After repeat(), every epoch draws anew; before it, the goals repeat.
    after = offsets(adders.relabel_goals(seed=1), builders.episode_tensors(episodes).repeat(2))
    np.testing.assert_array_equal(np.stack(after[:2]), np.stack(first))
    assert not np.array_equal(np.stack(after[2:]), np.stack(first))


def test_relabel_goals_on_data_written_by_tfds(users_dir):
    out = builders.read_episodes(load(users_dir).take(8).apply(adders.relabel_goals(seed=3)))
    given_steps = builders.read_episodes(load(users_dir).take(8))
    for index, (steps, raw) in enumerate(zip(out, given_steps, strict=True)):
        size = len(raw[types.IS_FIRST])
        goal_steps, margin = goal_references.reference_goal_steps(
            _draws(3, index, size), 'future', None, bool(raw[types.IS_TERMINAL][-1])
        )
        assert (margin > 1e-9).all()
        assert_same(steps, goal_references.reference_relabel(raw, goal_steps))


# --- Errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    'make,match',
    [
        (lambda: adders.relabel_goals('past'), r"strategy='past' is not valid"),
        (lambda: adders.relabel_goals('geometric'), r"p=None is not valid; strategy='geometric'"),
        (lambda: adders.relabel_goals('geometric', p=0), r'p=0 is not valid'),
        (lambda: adders.relabel_goals('geometric', p=1.5), r'p=1.5 is not valid'),
        (lambda: adders.relabel_goals(p=0.5), r"p=0.5 applies to strategy='geometric' only"),
        (lambda: adders.relabel_goals(seed=1.5), r'seed=1.5 is not valid'),
        (lambda: adders.relabel_goals(goal_field=()), r'goal_field=\(\) is not valid'),
        (lambda: adders.relabel_goals(reward_fn=3), r'reward_fn=3 is not valid'),
        (lambda: adders.relabel_goals(success_fn='x'), r"success_fn='x' is not valid"),
    ],
)
def test_bad_goal_options_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def _apply(transform, steps=None):
    data = builders.dataset([steps or builders.episode(4)], 'tensors')
    return data.apply(transform)


def test_relabel_goals_names_a_missing_goal_field():
    with pytest.raises(ValueError, match=r"has no 'position' at \('observation',\)"):
        _apply(adders.relabel_goals(goal_field=('observation', 'position')))


def test_relabel_goals_refuses_to_run_twice():
    once = _apply(adders.relabel_goals())
    with pytest.raises(ValueError, match=r"relabel_goals adds step field\(s\) \['goal'"):
        once.apply(adders.relabel_goals())


def test_a_reward_fn_of_the_wrong_shape_raises_when_applied():
    with pytest.raises(ValueError, match=r'reward_fn returned shape \(\w+, 2\); the reward is'):
        _apply(adders.relabel_goals(reward_fn=lambda achieved, goal: achieved - goal))


def test_a_reward_fn_of_the_wrong_structure_raises_when_applied():
    with pytest.raises(ValueError, match=r'reward_fn returned .* not shaped like the reward'):
        _apply(adders.relabel_goals(reward_fn=lambda achieved, goal: {'r': goal[:, 0]}))


def test_a_success_fn_of_the_wrong_shape_raises_when_applied():
    with pytest.raises(ValueError, match=r'success_fn returned shape \(\w+, 2\); expected \[T\]'):
        _apply(adders.relabel_goals(success_fn=lambda achieved, goal: achieved > goal))
