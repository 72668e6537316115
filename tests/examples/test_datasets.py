"""Tests of the embedded datasets: the CartPole generator, its TFDS writer, synthetic data."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core import example_serializer

from rlds_reverb.core import types
from rlds_reverb.examples import cartpole, synthetic
from rlds_reverb.read.loading import load
from rlds_reverb.storage import tfds_writer

SMALL = {'num_episodes': 4, 'seed': 3, 'max_episode_steps': 60}


def read_episodes(episodes: tf.data.Dataset) -> list[dict[str, np.ndarray]]:
    """Returns every episode's steps as NumPy arrays `[T, ...]`, plus episode fields."""
    result = []
    for episode in episodes:
        steps = episode[types.STEPS].batch(100_000).get_single_element()
        fields = {k: v.numpy() for k, v in episode.items() if k != types.STEPS}
        result.append({**tf.nest.map_structure(lambda t: t.numpy(), steps), **fields})
    return result


def read_files(directory: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_generate_gives_the_same_bytes_for_the_same_seed(tmp_path):
    first = cartpole.generate(tmp_path / 'a', **SMALL)
    second = cartpole.generate(tmp_path / 'b', **SMALL)
    other = cartpole.generate(tmp_path / 'c', **{**SMALL, 'seed': 4})

    files = read_files(first)
    assert files == read_files(second)
    assert any(name.startswith('cartpole_v1-train.tfrecord') for name in files)
    shards = [name for name in files if '.tfrecord' in name]
    assert [files[n] for n in shards] != [read_files(other)[n] for n in shards]


def test_generate_writes_a_tfds_directory_with_the_documented_layout(cartpole_dir):
    assert cartpole_dir.parts[-2:] == ('cartpole_v1', '1.0.0')
    builder = tfds.builder_from_directory(cartpole_dir)
    assert list(builder.info.splits) == ['train']
    assert builder.info.splits['train'].num_examples == 12
    assert builder.info.splits['train'].num_shards == 3
    assert isinstance(builder.info.features[types.STEPS], tfds.features.Dataset)
    assert not list(cartpole_dir.parent.glob('.*'))  # No staging directory left behind.


def test_load_reads_the_documented_specs(cartpole_episodes):
    spec = cartpole_episodes.element_spec
    steps = spec[types.STEPS].element_spec
    assert steps[types.OBSERVATION] == tf.TensorSpec([4], tf.float32)
    assert steps[types.ACTION] == tf.TensorSpec([], tf.int64)
    assert steps[types.REWARD] == tf.TensorSpec([], tf.float32)
    assert steps[types.DISCOUNT] == tf.TensorSpec([], tf.float32)
    for flag in types.FLAG_FIELDS:
        assert steps[flag] == tf.TensorSpec([], tf.bool)
    assert spec[cartpole.EPISODE_RETURN] == tf.TensorSpec([], tf.float32)
    assert spec[cartpole.RANDOM_ACTION_FRACTION] == tf.TensorSpec([], tf.float32)


def test_episodes_follow_rlds_step_semantics(cartpole_episodes):
    for episode in read_episodes(cartpole_episodes):
        n = len(episode[types.IS_FIRST]) - 1  # Environment steps; the last RLDS step is o_N.
        terminated = bool(episode[types.IS_TERMINAL][-1])
        np.testing.assert_array_equal(episode[types.IS_FIRST], np.arange(n + 1) == 0)
        np.testing.assert_array_equal(episode[types.IS_LAST], np.arange(n + 1) == n)
        assert not episode[types.IS_TERMINAL][:-1].any()  # is_terminal implies is_last.
        np.testing.assert_array_equal(episode[types.REWARD], [1.0] * n + [0.0])
        # The transition into a terminal state has discount 0 (dm_env's convention).
        transition_discounts = [1.0] * (n - 1) + [0.0 if terminated else 1.0]
        np.testing.assert_array_equal(episode[types.DISCOUNT][:-1], transition_discounts)
        assert episode[types.DISCOUNT][-1] == (0.0 if terminated else 1.0)
        assert episode[types.ACTION][-1] == 0 and set(episode[types.ACTION]) <= {0, 1}
        assert episode[cartpole.EPISODE_RETURN] == n
        if terminated:
            assert n < 500
            x, theta = episode[types.OBSERVATION][-1, 0], episode[types.OBSERVATION][-1, 2]
            assert abs(x) > 2.4 or abs(theta) > 12 * 2 * np.pi / 360  # The pole fell.
        else:
            assert n == 500  # Truncated: 500 steps and the final observation, 501 in all.


def test_fixture_has_both_endings_and_stats_match(cartpole_dir, cartpole_episodes):
    episodes = read_episodes(cartpole_episodes)
    terminated = sum(bool(e[types.IS_TERMINAL][-1]) for e in episodes)
    stats = cartpole.read_stats(cartpole_dir)
    assert stats['num_terminated'] == terminated >= 1
    assert stats['num_truncated'] == len(episodes) - terminated >= 1
    assert stats['num_steps'] == sum(len(e[types.IS_FIRST]) for e in episodes)
    assert stats['mean_return'] == pytest.approx(
        np.mean([e[cartpole.EPISODE_RETURN] for e in episodes])
    )


def test_random_action_fraction_sets_the_quality():
    def returns(fraction):
        episodes = cartpole.simulate_episodes(num_episodes=5, random_action_fraction=fraction)
        return np.array([e[cartpole.EPISODE_RETURN] for e in episodes])

    assert (returns(0.0) == 500).all()  # The controller alone always balances.
    assert returns(0.9).max() < 200
    fractions = [
        e[cartpole.RANDOM_ACTION_FRACTION]
        for e in cartpole.simulate_episodes(num_episodes=6, random_action_fraction=(0.2, 0.4))
    ]
    assert all(0.2 <= f <= 0.4 for f in fractions) and len(set(fractions)) == 6


def test_max_episode_steps_sets_the_time_limit():
    (episode,) = cartpole.simulate_episodes(
        num_episodes=1, random_action_fraction=0.0, max_episode_steps=30
    )
    steps = episode[types.STEPS]
    assert len(steps[types.IS_LAST]) == 31
    assert not steps[types.IS_TERMINAL][-1] and steps[types.DISCOUNT][-1] == 1.0


@pytest.mark.parametrize(
    'kwargs', [{'random_action_fraction': (0.5, 0.2)}, {'random_action_fraction': 1.5}]
)
def test_generate_rejects_bad_fractions(tmp_path, kwargs):
    with pytest.raises(ValueError, match='random_action_fraction=.* must be a fraction'):
        cartpole.generate(tmp_path, num_episodes=1, **kwargs)


def test_writer_bytes_equal_tfds_serializer():
    features = cartpole.make_features()
    (episode,) = cartpole.simulate_episodes(num_episodes=1, max_episode_steps=40)
    episode[types.STEPS][types.ACTION][:3] = [-5, 2**40, 300]  # Multi-byte varints.
    serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
    expected = serializer.serialize_example(features.encode_example(episode))
    ours = tfds_writer.serialize_episode(episode, features.get_serialized_info())
    # The same Example and size; the order of the feature map's entries is the protobuf
    # runtime's own (the compiled upb runtime writes them in hash order, not sorted).
    assert len(ours) == len(expected)
    assert tf.train.Example.FromString(ours) == tf.train.Example.FromString(expected)


def test_writer_rejects_a_mismatched_episode(tmp_path):
    (episode,) = cartpole.simulate_episodes(num_episodes=1, max_episode_steps=5)
    episode[types.STEPS][types.OBSERVATION] = np.zeros((6, 3), np.float32)
    with pytest.raises(ValueError, match=r"'steps/observation' has shape \(6, 3\)"):
        tfds_writer.write_rlds_dataset(
            tmp_path / 'x' / '1.0.0', [episode], features=cartpole.make_features(), name='x'
        )
    assert not list((tmp_path / 'x').iterdir())  # Nothing half-written is left.


@pytest.mark.slow  # Generates the default dataset twice: about 13 s on a loaded host.
def test_ensure_default_dataset_builds_once_and_rebuilds_when_incomplete(tmp_path, monkeypatch):
    monkeypatch.setenv(cartpole.DATA_DIR_ENV, str(tmp_path))
    assert cartpole.default_data_dir() == tmp_path
    path = cartpole.ensure_default_dataset()
    assert path == tmp_path / 'cartpole_v1' / '1.0.0'
    stats = cartpole.read_stats(path)
    assert stats['num_episodes'] == cartpole.DEFAULT_NUM_EPISODES
    assert stats['num_terminated'] > 50 and stats['num_truncated'] > 50
    assert 150 < stats['mean_return'] < 350

    stamp = (path / 'dataset_info.json').stat().st_mtime_ns
    assert cartpole.ensure_default_dataset() == path
    assert (path / 'dataset_info.json').stat().st_mtime_ns == stamp  # Reused.

    shard = sorted(path.glob('*.tfrecord-*'))[-1]
    shard.write_bytes(shard.read_bytes()[:-10])  # Half-written.
    assert not cartpole.is_complete(path)
    cartpole.ensure_default_dataset()
    assert cartpole.is_complete(path) and cartpole.read_stats(path) == stats


def test_is_complete_checks_the_generator_arguments(cartpole_dir):
    stored = json.loads((cartpole_dir / 'metadata.json').read_text())['generator_args']
    assert cartpole.is_complete(cartpole_dir, expected_args=stored)
    assert not cartpole.is_complete(cartpole_dir, expected_args={**stored, 'seed': 99})


def test_synthetic_episodes_have_halfcheetah_specs_and_flags():
    episodes = synthetic.make_synthetic_episodes(num_episodes=3, episode_length=7)
    steps = episodes.element_spec[types.STEPS].element_spec
    assert steps[types.OBSERVATION] == tf.TensorSpec([17], tf.float32)
    assert steps[types.ACTION] == tf.TensorSpec([6], tf.float32)
    data = read_episodes(load(episodes))
    assert len(data) == 3
    for episode in data:
        np.testing.assert_array_equal(episode[types.IS_FIRST], np.arange(7) == 0)
        np.testing.assert_array_equal(episode[types.IS_LAST], np.arange(7) == 6)
        np.testing.assert_array_equal(episode[types.IS_TERMINAL], np.arange(7) == 6)
        np.testing.assert_array_equal(episode[types.DISCOUNT], [1.0] * 6 + [0.0])
        assert episode[types.REWARD][-1] == 0 and not episode[types.ACTION][-1].any()
    assert not np.array_equal(data[0][types.OBSERVATION], data[1][types.OBSERVATION])


def test_synthetic_image_variant_is_deterministic():
    def make(seed):
        return synthetic.make_synthetic_episodes(
            num_episodes=2,
            episode_length=4,
            observation_shape=(84, 84, 3),
            observation_dtype=np.uint8,
            seed=seed,
            terminal=False,
        )

    steps = make(0).element_spec[types.STEPS].element_spec
    assert steps[types.OBSERVATION] == tf.TensorSpec([84, 84, 3], tf.uint8)
    first, again, other = read_episodes(make(0)), read_episodes(make(0)), read_episodes(make(1))
    np.testing.assert_array_equal(first[1][types.OBSERVATION], again[1][types.OBSERVATION])
    assert not np.array_equal(first[1][types.OBSERVATION], other[1][types.OBSERVATION])
    assert not first[0][types.IS_TERMINAL].any() and first[0][types.DISCOUNT][-1] == 1.0


def test_synthetic_rejects_empty_episodes():
    with pytest.raises(ValueError, match='episode_length=0'):
        synthetic.make_synthetic_episodes(num_episodes=1, episode_length=0)
