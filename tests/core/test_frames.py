"""Frames that stay encoded: formats, the spec-name grammar, and decoding as TFDS decodes."""

from __future__ import annotations

import re

import hypothesis
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from hypothesis import strategies as st

from rlds_reverb.core import errors, frames
from rlds_reverb.core.frames import FrameFormat

JPEG = FrameFormat('jpeg', (12, 16, 3))
PNG = FrameFormat('png', (12, 16, 3))
GRAY = FrameFormat('png', (12, 16, 1))


def _images(count: int, shape=(12, 16, 3), seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, *shape), dtype=np.uint8)


def _encode(images: np.ndarray, codec: str) -> list[bytes]:
    encode = tf.io.encode_jpeg if codec == 'jpeg' else tf.io.encode_png
    return [encode(image).numpy() for image in images]


def _tfds_decode(encoded: list[bytes], fmt: FrameFormat) -> np.ndarray:
    """What TFDS' own `Image` feature decodes the bytes to."""
    feature = tfds.features.Image(shape=fmt.shape, dtype=np.uint8, encoding_format=fmt.codec)
    return np.stack([feature.decode_example(tf.constant(b)).numpy() for b in encoded])


# --- FrameFormat and the grammar ------------------------------------------------------------


def test_spec_name_follows_the_grammar():
    assert JPEG.spec_name == 'frame.jpeg.12x16x3'
    assert FrameFormat('png', (None, None, 1)).spec_name == 'frame.png._x_x1'
    assert JPEG.describe() == 'jpeg 12x16x3'
    assert FrameFormat('png', (None, 8, 3)).describe() == 'png ?x8x3'


@hypothesis.given(
    codec=st.sampled_from(frames.CODECS),
    height=st.none() | st.integers(1, 5000),
    width=st.none() | st.integers(1, 5000),
    channels=st.integers(1, 4),
)
def test_parse_reads_back_every_spec_name(codec, height, width, channels):
    fmt = FrameFormat(codec, (height, width, channels))
    assert FrameFormat.parse(fmt.spec_name) == fmt
    # A spec name is a valid TF node name (TF's own rule): it can name a tf.function input.
    assert re.match(r'^[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*$', fmt.spec_name)


@pytest.mark.parametrize('name', [None, '', 'step_type', 'frame.gif.1x1x3', 'frame.jpeg.1x1', 'x'])
def test_parse_gives_none_for_other_names(name):
    assert FrameFormat.parse(name) is None


@pytest.mark.parametrize(
    ('codec', 'shape', 'match'),
    [
        ('gif', (1, 1, 3), 'codec'),
        ('jpeg', (1, 1), 'shape'),
        ('jpeg', (0, 1, 3), 'shape'),
        ('png', (1, 1, None), 'shape'),
        ('png', (1.5, 1, 3), 'shape'),
    ],
)
def test_frame_format_refuses_invalid_values(codec, shape, match):
    with pytest.raises(ValueError, match=match):
        FrameFormat(codec, shape)


def test_name_and_find_spec_formats_round_trip():
    spec = {
        'observation': {
            'image': tf.TensorSpec([None], tf.string),
            'state': tf.TensorSpec([None, 3], tf.float32),
        },
        'next': (tf.TensorSpec([None], tf.string),),
    }
    named = frames.name_frame_specs(spec, {'observation/image': JPEG, 'observation/state': PNG})
    assert named['observation']['image'].name == JPEG.spec_name
    assert named['observation']['state'].name is None  # Not a string: left as it is.
    assert frames.find_spec_formats(named) == {'observation/image': JPEG}
    assert frames.find_spec_formats(None) == {}
    assert frames.name_frame_specs(spec, {}) is spec


def test_diff_frame_fields_names_each_disagreement():
    table = {
        'a': tf.TensorSpec([None], tf.string, name=JPEG.spec_name),
        'b': tf.TensorSpec([None, 12, 16, 3], tf.uint8),
        'c': tf.TensorSpec([None], tf.string, name=JPEG.spec_name),
        'd': tf.TensorSpec([None], tf.string, name=JPEG.spec_name),
    }
    items = {
        'a': tf.TensorSpec([None, 12, 16, 3], tf.uint8),
        'b': tf.TensorSpec([None], tf.string, name=PNG.spec_name),
        'c': tf.TensorSpec([None], tf.string, name=PNG.spec_name),
        'd': tf.TensorSpec([None], tf.string),  # Bytes without a name: agrees.
    }
    assert frames.diff_frame_fields(table, items) == [
        'a: expected encoded frames (jpeg 12x16x3), found decoded uint8[None, 12, 16, 3]',
        'b: expected decoded uint8[None, 12, 16, 3], found encoded frames (png 12x16x3)',
        'c: expected jpeg 12x16x3 frames, found png 12x16x3',
    ]
    assert frames.diff_frame_fields(table, table) == []


def test_select_formats():
    formats = {'observation/image': JPEG, 'observation/wrist': PNG}
    assert frames.select_formats(formats, 'all', argument='x') == formats
    assert frames.select_formats(formats, (), argument='x') == {}
    assert frames.select_formats(formats, None, argument='x') == {}
    assert frames.select_formats(formats, ['/observation/wrist'], argument='x') == {
        'observation/wrist': PNG
    }


def test_select_formats_names_an_unknown_field_and_lists_the_frame_fields():
    formats = {'observation/image': JPEG}
    with pytest.raises(
        errors.FrameFieldError,
        match=r"decode_frames names 'observation/state', which is not a field holding "
        r'encoded frames. Frame fields: observation/image',
    ):
        frames.select_formats(formats, ['observation/state'], argument='decode_frames')
    with pytest.raises(errors.FrameFieldError, match='none'):
        frames.select_formats({}, ['observation/image'], argument='decode_frames')
    with pytest.raises(TypeError, match="'all' or a sequence"):
        frames.select_formats(formats, 'observation/image', argument='decode_frames')


# --- Decoding ----------------------------------------------------------------------------------


@pytest.mark.parametrize('fmt', [JPEG, PNG, GRAY], ids=['jpeg', 'png', 'gray-png'])
def test_decode_is_bit_identical_to_tfds(fmt):
    encoded = _encode(_images(5, fmt.shape), fmt.codec)
    decoded, present = frames.decode_frames(tf.constant(encoded), fmt)
    np.testing.assert_array_equal(decoded.numpy(), _tfds_decode(encoded, fmt))
    assert present.numpy().all()
    assert decoded.shape == (5, *fmt.shape)


def test_decode_gives_zero_frames_and_a_mask_for_empty_strings():
    encoded = _encode(_images(2), 'jpeg')
    decoded, present = frames.decode_frames(tf.constant([encoded[0], b'', encoded[1]]), JPEG)
    assert present.numpy().tolist() == [True, False, True]
    assert not decoded.numpy()[1].any()
    np.testing.assert_array_equal(decoded.numpy()[[0, 2]], _tfds_decode(encoded, JPEG))


@hypothesis.settings(max_examples=15, deadline=None)
@hypothesis.given(
    lead=st.lists(st.integers(0, 3), min_size=0, max_size=3),
    seed=st.integers(0, 100),
)
def test_decode_keeps_any_leading_shape(lead, seed):
    count = int(np.prod(lead, dtype=np.int64))
    encoded = _encode(_images(count, seed=seed), 'png')
    tensor = tf.reshape(tf.constant(encoded, tf.string), lead)
    decoded, present = frames.decode_frames(tensor, PNG)
    assert decoded.shape == (*lead, *PNG.shape)
    assert present.shape == tuple(lead)
    if count:
        reference = _tfds_decode(encoded, PNG).reshape(*lead, *PNG.shape)
        np.testing.assert_array_equal(decoded.numpy(), reference)


def test_decode_runs_in_parallel_maps_and_functions():
    encoded = tf.constant(_encode(_images(4), 'jpeg'))
    reference = _tfds_decode(list(encoded.numpy()), JPEG)
    mapped = tf.data.Dataset.from_tensors(encoded).repeat(3)
    mapped = mapped.map(lambda x: frames.decode_frames(x, JPEG)[0], num_parallel_calls=2)
    for decoded in mapped:
        np.testing.assert_array_equal(decoded.numpy(), reference)
    traced = tf.function(lambda x: frames.decode_frames(x, JPEG)[0])
    np.testing.assert_array_equal(traced(encoded).numpy(), reference)


def test_decode_applies_a_frame_function_and_its_shape():
    encoded = tf.constant([*_encode(_images(2), 'png'), b''])

    def _top_left(frame):
        return frame[:4, :5]

    decoded, _ = frames.decode_frames(encoded, PNG, frame_fn=_top_left, frame_shape=(4, 5, 3))
    assert decoded.shape == (3, 4, 5, 3)
    np.testing.assert_array_equal(
        decoded.numpy()[:2], _tfds_decode(list(encoded.numpy()[:2]), PNG)[:, :4, :5]
    )


def test_decode_fails_on_bytes_that_are_not_an_image():
    with pytest.raises(tf.errors.InvalidArgumentError):
        frames.decode_frames(tf.constant([b'not an image']), JPEG)


def test_decode_fields_walks_dicts_namedtuples_and_tuples():
    from tf_agents.trajectories import trajectory

    encoded = tf.constant(_encode(_images(2), 'png'))
    formats = {'observation/image': PNG}
    nest = (
        {'info': tf.constant(1)},
        trajectory.Trajectory(
            step_type=tf.constant([0, 1]),
            observation={'image': encoded, 'state': tf.zeros([2, 3])},
            action=(),
            policy_info=(),
            next_step_type=tf.constant([1, 2]),
            reward=tf.zeros([2]),
            discount=tf.ones([2]),
        ),
    )
    out = frames.decode_fields(nest, formats, present_suffix='_present')
    observation = out[1].observation
    assert observation['image'].shape == (2, *PNG.shape)
    assert observation['image_present'].numpy().all()
    assert out[0]['info'] == 1 and out[1].step_type.shape == (2,)


def test_decode_fields_refuses_masks_it_cannot_place():
    encoded = tf.constant(_encode(_images(1), 'png'))
    with pytest.raises(errors.FrameFieldError, match='a field of that name exists'):
        frames.decode_fields(
            {'image': encoded, 'image_present': tf.constant([True])},
            {'image': PNG},
            present_suffix='_present',
        )
    from tf_agents.trajectories import time_step

    step = time_step.TimeStep(tf.constant([0]), tf.zeros([1]), tf.ones([1]), encoded)
    with pytest.raises(errors.FrameFieldError, match='not in a dict'):
        frames.decode_fields(step, {'observation': PNG}, present_suffix='_present')
    # Without masks it decodes there.
    assert frames.decode_fields(step, {'observation': PNG}).observation.shape == (1, 12, 16, 3)


def test_decode_spec_matches_what_decoding_gives():
    spec = {'image': tf.TensorSpec([None, 4], tf.string), 'x': tf.TensorSpec([2], tf.float32)}
    decoded = frames.decode_spec(spec, {'image': JPEG, 'missing': PNG})
    assert decoded == {
        'image': tf.TensorSpec([None, 4, 12, 16, 3], tf.uint8),
        'x': tf.TensorSpec([2], tf.float32),
    }
