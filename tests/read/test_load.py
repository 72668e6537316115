"""Tests of `rlds_reverb.load`: every source kind and every error, on real TFDS directories."""

from __future__ import annotations

import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.core import types
from rlds_reverb.core.errors import SourceError, SourceNotFoundError, SpecMismatchError
from rlds_reverb.examples import cartpole
from rlds_reverb.read.loading import load
from rlds_reverb.read.tfds_dirs import find_dataset_directory
from rlds_reverb.storage import tfds_writer
from tests import builders

NUM_EPISODES = 12


def count(episodes: tf.data.Dataset) -> int:
    return int(episodes.reduce(0, lambda n, _: n + 1))


def write_toy_dataset(directory: pathlib.Path, step_fields: dict[str, np.ndarray]) -> pathlib.Path:
    """Writes a 2-episode TFDS RLDS dataset whose steps hold `step_fields` plus the flags."""
    length = len(next(iter(step_fields.values())))
    flags = {k: v for k, v in builders.episode(length).items() if k in types.FLAG_FIELDS}
    features = tfds_writer.make_rlds_features(
        {k: tfds.features.Tensor(shape=v.shape[1:], dtype=v.dtype) for k, v in step_fields.items()}
    )
    steps = {**step_fields, **flags}
    return builders.write_tfds(directory, [steps, steps], name='toy', features=features)


@pytest.fixture
def cartpole_copy(cartpole_dir, tmp_path) -> pathlib.Path:
    """A copy of the CartPole fixture that a test may damage."""
    return pathlib.Path(shutil.copytree(cartpole_dir, tmp_path / 'cartpole_v1' / '1.0.0'))


# Sources.


def test_load_opens_a_tfds_directory(cartpole_dir):
    episodes = load(cartpole_dir)
    assert count(episodes) == NUM_EPISODES
    assert episodes.element_spec[types.STEPS].element_spec.keys() >= set(types.REQUIRED_STEP_FIELDS)


def test_load_accepts_a_string_path_and_the_parents_of_the_version(cartpole_dir):
    assert count(load(str(cartpole_dir))) == NUM_EPISODES
    assert find_dataset_directory(cartpole_dir.parent) == cartpole_dir
    assert find_dataset_directory(cartpole_dir.parent.parent) == cartpole_dir
    assert count(load(cartpole_dir.parent)) == NUM_EPISODES


def test_load_picks_the_latest_version(cartpole_dir, tmp_path):
    shutil.copytree(cartpole_dir, tmp_path / 'cartpole_v1' / '0.9.0')
    shutil.copytree(cartpole_dir, tmp_path / 'cartpole_v1' / '1.10.0')
    assert find_dataset_directory(tmp_path / 'cartpole_v1').name == '1.10.0'


@pytest.mark.parametrize('name', ['cartpole_v1', 'cartpole_v1:1.0.0'])
def test_load_opens_a_tfds_name_in_data_dir(cartpole_dir, name):
    episodes = load(name, data_dir=cartpole_dir.parent.parent, split='train[:3]')
    assert count(episodes) == 3


def test_load_returns_a_complete_tf_dataset_as_is(cartpole_episodes):
    assert load(cartpole_episodes) is cartpole_episodes


def test_load_shuffles_files_when_asked(cartpole_dir):
    config = tfds.ReadConfig(shuffle_seed=1)
    returns = [
        float(e[cartpole.EPISODE_RETURN])
        for e in load(cartpole_dir, shuffle_files=True, read_config=config)
    ]
    in_order = [float(e[cartpole.EPISODE_RETURN]) for e in load(cartpole_dir)]
    assert sorted(returns) == sorted(in_order)


# Errors.


def test_missing_path_says_what_was_looked_for(tmp_path):
    missing = tmp_path / 'nowhere'
    with pytest.raises(SourceNotFoundError, match=f'No RLDS dataset at {missing}: the path does'):
        load(missing)
    with pytest.raises(FileNotFoundError, match='dataset_info.json'):
        load(str(missing))


def test_unknown_name_lists_the_data_dir(cartpole_dir):
    data_dir = cartpole_dir.parent.parent
    with pytest.raises(
        SourceNotFoundError, match=r"No TFDS dataset named 'no_such_set'.*holds: cartpole_v1/"
    ):
        load('no_such_set', data_dir=data_dir)


def test_directory_that_is_not_a_dataset_lists_its_entries(tmp_path):
    (tmp_path / 'notes.txt').write_text('hello')
    (tmp_path / 'images').mkdir()
    with pytest.raises(
        SourceError,
        match=r'is not an RLDS dataset directory: expected a TFDS dataset directory holding '
        r'dataset_info.json .* but found images/, notes.txt\.',
    ):
        load(tmp_path)


def test_empty_directory_is_named_as_such(tmp_path):
    with pytest.raises(SourceError, match='but found an empty directory'):
        load(tmp_path)


def test_file_instead_of_directory(cartpole_dir):
    shard = sorted(cartpole_dir.glob('*.tfrecord-*'))[0]
    with pytest.raises(SourceError, match='is a file; expected a TFDS dataset directory'):
        load(shard)


def test_tfds_dataset_without_steps(tmp_path):
    features = tfds.features.FeaturesDict({'label': tfds.features.Scalar(dtype=np.int64)})
    path = tfds_writer.write_rlds_dataset(
        tmp_path / 'plain' / '1.0.0', [{'label': 3}], features=features, name='plain'
    )
    with pytest.raises(
        SourceError,
        match=r"is a TFDS dataset but not an RLDS dataset: expected a 'steps' feature .* "
        r"found features \['label'\]",
    ):
        load(path)


def test_tf_dataset_without_steps():
    with pytest.raises(
        SourceError, match="the given tf.data.Dataset: No dataset representing RLDS 'steps'"
    ):
        load(tf.data.Dataset.from_tensors({'observation': [1.0]}))
    with pytest.raises(
        SourceError, match="the given tf.data.Dataset: No dataset representing RLDS 'steps'"
    ):
        load(tf.data.Dataset.range(3))


def test_missing_field_is_named(tmp_path):
    path = write_toy_dataset(
        tmp_path,
        {
            types.OBSERVATION: np.zeros((3, 2), np.float32),
            types.REWARD: np.ones(3, np.float32),
            types.DISCOUNT: np.ones(3, np.float32),
        },
    )
    with pytest.raises(SpecMismatchError, match=r"missing step field\(s\) \['action'\]"):
        load(path)


def test_missing_fields_of_a_tf_dataset_are_named():
    steps = {types.OBSERVATION: np.zeros((3, 2), np.float32), types.IS_FIRST: np.ones(3, bool)}
    with pytest.raises(
        SpecMismatchError,
        match=r"the given tf.data.Dataset: .*\['action', 'reward', 'discount', 'is_last', "
        r"'is_terminal'\]",
    ):
        load(builders.rlds([steps]))


def test_unknown_split_lists_the_available_ones(cartpole_dir):
    with pytest.raises(
        SourceError, match=r"Unknown split 'test'.*available splits are \['train'\]"
    ):
        load(cartpole_dir, split='test')
    with pytest.raises(SourceError, match=r"Unknown split 'train\+valid\[:2\]'"):
        load(cartpole_dir, split='train+valid[:2]')


def test_unprepared_registered_name_is_not_downloaded(tmp_path):
    with pytest.raises(SourceNotFoundError, match="'mnist' is known but not prepared.*never"):
        load('mnist', data_dir=tmp_path)


def test_not_a_source():
    with pytest.raises(TypeError, match='source must be a tf.data.Dataset.*got int'):
        load(42)


# Missing discount.


def test_missing_discount_is_filled_with_a_warning(tmp_path):
    path = write_toy_dataset(
        tmp_path,
        {
            types.OBSERVATION: np.zeros((3, 2), np.float32),
            types.ACTION: np.zeros(3, np.int64),
            types.REWARD: np.full(3, 2.0, np.float32),
        },
    )
    with pytest.warns(UserWarning, match="have no 'discount' field; using 1.0 on every step"):
        episodes = load(path)
    assert episodes.element_spec[types.STEPS].element_spec[types.DISCOUNT] == tf.TensorSpec(
        [], tf.float32
    )
    for episode in episodes:
        discounts = [float(s[types.DISCOUNT]) for s in episode[types.STEPS]]
        assert discounts == [1.0, 1.0, 1.0]


def test_missing_discount_follows_a_nested_reward():
    steps = {
        types.OBSERVATION: np.zeros((2, 3), np.float32),
        types.ACTION: np.zeros(2, np.int32),
        types.REWARD: {'task': np.ones(2, np.float64), 'aux': np.ones((2, 4), np.float32)},
        types.IS_FIRST: np.array([True, False]),
        types.IS_LAST: np.array([False, True]),
        types.IS_TERMINAL: np.array([False, False]),
    }
    with pytest.warns(UserWarning, match="no 'discount' field"):
        episodes = load(builders.rlds([steps]))
    discount = episodes.element_spec[types.STEPS].element_spec[types.DISCOUNT]
    assert discount == {
        'task': tf.TensorSpec([], tf.float32),
        'aux': tf.TensorSpec([4], tf.float32),
    }
    step = next(iter(next(iter(episodes))[types.STEPS]))
    np.testing.assert_array_equal(step[types.DISCOUNT]['aux'], np.ones(4, np.float32))


# Damaged files.


def test_truncated_shard_is_named(cartpole_copy):
    shard = sorted(cartpole_copy.glob('*.tfrecord-*'))[1]
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(
        SourceError, match=f'shard {shard} of split .train. is truncated or corrupt'
    ):
        load(cartpole_copy)


def test_shard_cut_at_a_record_boundary_is_named(cartpole_copy):
    shard = sorted(cartpole_copy.glob('*.tfrecord-*'))[0]
    first = next(iter(tf.data.TFRecordDataset(str(shard))))
    shard.write_bytes(shard.read_bytes()[: len(first.numpy()) + 16])
    with pytest.raises(
        SourceError, match=f'shard {shard} .* holds 1 records; dataset_info.json says 5'
    ):
        load(cartpole_copy)


def test_missing_shard_is_named(cartpole_copy):
    shard = sorted(cartpole_copy.glob('*.tfrecord-*'))[2]
    shard.unlink()
    with pytest.raises(
        SourceError, match=rf"1 of 3 shard file\(s\) are missing: \['{shard.name}'\]"
    ):
        load(cartpole_copy)


def test_corrupt_bytes_are_found_by_a_full_check(cartpole_copy):
    shard = sorted(cartpole_copy.glob('*.tfrecord-*'))[0]
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF  # Same size: only a read finds it.
    shard.write_bytes(bytes(data))
    assert load(cartpole_copy) is not None  # The cheap check passes.
    with pytest.raises(SourceError, match=f'shard {shard} .* truncated or corrupt'):
        load(cartpole_copy, check_files='full')


def test_check_files_must_be_known(cartpole_dir):
    with pytest.raises(ValueError, match="check_files='fast' is not valid"):
        load(cartpole_dir, check_files='fast')
    assert count(load(cartpole_dir, check_files=False)) == NUM_EPISODES
    assert count(load(cartpole_dir, check_files='full')) == NUM_EPISODES
