"""LeRobot cameras kept encoded: image mode hands out the stored PNG bytes, video is refused.

On the committed fixtures written by LeRobot 0.6.1 itself (tests/fixtures/lerobot: image
mode, PNG frames in the data parquet; video mode, AV1 in mp4): the encoded bytes decode to
the frames the reader decodes (and LeRobot returned: the reference checksums), with the
format info.json gives; they are pushed encoded into a real Reverb server and copied into
an RLDS dataset unchanged, and `rlds-reverb info` lists them; a video camera asked for
encoded is refused by name.
"""

from __future__ import annotations

import hashlib
import pathlib

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tree

import rlds_reverb
from rlds_reverb import items, tables
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import frames, types
from rlds_reverb.core.errors import FrameFieldError
from rlds_reverb.core.frames import FrameFormat
from rlds_reverb.export import rlds_copy
from tests import reverb_tables

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'lerobot'
IMAGE, VIDEO = FIXTURES / 'datasets' / 'image-v3', FIXTURES / 'datasets' / 'video-v3'
FRONT, WRIST = 'observation/images/front', 'observation/images/wrist'
# info.json of image-v3: the cameras' shapes (height, width, channels).
FORMATS = {FRONT: FrameFormat('png', (48, 64, 3)), WRIST: FrameFormat('png', (32, 40, 3))}
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


def _read(episodes: tf.data.Dataset) -> list[dict]:
    return list(episodes_lib.to_whole_episodes(episodes).as_numpy_iterator())


def _get(episode: dict, path: str) -> np.ndarray:
    node = episode[types.STEPS]
    for key in path.split('/'):
        node = node[key]
    return node


def _sha256(frames_: np.ndarray) -> list[str]:
    return [hashlib.sha256(np.ascontiguousarray(f).tobytes()).hexdigest() for f in frames_]


def _decode(encoded: np.ndarray, fmt: FrameFormat) -> np.ndarray:
    decoded, present = frames.decode_frames(tf.constant(encoded, tf.string), fmt)
    assert bool(tf.reduce_all(present))
    return decoded.numpy()


def test_image_mode_cameras_are_listed_with_info_json_formats():
    assert rlds_reverb.list_frame_fields(IMAGE) == FORMATS
    assert rlds_reverb.list_frame_fields(VIDEO) == {}  # Video frames are no stored bytes.


def test_encoded_png_bytes_decode_to_the_readers_frames():
    encoded = rlds_reverb.load(IMAGE, encoded_frames='all')
    assert encoded.frame_formats == FORMATS
    images = encoded.element_spec[types.STEPS].element_spec[types.OBSERVATION]['images']
    assert images == {
        'front': tf.TensorSpec([], tf.string),
        'wrist': tf.TensorSpec([], tf.string),
    }
    got, want = _read(encoded), _read(rlds_reverb.load(IMAGE))
    reference = dict(np.load(FIXTURES / 'reference' / 'image-v3.npz'))
    for path, fmt in FORMATS.items():
        blobs = np.concatenate([_get(e, path) for e in got])
        assert all(bytes(b).startswith(PNG_SIGNATURE) for b in blobs)
        decoded = _decode(blobs, fmt)
        assert _sha256(decoded) == _sha256(np.concatenate([_get(e, path) for e in want]))
        # What LeRobot's own reader returned for every frame (make_fixtures.py).
        name = 'observation.images.' + path.rsplit('/', 1)[1]
        assert _sha256(decoded) == reference[f'sha256/image/{name}'].tolist()
    # Every other field is as the decoded read gives it.
    for a, b in zip(got, want, strict=True):
        for path in FORMATS:
            a = _drop(a, path)
            b = _drop(b, path)
        tree.map_structure(np.testing.assert_array_equal, a, b)


def _drop(episode: dict, path: str) -> dict:
    steps = dict(episode[types.STEPS])
    observation = dict(steps[types.OBSERVATION])
    observation['images'] = {
        k: v for k, v in observation['images'].items() if k != path.rsplit('/', 1)[1]
    }
    return {**episode, types.STEPS: {**steps, types.OBSERVATION: observation}}


def test_one_camera_encoded_the_other_decoded_and_selections_keep_them():
    episodes = rlds_reverb.load(IMAGE, encoded_frames=[WRIST]).skip(1).take(2)
    assert episodes.frame_formats == {WRIST: FORMATS[WRIST]}
    want = _read(rlds_reverb.load(IMAGE).skip(1).take(2))
    for got, ref in zip(_read(episodes), want, strict=True):
        np.testing.assert_array_equal(_get(got, FRONT), _get(ref, FRONT))
        np.testing.assert_array_equal(_decode(_get(got, WRIST), FORMATS[WRIST]), _get(ref, WRIST))


def test_a_path_that_is_no_camera_is_refused_with_the_cameras():
    with pytest.raises(FrameFieldError, match=f'observation/state.*{FRONT}, {WRIST}'):
        rlds_reverb.load(IMAGE, encoded_frames=['observation/state'])


@pytest.mark.parametrize(
    'encoded_frames, named',
    [('all', ['front', 'wrist']), ([WRIST], ['wrist'])],
    ids=['all', 'one'],
)
def test_video_cameras_are_refused_by_name(encoded_frames, named):
    with pytest.raises(FrameFieldError, match='mp4') as raised:
        rlds_reverb.load(VIDEO, encoded_frames=encoded_frames)
    message = str(raised.value)
    for camera in ('front', 'wrist'):
        assert (f"'observation.images.{camera}'" in message) == (camera in named)
    assert 'image mode' in message and '--to lerobot' in message


def test_video_fields_left_out_are_not_refused():
    episodes = rlds_reverb.load(VIDEO, step_fields=['observation/state'], encoded_frames='all')
    assert episodes.frame_formats == {}


def test_push_of_encoded_cameras_stores_the_bytes_and_decodes_to_the_frames():
    encoded = rlds_reverb.load(IMAGE, encoded_frames='all').take(3)
    decoded = rlds_reverb.load(IMAGE).take(3)
    kind = items.TwoStep()
    signature = tables.signature_for(kind, encoded)
    formats = kind.map_frame_formats(FORMATS)
    assert frames.find_spec_formats(signature) == formats
    names = [
        reverb_tables.make_fifo_table('encoded', signature),
        reverb_tables.make_fifo_table('decoded', tables.signature_for(kind, decoded)),
    ]
    server = reverb.Server(names, port=None)
    try:
        client = server.localhost_client()
        pushed = rlds_reverb.push(encoded, client, 'encoded', item=kind)
        reference = rlds_reverb.push(decoded, client, 'decoded', item=kind)
        assert pushed.items == {'encoded': reference.items['decoded']}
        got = reverb_tables.read_items(client, 'encoded')
        want = reverb_tables.read_items(client, 'decoded')
    finally:
        server.stop()
    assert len(got) == len(want) == pushed.items['encoded']
    for a, b in zip(got, want, strict=True):
        tree.map_structure(
            np.testing.assert_array_equal, frames.decode_fields(a.data, formats), b.data
        )


def test_save_as_rlds_copies_the_png_bytes(tmp_path):
    out = tmp_path / 'copy' / '1.0.0'
    rlds_copy.save_as_rlds(IMAGE, out, encoded_frames='all')
    assert rlds_reverb.list_frame_fields(out) == FORMATS
    source, copy = (_read(rlds_reverb.load(d, encoded_frames='all')) for d in (IMAGE, out))
    for a, b in zip(source, copy, strict=True):
        for path in FORMATS:
            assert _get(a, path).tolist() == _get(b, path).tolist()


def test_info_lists_the_image_mode_cameras(run_cli):
    code, stdout, stderr = run_cli('info', IMAGE)
    assert code == 0, stderr
    assert f'{FRONT}: png 48x64x3' in stdout and f'{WRIST}: png 32x40x3' in stdout
