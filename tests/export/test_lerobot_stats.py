"""LeRobot's statistics, computed here as LeRobot 0.6.1 computes them: equal, bit for bit.

Two references, both made by LeRobot 0.6.1 itself in a scratch venv: the fixtures' own
per-episode `stats/*` columns and `meta/stats.json` (from the frames and values LeRobot
recorded), and `reference/written-stats.json`, LeRobot's `compute_episode_stats` on the
arrays of `tests.lerobot_checked.stats_cases()` (vectors, scalars, int64, bool, one-frame
episodes, and images larger than 300 pixels, which LeRobot samples and downsamples).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pyarrow.parquet as pq
import pytest

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.export import lerobot_stats
from rlds_reverb.read.loading import load
from tests import lerobot_checked

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'lerobot'
IMAGE = FIXTURES / 'datasets' / 'image-v3'


def _episode_values(episode: dict, index: int, first: int, tasks: list[str]) -> dict:
    """One fixture episode's values as LeRobot's recorder handed them to its statistics."""
    steps = episode[types.STEPS]
    length = len(steps[types.IS_FIRST])
    observation = steps[types.OBSERVATION]
    return {
        'observation.images.front': ('image', observation['images']['front']),
        'observation.images.wrist': ('image', observation['images']['wrist']),
        'observation.state': ('numeric', observation['state']),
        'action': ('numeric', steps[types.ACTION]),
        'observation.gripper': ('numeric', observation['gripper']),
        'next.reward': ('numeric', steps[types.REWARD]),
        'next.done': ('numeric', steps[types.IS_TERMINAL]),
        'timestamp': ('numeric', np.arange(length) / 10),
        'frame_index': ('numeric', np.arange(length)),
        'episode_index': ('numeric', np.full(length, index)),
        'index': ('numeric', np.arange(first, first + length)),
        'task_index': (
            'numeric',
            np.array([tasks.index(t.decode()) for t in steps[types.LANGUAGE_INSTRUCTION]]),
        ),
    }


def test_every_statistic_of_the_lerobot_fixture_is_recomputed_exactly():
    episodes = list(episodes_lib.to_whole_episodes(load(IMAGE)).as_numpy_iterator())
    rows = pq.read_table(IMAGE / 'meta/episodes/chunk-000/file-000.parquet').to_pylist()
    tasks = pq.read_table(IMAGE / 'meta/tasks.parquet').column('task').to_pylist()
    total: dict = {}
    first = 0
    for index, (episode, row) in enumerate(zip(episodes, rows, strict=True)):
        values = _episode_values(episode, index, first, tasks)
        first += len(episode[types.STEPS][types.IS_FIRST])
        for name, (kind, array) in values.items():
            stats = (lerobot_stats.image_stats if kind == 'image' else lerobot_stats.numeric_stats)(
                array
            )
            for stat in lerobot_stats.STAT_NAMES:
                assert np.asarray(stats[stat]).tolist() == row[f'stats/{name}/{stat}'], (
                    index,
                    name,
                    stat,
                )
            total[name] = lerobot_stats.aggregate(total.get(name), stats)
    written = json.loads((IMAGE / 'meta/stats.json').read_text())
    assert sorted(written) == sorted(total)
    for name, stats in total.items():
        assert lerobot_stats.to_lists(stats) == written[name], name


@pytest.mark.parametrize('key', sorted(lerobot_checked.stats_cases()))
def test_each_case_is_what_lerobots_compute_episode_stats_gives(key):
    reference = json.loads((FIXTURES / 'reference' / 'written-stats.json').read_text())[key]
    values = lerobot_checked.stats_cases()[key]
    compute = lerobot_stats.image_stats if key.startswith('image') else lerobot_stats.numeric_stats
    assert {k: np.asarray(v).tolist() for k, v in compute(values).items()} == reference


def test_image_statistics_sample_and_downsample_as_lerobot():
    assert lerobot_stats.estimate_samples(1) == 1
    assert lerobot_stats.estimate_samples(99) == 99
    assert lerobot_stats.estimate_samples(500) == 105  # int(500 ** 0.75)
    assert lerobot_stats.sample_positions(5).tolist() == [0, 1, 2, 3, 4]
    frames = np.zeros((3, 320, 640, 3), np.uint8)
    assert lerobot_stats.image_stats(frames)['count'].tolist() == [3]
    assert lerobot_stats.image_stats(frames)['mean'].shape == (3, 1, 1)
