"""The whole-episode reader of TFDS sources: equal to TFDS' nested steps, used throughout.

`load` reads a TFDS source as whole `[T, ...]` episode tensors (docs/semantics.md §1); these
tests pin that it gives exactly what TFDS' own nested reader gives (images included), that
the toolkit's functions take that path, and that what it cannot decode is named.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import adders
import rlds_reverb
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import SourceError
from rlds_reverb.storage import tfds_writer


def _nested_tensors(episodes: tf.data.Dataset) -> list[dict]:
    """Every episode's steps read through the nested dataset, batched into whole arrays."""
    return [
        tf.nest.map_structure(np.asarray, episode)
        for episode in episodes.map(
            lambda e: e[types.STEPS].batch(100_000).get_single_element()
        ).as_numpy_iterator()
    ]


def _assert_same_episodes(left: list[dict], right: list[dict]) -> None:
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        tf.nest.assert_same_structure(a, b)
        for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b), strict=True):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)


def _write_image_dataset(data_dir, *, per_step_dataset: bool = False):
    """Writes 2 episodes whose observation holds a PNG `Image` and a vector.

    With `per_step_dataset`, each step also holds a `tfds.features.Dataset` field, which
    decodes to a dataset per step rather than to a tensor.
    """
    rng = np.random.default_rng(3)
    extra = {'sub_steps': tfds.features.Dataset({'x': tfds.features.Scalar(dtype=np.float32)})}
    features = tfds_writer.make_rlds_features(
        {
            types.OBSERVATION: tfds.features.FeaturesDict(
                {
                    'pixels': tfds.features.Image(shape=(8, 8, 3), dtype=np.uint8),
                    'state': tfds.features.Tensor(shape=(2,), dtype=np.float32),
                }
            ),
            types.ACTION: tfds.features.Scalar(dtype=np.int64),
            types.REWARD: tfds.features.Scalar(dtype=np.float32),
            types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
            **(extra if per_step_dataset else {}),
        }
    )

    def _episode(length: int) -> dict:
        t = np.arange(length)
        steps = {
            types.OBSERVATION: {
                'pixels': rng.integers(0, 256, size=(length, 8, 8, 3), dtype=np.uint8),
                'state': rng.standard_normal((length, 2)).astype(np.float32),
            },
            types.ACTION: t,
            types.REWARD: rng.standard_normal(length).astype(np.float32),
            types.DISCOUNT: np.ones(length, np.float32),
            types.IS_FIRST: t == 0,
            types.IS_LAST: t == length - 1,
            types.IS_TERMINAL: t == length - 1,
        }
        # TFDS' writer takes a list of step dicts.
        step_list = [tf.nest.map_structure(lambda x, i=i: x[i], steps) for i in range(length)]
        for step in step_list if per_step_dataset else ():
            step['sub_steps'] = [{'x': 1.0}]
        return {types.STEPS: step_list}

    tfds.dataset_builders.store_as_tfds_dataset(
        name='pixels',
        version='1.0.0',
        features=features,
        split_datasets={'train': [('0', _episode(3)), ('1', _episode(1))]},
        data_dir=str(data_dir),
        disable_shuffling=True,
    )
    return data_dir / 'pixels' / '1.0.0'


def test_whole_episodes_equal_tfds_nested_steps(cartpole_dir):
    whole = rlds_reverb.load(cartpole_dir)
    assert episodes_lib.has_whole_episodes(whole)
    nested = tfds.builder_from_directory(str(cartpole_dir)).as_dataset(split='train')
    _assert_same_episodes(
        list(episodes_lib.to_episode_tensors(whole).as_numpy_iterator()), _nested_tensors(nested)
    )
    # What users see is still RLDS: its nested steps read the same values.
    _assert_same_episodes(_nested_tensors(whole), _nested_tensors(nested))


def test_images_are_decoded_as_whole_uint8_episodes(tmp_path):
    directory = _write_image_dataset(tmp_path)
    whole = list(episodes_lib.to_episode_tensors(rlds_reverb.load(directory)).as_numpy_iterator())
    nested = _nested_tensors(tfds.builder_from_directory(str(directory)).as_dataset(split='train'))
    _assert_same_episodes(whole, nested)
    assert whole[0][types.OBSERVATION]['pixels'].shape == (3, 8, 8, 3)
    assert whole[0][types.OBSERVATION]['pixels'].dtype == np.uint8


def test_nested_reading_is_still_available(cartpole_dir):
    nested = rlds_reverb.load(cartpole_dir, whole_episodes=False)
    assert not episodes_lib.has_whole_episodes(nested)
    _assert_same_episodes(_nested_tensors(nested), _nested_tensors(rlds_reverb.load(cartpole_dir)))


def test_toolkit_functions_give_the_same_results_on_both_paths(cartpole_dir):
    whole = rlds_reverb.load(cartpole_dir)
    nested = rlds_reverb.load(cartpole_dir, whole_episodes=False)
    assert rlds_reverb.validate(whole) == rlds_reverb.validate(nested)
    converted = [
        list(rlds_reverb.convert_rlds_to_trajectories(e, batch_size=64).as_numpy_iterator())
        for e in (whole, nested)
    ]
    _assert_same_episodes(*converted)
    n_step = [e.apply(adders.n_step(3, 0.9)) for e in (whole, nested)]
    # An adder keeps the whole-episode form, so a chain of transforms stays on it.
    assert episodes_lib.has_whole_episodes(n_step[0])
    _assert_same_episodes(
        *[list(episodes_lib.to_episode_tensors(e).as_numpy_iterator()) for e in n_step]
    )


def test_a_field_the_whole_episode_reader_cannot_decode_is_named(tmp_path):
    directory = _write_image_dataset(tmp_path, per_step_dataset=True)
    with pytest.raises(SourceError, match=r"step field 'sub_steps' \(Dataset\).*step_fields="):
        rlds_reverb.load(directory)
    # The suggested way out: leave the field out.
    episodes = rlds_reverb.load(directory, step_fields=[types.OBSERVATION])
    lengths = [len(e[types.IS_FIRST]) for e in episodes_lib.to_episode_tensors(episodes)]
    assert lengths == [3, 1]


@pytest.mark.parametrize('split', ['train[1:4]', 'train[:50%]', 'train[-2:]'])
def test_split_slices_read_the_same_episodes_as_tfds(cartpole_dir, split):
    # The TFRecord reader follows TFDS' file instructions (skip/take per shard) and order.
    whole = rlds_reverb.load(cartpole_dir, split=split)
    nested = tfds.builder_from_directory(str(cartpole_dir)).as_dataset(split=split)
    _assert_same_episodes(
        list(episodes_lib.to_episode_tensors(whole).as_numpy_iterator()), _nested_tensors(nested)
    )


def test_a_read_config_reads_through_tfds_with_the_same_episodes(cartpole_dir):
    # Read options the TFRecord reader does not serve go to TFDS' own as_dataset.
    whole = rlds_reverb.load(cartpole_dir, read_config=tfds.ReadConfig(interleave_cycle_length=1))
    nested = tfds.builder_from_directory(str(cartpole_dir)).as_dataset(
        split='train', read_config=tfds.ReadConfig(interleave_cycle_length=1)
    )
    _assert_same_episodes(
        list(episodes_lib.to_episode_tensors(whole).as_numpy_iterator()), _nested_tensors(nested)
    )
