"""`shuffle_within_budget`: episodes or steps shuffled within a memory budget in bytes.

On robot-like data written by TFDS's own writer (`tests/robot_data.py`: JPEG and PNG
cameras, shards shuffled by TFDS, four shards): every element exactly once, the same order
for a seed, the buffer's bytes (measured inside the transform) within the budget, and an
order far from the source's (Spearman's rho, measured from the data's own episode and step
numbers) where `tf.data`'s shuffle of the same bytes stays close to it.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

import adders
import rlds_reverb
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import errors, sources, types
from rlds_reverb.read import shuffle
from rlds_reverb.read.shuffle import ShuffleStats, ShuffleUnit, shuffle_within_budget
from tests import robot_data as rd

# 400 short episodes (1 to 12 steps) in 4 shards: many more than a small budget holds.
SPEC = rd.RobotSpec(
    tuple(int(n) for n in np.random.default_rng(2).integers(1, 13, 400)),
    image_shape=(16, 16, 3),
    wrist_shape=(8, 8, 3),
    num_shards=4,
)
# The bound on |rho| at 200 ranges (2 episodes a range): rho's standard deviation over
# seeds is about 1 / sqrt(199) = 0.071 (the module docstring).
RHO_BOUND = 0.25


@pytest.fixture(scope='module')
def robot_dir(tmp_path_factory):
    return rd.write(tmp_path_factory.mktemp('shuffle'), SPEC)


def _step_keys(steps: tf.data.Dataset) -> list[tuple[int, int]]:
    """Returns each step's (episode index, step index), from its `state`, in order."""
    keys = []
    for batch in steps.batch(1024).as_numpy_iterator():
        state = batch[types.OBSERVATION][rd.STATE]
        keys.extend(
            zip(state[:, 0].astype(int).tolist(), state[:, 1].astype(int).tolist(), strict=False)
        )
    return keys


def _load_order_steps(directory) -> list[tuple[int, int]]:
    """Returns every step's key in `load`'s order (the source order)."""
    whole = rlds_reverb.load(directory, encoded_frames='all')
    return _step_keys(whole.flat_map(lambda episode: episode[types.STEPS]))


def _rho(given: list, source_order: list) -> float:
    place = {key: i for i, key in enumerate(source_order)}
    return shuffle.measure_rank_correlation([place[key] for key in given])


def _data_bytes(directory) -> int:
    stats = ShuffleStats()
    steps = shuffle_within_budget(
        rlds_reverb.load(directory, encoded_frames='all'),
        memory_budget_bytes=2**40,
        seed=0,
        unit=ShuffleUnit.STEPS,
        stats=stats,
    )
    for _ in steps:
        pass
    return stats.peak_buffer_bytes  # The whole dataset fits: the buffer held every step.


def test_steps_come_once_each_in_one_order_per_seed(robot_dir):
    episodes = rlds_reverb.load(robot_dir, encoded_frames='all')
    source_order = _load_order_steps(robot_dir)

    def _run(seed: int) -> list[tuple[int, int]]:
        steps = shuffle_within_budget(
            episodes, memory_budget_bytes=200_000, seed=seed, unit=ShuffleUnit.STEPS
        )
        return _step_keys(steps)

    first, again, other = _run(0), _run(0), _run(1)
    assert collections.Counter(first) == collections.Counter(source_order)
    assert len(first) == SPEC.num_steps
    assert again == first  # The same seed, the same order.
    assert other != first
    assert collections.Counter(other) == collections.Counter(source_order)


def test_every_pass_gives_the_same_order_and_the_frames_unchanged(robot_dir):
    episodes = rlds_reverb.load(robot_dir, encoded_frames='all')
    steps = shuffle_within_budget(
        episodes, memory_budget_bytes=300_000, seed=4, unit=ShuffleUnit.STEPS
    )
    assert _step_keys(steps) == _step_keys(steps)
    stored = rd.make_episodes(SPEC)
    for step in steps.take(50).as_numpy_iterator():
        index, t = step[types.OBSERVATION][rd.STATE][:2].astype(int)
        assert step[types.OBSERVATION][rd.IMAGE] == stored[index]['jpeg'][rd.IMAGE][t]


def test_the_budget_holds_and_the_order_is_far_from_the_source(robot_dir):
    total_bytes = _data_bytes(robot_dir)
    budget = total_bytes // 50  # 2% of the data.
    episodes = rlds_reverb.load(robot_dir, encoded_frames='all')
    source_order = _load_order_steps(robot_dir)
    rhos = []
    for seed in range(3):
        stats = ShuffleStats()
        steps = shuffle_within_budget(
            episodes,
            memory_budget_bytes=budget,
            seed=seed,
            unit=ShuffleUnit.STEPS,
            range_episodes=2,
            stats=stats,
        )
        given = _step_keys(steps)
        assert stats.peak_held_bytes <= budget
        assert stats.peak_buffer_bytes > budget // 4  # The buffer is used, not left empty.
        assert stats.elements == len(given) == SPEC.num_steps
        rho = _rho(given, source_order)
        assert stats.rank_correlation() == pytest.approx(rho)
        rhos.append(rho)
    assert max(abs(r) for r in rhos) < RHO_BOUND, rhos
    # tf.data's shuffle of the same bytes: as many steps as fit in the budget.
    buffer_size = max(budget * SPEC.num_steps // total_bytes, 1)
    flat = episodes.flat_map(lambda episode: episode[types.STEPS])
    tf_order = _step_keys(flat.shuffle(buffer_size, seed=0))
    assert _rho(tf_order, source_order) > 0.9


def test_episodes_with_decoded_frames_and_a_selection(robot_dir):
    episodes = rlds_reverb.load(robot_dir).skip(30).take(200)
    expected = [
        int(e[rd.METADATA][rd.EPISODE_ID])
        for e in episodes_lib.to_whole_episodes(episodes).as_numpy_iterator()
    ]
    stats = ShuffleStats()
    shuffled = shuffle_within_budget(episodes, memory_budget_bytes=3_000_000, seed=7, stats=stats)
    assert isinstance(shuffled, episodes_lib.EpisodeDataset)
    whole = episodes_lib.to_whole_episodes(shuffled)
    given = [int(e[rd.METADATA][rd.EPISODE_ID]) for e in whole.as_numpy_iterator()]
    assert sorted(given) == sorted(expected)
    assert given != expected
    assert stats.peak_held_bytes <= 3_000_000
    assert stats.source_keys == [expected.index(i) for i in given]


def test_encoded_episodes_keep_their_frame_formats(robot_dir):
    episodes = rlds_reverb.load(robot_dir, encoded_frames='all')
    shuffled = shuffle_within_budget(episodes, memory_budget_bytes=2_000_000, seed=0)
    assert shuffled.frame_formats == episodes.frame_formats
    assert shuffled.element_spec == episodes.element_spec


def test_an_element_larger_than_the_budget_names_the_episode(robot_dir):
    episodes = rlds_reverb.load(robot_dir)
    shuffled = shuffle_within_budget(episodes, memory_budget_bytes=1_000, seed=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r'memory_budget_bytes=1,000 is too'):
        next(iter(shuffled))


def test_a_source_without_record_ranges_is_refused():
    whole = tf.data.Dataset.from_tensors({types.STEPS: {types.REWARD: np.zeros(3, np.float32)}})
    with pytest.raises(errors.SourceError, match='TFRecord shards'):
        shuffle_within_budget(whole, memory_budget_bytes=1_000, seed=0)


@pytest.mark.parametrize(
    ('arguments', 'error', 'match'),
    [
        ({'memory_budget_bytes': 0}, ValueError, 'memory_budget_bytes=0'),
        ({'memory_budget_bytes': 1.5}, ValueError, 'memory_budget_bytes=1.5'),
        ({'streams': 0}, ValueError, 'streams=0'),
        ({'range_episodes': 0}, ValueError, 'range_episodes=0'),
        ({'unit': 'steps'}, TypeError, "unit='steps'"),
    ],
)
def test_arguments_are_checked(robot_dir, arguments, error, match):
    episodes = rlds_reverb.load(robot_dir)
    given = {'memory_budget_bytes': 10**6, 'seed': 0, **arguments}
    with pytest.raises(error, match=match):
        shuffle_within_budget(episodes, **given)


def test_rank_correlation_of_known_orders():
    assert shuffle.measure_rank_correlation([0, 1, 2, 3]) == 1.0
    assert shuffle.measure_rank_correlation([3, 2, 1, 0]) == -1.0
    assert shuffle.measure_rank_correlation([5]) == 0.0
    keys = np.random.default_rng(0).permutation(10_000)
    assert abs(shuffle.measure_rank_correlation(keys)) < 0.05


def test_maps_over_the_source_are_applied_to_the_shuffled_episodes(robot_dir):
    # What `normalize` returns: the records' source under a MappedSource.
    loaded = rlds_reverb.load(robot_dir, encoded_frames='all').take(40)

    def _add_one(episode: dict) -> dict:
        steps = episode[types.STEPS]
        return {**episode, types.STEPS: {**steps, types.REWARD: steps[types.REWARD] + 1.0}}

    mapped = episodes_lib.from_source(
        sources.MappedSource(loaded.source, _add_one), frame_formats=loaded.frame_formats
    )
    shuffled = shuffle_within_budget(mapped, memory_budget_bytes=2_000_000, seed=0)
    rewards = {
        int(e[rd.METADATA][rd.EPISODE_ID]): e[types.STEPS][types.REWARD]
        for e in episodes_lib.to_whole_episodes(shuffled).as_numpy_iterator()
    }
    for e in episodes_lib.to_whole_episodes(loaded).as_numpy_iterator():
        np.testing.assert_array_equal(
            rewards.pop(int(e[rd.METADATA][rd.EPISODE_ID])), e[types.STEPS][types.REWARD] + 1.0
        )
    assert not rewards


def test_an_adders_output_on_the_records_is_shuffled_with_the_adder_applied(robot_dir):
    # An adder made in the read's own map (a StageMappedSource) is a map over the records:
    # the shuffle reads the records and applies it, so nothing bigger than a record is held.
    loaded = rlds_reverb.load(robot_dir, encoded_frames='all').take(30)
    chunked = loaded.apply(adders.chunks(2, 4))
    assert isinstance(episodes_lib.find_source(chunked), sources.StageMappedSource)
    shuffled = shuffle_within_budget(chunked, memory_budget_bytes=2_000_000, seed=1)
    by_id = {
        int(e[rd.METADATA][rd.EPISODE_ID]): e[types.STEPS]
        for e in episodes_lib.to_whole_episodes(shuffled).as_numpy_iterator()
    }
    for e in episodes_lib.to_whole_episodes(chunked).as_numpy_iterator():
        got = by_id.pop(int(e[rd.METADATA][rd.EPISODE_ID]))
        tf.nest.map_structure(np.testing.assert_array_equal, got, e[types.STEPS])
    assert not by_id
