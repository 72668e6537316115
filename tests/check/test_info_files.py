"""`rlds-reverb info` from the record files alone (no TensorFlow) gives what `load` gives.

`check.summary.describe_dataset_files` reads a TFDS directory in the default layout with
NumPy; anything it cannot read exactly as `load` does makes it return None, and the command
falls back to `load` (which names the problem).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import tensorflow_datasets as tfds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlds_reverb.check import stats, summary
from rlds_reverb.core import types
from rlds_reverb.read.loading import list_frame_fields, load
from rlds_reverb.storage import codec
from tests import builders


def _assert_same(directory, split='train'):
    from_files = summary.describe_dataset_files(directory, split=split)
    assert from_files is not None
    through_tf = stats.describe_dataset(load(directory, split=split))
    # The command line adds the frame fields to what `load` gives (cli/data_commands.py).
    formats = list_frame_fields(directory)
    through_tf.frame_fields = {path: fmt.describe() for path, fmt in formats.items()}
    for name in ('episodes', 'steps', 'terminated', 'truncated', 'unfinished'):
        assert getattr(from_files, name) == getattr(through_tf, name), name
    np.testing.assert_array_equal(np.sort(from_files.lengths), np.sort(through_tf.lengths))
    np.testing.assert_allclose(np.sort(from_files.returns), np.sort(through_tf.returns))
    assert from_files.format() == through_tf.format()


def test_the_embedded_dataset_reads_the_same_from_its_files(cartpole_dir):
    _assert_same(cartpole_dir)


def test_users_data_with_images_strings_and_metadata_reads_the_same(users_dir):
    _assert_same(users_dir)


def test_users_plain_data_over_three_shuffled_shards_reads_the_same(users_plain_dir):
    _assert_same(users_plain_dir)


_REWARDS = {
    'scalar': (tfds.features.Scalar(dtype=np.float32), lambda t, r: r.astype(np.float32)),
    'vector': (
        tfds.features.Tensor(shape=(2,), dtype=np.float32),
        lambda t, r: np.stack([r, -2 * r], axis=1).astype(np.float32),
    ),
    'int': (tfds.features.Scalar(dtype=np.int64), lambda t, r: np.round(r * 10).astype(np.int64)),
    'float64': (tfds.features.Scalar(dtype=np.float64), lambda t, r: r.astype(np.float64)),
    'nested': (
        tfds.features.FeaturesDict(
            {'a': tfds.features.Scalar(dtype=np.float32), 'b': tfds.features.Scalar(np.int64)}
        ),
        lambda t, r: {'a': r.astype(np.float32), 'b': np.arange(t, dtype=np.int64)},
    ),
}


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lengths=st.lists(st.integers(1, 1000), min_size=1, max_size=6),
    endings=st.lists(st.sampled_from(builders.ENDINGS), min_size=6, max_size=6),
    reward=st.sampled_from(sorted(_REWARDS)),
    per_shard=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_any_shape_reads_the_same_from_the_files(
    tmp_path_factory, lengths, endings, reward, per_shard, seed
):
    feature, make_reward = _REWARDS[reward]
    rng = np.random.default_rng(seed)
    episodes = [
        builders.episode(
            length,
            ending=ending,
            reward=make_reward(length, rng.normal(size=length) * 100),
        )
        for length, ending in zip(lengths, endings, strict=False)
    ]
    directory = builders.write_tfds(
        tmp_path_factory.mktemp('shapes'),
        episodes,
        name='shapes',
        features=builders.step_features(reward=feature),
        episodes_per_shard=per_shard,
    )
    _assert_same(directory)


@pytest.fixture
def small_dir(tmp_path):
    episodes = [
        builders.episode(n, ending=e) for n, e in zip((3, 1, 7), builders.ENDINGS, strict=True)
    ]
    return builders.write_tfds(tmp_path, episodes, name='small', episodes_per_shard=2)


def _edit_json(path: pathlib.Path, edit) -> None:
    content = json.loads(path.read_text())
    edit(content)
    path.write_text(json.dumps(content))


def _first_shard(directory: pathlib.Path) -> pathlib.Path:
    return sorted(directory.glob('*.tfrecord-*'))[0]


def _step_features(content: dict) -> dict:
    return content['featuresDict']['features'][types.STEPS]['sequence']['feature']['featuresDict'][
        'features'
    ]


def _truncate_first_shard(directory):
    shard = _first_shard(directory)
    shard.write_bytes(shard.read_bytes()[:-5])


def _drop_first_shard(directory):
    _first_shard(directory).unlink()


def _add_record_count(directory):
    _edit_json(
        directory / 'dataset_info.json',
        lambda c: c['splits'][0].update(shardLengths=['3', *c['splits'][0]['shardLengths'][1:]]),
    )


def _name_an_unknown_class(directory):
    def edit(content):
        _step_features(content)[types.REWARD]['pythonClassName'] = 'evil.module.Feature'

    _edit_json(directory / 'features.json', edit)


def _encode_a_tensor(directory):
    def edit(content):
        _step_features(content)[types.OBSERVATION]['tensor']['encoding'] = 'zlib'

    _edit_json(directory / 'features.json', edit)


def _remove_dataset_info(directory):
    (directory / 'dataset_info.json').unlink()


_UNREADABLE = {
    'a truncated shard': _truncate_first_shard,
    'a missing shard': _drop_first_shard,
    'more records promised than held': _add_record_count,
    'a feature class TFDS does not define': _name_an_unknown_class,
    'an encoded tensor': _encode_a_tensor,
    'no dataset_info.json': _remove_dataset_info,
}


@pytest.mark.parametrize('damage', sorted(_UNREADABLE))
def test_files_it_cannot_read_exactly_give_none(small_dir, damage):
    assert summary.describe_dataset_files(small_dir, split='train') is not None
    _UNREADABLE[damage](small_dir)
    assert summary.describe_dataset_files(small_dir, split='train') is None


@pytest.mark.parametrize('split', ['train[:2]', 'test', 'train+train'])
def test_a_split_slice_or_an_unknown_split_gives_none(small_dir, split):
    assert summary.describe_dataset_files(small_dir, split=split) is None


def test_a_record_that_is_not_an_example_is_an_error():
    with pytest.raises(ValueError, match='not a tf.train.Example'):
        codec.decode_example(b'\x0a\x05\x0a', frozenset({'steps/reward'}))


def test_a_file_that_ends_inside_a_record_is_an_error(tmp_path):
    path = tmp_path / 'short.tfrecord'
    path.write_bytes((100).to_bytes(8, 'little') + b'\x00' * 20)
    with pytest.raises(ValueError, match='ends inside a record'):
        list(codec.iter_records(path))


def test_info_falls_back_to_load_and_names_a_truncated_shard(small_dir, run_cli):
    _truncate_first_shard(small_dir)
    code, out, err = run_cli('info', str(small_dir))
    assert code != 0
    assert _first_shard(small_dir).name in err


def test_info_on_a_split_slice_answers_through_load(small_dir, run_cli):
    code, out, _ = run_cli('info', str(small_dir), '--split', 'train[:2]')
    assert code == 0
    assert 'episodes: 2' in out


def test_info_from_the_files_prints_what_load_gives(cartpole_dir, run_cli):
    _, fast, _ = run_cli('info', str(cartpole_dir))
    # A split slice is read through `load`; the whole split as a slice is the same data.
    _, through_load, _ = run_cli('info', str(cartpole_dir), '--split', 'train[:100%]')
    assert fast.splitlines()[1:] == through_load.splitlines()[1:]
