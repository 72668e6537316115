"""save_as_rlds of encoded frames: the stored JPEG and PNG bytes go into the copy unchanged,
as TFDS `Image` features of their format (no decode, no re-encode).

Robot-like data written by TFDS's own writer (`tests/robot_data.py`: two JPEG cameras, one
PNG camera, dict observations holding a string), loaded encoded, saved, and read back both
ways: the bytes, the decoded frames (against the source's own decode), the features.
`rlds-reverb convert --encoded-frames` is tested in tests/cli/test_convert_command.py.
"""

from __future__ import annotations

import pytest
import tensorflow_datasets as tfds

import rlds_reverb
from rlds_reverb.core import types
from rlds_reverb.core.errors import FrameFieldError, SourceError
from rlds_reverb.export import rlds_copy
from tests import robot_data as rd
from tests import users_data
from tests.rlds_copies import assert_same_episodes

SPEC = rd.SMALL_SPEC


@pytest.fixture(scope='module')
def robot_dir(tmp_path_factory):
    return rd.shared_dir(tmp_path_factory, SPEC)


def _read(directory, **options) -> list[dict]:
    return users_data.read_numpy(rlds_reverb.load(directory, **options))


def _assert_copied_encoded(source, out) -> None:
    """The copy holds the source's bytes, in `Image` features of the source's formats."""
    formats = rlds_reverb.list_frame_fields(source)
    assert set(formats) == set(rd.FRAME_PATHS)
    assert rlds_reverb.list_frame_fields(out) == formats
    features = tfds.builder_from_directory(str(out)).info.features[types.STEPS]
    for path, fmt in formats.items():
        feature = features[types.OBSERVATION][path.split('/')[1]]
        assert isinstance(feature, tfds.features.Image), path
        assert (feature.encoding_format, feature.shape) == (fmt.codec, fmt.shape)
    # Byte for byte: every field of every episode (frames as bytes, strings, metadata).
    assert_same_episodes(_read(source, encoded_frames='all'), _read(out, encoded_frames='all'))
    # Decoded: the same frames as the source decodes, by `load` and by TFDS's own reader.
    decoded = _read(source)
    assert_same_episodes(decoded, _read(out))
    assert_same_episodes(users_data.read_with_tfds(source), users_data.read_with_tfds(out))


def test_an_encoded_dataset_is_copied_with_its_bytes(robot_dir, tmp_path):
    encoded = rlds_reverb.load(robot_dir, encoded_frames='all')
    assert set(encoded.frame_formats) == set(rd.FRAME_PATHS)
    out = tmp_path / 'copy' / '1.0.0'
    stats = rlds_copy.save_as_rlds(encoded, out)
    assert (stats.episodes, stats.steps) == (len(SPEC.lengths), SPEC.num_steps)
    _assert_copied_encoded(robot_dir, out)


def test_encoded_frames_of_a_path_keep_those_fields_encoded(robot_dir, tmp_path):
    out = tmp_path / 'copy'
    rlds_copy.save_as_rlds(robot_dir, out, encoded_frames='all')
    _assert_copied_encoded(robot_dir, out)
    # One camera only: the others are decoded and stored as uint8 tensors.
    part = tmp_path / 'part'
    rlds_copy.save_as_rlds(robot_dir, part, encoded_frames=[rd.OVERHEAD_PATH])
    assert list(rlds_reverb.list_frame_fields(part)) == [rd.OVERHEAD_PATH]
    features = tfds.builder_from_directory(str(part)).info.features[types.STEPS]
    assert isinstance(features[types.OBSERVATION][rd.IMAGE], tfds.features.Tensor)
    assert_same_episodes(_read(robot_dir), _read(part))


def test_encoded_frames_naming_no_frame_field_is_refused(robot_dir, tmp_path):
    with pytest.raises(FrameFieldError, match='observation/state'):
        rlds_copy.save_as_rlds(robot_dir, tmp_path / 'copy', encoded_frames=['observation/state'])
    assert not (tmp_path / 'copy').exists()
    # A dataset load returned is read as it is: encoded_frames is load's to give then.
    encoded = rlds_reverb.load(robot_dir, encoded_frames='all')
    with pytest.raises(SourceError, match='encoded_frames'):
        rlds_copy.save_as_rlds(encoded, tmp_path / 'again', encoded_frames='all')
