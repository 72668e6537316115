"""The two-step converter against hand-computed cases, a NumPy reference and TF-Agents."""

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds

import rlds_reverb
from rlds_reverb.core import errors, types
from rlds_reverb.transform import convert
from tests import rlds_builders
from tests.cases import convert_cases

_CASES = {case['testcase_name']: case for case in convert_cases.CASES}
# TF-Agents is right on these (no dict observations, no extras, float32 discounts).
_TF_AGENTS_AGREES = [
    'complete_episode',
    'truncated_episode',
    'single_step_episodes',
    'several_episodes_in_one_stream',
    'uint8_images',
]


def _stack(trajectories):
    return tf.nest.map_structure(lambda *xs: np.stack([x.numpy() for x in xs]), *trajectories)


def _assert_nests_equal(actual, expected):
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected)
        for key, value in expected.items():
            _assert_nests_equal(actual[key], value)
        return
    expected = np.asarray(expected)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected.astype(actual.dtype), rtol=1e-6)


@pytest.mark.parametrize('name', sorted(_CASES))
def test_matches_hand_computed_case(name):
    case = _CASES[name]
    dataset = rlds_builders.make_rlds(case['episodes'])
    got = _stack(list(rlds_reverb.convert_rlds_to_trajectories(dataset)))
    expected = case['expected']
    for field, value in expected.items():
        _assert_nests_equal(getattr(got, field), value)
    if 'policy_info' not in expected:
        assert got.policy_info == ()


def test_keeps_float64_dtypes():
    dataset = rlds_builders.make_rlds(_CASES['float64_fields']['episodes'])
    got = next(iter(rlds_reverb.convert_rlds_to_trajectories(dataset)))
    assert got.discount.dtype == tf.float64
    assert got.reward.dtype == tf.float64
    assert rlds_reverb.create_trajectory_data_spec(dataset).discount.dtype == tf.float64
    # TF-Agents hard-codes a float32 discount and cannot convert this data.
    with pytest.raises((TypeError, ValueError)):
        list(tfa_rlds.convert_rlds_to_trajectories(dataset))


@pytest.mark.parametrize('name', _TF_AGENTS_AGREES)
def test_equals_tf_agents_where_tf_agents_is_right(name):
    dataset = rlds_builders.make_rlds(_CASES[name]['episodes'])
    ours = list(rlds_reverb.convert_rlds_to_trajectories(dataset))
    theirs = list(tfa_rlds.convert_rlds_to_trajectories(dataset))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        tf.nest.map_structure(
            lambda x, y: np.testing.assert_array_equal(x.numpy(), y.numpy()), a, b
        )
    assert rlds_reverb.create_trajectory_data_spec(dataset) == tfa_rlds.create_trajectory_data_spec(
        dataset
    )


def test_dict_observations_are_split_per_step_unlike_tf_agents():
    dataset = rlds_builders.make_rlds(_CASES['dict_observations']['episodes'])
    ours = list(rlds_reverb.convert_rlds_to_trajectories(dataset))
    theirs = list(tfa_rlds.convert_rlds_to_trajectories(dataset))
    # Ours: each trajectory holds its own step's observation.
    np.testing.assert_array_equal(ours[0].observation['position'].numpy(), [0.0])
    np.testing.assert_array_equal(ours[1].observation['label'].numpy(), 11)
    # TF-Agents copies the whole pair of observations into both trajectories: wrong shape.
    assert theirs[0].observation['position'].shape == (2, 1)
    np.testing.assert_array_equal(theirs[0].observation['label'].numpy(), [10, 11])


def test_policy_info_fn_matches_tf_agents_per_step_meaning():
    dataset = rlds_builders.make_rlds([rlds_builders.make_episode(4, terminal=False)])

    def policy_info_fn(current, following):
        return {'next_reward': following[types.REWARD], 'doubled': 2 * current[types.REWARD]}

    ours = list(rlds_reverb.convert_rlds_to_trajectories(dataset, policy_info_fn))
    theirs = list(tfa_rlds.convert_rlds_to_trajectories(dataset, policy_info_fn))
    for a, b in zip(ours, theirs, strict=True):
        for key in ('next_reward', 'doubled'):
            np.testing.assert_array_equal(a.policy_info[key], b.policy_info[key])
    spec = rlds_reverb.create_trajectory_data_spec(dataset, policy_info_fn=policy_info_fn)
    assert spec.policy_info['next_reward'].dtype == tf.float32


def _numpy_reference(episodes):
    """TF-Agents' two-step semantics, written as an obvious loop."""
    flat = [
        {k: v[t] for k, v in ep.items()} for ep in episodes for t in range(len(ep[types.IS_FIRST]))
    ]
    padded = [*flat, {types.IS_FIRST: True, types.IS_LAST: False}]
    rows = []
    for current, following in zip(padded[:-1], padded[1:], strict=True):

        def kind(step):
            if step[types.IS_FIRST]:
                return 0
            return 2 if step[types.IS_LAST] else 1

        step_type, next_type = kind(current), kind(following)
        if step_type == 0 and next_type == 0:
            step_type = next_type = 2
        terminal = current[types.IS_LAST] and current[types.IS_TERMINAL]
        rows.append(
            dict(
                step_type=step_type,
                next_step_type=next_type,
                observation=current[types.OBSERVATION],
                action=current[types.ACTION],
                reward=current[types.REWARD],
                discount=0.0 if terminal else current[types.DISCOUNT],
            )
        )
    return rows


@pytest.mark.parametrize('seed', range(4))
def test_property_against_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    episodes = [
        rlds_builders.make_episode(
            int(rng.integers(1, 7)),
            terminal=bool(rng.integers(2)),
            obs_dim=3,
            start=float(rng.normal()),
            discount=float(rng.uniform()),
        )
        for _ in range(int(rng.integers(1, 6)))
    ]
    got = list(rlds_reverb.convert_rlds_to_trajectories(rlds_builders.make_rlds(episodes)))
    expected = _numpy_reference(episodes)
    assert len(got) == len(expected)
    for traj, row in zip(got, expected, strict=True):
        for field, value in row.items():
            np.testing.assert_allclose(getattr(traj, field).numpy(), value, rtol=1e-6)


def test_batched_consumption_matches_unbatched():
    episodes = [rlds_builders.make_episode(n) for n in (5, 1, 7)]
    dataset = rlds_builders.make_rlds(episodes)
    batched = next(iter(rlds_reverb.convert_rlds_to_trajectories(dataset).batch(256)))
    unbatched = _stack(list(rlds_reverb.convert_rlds_to_trajectories(dataset)))
    tf.nest.map_structure(
        np.testing.assert_array_equal, tf.nest.map_structure(np.asarray, batched), unbatched
    )


@pytest.mark.parametrize('drop_remainder', [False, True])
def test_batch_size_option_equals_batching_step_by_step(drop_remainder):
    episodes = [rlds_builders.make_episode(n) for n in (5, 1, 7, 2)]
    dataset = rlds_builders.make_rlds(episodes)
    expected = rlds_reverb.convert_rlds_to_trajectories(dataset).batch(
        4, drop_remainder=drop_remainder
    )
    batches = rlds_reverb.convert_rlds_to_trajectories(
        dataset, batch_size=4, drop_remainder=drop_remainder
    )
    expected, batches = list(expected.as_numpy_iterator()), list(batches.as_numpy_iterator())
    assert len(batches) == len(expected) == (3 if drop_remainder else 4)
    for got, want in zip(batches, expected, strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, got, want)


@pytest.mark.parametrize('batch_size', [0, -1, 2.5, True])
def test_bad_batch_size_is_refused(batch_size):
    dataset = rlds_builders.make_rlds([rlds_builders.make_episode(3)])
    with pytest.raises(ValueError, match=f'batch_size={batch_size!r} is not valid'):
        rlds_reverb.convert_rlds_to_trajectories(dataset, batch_size=batch_size)


def test_invalid_episode_raises_invalid_argument_naming_episode_step_field_and_rule():
    bad = rlds_builders.make_episode(3)
    bad[types.IS_TERMINAL] = np.array([False, True, True])
    dataset = rlds_builders.make_rlds([rlds_builders.make_episode(2), bad])
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match='Episode 1 is invalid: episode 1, step 1, field is_terminal, rule '
        'is_terminal_implies_is_last: ',
    ):
        list(rlds_reverb.convert_rlds_to_trajectories(dataset))


def test_skip_mode_drops_invalid_episodes_whole():
    bad = rlds_builders.make_episode(3)
    bad[types.REWARD] = np.array([0.0, np.inf, 0.0], np.float32)
    dataset = rlds_builders.make_rlds(
        [rlds_builders.make_episode(2), bad, rlds_builders.make_episode(4)]
    )
    got = list(rlds_reverb.convert_rlds_to_trajectories(dataset, on_invalid='skip'))
    assert len(got) == 6


def test_dataset_without_steps_is_a_value_error():
    dataset = tf.data.Dataset.from_tensors({'frames': tf.zeros([3])})
    with pytest.raises(ValueError, match="No dataset representing RLDS 'steps'"):
        rlds_reverb.convert_rlds_to_trajectories(dataset)
    with pytest.raises(errors.SourceError):
        rlds_reverb.create_trajectory_data_spec(dataset)


def test_missing_step_fields_are_named():
    episode = rlds_builders.make_episode(2)
    del episode[types.ACTION], episode[types.IS_TERMINAL]
    dataset = rlds_builders.make_rlds([episode])
    with pytest.raises(ValueError, match=r"missing step field\(s\) \['action', 'is_terminal'\]"):
        rlds_reverb.convert_rlds_to_trajectories(dataset)


def test_inconsistent_shapes_between_episodes_are_named():
    signature = rlds_builders.make_step_signature(
        **{types.OBSERVATION: tf.TensorSpec([None], tf.float32)}
    )
    episodes = [rlds_builders.make_episode(2, obs_dim=2), rlds_builders.make_episode(3, obs_dim=5)]
    dataset = rlds_builders.make_rlds_from_generator(episodes, signature)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r'episode 1, step 0, field observation, rule consistent_shape: .*\[2\]',
    ):
        list(rlds_reverb.convert_rlds_to_trajectories(dataset))
    assert len(list(rlds_reverb.convert_rlds_to_trajectories(dataset, on_invalid='skip'))) == 2


def test_report_mode_is_refused_by_the_converter():
    dataset = rlds_builders.make_rlds([rlds_builders.make_episode(2)])
    with pytest.raises(ValueError, match="on_invalid='report' converts nothing"):
        rlds_reverb.convert_rlds_to_trajectories(dataset, on_invalid='report')


def test_per_episode_conversion_keeps_time_axis():
    dataset = rlds_builders.make_rlds(
        [rlds_builders.make_episode(4), rlds_builders.make_episode(1)]
    )
    per_episode = list(convert.convert_episodes_to_trajectories(dataset))
    assert [t.step_type.shape[0] for t in per_episode] == [4, 1]
