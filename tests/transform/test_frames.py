"""Encoded frames through the adders and convert, and the image ops (`transform.frames`).

Everything on encoded frames must give, once decoded, the frames of the same path on the
dataset `load` decodes (checksums), on robot-like data written by TFDS's own writer
(`tests/robot_data.py`).
"""

from __future__ import annotations

import hypothesis
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import strategies as st

import adders
import rlds_reverb
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import errors, types
from rlds_reverb.core.frames import FrameFormat
from rlds_reverb.transform import frames, image_ops
from tests import robot_data as rd

# A third of the shared dataset (its 1,000-step episode included) keeps these quick.
EPISODES = 40
SHAPE = rd.ROBOT_SPEC.image_shape


@pytest.fixture(scope='module')
def encoded(robot_dir):
    return rlds_reverb.load(robot_dir, encoded_frames='all').take(EPISODES)


@pytest.fixture(scope='module')
def decoded(robot_dir):
    return rlds_reverb.load(robot_dir).take(EPISODES)


def _whole(episodes: tf.data.Dataset) -> list[dict]:
    return list(episodes_lib.to_whole_episodes(episodes).as_numpy_iterator())


def _steps(episodes: tf.data.Dataset) -> list[dict]:
    return [e[types.STEPS] for e in _whole(episodes)]


def _assert_same(a, b) -> None:
    tf.nest.map_structure(np.testing.assert_array_equal, a, b)


def _decode_masked(episodes: tf.data.Dataset) -> tf.data.Dataset:
    return episodes.apply(frames.decode_frames(masks=False))


# --- Adders over bytes, then decode -------------------------------------------------------------


def test_n_step_over_bytes_then_decode_equals_n_step_over_frames(encoded, decoded):
    over_bytes = encoded.apply(adders.n_step(3, 0.9))
    formats = episodes_lib.find_frame_formats(over_bytes)
    assert formats[f'{types.NEXT_OBSERVATION}/{rd.IMAGE}'] == formats[rd.IMAGE_PATH]
    spec = over_bytes.element_spec[types.STEPS].element_spec[types.NEXT_OBSERVATION]
    assert spec[rd.IMAGE].dtype == tf.string
    _assert_same(_steps(_decode_masked(over_bytes)), _steps(decoded.apply(adders.n_step(3, 0.9))))


def test_stacking_over_bytes_then_decode_equals_stacking_frames(encoded, decoded):
    over_bytes = encoded.apply(adders.stack_frames(3))
    spec = over_bytes.element_spec[types.STEPS].element_spec[types.OBSERVATION][rd.IMAGE]
    assert spec == tf.TensorSpec([3], tf.string)
    _assert_same(_steps(_decode_masked(over_bytes)), _steps(decoded.apply(adders.stack_frames(3))))


def test_sequence_windows_over_bytes_decode_padding_to_zeros(encoded, decoded):
    formats = encoded.frame_formats
    windows = encoded.apply(adders.sequences(4, end='pad'))
    got = list(
        windows.apply(frames.decode_frames(frame_formats=formats)).take(200).as_numpy_iterator()
    )
    want = list(decoded.apply(adders.sequences(4, end='pad')).take(200).as_numpy_iterator())
    for a, b in zip(got, want, strict=True):
        observation = a[types.OBSERVATION]
        np.testing.assert_array_equal(observation[f'{rd.IMAGE}_present'], b[types.MASK])
        for key in (rd.IMAGE, rd.WRIST, rd.OVERHEAD):
            del observation[f'{key}{types.FRAME_PRESENT_SUFFIX}']
        _assert_same(a, b)


# --- Convert ---------------------------------------------------------------------------------------


def test_convert_decodes_by_default_as_tf_agents_delivers(encoded, decoded):
    assert rlds_reverb.create_trajectory_data_spec(
        encoded
    ) == rlds_reverb.create_trajectory_data_spec(decoded)
    got = rlds_reverb.convert_rlds_to_trajectories(encoded, batch_size=64)
    want = rlds_reverb.convert_rlds_to_trajectories(decoded, batch_size=64)
    for a, b in zip(got.as_numpy_iterator(), want.as_numpy_iterator(), strict=True):
        _assert_same(a, b)


def test_convert_can_deliver_bytes_or_decode_a_subset(encoded, decoded):
    subset = rlds_reverb.convert_rlds_to_trajectories(encoded, decode_frames=[rd.IMAGE_PATH])
    spec = rlds_reverb.create_trajectory_data_spec(encoded, decode_frames=[rd.IMAGE_PATH])
    assert subset.element_spec.observation == spec.observation
    assert spec.observation[rd.IMAGE] == tf.TensorSpec(SHAPE, tf.uint8)
    assert spec.observation[rd.WRIST] == tf.TensorSpec([], tf.string)
    raw = rlds_reverb.convert_rlds_to_trajectories(encoded, decode_frames=(), batch_size=64)
    assert raw.element_spec.observation[rd.IMAGE] == tf.TensorSpec([None], tf.string)
    # The bytes, decoded later by the image ops, are the default conversion.
    formats = encoded.frame_formats
    later = raw.apply(frames.decode_frames(masks=False, frame_formats=formats))
    want = rlds_reverb.convert_rlds_to_trajectories(decoded, batch_size=64)
    for a, b in zip(later.as_numpy_iterator(), want.as_numpy_iterator(), strict=True):
        _assert_same(a, b)


def test_convert_names_a_field_without_encoded_frames(encoded, decoded):
    with pytest.raises(errors.FrameFieldError, match="'observation/state'"):
        rlds_reverb.convert_rlds_to_trajectories(encoded, decode_frames=['observation/state'])
    with pytest.raises(errors.FrameFieldError, match='none'):
        rlds_reverb.create_trajectory_data_spec(decoded, decode_frames=[rd.IMAGE_PATH])


# --- The image ops ----------------------------------------------------------------------------------


def test_decode_frames_resizes_per_camera_and_adds_masks(encoded, decoded):
    sizes = {rd.IMAGE_PATH: (12, 16)}
    out = encoded.apply(frames.decode_frames([rd.IMAGE_PATH, rd.WRIST_PATH], sizes=sizes))
    assert out.frame_formats == {rd.OVERHEAD_PATH: encoded.frame_formats[rd.OVERHEAD_PATH]}
    resized = decoded.apply(frames.resize_frames(sizes))
    for a, b in zip(_steps(out), _steps(resized), strict=True):
        got, want = a[types.OBSERVATION], b[types.OBSERVATION]
        np.testing.assert_array_equal(got[rd.IMAGE], want[rd.IMAGE])
        np.testing.assert_array_equal(got[rd.WRIST], want[rd.WRIST])
        assert got[rd.IMAGE].shape[1:] == (12, 16, 3)
        assert got[f'{rd.IMAGE}_present'].all() and got[rd.OVERHEAD].dtype == object


def test_decode_frames_of_missing_frames_gives_zeros_and_false_masks(tmp_path_factory):
    directory = rd.shared_dir(tmp_path_factory, rd.MISSING_SPEC)
    episodes = rlds_reverb.load(directory, encoded_frames=[rd.WRIST_PATH])
    out = episodes.apply(frames.decode_frames(sizes={rd.WRIST_PATH: (8, 8)}))
    for steps in _steps(out):
        observation = steps[types.OBSERVATION]
        missing = np.arange(len(observation[rd.WRIST])) % 3 == 2
        np.testing.assert_array_equal(observation[f'{rd.WRIST}_present'], ~missing)
        assert observation[rd.WRIST].shape[1:] == (8, 8, 3)
        assert not observation[rd.WRIST][missing].any()


def test_decode_frames_over_sampled_batches(encoded, decoded):
    """`[B, T]` frames, as a batch of sequence items sampled from Reverb holds them."""
    formats = encoded.frame_formats
    windows = encoded.apply(adders.sequences(2, end='drop')).batch(8)
    batches = windows.map(lambda w: ({'key': tf.zeros([8])}, w))  # (info, data) samples.
    out = batches.apply(frames.decode_frames(frame_formats=formats)).take(3)
    want = decoded.apply(adders.sequences(2, end='drop')).batch(8).take(3)
    for (_, a), b in zip(out.as_numpy_iterator(), want.as_numpy_iterator(), strict=True):
        assert a[types.OBSERVATION][rd.IMAGE].shape == (8, 2, *SHAPE)
        assert a[types.OBSERVATION][f'{rd.IMAGE}_present'].shape == (8, 2)
        np.testing.assert_array_equal(
            a[types.OBSERVATION][rd.IMAGE], b[types.OBSERVATION][rd.IMAGE]
        )


def test_crops_and_augmentations_are_seeded_and_keep_shapes(decoded):
    center = decoded.apply(frames.crop_frames({rd.IMAGE_PATH: (10, 12)}))
    steps = _steps(center)[0][types.OBSERVATION][rd.IMAGE]
    full = _steps(decoded)[0][types.OBSERVATION][rd.IMAGE]
    np.testing.assert_array_equal(steps, full[:, 7:17, 10:22])

    def random_crops(seed):
        crop = frames.crop_frames({rd.IMAGE_PATH: (10, 12)}, mode='random', seed=seed)
        augment = frames.augment_frames(
            [rd.IMAGE_PATH], brightness=0.2, contrast=(0.5, 1.5), flip=True, seed=seed
        )
        return _steps(decoded.take(3).apply(crop).apply(augment))

    first, again, other = random_crops(1), random_crops(1), random_crops(2)
    _assert_same(first, again)
    images = [s[types.OBSERVATION][rd.IMAGE] for s in first]
    assert all(x.shape[1:] == (10, 12, 3) and x.dtype == np.uint8 for x in images)
    assert any(
        not np.array_equal(a[types.OBSERVATION][rd.IMAGE], b[types.OBSERVATION][rd.IMAGE])
        for a, b in zip(first, other, strict=True)
    )


def test_augmentations_left_at_zero_change_nothing(decoded):
    same = decoded.take(2).apply(frames.augment_frames([rd.IMAGE_PATH]))
    _assert_same(_steps(same), _steps(decoded.take(2)))


@hypothesis.settings(max_examples=20, deadline=None)
@hypothesis.given(
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    size=st.tuples(st.integers(1, 9), st.integers(1, 11)),
    seed=st.integers(0, 2**16),
)
def test_random_crops_are_windows_of_each_image(lead, size, seed):
    images = np.random.default_rng(seed).integers(0, 256, (*lead, 9, 11, 3), dtype=np.uint8)
    cropped = image_ops.crop_images(
        tf.constant(images), size, mode=image_ops.CropMode.RANDOM, seed=tf.constant([seed, 1])
    ).numpy()
    assert cropped.shape == (*lead, *size, 3)
    flat, crops = images.reshape(-1, 9, 11, 3), cropped.reshape(-1, *size, 3)
    for image, crop in zip(flat, crops, strict=True):
        windows = [
            image[y : y + size[0], x : x + size[1]]
            for y in range(9 - size[0] + 1)
            for x in range(11 - size[1] + 1)
        ]
        assert any(np.array_equal(crop, w) for w in windows)


def test_resize_images_keeps_leading_dims():
    images = tf.zeros([2, 3, 8, 8, 3], tf.uint8) + 200
    resized = image_ops.resize_images(images, (4, 6))
    assert resized.shape == (2, 3, 4, 6, 3) and resized.dtype == tf.uint8
    assert (resized.numpy() == 200).all()


def test_a_crop_larger_than_the_frames_fails_when_run():
    with pytest.raises(tf.errors.InvalidArgumentError, match='larger than the frames'):
        image_ops.crop_images(tf.zeros([1, 4, 4, 3], tf.uint8), (5, 4))


# --- Every documented error of the transforms ----------------------------------------------------


def test_transforms_check_their_arguments():
    with pytest.raises(ValueError, match=r'expected \(height, width\)'):
        frames.decode_frames(sizes={rd.IMAGE_PATH: (3,)})
    with pytest.raises(ValueError, match='>= 1'):
        frames.resize_frames({rd.IMAGE_PATH: (0, 3)})
    with pytest.raises(TypeError, match='must map frame fields'):
        frames.decode_frames(sizes=[(3, 3)])
    with pytest.raises(ValueError, match='method='):
        frames.decode_frames(method='cubic-ish')
    with pytest.raises(ValueError, match='mode='):
        frames.crop_frames({rd.IMAGE_PATH: (3, 3)}, mode='corner')
    with pytest.raises(ValueError, match='brightness'):
        frames.augment_frames([rd.IMAGE_PATH], brightness=-0.1)
    with pytest.raises(ValueError, match='contrast'):
        frames.augment_frames([rd.IMAGE_PATH], contrast=(1.2, 0.8))
    with pytest.raises(ValueError, match='seed'):
        frames.augment_frames([rd.IMAGE_PATH], seed=-1)


def test_transforms_name_fields_that_are_not_frames(encoded, decoded):
    with pytest.raises(errors.FrameFieldError, match="'observation/state'"):
        encoded.apply(frames.decode_frames(['observation/state']))
    with pytest.raises(errors.FrameFieldError, match='sizes'):
        encoded.apply(frames.decode_frames([rd.IMAGE_PATH], sizes={rd.WRIST_PATH: (4, 4)}))
    with pytest.raises(errors.FrameFieldError, match='holds encoded frames: decode_frames first'):
        encoded.apply(frames.resize_frames({rd.IMAGE_PATH: (4, 4)}))
    with pytest.raises(errors.FrameFieldError, match='not a uint8'):
        decoded.apply(frames.crop_frames({'observation/state': (1, 1)}))
    with pytest.raises(errors.FrameFieldError, match='not a field of the elements'):
        decoded.apply(frames.augment_frames(['observation/nothing']))


def test_a_mask_that_cannot_be_placed_is_named():
    fmt = FrameFormat('png', (2, 2, 3))
    png = tf.io.encode_png(tf.zeros([2, 2, 3], tf.uint8)).numpy()
    data = tf.data.Dataset.from_tensors({'image': [png], 'image_present': [True]})
    with pytest.raises(errors.FrameFieldError, match='exists'):
        data.apply(frames.decode_frames(frame_formats={'image': fmt}))
