"""Pushes into a real in-process Reverb server: items read back equal hand-computed cases."""

from __future__ import annotations

import time

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tree
from tf_agents.replay_buffers import reverb_utils
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds

from rlds_reverb.core import errors, types
from rlds_reverb.serve import table_info
from rlds_reverb.transform import items, plans
from rlds_reverb.write import observers
from rlds_reverb.write import push as writers
from tests.cases import reverb_cases
from tests.reverb_fixtures import *  # noqa: F403
from tests.reverb_fixtures import (
    make_case_episodes,
    make_case_steps,
    make_window_items,
    read_items,
)


def _as_lists(nest):
    return tree.map_structure(lambda x: np.asarray(x).tolist(), nest)


def _table_size(client, table):
    return client.server_info()[table].current_size


def _push_and_read(client, table, item, episodes=None, **kwargs):
    stats = writers.push(episodes or make_case_episodes(), client, table, item=item, **kwargs)
    assert stats.items == {table: _table_size(client, table)}
    return stats, read_items(client, table)


def test_two_step_items_equal_cases(reverb_client):
    stats, samples = _push_and_read(reverb_client, 'two_step', items.TwoStep())
    assert (stats.episodes, stats.steps, stats.items, stats.skipped_episodes) == (
        3,
        8,
        {'two_step': 5},
        0,
    )
    assert len(samples) == len(reverb_cases.TWO_STEP_ITEMS)
    for sample, expected in zip(samples, reverb_cases.TWO_STEP_ITEMS, strict=True):
        got = sample.data
        assert np.asarray(got.observation).ravel().tolist() == list(expected['observation'])
        for field in ('step_type', 'action', 'next_step_type', 'reward', 'discount'):
            assert np.asarray(getattr(got, field)).tolist() == list(expected[field]), field


def test_two_step_items_equal_tf_agents_observer(reverb_client):
    observer = reverb_utils.ReverbAddTrajectoryObserver(
        reverb_client, 'tf_agents', sequence_length=2
    )
    tfa_rlds.push_rlds_to_reverb(make_case_episodes(), observer)
    observer.close()
    theirs = [_as_lists(s.data) for s in read_items(reverb_client, 'tf_agents')]
    writers.push(make_case_episodes(), reverb_client, 'tf_agents')
    ours = [_as_lists(s.data) for s in read_items(reverb_client, 'tf_agents')]
    assert ours == theirs


def test_n_step_items_equal_cases(reverb_client):
    _, samples = _push_and_read(reverb_client, 'n_step', items.NStep(**reverb_cases.N_STEP))
    got = [_as_lists(s.data) for s in samples]
    for item, expected in zip(got, reverb_cases.N_STEP_ITEMS, strict=True):
        assert item[types.OBSERVATION] == [expected['observation']]
        assert item[types.NEXT_OBSERVATION] == [expected['next_observation']]
        for field in ('action', 'n_step_return', 'n_step_discount', 'n_step_length'):
            assert item[field] == pytest.approx(expected[field]), field


def test_priority_function_sets_item_priorities(reverb_client):
    item = items.NStep(**reverb_cases.N_STEP)
    _, samples = _push_and_read(
        reverb_client, 'n_step', item, priority=lambda batch: tf.abs(batch[types.N_STEP_RETURN])
    )
    expected = [case['n_step_return'] for case in reverb_cases.N_STEP_ITEMS]
    assert [s.info.priority for s in samples] == pytest.approx(expected)


def _assert_windows_equal(samples, windows):
    expected = make_window_items(windows)
    assert len(samples) == len(expected)
    for sample, want in zip(samples, expected, strict=True):
        got = sample.data
        assert sorted(got) == sorted(want)
        for field, value in want.items():
            np.testing.assert_array_equal(np.asarray(got[field]), value, err_msg=field)


@pytest.mark.parametrize(
    'case',
    reverb_cases.SEQUENCE_CASES,
    ids=[c['testcase_name'] for c in reverb_cases.SEQUENCE_CASES],
)
def test_sequence_items_equal_cases(reverb_client, case):
    table = f'seq_{case["testcase_name"]}'
    item = items.Sequence(case['length'], case['period'], case['end'])
    _, samples = _push_and_read(reverb_client, table, item)
    _assert_windows_equal(samples, case['windows'])


@pytest.mark.parametrize(
    'case', reverb_cases.EPISODE_CASES, ids=[c['testcase_name'] for c in reverb_cases.EPISODE_CASES]
)
def test_episode_items_equal_cases(reverb_client, case):
    table = f'episode_{case["testcase_name"]}'
    item = items.Episode(reverb_cases.EPISODE_MAX_LENGTH, case['overflow'])
    _, samples = _push_and_read(reverb_client, table, item)
    _assert_windows_equal(samples, case['windows'])


def test_too_long_episode_raises_after_writing_earlier_ones(reverb_client):
    item = items.Episode(reverb_cases.EPISODE_MAX_LENGTH)
    with pytest.raises(errors.EpisodeTooLongError, match='4 steps, more than') as info:
        writers.push(make_case_episodes(), reverb_client, 'episode_error', item=item)
    assert info.value.episodes_written == 2
    assert _table_size(reverb_client, 'episode_error') == info.value.items_written == 2


def test_count_items_matches_push(reverb_client):
    for case in reverb_cases.SEQUENCE_CASES:
        item = items.Sequence(case['length'], case['period'], case['end'])
        assert plans.count_items(make_case_episodes(), item) == len(case['windows'])
    assert plans.count_items(make_case_episodes(), items.TwoStep()) == 5


def _make_invalid_episodes():
    steps = {k: v.copy() for k, v in make_case_steps()[0].items()}
    steps[types.IS_FIRST][0] = False
    bad = tf.data.Dataset.from_tensors({types.STEPS: tf.data.Dataset.from_tensor_slices(steps)})
    return make_case_episodes([0]).concatenate(bad).concatenate(make_case_episodes([2]))


def test_invalid_episode_raises_naming_problems(reverb_client):
    with pytest.raises(
        errors.InvalidEpisodeError, match='(?s)Episode 1 is invalid.*is_first'
    ) as info:
        writers.push(_make_invalid_episodes(), reverb_client, 'two_step')
    assert info.value.episodes_written == 1
    assert _table_size(reverb_client, 'two_step') == 2


def test_invalid_episode_is_skipped_whole(reverb_client):
    stats = writers.push(_make_invalid_episodes(), reverb_client, 'two_step', on_invalid='skip')
    assert (stats.episodes, stats.skipped_episodes, stats.items['two_step']) == (2, 1, 5)
    assert _table_size(reverb_client, 'two_step') == 5


def test_signature_mismatch_gives_leaf_diff(reverb_client):
    with pytest.raises(errors.SpecMismatchError, match=r'(?s)signature.*n_step_return: unexpected'):
        writers.push(make_case_episodes(), reverb_client, 'two_step', item=items.NStep(2, 0.5))


def test_table_too_small_is_an_error_unless_eviction_allowed(reverb_client):
    with pytest.raises(errors.TableTooSmallError, match='room for 2 more') as info:
        writers.push(make_case_episodes(), reverb_client, 'tiny')
    assert info.value.episodes_written == 2  # E0 (2 items) and E1 (no item) fit.
    assert _table_size(reverb_client, 'tiny') == 2
    reverb_client.reset('tiny')
    stats = writers.push(make_case_episodes(), reverb_client, 'tiny', allow_eviction=True)
    assert stats.items == {'tiny': 5}
    assert _table_size(reverb_client, 'tiny') == 2


def test_blocked_insert_raises_push_error_with_exact_count(reverb_client):
    with pytest.raises(errors.PushError, match='failed at episode 2.*2 episode') as info:
        writers.push(
            make_case_episodes(), reverb_client, 'queue', timeout_ms=300, allow_eviction=True
        )
    assert info.value.episodes_written == 2


def test_wrong_table_lists_existing_tables(reverb_client):
    with pytest.raises(errors.TableError, match=r"Could not find table 'nope'.*exist: .*two_step"):
        writers.push(make_case_episodes(), reverb_client, 'nope')


def test_unreachable_server_errors_within_timeout():
    started = time.perf_counter()
    with pytest.raises(errors.ReverbConnectionError, match='localhost:1 within 1000 ms'):
        writers.push(make_case_episodes(), 'localhost:1', 'two_step', timeout_ms=1000)
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize(
    ('kwargs', 'match'),
    [
        (dict(priority=-1.0), 'priority=-1.0 is not valid'),
        (dict(timeout_ms=0), 'timeout_ms=0 is not valid'),
        (dict(max_in_flight_items=0), 'max_in_flight_items=0 is not valid'),
        (dict(item='two-step'), "item='two-step' is not valid"),
        (dict(on_invalid='report'), "on_invalid='report' writes nothing"),
        (dict(on_invalid='maybe'), "on_invalid='maybe' is not valid"),
    ],
)
def test_invalid_options_raise(reverb_client, kwargs, match):
    with pytest.raises(ValueError, match=match):
        writers.push(make_case_episodes(), reverb_client, 'two_step', **kwargs)


def test_bad_address_raises():
    with pytest.raises(errors.ReverbConnectionError, match="server='nowhere' is not valid"):
        table_info.connect('nowhere')


def test_drop_in_uses_fast_path_for_tf_agents_observer(reverb_client):
    observer = reverb_utils.ReverbAddTrajectoryObserver(reverb_client, 'two_step', 2)
    assert writers.push_rlds_to_reverb(make_case_episodes(), observer) == 8
    assert _table_size(reverb_client, 'two_step') == 5


def test_drop_in_falls_back_to_the_observer_loop(reverb_client):
    observer = observers.ReverbAddTrajectoryObserver(reverb_client, 'two_step', 2, keep_tails=True)
    assert writers.push_rlds_to_reverb(make_case_episodes(), observer) == 8
    observer.close()
    # keep_tails adds E1's single step as a one-step item.
    assert _table_size(reverb_client, 'two_step') == 6


def test_drop_in_signature_mismatch_is_a_value_error_with_diff(reverb_client):
    observer = reverb_utils.ReverbAddTrajectoryObserver(reverb_client, 'n_step', 2)
    with pytest.raises(ValueError, match=r'(?s)should match RLDS data spec.*missing'):
        writers.push_rlds_to_reverb(make_case_episodes(), observer)


def test_push_accepts_an_address_and_several_tables(reverb_server, reverb_client):
    address = f'localhost:{reverb_server.port}'
    stats = writers.push(make_case_episodes(), address, ['two_step', 'tf_agents'])
    assert stats.items == {'two_step': 5, 'tf_agents': 5}
    assert _table_size(reverb_client, 'tf_agents') == 5


def test_progress_reports_episodes_and_steps(reverb_client):
    seen = []
    writers.push(
        make_case_episodes(), reverb_client, 'two_step', progress=lambda e, s: seen.append((e, s))
    )
    assert seen == [(1, 3), (1, 1), (1, 4)]


def test_sampled_items_feed_a_trajectory_dataset(reverb_server, reverb_client):
    writers.push(make_case_episodes(), reverb_client, 'seq_pad', item=items.Sequence(2, 2, 'pad'))
    dataset = reverb.TrajectoryDataset.from_table_signature(
        f'localhost:{reverb_server.port}', 'seq_pad', max_in_flight_samples_per_worker=2
    )
    sample = next(iter(dataset.take(1)))
    assert sample.data[types.MASK].shape == (2,)


@pytest.mark.parametrize(
    ('make', 'match'),
    [
        (lambda: items.NStep(0, 0.9), 'n=0 is not valid; expected an integer >= 1'),
        (lambda: items.NStep(3, 1.5), r'gamma=1.5 is not valid; expected 0 <= gamma <= 1'),
        (lambda: items.Sequence(0), 'length=0 is not valid'),
        (lambda: items.Sequence(4, 0), 'period=0 is not valid'),
        (lambda: items.Sequence(4, 2, 'wrap'), "end='wrap' is not valid"),
        (lambda: items.Episode(0), 'max_length=0 is not valid'),
        (lambda: items.Episode(10, 'chop'), "overflow='chop' is not valid"),
        (
            lambda: items.parse_item('triple'),
            "item='triple' is not valid; expected one of two-step",
        ),
    ],
)
def test_bad_item_arguments_raise(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_priority_function_refused_for_stream_windows(reverb_client):
    with pytest.raises(ValueError, match='CONTINUE sequences take a constant priority'):
        writers.push(
            make_case_episodes(),
            reverb_client,
            'seq_continue',
            item=items.Sequence(3, 3, 'continue'),
            priority=lambda batch: 1.0,
        )


def test_drop_in_raises_invalid_argument_on_invalid_episodes(reverb_client):
    observer = reverb_utils.ReverbAddTrajectoryObserver(reverb_client, 'two_step', 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match='Episode 1 is invalid'):
        writers.push_rlds_to_reverb(_make_invalid_episodes(), observer)


@pytest.mark.parametrize(
    ('length', 'period', 'end'),
    [(3, 1, 'truncate'), (3, 2, 'pad'), (3, 2, 'last'), (4, 3, 'drop'), (2, 3, 'continue')],
)
def test_sequence_items_equal_adders_windows(reverb_client, length, period, end):
    """The same windows as `adders.sequences` (without `is_burn_in`), read back from Reverb."""
    import adders

    item = items.Sequence(length, period, end)
    stats = writers.push(make_case_episodes(), reverb_client, 'unsigned', item=item)
    spec = item.compute_item_spec(make_case_episodes(), policy_info_fn=None)
    samples = [tree.unflatten_as(spec, s.data) for s in read_items(reverb_client, 'unsigned')]
    windows = list(make_case_episodes().apply(adders.sequences(length, period, end=end)))
    assert stats.items['unsigned'] == len(samples) == len(windows)
    for sample, window in zip(samples, windows, strict=True):
        for field, value in sample.items():
            np.testing.assert_array_equal(np.asarray(value), window[field].numpy(), err_msg=field)
