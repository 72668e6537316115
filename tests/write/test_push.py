"""Pushes into a real in-process Reverb server: items read back equal the hand-computed cases.

The case tables of `tests/cases` (two-step, n-step, sequences, episodes) run through `push`
with each writer engine that can create their items (`engine='structured'`: two-step,
n-step and dropped-tail sequences with a constant priority; `engine='trajectory'`: all).
"""

from __future__ import annotations

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
from rlds_reverb.write import engines, observers
from rlds_reverb.write import push as writers
from tests import builders, expected
from tests.cases import sequence_cases
from tests.cases.episodes import THREE_EPISODES
from tests.reverb_tables import (
    EPISODE_CASES,
    N_STEP_CASES,
    SEQUENCE_CASES,
    TWO_STEP_CASES,
    as_lists,
    case_table,
    read_items,
    table_size,
)

_ENGINES = ['structured', 'trajectory']
_N_STEP = {case['testcase_name']: case for case in N_STEP_CASES}['three_episodes']


def _case_id(case: dict) -> str:
    return case['testcase_name']


def _three_episodes(indices=(0, 1, 2)) -> tf.data.Dataset:
    """THREE_EPISODES (tests/cases/episodes.py), or those at `indices`, as an RLDS dataset."""
    return builders.case_dataset([THREE_EPISODES[i] for i in indices])


def _push_and_read(client, table, item, episodes=None, **kwargs):
    stats = writers.push(episodes or _three_episodes(), client, table, item=item, **kwargs)
    assert stats.items == {table: table_size(client, table)}
    return stats, read_items(client, table)


# --- The case tables, with each engine ------------------------------------------------------


@pytest.mark.parametrize('engine', _ENGINES)
@pytest.mark.parametrize('case', TWO_STEP_CASES, ids=_case_id)
def test_two_step_items_equal_cases(reverb_client, case, engine):
    table = case_table('two_step', case)
    episodes = builders.case_episodes(case['episodes'])
    stats, samples = _push_and_read(
        reverb_client, table, items.TwoStep(), builders.rlds(episodes), engine=engine
    )
    want = expected.two_step_items(case)
    steps = sum(len(e[types.IS_FIRST]) for e in episodes)
    assert (stats.episodes, stats.steps, stats.skipped_episodes) == (len(episodes), steps, 0)
    assert len(samples) == len(want)
    for sample, want_item in zip(samples, want, strict=True):
        for field, value in want_item.items():
            expected.assert_nest_close(
                getattr(sample.data, field), value, rtol=1e-6, atol=0, where=field
            )
        if 'policy_info' not in want_item:
            assert sample.data.policy_info == ()


def test_push_stats_count_episodes_steps_and_items(reverb_client):
    stats, _ = _push_and_read(reverb_client, 'two_step', items.TwoStep())
    assert (stats.episodes, stats.steps, stats.items, stats.skipped_episodes) == (
        3,
        8,
        {'two_step': 5},
        0,
    )


@pytest.mark.parametrize('engine', _ENGINES)
@pytest.mark.parametrize('case', N_STEP_CASES, ids=_case_id)
def test_n_step_items_equal_cases(reverb_client, case, engine):
    table = case_table('n_step', case)
    item = items.NStep(**case['params'])
    episodes = builders.case_dataset(case['episodes'])
    _, samples = _push_and_read(reverb_client, table, item, episodes, engine=engine)
    want = expected.n_step_items(case)
    assert len(samples) == len(want)
    for index, (sample, want_item) in enumerate(zip(samples, want, strict=True)):
        expected.assert_nest_close(sample.data, want_item, where=f'item {index}')


def test_priority_function_sets_item_priorities(reverb_client):
    item = items.NStep(**_N_STEP['params'])
    _, samples = _push_and_read(
        reverb_client,
        case_table('n_step', _N_STEP),
        item,
        priority=lambda batch: tf.abs(batch[types.N_STEP_RETURN]),
    )
    want = [float(i[types.N_STEP_RETURN]) for i in expected.n_step_items(_N_STEP)]
    assert want == [0.5, 1.0, 30.5, 32.0, 22.0]
    assert [s.info.priority for s in samples] == pytest.approx(want)


def test_priority_function_needs_the_trajectory_engine(reverb_client):
    table = case_table('n_step', _N_STEP)
    with pytest.raises(ValueError, match=r"engine='structured' cannot write NStep\(.*per-item"):
        writers.push(
            _three_episodes(),
            reverb_client,
            table,
            item=items.NStep(**_N_STEP['params']),
            priority=lambda batch: tf.abs(batch[types.N_STEP_RETURN]),
            engine='structured',
        )
    assert table_size(reverb_client, table) == 0


@pytest.mark.parametrize(
    'item,want',
    [
        (items.TwoStep(), engines.StructuredEngine),
        (items.NStep(3, 0.99), engines.TrajectoryEngine),
        (items.Sequence(3, end='drop'), engines.StructuredEngine),
    ],
    ids=['two_step', 'n_step', 'sequence'],
)
def test_auto_engine_leaves_n_step_items_to_the_trajectory_writer(reverb_client, item, want):
    # N-step items under the StructuredWriter's auto-tuned chunks take ~10% more server
    # memory per step (benchmarks/README.md); the items written are the same either way.
    rows = [np.zeros(2, np.float32), np.zeros((), np.int32)]
    engine = engines.make_engine(
        reverb_client,
        item,
        ['replay'],
        row_structure=rows,
        priority=1.0,
        max_in_flight_items=8,
        timeout_ms=5_000,
    )
    with engine:
        assert type(engine) is want


def _assert_windows_equal(samples, case):
    want = expected.window_items(case)
    assert len(samples) == len(want)
    for index, (sample, window) in enumerate(zip(samples, want, strict=True)):
        got = sample.data
        assert sorted(got) == sorted(window)
        for field, value in window.items():
            np.testing.assert_array_equal(np.asarray(got[field]), value, err_msg=field)
        for field, values in case.get('expected', {}).items():
            np.testing.assert_array_equal(np.asarray(got[field]), values[index], err_msg=field)


# Only dropped-tail windows are fixed windows of the newest rows, which the StructuredWriter
# creates alone (`items.Sequence.window_pattern`).
_SEQUENCE_PARAMS = [
    pytest.param(case, engine, id=f'{case["testcase_name"]}-{engine}')
    for case in SEQUENCE_CASES
    for engine in (_ENGINES if case['params']['end'] == 'drop' else ['trajectory'])
]


@pytest.mark.parametrize('case,engine', _SEQUENCE_PARAMS)
def test_sequence_items_equal_cases(reverb_client, case, engine):
    table = case_table('sequence', case)
    item = items.Sequence(**case['params'])
    episodes = builders.case_dataset(case['episodes'])
    _, samples = _push_and_read(reverb_client, table, item, episodes, engine=engine)
    _assert_windows_equal(samples, case)


def test_structured_engine_refuses_windows_it_cannot_create(reverb_client):
    (case,) = (c for c in SEQUENCE_CASES if c['testcase_name'] == 'three_episodes_pad')
    table = case_table('sequence', case)
    with pytest.raises(ValueError, match=r"engine='structured' cannot write Sequence\("):
        writers.push(
            _three_episodes(),
            reverb_client,
            table,
            item=items.Sequence(**case['params']),
            engine='structured',
        )
    assert table_size(reverb_client, table) == 0


@pytest.mark.parametrize('case', EPISODE_CASES, ids=_case_id)
def test_episode_items_equal_cases(reverb_client, case):
    table = case_table('episode', case)
    item = items.Episode(**case['params'])
    episodes = builders.case_dataset(case['episodes'])
    _, samples = _push_and_read(reverb_client, table, item, episodes, engine='trajectory')
    _assert_windows_equal(samples, case)


# --- Errors, options and the TF-Agents drop-in -------------------------------------------


def test_two_step_items_equal_tf_agents_observer(reverb_client):
    observer = reverb_utils.ReverbAddTrajectoryObserver(
        reverb_client, 'tf_agents', sequence_length=2
    )
    tfa_rlds.push_rlds_to_reverb(_three_episodes(), observer)
    observer.close()
    theirs = [as_lists(s.data) for s in read_items(reverb_client, 'tf_agents')]
    writers.push(_three_episodes(), reverb_client, 'tf_agents')
    ours = [as_lists(s.data) for s in read_items(reverb_client, 'tf_agents')]
    # The same items, except on purpose (deviation D1, docs/deviations.md): E0 is terminated with data
    # discounts 1 1 1, and its transition into the terminal step gets 0 here.
    assert [t.discount for t in theirs[:2]] == [[1.0, 1.0], [1.0, 0.0]]
    assert [t.discount for t in ours[:2]] == [[1.0, 0.0], [0.0, 0.0]]
    assert [t._replace(discount=None) for t in ours] == [t._replace(discount=None) for t in theirs]
    assert [t.discount for t in ours[2:]] == [t.discount for t in theirs[2:]]


def test_too_long_episode_raises_after_writing_earlier_ones(reverb_client):
    item = items.Episode(sequence_cases.EPISODE_MAX_LENGTH)
    with pytest.raises(errors.EpisodeTooLongError, match='4 steps, more than') as info:
        writers.push(_three_episodes(), reverb_client, 'episode_error', item=item)
    assert info.value.episodes_written == 2
    assert table_size(reverb_client, 'episode_error') == info.value.items_written == 2


def test_count_items_matches_push(reverb_client):
    # The cases on THREE_EPISODES (each traced count costs ~0.6 s; one set is enough here).
    for case in SEQUENCE_CASES:
        if case['episodes'] is THREE_EPISODES:
            item = items.Sequence(**case['params'])
            assert plans.count_items(_three_episodes(), item) == len(case['windows'])
    assert plans.count_items(_three_episodes(), items.TwoStep()) == 5


def _make_invalid_episodes():
    first, _, last = builders.case_episodes(THREE_EPISODES)
    bad = {k: v.copy() for k, v in first.items()}
    bad[types.IS_FIRST][0] = False
    return builders.rlds([first, bad, last])


def test_invalid_episode_raises_naming_problems(reverb_client):
    with pytest.raises(
        errors.InvalidEpisodeError, match='(?s)Episode 1 is invalid.*is_first'
    ) as info:
        writers.push(_make_invalid_episodes(), reverb_client, 'two_step')
    assert info.value.episodes_written == 1
    assert table_size(reverb_client, 'two_step') == 2


def test_invalid_episode_is_skipped_whole(reverb_client):
    stats = writers.push(_make_invalid_episodes(), reverb_client, 'two_step', on_invalid='skip')
    assert (stats.episodes, stats.skipped_episodes, stats.items['two_step']) == (2, 1, 5)
    assert table_size(reverb_client, 'two_step') == 5


def test_signature_mismatch_gives_leaf_diff(reverb_client):
    with pytest.raises(errors.SpecMismatchError, match=r'(?s)signature.*n_step_return: unexpected'):
        writers.push(_three_episodes(), reverb_client, 'two_step', item=items.NStep(2, 0.5))


def test_table_too_small_is_an_error_unless_eviction_allowed(reverb_client):
    with pytest.raises(errors.TableTooSmallError, match='room for 2 more') as info:
        writers.push(_three_episodes(), reverb_client, 'tiny')
    assert info.value.episodes_written == 2  # E0 (2 items) and E1 (no item) fit.
    assert table_size(reverb_client, 'tiny') == 2
    reverb_client.reset('tiny')
    stats = writers.push(_three_episodes(), reverb_client, 'tiny', allow_eviction=True)
    assert stats.items == {'tiny': 5}
    assert table_size(reverb_client, 'tiny') == 2


def test_blocked_insert_raises_push_error_with_exact_count(reverb_client):
    with pytest.raises(errors.PushError, match='failed at episode 2.*2 episode') as info:
        writers.push(_three_episodes(), reverb_client, 'queue', timeout_ms=300, allow_eviction=True)
    assert info.value.episodes_written == 2


def test_wrong_table_lists_existing_tables(reverb_client):
    with pytest.raises(errors.TableError, match=r"Could not find table 'nope'.*exist: .*two_step"):
        writers.push(_three_episodes(), reverb_client, 'nope')


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
        writers.push(_three_episodes(), reverb_client, 'two_step', **kwargs)


def test_bad_address_raises():
    with pytest.raises(errors.ReverbConnectionError, match="server='nowhere' is not valid"):
        table_info.connect('nowhere')


def test_drop_in_uses_fast_path_for_tf_agents_observer(reverb_client):
    observer = reverb_utils.ReverbAddTrajectoryObserver(reverb_client, 'two_step', 2)
    assert writers.push_rlds_to_reverb(_three_episodes(), observer) == 8
    assert table_size(reverb_client, 'two_step') == 5


def test_drop_in_falls_back_to_the_observer_loop(reverb_client):
    observer = observers.ReverbAddTrajectoryObserver(reverb_client, 'two_step', 2, keep_tails=True)
    assert writers.push_rlds_to_reverb(_three_episodes(), observer) == 8
    observer.close()
    # keep_tails adds E1's single step as a one-step item.
    assert table_size(reverb_client, 'two_step') == 6


def test_drop_in_signature_mismatch_is_a_value_error_with_diff(reverb_client):
    observer = reverb_utils.ReverbAddTrajectoryObserver(
        reverb_client, case_table('n_step', _N_STEP), 2
    )
    with pytest.raises(ValueError, match=r'(?s)should match RLDS data spec.*missing'):
        writers.push_rlds_to_reverb(_three_episodes(), observer)


def test_push_accepts_an_address_and_several_tables(reverb_server, reverb_client):
    address = f'localhost:{reverb_server.port}'
    stats = writers.push(_three_episodes(), address, ['two_step', 'tf_agents'])
    assert stats.items == {'two_step': 5, 'tf_agents': 5}
    assert table_size(reverb_client, 'tf_agents') == 5


def test_progress_reports_episodes_and_steps(reverb_client):
    seen = []
    writers.push(
        _three_episodes(), reverb_client, 'two_step', progress=lambda e, s: seen.append((e, s))
    )
    assert seen == [(1, 3), (1, 1), (1, 4)]


def test_sampled_items_feed_a_trajectory_dataset(reverb_server, reverb_client):
    table = 'sequence:three_episodes_pad'
    writers.push(_three_episodes(), reverb_client, table, item=items.Sequence(2, 2, 'pad'))
    dataset = reverb.TrajectoryDataset.from_table_signature(
        f'localhost:{reverb_server.port}', table, max_in_flight_samples_per_worker=2
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
            _three_episodes(),
            reverb_client,
            'sequence:three_episodes_continue',
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
    stats = writers.push(_three_episodes(), reverb_client, 'unsigned', item=item)
    spec = item.compute_item_spec(_three_episodes(), policy_info_fn=None)
    samples = [tree.unflatten_as(spec, s.data) for s in read_items(reverb_client, 'unsigned')]
    windows = list(_three_episodes().apply(adders.sequences(length, period, end=end)))
    assert stats.items['unsigned'] == len(samples) == len(windows)
    for sample, window in zip(samples, windows, strict=True):
        for field, value in sample.items():
            np.testing.assert_array_equal(np.asarray(value), window[field].numpy(), err_msg=field)


def test_the_plans_of_a_push_run_without_tf_data_autotuning():
    """Reverb's writer paces a push; with autotuning, dropping the plans' iterator at the end
    of a 200,000-step push waited 9 to 10 s in 1 push of 3 (benchmarks/README.md)."""
    episodes = builders.rlds([builders.episode(length) for length in (3, 1, 4)])
    pipeline = plans.make_episode_plans(episodes, items.TwoStep())
    assert pipeline.options().autotune.enabled is False
    got = list(pipeline.as_numpy_iterator())
    assert [int(p.summary.length) for p in got] == [3, 1, 4]
