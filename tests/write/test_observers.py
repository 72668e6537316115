"""Our observers write the same items as TF-Agents' (same arguments), plus kept tails."""

from __future__ import annotations

import numpy as np
import pytest
import tree
from tf_agents.replay_buffers import reverb_utils

from rlds_reverb.transform import convert
from rlds_reverb.write import observers
from tests import builders
from tests.cases.episodes import THREE_EPISODES
from tests.reverb_tables import as_lists, read_items


def _write(observer) -> None:
    episodes = builders.case_dataset(THREE_EPISODES)
    for trajectory in convert.convert_rlds_to_trajectories(episodes):
        observer(tree.map_structure(np.asarray, trajectory))
    observer.close()


def _read(client, table) -> list:
    return [as_lists(s.data) for s in read_items(client, table)]


@pytest.mark.parametrize(
    'kwargs',
    [
        dict(sequence_length=2),
        dict(sequence_length=3, stride_length=2),
        dict(sequence_length=3, pad_end_of_episodes=True),
        dict(sequence_length=3, pad_end_of_episodes=True, tile_end_of_episodes=True),
    ],
    ids=['two', 'three_stride_two', 'pad', 'pad_tile'],
)
def test_trajectory_observer_matches_tf_agents(reverb_client, kwargs):
    _write(reverb_utils.ReverbAddTrajectoryObserver(reverb_client, 'tf_agents', **kwargs))
    _write(observers.ReverbAddTrajectoryObserver(reverb_client, 'two_step', **kwargs))
    theirs, ours = _read(reverb_client, 'tf_agents'), _read(reverb_client, 'two_step')
    assert theirs and ours == theirs


def test_trajectory_observer_keeps_tails(reverb_client):
    _write(observers.ReverbAddTrajectoryObserver(reverb_client, 'two_step', 3, 2, keep_tails=True))
    observations = [np.ravel(item.observation).tolist() for item in _read_raw(reverb_client)]
    # E0 (3 steps): [0 1 2]; E1 (1 step): its tail [10]; E2 (4): [20 21 22] + tail [21 22 23].
    assert observations == [[0, 1, 2], [10], [20, 21, 22], [21, 22, 23]]


def _read_raw(client):
    return [s.data for s in read_items(client, 'two_step')]


def test_trajectory_observer_rejects_tile_without_pad(reverb_client):
    with pytest.raises(ValueError, match='pad_end_of_episodes=True'):
        observers.ReverbAddTrajectoryObserver(
            reverb_client, 'two_step', 3, tile_end_of_episodes=True
        )


def test_episode_observer_matches_tf_agents(reverb_client):
    _write(reverb_utils.ReverbAddEpisodeObserver(reverb_client, 'tf_agents', 10))
    _write(observers.ReverbAddEpisodeObserver(reverb_client, 'two_step', 10))
    theirs, ours = _read(reverb_client, 'tf_agents'), _read(reverb_client, 'two_step')
    assert len(theirs) == 3 and ours == theirs


def test_episode_observer_splits_long_episodes_with_keep_tails(reverb_client):
    _write(observers.ReverbAddEpisodeObserver(reverb_client, 'two_step', 2, keep_tails=True))
    observations = [np.ravel(item.observation).tolist() for item in _read_raw(reverb_client)]
    assert observations == [[0, 1], [2], [10], [20, 21], [22, 23]]


def test_episode_observer_raises_on_long_episode(reverb_client):
    observer = observers.ReverbAddEpisodeObserver(reverb_client, 'two_step', 2)
    with pytest.raises(ValueError, match='exceeds `max_sequence_length`'):
        _write(observer)


def test_episode_observer_rejects_bad_length(reverb_client):
    with pytest.raises(ValueError, match='greater equal one'):
        observers.ReverbAddEpisodeObserver(reverb_client, 'two_step', 0)


def test_trajectory_observer_rejects_tails_with_padding(reverb_client):
    with pytest.raises(ValueError, match='keep_tails writes real tail steps'):
        observers.ReverbAddTrajectoryObserver(
            reverb_client, 'two_step', 3, pad_end_of_episodes=True, keep_tails=True
        )
