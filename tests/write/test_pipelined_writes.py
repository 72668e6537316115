"""Window items written without waiting at each episode's end (`engines.StructuredEngine`).

The StructuredWriter of window items never ends its episode between episodes: each row
carries its step index, which the configs' conditions read, so windows never cross an
episode's start; `EpisodeLoop` counts an episode written once its items are confirmed.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rlds_reverb.transform import items, plans
from rlds_reverb.write import configs, engines
from rlds_reverb.write import push as writers
from tests import builders
from tests.reverb_tables import read_items, table_size

# Lengths with single steps between longer episodes: a window crossing a start would show.
_LENGTHS = [1, 3, 1, 4, 2, 1, 5]
_TABLE = 'unsigned'  # A FIFO table without a signature (tests/reverb_tables.py).


def _episodes() -> tf.data.Dataset:
    # Observations number the steps of the whole stream: 0, 1, 2, ...
    starts = np.cumsum([0, *_LENGTHS[:-1]])
    return builders.rlds(
        [
            builders.episode(length, obs_dim=None, start=float(start))
            for start, length in zip(starts, _LENGTHS, strict=True)
        ]
    )


def test_two_step_windows_stay_inside_episodes_while_the_writer_goes_on(reverb_client):
    stats = writers.push(_episodes(), reverb_client, _TABLE, engine='structured')
    # Unsigned: flat columns, the observation second (after step_type).
    pairs = [tuple(item.data[1]) for item in read_items(reverb_client, _TABLE)]
    starts = np.cumsum([0, *_LENGTHS[:-1]])
    want = [(s + t, s + t + 1) for s, n in zip(starts, _LENGTHS, strict=True) for t in range(n - 1)]
    assert pairs == [tuple(map(float, p)) for p in want]
    assert (stats.episodes, stats.items[_TABLE]) == (len(_LENGTHS), len(want))


def test_engine_confirms_at_the_end_what_it_did_not_wait_for(reverb_client):
    item = items.TwoStep()
    episode_plans = list(plans.make_episode_plans(_episodes(), item).as_numpy_iterator())
    engine = engines.make_engine(
        reverb_client,
        item,
        [_TABLE],
        row_structure=episode_plans[0].rows,
        priority=1.0,
        kind='structured',
        max_in_flight_items=1_000,  # No flush before the end.
        timeout_ms=10_000,
    )
    with engine:
        created = sum(engine.write_episode(plan) for plan in episode_plans)
        assert engine.confirmed_items == 0  # Nothing waited for yet: nothing known.
        assert engine.probe_confirmed() <= created
        assert engine.finish() == 0
        assert engine.confirmed_items == created == sum(n - 1 for n in _LENGTHS)
    assert table_size(reverb_client, _TABLE) == created
    read_items(reverb_client, _TABLE)  # Empties the table for the next test.


def test_n_step_items_still_end_each_episode(reverb_client):
    item = items.NStep(2, 0.5)
    plan = list(plans.make_episode_plans(_episodes(), item).as_numpy_iterator())[1]
    engine = engines.make_engine(
        reverb_client,
        item,
        [_TABLE],
        row_structure=plan.rows,
        priority=1.0,
        kind='structured',
        max_in_flight_items=1_000,
        timeout_ms=10_000,
    )
    with engine:  # Its last items are made at the episode's end: confirmed there.
        assert engine.write_episode(plan) == plan.num_items > 0
        assert engine.confirmed_items == plan.num_items
    read_items(reverb_client, _TABLE)


def test_step_column_with_keep_tails_is_an_error():
    with pytest.raises(ValueError, match='keep_tails needs the writer to end episodes'):
        configs.make_window_configs(
            [None] * 3, ['replay'], length=2, priority=1.0, keep_tails=True, step_column=3
        )


def test_window_configs_read_the_step_column():
    made = configs.make_item_configs(items.TwoStep(), [None] * 3, ['replay'], 1.0, step_column=True)
    (window,) = made[0].conditions  # Step index >= 1, read from column 3.
    assert (window.flat_source_index, window.step_index, window.ge) == (3, False, 1)
    assert configs.needs_episode_ends(items.NStep(3, 0.9))
    assert not configs.needs_episode_ends(items.TwoStep())
