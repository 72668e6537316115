"""`load(..., encoded_frames=...)`: frame fields handed out as the bytes the source stores.

On robot-like data written by TFDS's own writer (`tests/robot_data.py`: one shuffled shard
of 120 episodes of 1 to 1,000 steps, two JPEG cameras and a PNG one, dict observations
with a string, a language instruction, episode metadata), each path of the TFDS reader (the
record path, `as_dataset`, the nested steps) gives the stored bytes, and those bytes
decode to exactly the frames `load` decodes without the option (checksums).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import rlds_reverb
from rlds_reverb.check import stats
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import errors, frames, types
from rlds_reverb.core.frames import FrameFormat
from rlds_reverb.read import loading
from rlds_reverb.storage import tfds_writer
from tests import builders, users_data
from tests import robot_data as rd
from tests.d4rl_files import write_d4rl_file

FORMATS = {
    rd.IMAGE_PATH: FrameFormat('jpeg', rd.ROBOT_SPEC.image_shape),
    rd.OVERHEAD_PATH: FrameFormat('png', rd.OVERHEAD_SHAPE),
    rd.WRIST_PATH: FrameFormat('jpeg', rd.ROBOT_SPEC.wrist_shape),
}


@pytest.fixture(scope='module')
def missing_frames_dir(tmp_path_factory):
    """`rd.MISSING_SPEC` written by TFDS: every third wrist frame is b''."""
    return rd.shared_dir(tmp_path_factory, rd.MISSING_SPEC)


def _numpy(episodes: tf.data.Dataset) -> list[dict]:
    """Whole episodes as NumPy (steps `[T, ...]`, metadata kept)."""
    return list(episodes_lib.to_whole_episodes(episodes).as_numpy_iterator())


def _stored_bytes(directory) -> dict[int, dict[str, list[bytes]]]:
    """{episode id: {path: bytes per step}}: what TFDS itself reads with `SkipDecoding`."""
    skip = {
        types.OBSERVATION: {
            k: tfds.decode.SkipDecoding() for k in (rd.IMAGE, rd.WRIST, rd.OVERHEAD)
        }
    }
    data = tfds.builder_from_directory(str(directory)).as_dataset(
        split=rd.SPLIT, decoders={types.STEPS: skip}
    )
    found = {}
    for episode in users_data.read_numpy(data):
        observation = episode[types.STEPS][types.OBSERVATION]
        found[int(episode[rd.METADATA][rd.EPISODE_ID])] = {
            path: list(observation[path.split('/')[1]]) for path in rd.FRAME_PATHS
        }
    return found


def _decode_all(episodes: tf.data.Dataset, formats) -> list[dict]:
    """The episodes (NumPy) with every encoded frame field decoded (`core.frames`), in a map."""
    whole = episodes_lib.to_whole_episodes(episodes)
    decoded = whole.map(lambda e: {**e, types.STEPS: frames.decode_fields(e[types.STEPS], formats)})
    return list(decoded.as_numpy_iterator())


def test_list_frame_fields_reads_the_features_only(robot_dir):
    assert rlds_reverb.list_frame_fields(robot_dir) == FORMATS
    assert list(rlds_reverb.list_frame_fields(robot_dir)) == sorted(FORMATS)
    assert loading.list_frame_fields(builders.rlds([builders.episode(3)])) == {}


def test_list_frame_fields_names_a_source_that_is_not_a_dataset(tmp_path):
    with pytest.raises(errors.SourceNotFoundError):
        rlds_reverb.list_frame_fields(tmp_path / 'nothing')
    with pytest.raises(TypeError):
        rlds_reverb.list_frame_fields(42)
    features = tfds.features.FeaturesDict({'label': tfds.features.Scalar(dtype=np.int64)})
    plain = tfds_writer.write_rlds_dataset(
        tmp_path / 'plain' / '1.0.0', [{'label': 3}], features=features, name='plain'
    )
    with pytest.raises(errors.SourceError, match='not an RLDS dataset'):
        rlds_reverb.list_frame_fields(plain)


def test_encoded_episodes_validate_and_describe_as_decoded_ones(robot_dir):
    encoded = rlds_reverb.load(robot_dir, encoded_frames='all')
    report = rlds_reverb.validate(encoded, on_invalid='report')
    assert report.ok and report.episodes == len(rd.ROBOT_SPEC.lengths)
    found = stats.describe_dataset(encoded)
    assert found.steps == rd.ROBOT_SPEC.num_steps


def test_encoded_fields_hold_the_stored_bytes_and_the_formats(robot_dir):
    episodes = rlds_reverb.load(robot_dir, encoded_frames='all')
    assert episodes.frame_formats == FORMATS
    assert episodes_lib.find_frame_formats(episodes) == FORMATS
    observation = episodes.element_spec[types.STEPS].element_spec[types.OBSERVATION]
    for key in (rd.IMAGE, rd.WRIST, rd.OVERHEAD):
        assert observation[key] == tf.TensorSpec([], tf.string)
    assert observation[rd.TEXT] == tf.TensorSpec([], tf.string)  # A string stays a string.
    stored = _stored_bytes(robot_dir)
    read = _numpy(episodes)
    assert len(read) == len(rd.ROBOT_SPEC.lengths) > 100  # One shard of 100+ episodes.
    assert sorted(len(e[types.STEPS][types.IS_FIRST]) for e in read)[-1] == 1000
    for episode in read:
        index = int(episode[rd.METADATA][rd.EPISODE_ID])
        observation = episode[types.STEPS][types.OBSERVATION]
        for path in rd.FRAME_PATHS:
            assert list(observation[path.split('/')[1]]) == stored[index][path]
        written = rd.make_episodes(rd.ROBOT_SPEC)[index]['jpeg']
        assert list(observation[rd.IMAGE]) == list(written[rd.IMAGE])  # Our JPEG, unchanged.


def test_encoded_frames_decode_to_what_load_decodes(robot_dir):
    decoded = _numpy(rlds_reverb.load(robot_dir))
    encoded = _decode_all(rlds_reverb.load(robot_dir, encoded_frames='all'), FORMATS)
    for path in rd.FRAME_PATHS:
        assert rd.frame_digests(encoded, path) == rd.frame_digests(decoded, path)
    # The other fields are the same too (same order of episodes).
    for a, b in zip(encoded, decoded, strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, a, b)


def test_the_decoded_frames_are_the_written_frames(robot_dir):
    # PNG is lossless: the frames TFDS encoded come back exactly.
    decoded = _decode_all(rlds_reverb.load(robot_dir, encoded_frames='all'), FORMATS)
    written = {i: e for i, e in enumerate(rd.make_episodes(rd.ROBOT_SPEC))}
    for episode in decoded:
        index = int(episode[rd.METADATA][rd.EPISODE_ID])
        np.testing.assert_array_equal(
            episode[types.STEPS][types.OBSERVATION][rd.OVERHEAD],
            written[index][types.STEPS][types.OBSERVATION][rd.OVERHEAD],
        )


@pytest.mark.parametrize(
    'options',
    [
        {'read_config': tfds.ReadConfig()},  # TFDS' as_dataset, whole episodes.
        {'shuffle_files': False, 'check_files': 'full'},
    ],
    ids=['as_dataset', 'records-full-check'],
)
def test_every_read_path_gives_the_same_bytes(robot_dir, options):
    paths = [rd.IMAGE_PATH, rd.OVERHEAD_PATH]
    episodes = rlds_reverb.load(robot_dir, encoded_frames=paths, **options)
    assert episodes.frame_formats == {p: FORMATS[p] for p in paths}
    reference = _numpy(rlds_reverb.load(robot_dir, encoded_frames=paths))
    for a, b in zip(_numpy(episodes), reference, strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, a, b)
    wrist = episodes.element_spec[types.STEPS].element_spec[types.OBSERVATION][rd.WRIST]
    assert wrist == tf.TensorSpec(rd.ROBOT_SPEC.wrist_shape, tf.uint8)  # Not chosen: decoded.


def test_nested_steps_hold_the_bytes_too(robot_dir):
    nested = rlds_reverb.load(robot_dir, encoded_frames=[rd.IMAGE_PATH], whole_episodes=False)
    reference = _numpy(rlds_reverb.load(robot_dir, encoded_frames=[rd.IMAGE_PATH]))
    read = users_data.read_numpy(nested.take(5))
    for a, b in zip(read, reference[:5], strict=True):
        np.testing.assert_array_equal(
            a[types.STEPS][types.OBSERVATION][rd.IMAGE], b[types.STEPS][types.OBSERVATION][rd.IMAGE]
        )


def test_selections_and_step_fields_keep_the_formats(robot_dir):
    episodes = rlds_reverb.load(
        robot_dir, encoded_frames='all', step_fields=[rd.IMAGE_PATH, rd.INSTRUCTION]
    )
    assert episodes.frame_formats == {rd.IMAGE_PATH: FORMATS[rd.IMAGE_PATH]}
    for selected in (episodes.take(3), episodes.skip(2).take(2), episodes.shard(4, 1)):
        assert episodes_lib.find_frame_formats(selected) == episodes.frame_formats
    observation = episodes.element_spec[types.STEPS].element_spec[types.OBSERVATION]
    assert set(observation) == {rd.IMAGE}
    assert episodes_lib.find_frame_formats(episodes.map(lambda e: e)) == {}  # A plain map.


def test_an_unknown_or_non_image_path_is_named_with_the_frame_fields(robot_dir):
    listed = 'observation/image, observation/overhead, observation/wrist_image'
    for path in ('observation/state', 'observation/nothing', rd.INSTRUCTION):
        with pytest.raises(errors.FrameFieldError, match=f"names '{path}'.*{listed}"):
            rlds_reverb.load(robot_dir, encoded_frames=[path])
    # A camera left out by step_fields is not among the frame fields either.
    with pytest.raises(errors.FrameFieldError, match='Its frame fields: observation/image.$'):
        rlds_reverb.load(robot_dir, encoded_frames=[rd.WRIST_PATH], step_fields=[rd.IMAGE_PATH])


def test_encoded_frames_option_values():
    options = rlds_reverb.LoadOptions(encoded_frames=['observation/image'])
    assert options.encoded_frames == ('observation/image',)
    assert rlds_reverb.LoadOptions(encoded_frames=['all', 'x']).encoded_frames == 'all'
    assert rlds_reverb.LoadOptions(encoded_frames=[]).encoded_frames is None
    with pytest.raises(TypeError, match="None, 'all' or a sequence"):
        rlds_reverb.LoadOptions(encoded_frames='observation/image')
    with pytest.raises(TypeError, match="None, 'all' or a sequence"):
        rlds_reverb.LoadOptions(encoded_frames=[1])


def test_readers_without_encoded_frames_refuse_the_option(tmp_path):
    data = builders.rlds([builders.episode(3)])
    with pytest.raises(
        errors.SourceError, match=r"tf.data reader, which does not take encoded_frames='all'"
    ):
        rlds_reverb.load(data, encoded_frames='all')
    path = write_d4rl_file(tmp_path / 'data.hdf5', next_observations=True)
    with pytest.raises(errors.SourceError, match='d4rl reader, which does not take encoded_frames'):
        rlds_reverb.load(path, encoded_frames=['observation'])


def test_missing_frames_stay_empty_strings_and_decode_to_zeros(missing_frames_dir):
    episodes = rlds_reverb.load(missing_frames_dir, encoded_frames='all')
    for episode in _numpy(episodes):
        index = int(episode[rd.METADATA][rd.EPISODE_ID])
        wrist = episode[types.STEPS][types.OBSERVATION][rd.WRIST]
        t = np.arange(len(wrist))
        assert [len(b) == 0 for b in wrist] == list(t % 3 == 2)
        decoded, present = frames.decode_frames(
            tf.constant(wrist), episodes.frame_formats[rd.WRIST_PATH]
        )
        assert present.numpy().tolist() == list(t % 3 != 2)
        assert not decoded.numpy()[t % 3 == 2].any()
        written = rd.make_episodes(rd.MISSING_SPEC)[index]['jpeg'][rd.WRIST]
        assert list(wrist) == list(written)


def test_envlogger_recordings_hold_encoded_frames(tmp_path):
    pytest.importorskip('envlogger', reason='envlogger 1.2 (the test extra) is needed')
    from tests import envlogger_env as env_lib

    directory = tmp_path / env_lib.NAME
    plan = env_lib.PLAN[:4]
    expected = env_lib.record(directory, plan, max_episodes_per_file=2)
    path = f'{types.OBSERVATION}/{env_lib.IMAGE}'
    fmt = FrameFormat('png', env_lib.IMAGE_SHAPE)
    assert rlds_reverb.list_frame_fields(directory) == {path: fmt}
    episodes = rlds_reverb.load(directory, encoded_frames='all')
    assert episodes.frame_formats == {path: fmt}
    decoded = _decode_all(episodes, {path: fmt})
    recorded = {int(e[types.EPISODE_ID]): e for e in expected}
    for episode in decoded:
        frames_read = episode[types.STEPS][types.OBSERVATION][env_lib.IMAGE]
        reference = recorded[int(episode[types.EPISODE_ID])][types.STEPS][types.OBSERVATION]
        np.testing.assert_array_equal(frames_read, reference[env_lib.IMAGE])
