"""The two-step converter against the hand-computed cases, a NumPy reference and TF-Agents.

`tests/cases/two_step_cases.py` runs through our converter and, where TF-Agents is right,
through TF-Agents' own; `tests/write/test_push.py` runs the same table through `push`.
"""

import numpy as np
import pytest
import tensorflow as tf
import tree
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds

import rlds_reverb
from rlds_reverb.check import validation
from rlds_reverb.core import errors, types
from rlds_reverb.transform import convert
from tests import builders, expected
from tests.cases import two_step_cases

_CASES = {case['testcase_name']: case for case in two_step_cases.CASES}
# The converters under test: ours (the drop-in) on every case, TF-Agents' where it is right
# (no dict observations, no extra step fields, float32 discounts; the tests below pin the
# differences).
_CONVERTERS = {
    'rlds_reverb': rlds_reverb.convert_rlds_to_trajectories,
    'tf_agents': tfa_rlds.convert_rlds_to_trajectories,
}
_CONVERTER_CASES = [
    pytest.param(converter, name, id=f'{name}-{converter}')
    for converter in _CONVERTERS
    for name in sorted(_CASES)
    if converter == 'rlds_reverb' or name in two_step_cases.TF_AGENTS_AGREES
]


def _stack(trajectories):
    return tf.nest.map_structure(lambda *xs: np.stack([x.numpy() for x in xs]), *trajectories)


def _case_dataset(name):
    return builders.case_dataset(_CASES[name]['episodes'])


@pytest.mark.parametrize('converter,name', _CONVERTER_CASES)
def test_matches_hand_computed_case(converter, name):
    dataset = _case_dataset(name)
    options = _CASES[name].get('options', {}) if converter == 'rlds_reverb' else {}
    got = _stack(list(_CONVERTERS[converter](dataset, **options)))
    want = _CASES[name]['expected']
    for field, value in want.items():
        expected.assert_nest_close(getattr(got, field), value, rtol=1e-6, atol=0, where=field)
    if 'policy_info' not in want:
        assert got.policy_info == ()


def test_keeps_float64_dtypes():
    dataset = _case_dataset('float64_fields')
    got = next(iter(rlds_reverb.convert_rlds_to_trajectories(dataset)))
    assert got.discount.dtype == tf.float64
    assert got.reward.dtype == tf.float64
    assert rlds_reverb.create_trajectory_data_spec(dataset).discount.dtype == tf.float64
    # TF-Agents hard-codes a float32 discount and cannot convert this data.
    with pytest.raises((TypeError, ValueError)):
        list(tfa_rlds.convert_rlds_to_trajectories(dataset))


@pytest.mark.parametrize('name', two_step_cases.TF_AGENTS_AGREES)
def test_equals_tf_agents_where_tf_agents_is_right(name):
    dataset = _case_dataset(name)
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


@pytest.mark.parametrize('name', sorted(two_step_cases.TF_AGENTS_TERMINAL_DISCOUNTS))
def test_tf_agents_differs_only_by_the_discount_into_a_terminal_step(name):
    """Deviation D1 (docs/deviations.md): TF-Agents keeps the data's discount into a terminal step."""
    theirs = _stack(list(tfa_rlds.convert_rlds_to_trajectories(_case_dataset(name))))
    want = dict(_CASES[name]['expected'])
    want['discount'] = two_step_cases.TF_AGENTS_TERMINAL_DISCOUNTS[name]
    for field, value in want.items():
        expected.assert_nest_close(getattr(theirs, field), value, rtol=1e-6, atol=0, where=field)


def test_extra_fields_dropped_by_default_as_tf_agents_kept_on_request():
    dataset = _case_dataset('extra_step_fields')
    assert next(iter(rlds_reverb.convert_rlds_to_trajectories(dataset))).policy_info == ()
    assert next(iter(tfa_rlds.convert_rlds_to_trajectories(dataset))).policy_info == ()
    assert rlds_reverb.create_trajectory_data_spec(dataset) == tfa_rlds.create_trajectory_data_spec(
        dataset
    )
    kept = rlds_reverb.create_trajectory_data_spec(dataset, extra_fields='policy_info')
    assert kept.policy_info == {'log_prob': tf.TensorSpec([], tf.float32)}


def test_dict_observations_are_split_per_step_unlike_tf_agents():
    dataset = _case_dataset('dict_observations')
    ours = list(rlds_reverb.convert_rlds_to_trajectories(dataset))
    theirs = list(tfa_rlds.convert_rlds_to_trajectories(dataset))
    # Ours: each trajectory holds its own step's observation.
    np.testing.assert_array_equal(ours[0].observation['position'].numpy(), [0.0])
    np.testing.assert_array_equal(ours[1].observation['label'].numpy(), 11)
    # TF-Agents copies the whole pair of observations into both trajectories: wrong shape.
    assert theirs[0].observation['position'].shape == (2, 1)
    np.testing.assert_array_equal(theirs[0].observation['label'].numpy(), [10, 11])


def test_policy_info_fn_matches_tf_agents_per_step_meaning():
    dataset = builders.rlds([builders.episode(4, ending='truncated')])

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
    """The two-step semantics (docs/semantics.md §3), written as an obvious loop."""
    flat = [
        {**{k: v[t] for k, v in ep.items()}, 'episode': e}
        for e, ep in enumerate(episodes)
        for t in range(len(ep[types.IS_FIRST]))
    ]
    padded = [*flat, {types.IS_FIRST: True, types.IS_LAST: False, 'episode': -1}]
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
        # The flags decide: the transition into a terminal step has discount 0 too.
        if following['episode'] == current['episode'] and following[types.IS_TERMINAL]:
            terminal = True
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
        builders.episode(
            int(rng.integers(1, 7)),
            ending='terminated' if rng.integers(2) else 'truncated',
            obs_dim=3,
            start=float(rng.normal()),
            discount=float(rng.uniform()),
        )
        for _ in range(int(rng.integers(1, 6)))
    ]
    got = list(rlds_reverb.convert_rlds_to_trajectories(builders.rlds(episodes)))
    expected = _numpy_reference(episodes)
    assert len(got) == len(expected)
    for traj, row in zip(got, expected, strict=True):
        for field, value in row.items():
            np.testing.assert_allclose(getattr(traj, field).numpy(), value, rtol=1e-6)


def test_batched_consumption_matches_unbatched():
    episodes = [builders.episode(n) for n in (5, 1, 7)]
    dataset = builders.rlds(episodes)
    batched = next(iter(rlds_reverb.convert_rlds_to_trajectories(dataset).batch(256)))
    unbatched = _stack(list(rlds_reverb.convert_rlds_to_trajectories(dataset)))
    tf.nest.map_structure(
        np.testing.assert_array_equal, tf.nest.map_structure(np.asarray, batched), unbatched
    )


@pytest.mark.parametrize('drop_remainder', [False, True])
def test_batch_size_option_equals_batching_step_by_step(drop_remainder):
    episodes = [builders.episode(n) for n in (5, 1, 7, 2)]
    dataset = builders.rlds(episodes)
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
    dataset = builders.rlds([builders.episode(3)])
    with pytest.raises(ValueError, match=f'batch_size={batch_size!r} is not valid'):
        rlds_reverb.convert_rlds_to_trajectories(dataset, batch_size=batch_size)


def test_invalid_episode_raises_invalid_argument_naming_episode_step_field_and_rule():
    bad = builders.episode(3)
    bad[types.IS_TERMINAL] = np.array([False, True, True])
    dataset = builders.rlds([builders.episode(2), bad])
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match='Episode 1 is invalid: episode 1, step 1, field is_terminal, rule '
        'is_terminal_implies_is_last: ',
    ):
        list(rlds_reverb.convert_rlds_to_trajectories(dataset))


def test_the_invalid_episode_message_lists_every_broken_rule_at_its_first_bad_step():
    bad = builders.episode(4)
    bad[types.IS_FIRST] = np.array([False, False, True, False])
    bad[types.DISCOUNT] = np.array([1.0, 1.0, 2.0, 3.0], np.float32)
    dataset = builders.rlds([builders.episode(2), builders.episode(3), bad])
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        list(rlds_reverb.convert_rlds_to_trajectories(dataset))
    rule = validation.Rule
    # The text `Problem.describe` gives each problem at its first bad step (written out by
    # hand here), joined as the iterator's message.
    lines = [
        f'episode 2, step {step}, field {field}, rule {r.rule_id}: {r.hint}'
        for step, field, r in [
            (0, types.IS_FIRST, rule.FIRST_AT_START),
            (2, types.IS_FIRST, rule.FIRST_ONLY_AT_START),
            (2, types.DISCOUNT, rule.DISCOUNT_IN_RANGE),
        ]
    ]
    # TF's Assert prints string data C-escaped (\\' for ').
    message = info.value.message.replace("\\'", "'")
    assert (
        f'Episode 2 is invalid: {"; ".join(lines)}. Fix the data, or pass '
        "on_invalid='skip' to drop invalid episodes whole." in message
    )


def test_an_empty_episode_is_named_in_the_message():
    signature = builders.step_signature()
    episodes = [builders.episode(2), builders.episode(0)]
    dataset = builders.rlds_from_generator(episodes, signature)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r'Episode 1 is invalid: episode 1, step 0, field steps, rule non_empty: ',
    ):
        list(rlds_reverb.convert_rlds_to_trajectories(dataset))


def test_an_iterator_is_checkpointed_and_restored_mid_dataset(users_plain_dir, tmp_path):
    """The message of an invalid episode is written by a stateless Python op: iterators of
    what `load` reads, converted, stay checkpointable (a stateful op refuses to be saved)."""
    batches = rlds_reverb.convert_rlds_to_trajectories(
        rlds_reverb.load(users_plain_dir).take(6)
    ).batch(16)
    want = [b.reward.numpy() for b in batches]
    iterator = iter(batches)
    next(iterator)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.save(str(tmp_path / 'iterator'))
    rest = [b.reward.numpy() for b in iterator]
    checkpoint.restore(path)
    again = [b.reward.numpy() for b in iterator]
    assert len(want) > 2
    tree.map_structure(np.testing.assert_array_equal, rest, want[1:])
    tree.map_structure(np.testing.assert_array_equal, again, want[1:])


def test_skip_mode_drops_invalid_episodes_whole():
    bad = builders.episode(3)
    bad[types.REWARD] = np.array([0.0, np.inf, 0.0], np.float32)
    dataset = builders.rlds([builders.episode(2), bad, builders.episode(4)])
    got = list(rlds_reverb.convert_rlds_to_trajectories(dataset, on_invalid='skip'))
    assert len(got) == 6


def test_dataset_without_steps_is_a_value_error():
    dataset = tf.data.Dataset.from_tensors({'frames': tf.zeros([3])})
    with pytest.raises(ValueError, match="No dataset representing RLDS 'steps'"):
        rlds_reverb.convert_rlds_to_trajectories(dataset)
    with pytest.raises(errors.SourceError):
        rlds_reverb.create_trajectory_data_spec(dataset)


def test_missing_step_fields_are_named():
    episode = builders.episode(2)
    del episode[types.ACTION], episode[types.IS_TERMINAL]
    dataset = builders.rlds([episode])
    with pytest.raises(ValueError, match=r"missing step field\(s\) \['action', 'is_terminal'\]"):
        rlds_reverb.convert_rlds_to_trajectories(dataset)


def test_inconsistent_shapes_between_episodes_are_named():
    signature = builders.step_signature(**{types.OBSERVATION: tf.TensorSpec([None], tf.float32)})
    episodes = [builders.episode(2, obs_dim=2), builders.episode(3, obs_dim=5)]
    dataset = builders.rlds_from_generator(episodes, signature)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r'episode 1, step 0, field observation, rule consistent_shape: .*\[2\]',
    ):
        list(rlds_reverb.convert_rlds_to_trajectories(dataset))
    assert len(list(rlds_reverb.convert_rlds_to_trajectories(dataset, on_invalid='skip'))) == 2


def test_report_mode_is_refused_by_the_converter():
    dataset = builders.rlds([builders.episode(2)])
    with pytest.raises(ValueError, match="on_invalid='report' converts nothing"):
        rlds_reverb.convert_rlds_to_trajectories(dataset, on_invalid='report')


def test_per_episode_conversion_keeps_time_axis():
    dataset = builders.rlds([builders.episode(4), builders.episode(1)])
    per_episode = list(convert.convert_episodes_to_trajectories(dataset))
    assert [t.step_type.shape[0] for t in per_episode] == [4, 1]


def test_missing_discount_filled_by_load_still_ends_terminated_episodes():
    """The loader's warning promise: the flags decide, even when every discount is 1.0."""
    episode = builders.episode(3, ending='terminated')
    del episode[types.DISCOUNT]
    with pytest.warns(UserWarning, match='transition into a terminal step gets discount 0'):
        loaded = rlds_reverb.load(builders.rlds([episode]))
    got = _stack(list(rlds_reverb.convert_rlds_to_trajectories(loaded)))
    np.testing.assert_array_equal(got.discount, [1.0, 0.0, 0.0])
