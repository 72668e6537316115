"""save_as_rlds: any source `load` reads -> an RLDS TFDS dataset with the same episodes.

Sources: a dataset written by TFDS's own writer with its defaults (images, strings, episode
metadata, shuffled shards: `tests/users_data.py`), a plain `tf.data` dataset (nested
fields, float64, int32, strings, episode metadata), the embedded CartPole data, a D4RL
HDF5 file. Each copy
is read back with TFDS's `builder_from_directory(...).as_dataset()` and with
`rlds_reverb.load` (on its fast record path) and compared episode by episode, every field
and dtype. Errors: an existing output, unreadable sources, fields TFDS cannot store, a
source failing part way, an interrupted save (nothing lands, nothing hidden is left).
"""

from __future__ import annotations

import pathlib

import h5py
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core import example_serializer

import rlds_reverb
from rlds_reverb.core import types
from rlds_reverb.core.errors import SourceError, SourceNotFoundError
from rlds_reverb.export import rlds_copy
from rlds_reverb.read.loading import load
from rlds_reverb.storage import tfds_writer
from tests import builders, users_data
from tests.rlds_copies import assert_same_episodes, read_both_ways


def make_plain_dataset() -> tf.data.Dataset:
    """A `tf.data` RLDS dataset with nested, float64, int32 and string fields and metadata."""
    episodes = []
    for index, length in enumerate((3, 1, 5)):
        t = np.arange(length)
        steps = builders.episode(
            length,
            ending=builders.TERMINATED if index % 2 else builders.TRUNCATED,
            observation={
                'position': (t[:, None] * [1.0, 2.0] + index).astype(np.float64),
                'pixels': np.full((length, 4, 4, 3), index * 10 + 1, np.uint8)
                + t[:, None, None, None].astype(np.uint8),
            },
            extras={'instruction': np.array([f'go {index}'.encode()] * length, object)},
        )
        steps['counter'] = t.astype(np.int32)
        metadata = {
            'episode_id': np.int64(index),
            'agent': np.array(f'agent-{index}'.encode(), object),
        }
        episodes.append({types.STEPS: steps, 'episode_metadata': metadata})
    dataset = None
    for episode in episodes:
        element = tf.data.Dataset.from_tensors(
            {
                types.STEPS: tf.data.Dataset.from_tensor_slices(episode[types.STEPS]),
                'episode_metadata': episode['episode_metadata'],
            }
        )
        dataset = element if dataset is None else dataset.concatenate(element)
    return dataset


def test_users_data_written_by_tfds_comes_back_the_same(users_dir, tmp_path):
    seen = []
    stats = rlds_copy.save_as_rlds(
        users_dir,
        tmp_path / 'users_copy' / '1.0.0',
        episodes_per_shard=64,
        progress=lambda episodes, steps: seen.append((episodes, steps)),
    )
    source = users_data.read_with_tfds(users_dir)
    by_tfds, by_load = read_both_ways(stats.directory)
    assert_same_episodes(source, by_tfds)
    assert_same_episodes(source, by_load)
    lengths = [len(e[types.STEPS][types.IS_FIRST]) for e in source]
    assert seen == [(1, n) for n in lengths]
    assert (stats.episodes, stats.steps) == (len(source), sum(lengths))
    builder = tfds.builder_from_directory(str(stats.directory))
    assert builder.info.name == 'users_copy'
    assert builder.info.disable_shuffling
    assert builder.info.splits['train'].num_shards == -(-len(source) // 64)
    image = builder.info.features[types.STEPS]['observation'][users_data.IMAGE]
    assert (image.shape, image.np_dtype) == (users_data.IMAGE_SHAPE, np.uint8)


def test_a_plain_tf_data_dataset_comes_back_the_same(tmp_path):
    dataset = make_plain_dataset()
    stats = rlds_copy.save_as_rlds(dataset, tmp_path / 'plain', episodes_per_shard=2)
    source = users_data.read_numpy(dataset)
    assert [int(e['episode_metadata']['episode_id']) for e in source] == [0, 1, 2]
    by_tfds, by_load = read_both_ways(stats.directory)
    assert_same_episodes(source, by_tfds)
    assert_same_episodes(source, by_load)
    assert tfds.builder_from_directory(str(stats.directory)).info.version == '1.0.0'


def test_float64_keeps_its_dtype_at_float32_precision(tmp_path):
    # tf.train.Example holds float32: TFDS's own writer rounds float64 the same way.
    steps = builders.episode(reward=np.array([0.1, 1 / 3], np.float64), obs_dim=1)
    stats = rlds_copy.save_as_rlds(builders.rlds([steps]), tmp_path / 'f64')
    (episode,) = users_data.read_with_tfds(stats.directory)
    reward = episode[types.STEPS][types.REWARD]
    assert reward.dtype == np.float64
    np.testing.assert_array_equal(reward, steps[types.REWARD].astype(np.float32))


def test_the_embedded_cartpole_data_comes_back_the_same(cartpole_dir, tmp_path):
    stats = rlds_copy.save_as_rlds(cartpole_dir, tmp_path / 'cartpole' / '2.0.0')
    source = users_data.read_with_tfds(cartpole_dir)
    by_tfds, by_load = read_both_ways(stats.directory)
    assert_same_episodes(source, by_tfds)
    assert_same_episodes(source, by_load)
    info = tfds.builder_from_directory(str(stats.directory)).info
    assert (info.name, str(info.version)) == ('cartpole', '2.0.0')
    assert rlds_reverb.validate(load(stats.directory)).ok


def test_a_slice_of_the_source_and_keep_order_false(users_plain_dir, tmp_path):
    stats = rlds_copy.save_as_rlds(
        users_plain_dir, tmp_path / 'part', split='train[:20]', keep_order=False
    )
    assert not tfds.builder_from_directory(str(stats.directory)).info.disable_shuffling
    assert_same_episodes(
        users_data.read_with_tfds(users_plain_dir, split='train[:20]'),
        users_data.read_with_tfds(stats.directory),
    )


@pytest.mark.parametrize(
    ('directory', 'name', 'version'),
    [
        ('My Data/1.2.3', 'my_data', '1.2.3'),
        ('copy', 'copy', '1.0.0'),
        ('7up', 'rlds_dataset_7up', '1.0.0'),
    ],
)
def test_name_and_version_come_from_the_directory(tmp_path, directory, name, version):
    stats = rlds_copy.save_as_rlds(builders.case_dataset([{'length': 2}]), tmp_path / directory)
    info = tfds.builder_from_directory(str(stats.directory)).info
    assert (info.name, str(info.version)) == (name, version)


def test_a_non_empty_directory_is_refused_without_overwrite(cartpole_dir, tmp_path):
    out = tmp_path / 'out'
    rlds_copy.save_as_rlds(cartpole_dir, out)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(FileExistsError, match=r'exists and is not empty .*overwrite=True'):
        rlds_copy.save_as_rlds(cartpole_dir, out)
    assert sorted(p.name for p in out.iterdir()) == before


def test_overwrite_replaces_a_dataset(cartpole_dir, tmp_path):
    out = tmp_path / 'out'
    rlds_copy.save_as_rlds(builders.case_dataset([{'length': 2}]), out)
    stats = rlds_copy.save_as_rlds(cartpole_dir, out, overwrite=True)
    assert_same_episodes(
        users_data.read_with_tfds(cartpole_dir), users_data.read_with_tfds(stats.directory)
    )


def test_overwrite_refuses_a_directory_that_is_not_a_dataset(cartpole_dir, tmp_path):
    (tmp_path / 'notes.txt').write_text('mine')
    with pytest.raises(FileExistsError, match=r'replaces a TFDS dataset directory only'):
        rlds_copy.save_as_rlds(cartpole_dir, tmp_path, overwrite=True)
    assert (tmp_path / 'notes.txt').read_text() == 'mine'


def test_an_empty_directory_is_written(cartpole_dir, tmp_path):
    (tmp_path / 'empty').mkdir()
    stats = rlds_copy.save_as_rlds(cartpole_dir, tmp_path / 'empty')
    assert (stats.directory / 'dataset_info.json').is_file()


def test_a_file_as_output_is_refused(cartpole_dir, tmp_path):
    (tmp_path / 'file').write_text('')
    with pytest.raises(NotADirectoryError, match='is not a directory'):
        rlds_copy.save_as_rlds(cartpole_dir, tmp_path / 'file')


def test_the_source_itself_as_output_is_refused(cartpole_dir):
    with pytest.raises(ValueError, match=r'is \(or holds\) the source'):
        rlds_copy.save_as_rlds(cartpole_dir, cartpole_dir, overwrite=True)
    with pytest.raises(ValueError, match=r'is \(or holds\) the source'):
        rlds_copy.save_as_rlds(cartpole_dir, cartpole_dir.parent, overwrite=True)


def test_the_source_through_a_symbolic_link_is_refused(cartpole_dir, tmp_path):
    (tmp_path / 'link').symlink_to(cartpole_dir)
    with pytest.raises(ValueError, match=r'is \(or holds\) the source'):
        rlds_copy.save_as_rlds(cartpole_dir, tmp_path / 'link', overwrite=True)
    assert (cartpole_dir / 'dataset_info.json').is_file()


def test_unreadable_sources_are_clear_errors(tmp_path):
    with pytest.raises(SourceNotFoundError, match='no_such_dir'):
        rlds_copy.save_as_rlds(tmp_path / 'no_such_dir', tmp_path / 'out')
    (tmp_path / 'not_a_dataset').mkdir()
    (tmp_path / 'not_a_dataset' / 'data.txt').write_text('x')
    with pytest.raises(SourceError, match='not_a_dataset'):
        rlds_copy.save_as_rlds(tmp_path / 'not_a_dataset', tmp_path / 'out')
    assert not (tmp_path / 'out').exists()


def test_a_source_of_another_type_is_a_type_error(tmp_path):
    with pytest.raises(TypeError):
        rlds_copy.save_as_rlds(42, tmp_path / 'out')


def test_episodes_per_shard_must_be_positive(cartpole_dir, tmp_path):
    with pytest.raises(ValueError, match='episodes_per_shard'):
        rlds_copy.save_as_rlds(cartpole_dir, tmp_path / 'out', episodes_per_shard=0)


def test_a_field_of_unknown_shape_is_named(tmp_path):
    steps = builders.episode(3)
    signature = builders.step_signature(observation=tf.TensorSpec([None], tf.float32))
    dataset = builders.rlds_from_generator([steps], signature)
    with pytest.raises(ValueError, match=r"step field 'observation' has shape \(None, None\)"):
        rlds_copy.save_as_rlds(dataset, tmp_path / 'out')
    assert not (tmp_path / 'out').exists()


def test_a_tuple_field_is_refused(tmp_path):
    steps = builders.episode(2)
    steps[types.OBSERVATION] = (steps[types.OBSERVATION], steps[types.OBSERVATION])
    with pytest.raises(ValueError, match="step field 'observation': Cannot store a tuple"):
        rlds_copy.save_as_rlds(builders.rlds([steps]), tmp_path / 'out')


def test_an_empty_source_writes_nothing(tmp_path):
    empty = builders.rlds([builders.episode(2)]).take(0)
    with pytest.raises(ValueError, match='No episode was added') as caught:
        rlds_copy.save_as_rlds(empty, tmp_path / 'out')
    assert 'stopped after 0 episode(s)' in '\n'.join(caught.value.__notes__)
    assert list(tmp_path.iterdir()) == []


def _fail_at_episode(dataset: tf.data.Dataset, index: int) -> tf.data.Dataset:
    def _check(position, episode):
        tf.debugging.assert_none_equal(
            position, tf.constant(index, tf.int64), message='broken source'
        )
        return episode

    return dataset.enumerate().map(_check)


def test_a_source_failing_part_way_leaves_nothing_and_says_so(tmp_path):
    dataset = _fail_at_episode(builders.case_dataset([{'length': 2}] * 5), 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match='broken source') as caught:
        rlds_copy.save_as_rlds(dataset, tmp_path / 'out', episodes_per_shard=1)
    (note,) = caught.value.__notes__
    assert f'Nothing was written to {tmp_path / "out"}' in note
    assert 'stopped after 3 episode(s) (6 steps)' in note
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_overwrite_keeps_the_old_dataset(cartpole_dir, tmp_path):
    out = tmp_path / 'out'
    rlds_copy.save_as_rlds(builders.case_dataset([{'length': 2}]), out)
    old = users_data.read_with_tfds(out)

    def _interrupt(episodes, steps):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as caught:
        rlds_copy.save_as_rlds(cartpole_dir, out, overwrite=True, progress=_interrupt)
    assert 'stopped after 1 episode(s)' in caught.value.__notes__[0]
    assert_same_episodes(old, users_data.read_with_tfds(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ['out']  # No staging left.


def test_the_writer_encodes_images_and_small_integers_as_tfds_does():
    # uint8 images and integers below 2**14 take the writer's one-or-two-byte varint path.
    rng = np.random.default_rng(0)
    steps = builders.episode(
        4,
        observation={'pixels': rng.integers(0, 256, (4, 6, 6, 3), dtype=np.uint8)},
        action=np.array([0, 127, 128, 16383], np.int64),
        extras={'big': np.array([16384, 255, -1, 2**40], np.int64)},
    )
    spec = tf.nest.map_structure(lambda x: tf.TensorSpec(x.shape[1:], x.dtype), steps)
    features = rlds_copy.make_features_from_spec(
        {
            types.STEPS: tf.nest.map_structure(
                lambda s: tf.TensorSpec([None, *s.shape], s.dtype), spec
            )
        },
        where='test',
    )
    episode = {types.STEPS: steps}
    serializer = example_serializer.ExampleSerializer(features.get_serialized_info())
    expected = serializer.serialize_example(features.encode_example(episode))
    ours = tfds_writer.serialize_episode(episode, features.get_serialized_info())
    assert len(ours) == len(expected)
    assert tf.train.Example.FromString(ours) == tf.train.Example.FromString(expected)


def _write_d4rl_file(path: pathlib.Path) -> pathlib.Path:
    """A small file in D4RL's key layout (float64 values that float32 holds exactly)."""
    rng = np.random.default_rng(0)
    rows = 9
    as_f32 = lambda x: x.astype(np.float32).astype(np.float64)  # noqa: E731
    with h5py.File(path, 'w') as file:
        file['observations'] = rng.normal(size=(rows, 3)).astype(np.float32)
        file['actions'] = rng.normal(size=(rows, 2)).astype(np.float32)
        file['rewards'] = rng.normal(size=rows).astype(np.float32)
        file['terminals'] = np.array([0, 0, 1, 0, 0, 0, 0, 0, 0], bool)
        file['timeouts'] = np.array([0, 0, 0, 0, 0, 1, 0, 0, 1], bool)
        file['infos/qpos'] = as_f32(rng.normal(size=(rows, 4)))
        file['metadata/algorithm'] = b'SAC'
    return path


def test_a_d4rl_file_comes_back_the_same(tmp_path):
    source = _write_d4rl_file(tmp_path / 'hopper_medium-v2.hdf5')
    stats = rlds_copy.save_as_rlds(source, tmp_path / 'hopper' / '1.0.0')
    expected = users_data.read_numpy(load(source))
    assert stats.episodes == len(expected) >= 3
    by_tfds, by_load = read_both_ways(stats.directory)
    assert_same_episodes(expected, by_tfds)
    assert_same_episodes(expected, by_load)
