"""One test per validation rule (docs/semantics.md §2), the modes, the report and the errors."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import rlds_reverb
from rlds_reverb.check.validation import Rule
from rlds_reverb.core import errors, types
from tests import builders


def _with(length=4, **fields):
    episode = builders.episode(length)
    for name, value in fields.items():
        episode[name] = np.asarray(value, episode[name].dtype)
    return episode


def _problems(episodes):
    report = rlds_reverb.validate(builders.rlds(episodes), on_invalid='report')
    return {(p.episode, p.step, p.field, p.rule) for p in report.problems}


# (rule, episode fields, expected (step, field)) for every per-step rule.
_RULE_CASES = [
    (Rule.FIRST_AT_START, dict(is_first=[0, 0, 0, 0]), (0, types.IS_FIRST)),
    (Rule.FIRST_ONLY_AT_START, dict(is_first=[1, 0, 1, 0]), (2, types.IS_FIRST)),
    (Rule.LAST_AT_END, dict(is_last=[0, 0, 0, 0], is_terminal=[0, 0, 0, 0]), (3, types.IS_LAST)),
    (Rule.LAST_ONLY_AT_END, dict(is_last=[0, 1, 0, 1]), (1, types.IS_LAST)),
    (Rule.TERMINAL_IMPLIES_LAST, dict(is_terminal=[0, 1, 0, 1]), (1, types.IS_TERMINAL)),
    (Rule.FINITE, dict(reward=[0.0, np.nan, 1.0, 0.0]), (1, types.REWARD)),
    (Rule.FINITE, dict(reward=[0.0, 1.0, -np.inf, 0.0]), (2, types.REWARD)),
    (Rule.FINITE, dict(discount=[1.0, 1.0, np.nan, 1.0]), (2, types.DISCOUNT)),
    (Rule.DISCOUNT_IN_RANGE, dict(discount=[1.0, 1.5, 1.0, 1.0]), (1, types.DISCOUNT)),
    (Rule.DISCOUNT_IN_RANGE, dict(discount=[1.0, 1.0, -0.1, 1.0]), (2, types.DISCOUNT)),
]


@pytest.mark.parametrize(
    ('rule', 'fields', 'where'), _RULE_CASES, ids=lambda x: getattr(x, 'name', None)
)
def test_each_rule_is_reported_at_its_step_and_field(rule, fields, where):
    problems = _problems([builders.episode(2), _with(**fields)])
    assert (1, *where, rule) in problems
    assert all(p[0] == 1 for p in problems)


def test_empty_episode_is_reported():
    problems = _problems([builders.episode(2), _with(length=0)])
    assert problems == {(1, 0, types.STEPS, Rule.NON_EMPTY)}


def test_inconsistent_shapes_are_reported_against_the_first_episode():
    signature = builders.step_signature(**{types.OBSERVATION: tf.TensorSpec([None], tf.float32)})
    episodes = [builders.episode(2, obs_dim=3), builders.episode(2, obs_dim=4)]
    report = rlds_reverb.validate(
        builders.rlds_from_generator(episodes, signature), on_invalid='report'
    )
    (problem,) = report.problems
    assert (problem.episode, problem.field, problem.rule) == (
        1,
        types.OBSERVATION,
        Rule.CONSISTENT_SHAPE,
    )
    assert 'expected per-step shape [3], found [4]' in problem.hint


def test_nested_rewards_name_the_leaf():
    episode = builders.episode(3)
    episode[types.REWARD] = {
        'task_a': np.array([0.0, 1.0, 0.0], np.float32),
        'task_b': np.array([0.0, np.nan, 0.0], np.float32),
    }
    assert _problems([episode]) == {(0, 1, 'reward.task_b', Rule.FINITE)}


def test_report_counts_and_rows():
    episodes = [
        builders.episode(3, ending='terminated'),
        builders.episode(2, ending='truncated'),
        _with(reward=[np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan][:4]),
        builders.episode(1, ending='terminated'),
    ]
    report = rlds_reverb.validate(builders.rlds(episodes), on_invalid='report')
    assert (report.valid, report.invalid, report.terminated, report.truncated) == (3, 1, 2, 1)
    assert report.steps == 6 and report.invalid_episodes == [2] and not report.ok
    (problem,) = report.problems
    assert problem.as_row() == (2, 0, types.REWARD, 'finite', Rule.FINITE.hint)
    assert problem.steps == (0, 1, 2, 3)
    assert 'steps 0, 1, 2, 3' in report.format()


def test_skip_mode_lists_what_would_be_dropped_without_raising():
    episodes = [_with(is_first=[0, 0, 0, 0]), builders.episode(2)]
    report = rlds_reverb.validate(builders.rlds(episodes), on_invalid='skip')
    assert report.invalid_episodes == [0] and report.valid == 1


def test_raise_mode_names_the_episode_and_every_problem():
    bad = _with(reward=[0.0, np.inf, 0.0, 0.0], discount=[1.0, 1.0, 2.0, 1.0])
    dataset = builders.rlds([builders.episode(2), bad, bad])
    with pytest.raises(errors.InvalidEpisodeError) as caught:
        rlds_reverb.validate(dataset)
    error = caught.value
    assert isinstance(error, tf.errors.InvalidArgumentError)
    assert error.episode_index == 1 and len(error.problems) == 2
    message = str(error)
    assert 'Episode 1 is invalid (2 problem(s))' in message
    assert 'episode 1, step 1, field reward, rule finite' in message
    assert 'episode 1, step 2, field discount, rule discount_in_0_1' in message


def test_valid_data_passes_in_raise_mode():
    episodes = [
        builders.episode(n, ending='terminated' if n % 2 == 0 else 'truncated') for n in (1, 2, 5)
    ]
    report = rlds_reverb.validate(builders.rlds(episodes))
    assert report.ok and report.episodes == 3


def test_unknown_mode_lists_valid_modes():
    with pytest.raises(
        ValueError, match="on_invalid='fix' is not valid; expected one of 'raise', 'skip', 'report'"
    ):
        rlds_reverb.validate(builders.rlds([builders.episode(2)]), on_invalid='fix')


def test_non_bool_flags_and_string_rewards_are_spec_errors():
    episode = builders.episode(2)
    episode[types.IS_LAST] = episode[types.IS_LAST].astype(np.int32)
    with pytest.raises(
        errors.SpecMismatchError, match="'is_last' has dtype int32; it must be bool"
    ):
        rlds_reverb.validate(builders.rlds([episode]))
    episode = builders.episode(2)
    episode[types.REWARD] = np.array([b'1', b'2'])
    with pytest.raises(errors.SpecMismatchError, match="'reward' has dtype string"):
        rlds_reverb.validate(builders.rlds([episode]))


def test_missing_steps_is_a_source_error():
    with pytest.raises(errors.SourceError, match="No dataset representing RLDS 'steps'"):
        rlds_reverb.validate(tf.data.Dataset.from_tensors({'x': 1}))


def test_an_unreadable_episode_is_a_value_in_its_place(tmp_path):
    from rlds_reverb.check import validation
    from rlds_reverb.core import episodes as episodes_lib

    uneven = builders.episode(3)
    uneven[types.OBSERVATION] = uneven[types.OBSERVATION][:2]  # Does not decode.
    episodes = [builders.episode(2), uneven, builders.episode(4)]
    directory = builders.write_tfds(tmp_path, episodes, name='uneven')
    lengths = episodes_lib.to_episode_tensors(rlds_reverb.load(directory)).map(
        episodes_lib.episode_length
    )
    read = list(validation.read_episodes(lengths))
    assert [(i, e) for i, e in read if not isinstance(e, validation.UnreadableEpisode)] == [
        (0, 2),
        (2, 4),
    ]
    index, unreadable = read[1]
    assert isinstance(unreadable, validation.UnreadableEpisode) and unreadable.index == index == 1
    assert 'different number of steps' in unreadable.error_message
    problem = unreadable.to_problem(7)  # Numbered as the caller counts episodes.
    assert (problem.episode, problem.field, problem.rule) == (7, unreadable.field, Rule.READABLE)
    assert problem.hint.startswith(Rule.READABLE.hint)
    with pytest.raises(dataclasses.FrozenInstanceError):
        unreadable.index = 0


def test_read_episodes_yields_what_as_numpy_iterator_yields():
    from rlds_reverb.check import validation
    from rlds_reverb.transform import items, plans

    episodes = builders.case_dataset([{'length': n} for n in (1, 3, 4)])
    plan_data = plans.make_episode_plans(episodes, items.TwoStep())
    got = [plan for _, plan in validation.read_episodes(plan_data)]
    want = list(plan_data.as_numpy_iterator())
    assert len(got) == len(want) == 3
    for g, w in zip(got, want, strict=True):
        assert type(g) is type(w) and g.priorities == w.priorities == ()
        tf.nest.assert_same_structure(g, w)
        for a, b in zip(tf.nest.flatten(g), tf.nest.flatten(w), strict=True):
            np.testing.assert_array_equal(a, b)
            assert np.asarray(a).dtype == np.asarray(b).dtype
    # Elements that are not plain tensors (ragged here) take tf.data's own path.
    ragged = tf.data.Dataset.from_tensors(tf.ragged.constant([[1], [2, 3]]))
    ((_, value),) = list(validation.read_episodes(ragged))
    (want_ragged,) = list(ragged.as_numpy_iterator())
    assert type(value) is type(want_ragged) and str(value) == str(want_ragged)
