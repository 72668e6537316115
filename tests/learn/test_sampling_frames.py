"""`LearnerDataset` on tables of encoded frames: decoded after sampling, resized and cropped
per camera, bytes on request; a decoded sample equals what a push of decoded frames samples.

Real in-process Reverb servers, robot-like data written by TFDS's own writer
(`tests/robot_data.py`), pushed twice: encoded (`load(..., encoded_frames='all')`) and
decoded (`load`'s default). FIFO tables give their items in insertion order, so the two
learners' batches compare item by item.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tree

import rlds_reverb
from rlds_reverb import items, tables
from rlds_reverb.core import errors, frames, types
from rlds_reverb.learn import sampling
from rlds_reverb.transform import image_ops
from tests import robot_data as rd
from tests.reverb_tables import make_fifo_table

EPISODES = 12
BATCH = 16
ITEM = items.TwoStep()


def _per_step(signature):
    """The learner's data_spec: a signature without its time axis (names dropped)."""
    return tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), signature)


@pytest.fixture(scope='module')
def pushed(robot_dir):
    """A server with the same two-step items pushed encoded and decoded; yields
    `(address, item count, decoded data_spec, encoded signature)`."""
    encoded = rlds_reverb.load(robot_dir, encoded_frames='all').take(EPISODES)
    decoded = rlds_reverb.load(robot_dir).take(EPISODES)
    encoded_signature = tables.signature_for(ITEM, encoded)
    decoded_signature = tables.signature_for(ITEM, decoded)
    server = reverb.Server(
        [
            make_fifo_table(name, signature, max_size=100_000)
            for name, signature in (
                ('encoded', encoded_signature),
                ('decoded', decoded_signature),
                ('encoded_2', encoded_signature),
                ('encoded_3', encoded_signature),
                ('encoded_4', encoded_signature),
            )
        ]
        + [tables.uniform('uniform', max_size=100_000, signature=encoded_signature)],
        port=None,
    )
    address = f'localhost:{server.port}'
    for table in ('encoded', 'encoded_2', 'encoded_3', 'encoded_4', 'uniform'):
        count = rlds_reverb.push(encoded, address, table, item=ITEM).items[table]
    assert rlds_reverb.push(decoded, address, 'decoded', item=ITEM).items['decoded'] == count
    yield address, count, _per_step(decoded_signature), encoded_signature
    server.stop()


def _batches(address, table, data_spec, count, **options):
    learner = sampling.LearnerDataset(
        address,
        table,
        data_spec=data_spec,
        batch_size=BATCH,
        rate_limiter_timeout_ms=2000,
        **options,
    )
    dataset = learner.as_dataset().take(count // BATCH)
    return learner, dataset, [b.experience for b in dataset.as_numpy_iterator()]


@pytest.fixture(scope='module')
def reference(pushed):
    """The decoded push's batches, in insertion order (its FIFO table is read once)."""
    address, count, data_spec, _ = pushed
    return _batches(address, 'decoded', data_spec, count)[2]


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def test_decoded_samples_equal_those_of_the_decoded_push(pushed, reference):
    address, count, data_spec, _ = pushed
    learner, dataset, got = _batches(address, 'encoded', data_spec, count)
    want = reference
    assert len(got) == count // BATCH > 1
    # Reverb is asked for the bytes; the learner delivers the decoded push's items.
    image = learner.item_spec.observation[rd.IMAGE]
    assert (image.shape, image.dtype, image.name) == ([2], tf.string, 'frame.jpeg.24x32x3')
    plain = tf.nest.map_structure(lambda s: tf.TensorSpec([2, *s.shape], s.dtype), data_spec)
    assert learner.delivered_item_spec == plain
    assert dataset.element_spec.experience == tf.nest.map_structure(
        lambda s: tf.TensorSpec([BATCH, *s.shape], s.dtype), plain
    )
    for a, b in zip(got, want, strict=True):
        for camera in (rd.IMAGE, rd.WRIST, rd.OVERHEAD):
            frames_got = a.observation[camera]
            assert frames_got.dtype == np.uint8 and frames_got.shape[-1] == 3
            assert _digest(frames_got) == _digest(b.observation[camera])
        tree.map_structure(np.testing.assert_array_equal, a, b)


def test_bytes_are_delivered_on_request(pushed):
    address, count, _, signature = pushed
    learner, _, got = _batches(
        address, 'encoded_2', _per_step(signature), count, decode_frames=None
    )
    assert learner.frame_decoding is None
    image = got[0].observation[rd.IMAGE]
    assert image.dtype == object and image.shape == (BATCH, 2)
    fmt = frames.find_spec_formats(signature)[rd.IMAGE_PATH]
    decoded, present = frames.decode_frames(tf.constant(image), fmt)
    assert decoded.shape == (BATCH, 2, *fmt.shape) and bool(tf.reduce_all(present))


def test_frames_are_resized_and_cropped_per_camera(pushed, reference):
    address, count, data_spec, _ = pushed
    sizes = {rd.IMAGE_PATH: (12, 16)}
    crops = {rd.IMAGE_PATH: (8, 10), rd.WRIST_PATH: (8, 8)}
    observation = dict(data_spec.observation)
    observation[rd.IMAGE] = tf.TensorSpec([8, 10, 3], tf.uint8)
    observation[rd.WRIST] = tf.TensorSpec([8, 8, 3], tf.uint8)
    shaped = data_spec._replace(observation=observation)
    learner, dataset, got = _batches(
        address, 'encoded_3', shaped, count, frame_sizes=sizes, frame_crops=crops
    )
    want = reference
    assert dataset.element_spec.experience.observation[rd.IMAGE].shape == [BATCH, 2, 8, 10, 3]
    for a, b in zip(got, want, strict=True):
        reference = image_ops.crop_images(
            image_ops.resize_images(tf.constant(b.observation[rd.IMAGE]), (12, 16)), (8, 10)
        )
        np.testing.assert_array_equal(a.observation[rd.IMAGE], reference)
        wrist = b.observation[rd.WRIST][:, :, 4:12, 4:12]  # The centre of 16x16 frames.
        np.testing.assert_array_equal(a.observation[rd.WRIST], wrist)
        np.testing.assert_array_equal(a.observation[rd.OVERHEAD], b.observation[rd.OVERHEAD])


def test_random_crops_of_one_camera_leave_the_others_as_bytes(pushed):
    """A uniform table, read by the default plan (two iterators: items of bytes are small)."""
    address, _, _, signature = pushed
    learner, _, got = _batches(
        address,
        'uniform',
        _per_step(signature),
        BATCH * 2,
        decode_frames=[rd.IMAGE_PATH],
        frame_crops={rd.IMAGE_PATH: (20, 20)},
        frame_crop_mode='random',
        frame_seed=3,
    )
    assert learner.iterator_counts == [[BATCH // 2, BATCH // 2]]
    for batch in got:
        assert batch.observation[rd.IMAGE].shape == (BATCH, 2, 20, 20, 3)
        assert batch.observation[rd.WRIST].dtype == object  # Not selected: bytes.


def test_a_data_spec_of_other_frame_shapes_is_refused(pushed):
    address, _, data_spec, _ = pushed
    with pytest.raises(
        errors.SpecMismatchError,
        match=r'(?s)does not match the frames it delivers.*observation/image: data_spec gives '
        r'frames of shape \[24, 32, 3\], the learner delivers \[12, 16, 3\] \(jpeg 24x32x3 '
        r'frames, resized to \(12, 16\)\)',
    ):
        sampling.LearnerDataset(
            address,
            'uniform',
            data_spec=data_spec,
            batch_size=4,
            frame_sizes={rd.IMAGE_PATH: (12, 16)},
        )
    # Bytes kept while data_spec gives decoded frames: the table's check says so.
    with pytest.raises(errors.SpecMismatchError, match='expected encoded frames'):
        sampling.LearnerDataset(
            address, 'uniform', data_spec=data_spec, batch_size=4, decode_frames=()
        )


def test_fields_that_hold_no_encoded_frames_are_named(pushed):
    address, _, data_spec, _ = pushed
    with pytest.raises(errors.FrameFieldError, match="decode_frames names 'observation/state'"):
        sampling.LearnerDataset(
            address,
            'uniform',
            data_spec=data_spec,
            batch_size=4,
            decode_frames=['observation/state'],
        )
    with pytest.raises(errors.FrameFieldError, match=r'frame_crops names .*observation/image'):
        sampling.LearnerDataset(
            address,
            'uniform',
            data_spec=data_spec,
            batch_size=4,
            decode_frames=[rd.WRIST_PATH],
            frame_crops={rd.IMAGE_PATH: (4, 4)},
        )


@pytest.mark.parametrize(
    'field, value, match',
    [
        ('frame_sizes', {rd.IMAGE_PATH: (0, 4)}, 'frame_sizes: '),
        ('frame_crops', {rd.IMAGE_PATH: 4}, 'frame_crops: '),
        ('frame_sizes', [(4, 4)], 'frame_sizes: '),
        ('frame_crop_mode', 'middle', 'frame_crop_mode'),
        ('frame_seed', -1, 'frame_seed'),
        ('frame_masks', 'yes', 'frame_masks'),
        ('decode_frames', 'observation/image', 'decode_frames'),
    ],
)
def test_frame_options_are_checked(field, value, match):
    with pytest.raises((ValueError, TypeError), match=match):
        sampling.SamplingOptions(batch_size=4, **{field: value})


def test_missing_frames_become_zeros_with_a_mask(tmp_path_factory):
    directory = rd.shared_dir(tmp_path_factory, rd.MISSING_SPEC)
    encoded = rlds_reverb.load(directory, encoded_frames='all')
    signature = tables.signature_for(ITEM, encoded)
    server = reverb.Server([make_fifo_table('t', signature, max_size=10_000)], port=None)
    try:
        address = f'localhost:{server.port}'
        count = rlds_reverb.push(encoded, address, 't', item=ITEM).items['t']
        _, dataset, got = _batches(address, 't', _per_step(signature), count, frame_masks=True)
    finally:
        server.stop()
    mask_name = rd.WRIST + types.FRAME_PRESENT_SUFFIX
    assert dataset.element_spec.experience.observation[mask_name].dtype == tf.bool
    masks = np.concatenate([b.observation[mask_name] for b in got])
    wrist = np.concatenate([b.observation[rd.WRIST] for b in got])
    assert 0 < (~masks).sum() < masks.size
    assert not wrist[~masks].any() and wrist[masks].any()
