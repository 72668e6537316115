"""Encoded frames pushed into Reverb: the bytes go in unchanged, overlapping items share them,
and the table says which fields hold them (`signature_for`, the pre-push check, status, CLI).

Items are read back with a plain `reverb.TrajectoryDataset` from FIFO tables, decoded, and
compared with the items a push of the decoded dataset (`load`'s default) writes.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tree

import rlds_reverb
from rlds_reverb import items, tables
from rlds_reverb.cli import app
from rlds_reverb.cli import common as cli_common
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import errors, frames, types
from rlds_reverb.core.frames import FrameFormat
from rlds_reverb.serve import status, table_info
from tests import builders
from tests import robot_data as rd
from tests.reverb_tables import make_fifo_table

EPISODES = 30
KINDS = {
    'two_step': items.TwoStep(),
    'n_step': items.NStep(3, 0.9),
    'sequence': items.Sequence(4, 2, end='pad'),
    'episode': items.Episode(1000),
}


@pytest.fixture(scope='module')
def encoded(robot_dir):
    return rlds_reverb.load(robot_dir, encoded_frames='all').take(EPISODES)


@pytest.fixture(scope='module')
def decoded(robot_dir):
    return rlds_reverb.load(robot_dir).take(EPISODES)


def _read_all(address: str, table: str, count: int, formats=None) -> list:
    """Returns the table's `count` items in insertion order, their frames decoded in the
    dataset's map (`formats`), as NumPy batches of 256."""
    dataset = reverb.TrajectoryDataset.from_table_signature(
        address, table, max_in_flight_samples_per_worker=1
    )
    data = dataset.take(count).map(lambda sample: sample.data).batch(256)
    if formats:
        data = data.map(lambda batch: frames.decode_fields(batch, formats))
    return list(data.as_numpy_iterator())


@pytest.mark.parametrize('kind', sorted(KINDS))
def test_pushed_bytes_decode_to_the_items_of_the_decoded_push(encoded, decoded, kind):
    item = KINDS[kind]
    signature = tables.signature_for(item, encoded)
    formats = item.map_frame_formats(encoded.frame_formats)
    assert frames.find_spec_formats(signature) == formats
    names = [
        make_fifo_table('encoded', signature, max_size=100_000),
        make_fifo_table('decoded', tables.signature_for(item, decoded), max_size=100_000),
    ]
    server = reverb.Server(names, port=None)
    try:
        address = f'localhost:{server.port}'
        pushed = rlds_reverb.push(encoded, address, 'encoded', item=item)
        reference = rlds_reverb.push(decoded, address, 'decoded', item=item)
        assert pushed.items == {'encoded': reference.items['decoded']}
        count = pushed.items['encoded']
        got = _read_all(address, 'encoded', count, formats)
        want = _read_all(address, 'decoded', count)
        info = reverb.Client(address).server_info()['encoded']
        assert frames.find_spec_formats(info.signature) == formats  # Kept by Reverb.
    finally:
        server.stop()
    for a, b in zip(got, want, strict=True):
        tree.map_structure(np.testing.assert_array_equal, a, b)


def _checkpoint_bytes(directory: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob('*') if p.is_file())


def _encoded_bytes(episodes: tf.data.Dataset) -> int:
    """The frames' bytes plus every other field's (as stored per step)."""
    total = 0
    for episode in episodes_lib.to_whole_episodes(episodes).as_numpy_iterator():
        for leaf in tree.flatten(episode[types.STEPS]):
            leaf = np.asarray(leaf)
            total += sum(map(len, leaf.flat)) if leaf.dtype == object else leaf.nbytes
    return total


def _checkpoint_size(episodes: tf.data.Dataset, item, directory: pathlib.Path) -> int:
    """Pushes `item`s of `episodes` and checkpoints the server; returns the files' bytes."""
    signature = tables.signature_for(item, episodes)
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(directory))
    server = reverb.Server(
        [tables.uniform('t', max_size=100_000, signature=signature)],
        port=None,
        checkpointer=checkpointer,
    )
    try:
        client = reverb.Client(f'localhost:{server.port}')
        rlds_reverb.push(episodes, client, 't', item=item)
        client.checkpoint()
    finally:
        server.stop()
    return _checkpoint_bytes(directory)


def test_overlapping_items_share_the_stored_frames(encoded, tmp_path):
    """A checkpoint holds each stored chunk once (compressed). Every step of
    `Sequence(6, 1)` is in 6 items, of two-step items in 2: if items copied frames, the
    checkpoint of the sequences would be 3 times the two-step one; shared, it is the same,
    and no larger than the steps' own bytes (the small frames' JPEG headers compress)."""
    two_step = _checkpoint_size(encoded, items.TwoStep(), tmp_path / 'two_step')
    windows = _checkpoint_size(encoded, items.Sequence(6, 1), tmp_path / 'windows')
    assert windows < 1.3 * two_step, (windows, two_step)
    assert two_step < 1.3 * _encoded_bytes(encoded)


@pytest.mark.parametrize('engine', ['structured', 'trajectory'])
def test_bytes_are_stored_exactly_with_either_engine(engine):
    episode = builders.episode(3)
    frames_in = [b'\xff\xd8 frame \x00\x00', b'\x00 frame', b'']
    episode[types.OBSERVATION] = {'image': np.array(frames_in, object)}
    data = builders.rlds([episode])
    fmt = {'observation/image': FrameFormat('jpeg', (2, 2, 3))}
    signature = tables.signature_for(items.Sequence(3, end='drop'), data, frame_formats=fmt)
    assert signature[types.OBSERVATION]['image'].name == 'frame.jpeg.2x2x3'
    server = reverb.Server([make_fifo_table('t', signature)], port=None)
    try:
        address = f'localhost:{server.port}'
        rlds_reverb.push(data, address, 't', item=items.Sequence(3, end='drop'), engine=engine)
        (sample,) = _read_all(address, 't', 1)
    finally:
        server.stop()
    assert list(sample[types.OBSERVATION]['image'][0]) == frames_in  # A batch of one.


def test_the_pre_push_check_says_what_to_pass(encoded, decoded):
    item = items.TwoStep()
    server = reverb.Server(
        [
            tables.uniform('encoded', max_size=10, signature=tables.signature_for(item, encoded)),
            tables.uniform('decoded', max_size=10, signature=tables.signature_for(item, decoded)),
        ],
        port=None,
    )
    try:
        address = f'localhost:{server.port}'
        with pytest.raises(
            errors.SpecMismatchError,
            match=r'(?s)frame fields differ. The table stores frames encoded: read the episodes '
            r"with rlds_reverb.load\(..., encoded_frames='all'\).*"
            r'observation/image: expected encoded frames \(jpeg 24x32x3\), found decoded',
        ):
            rlds_reverb.push(decoded, address, 'encoded', allow_eviction=True)
        with pytest.raises(
            errors.SpecMismatchError,
            match=r'(?s)The table stores decoded frames: read the episodes without '
            r'encoded_frames.*observation/wrist_image: expected decoded uint8\[None, 16, 16, 3\], '
            r'found encoded frames \(jpeg 16x16x3\)',
        ):
            rlds_reverb.push(encoded, address, 'decoded', allow_eviction=True)
        other = {path: FrameFormat('png', fmt.shape) for path, fmt in encoded.frame_formats.items()}
        reverb_info = reverb.Client(address).server_info()['encoded']
        with pytest.raises(errors.SpecMismatchError, match='another format'):
            table_info.check_signature(
                reverb_info, tables.signature_for(item, encoded, frame_formats=other)
            )
    finally:
        server.stop()


def test_status_shows_the_encoded_fields(encoded):
    signature = tables.signature_for(items.NStep(2, 0.9), encoded)
    server = reverb.Server(
        [
            tables.uniform('frames', max_size=10, signature=signature),
            tables.uniform('plain', max_size=10),
        ],
        port=None,
    )
    try:
        snapshot = status.fetch_server_status(f'localhost:{server.port}')
    finally:
        server.stop()
    table = snapshot.table('frames')
    assert table.frame_fields == {
        'next_observation/image': 'jpeg 24x32x3',
        'next_observation/overhead': 'png 8x8x3',
        'next_observation/wrist_image': 'jpeg 16x16x3',
        'observation/image': 'jpeg 24x32x3',
        'observation/overhead': 'png 8x8x3',
        'observation/wrist_image': 'jpeg 16x16x3',
    }
    assert '  frames        encoded: next_observation/image (jpeg 24x32x3), ' in table.format()
    assert snapshot.table('plain').frame_fields == {}
    assert 'frames' not in snapshot.table('plain').format().split('\n')[-1]
    assert snapshot.to_json()['tables'][0]['frame_fields']['observation/image'] == 'jpeg 24x32x3'


# --- The command line ----------------------------------------------------------------------------


def test_push_and_status_on_the_command_line(robot_dir, encoded, run_cli):
    signature = tables.signature_for(
        items.TwoStep(), rlds_reverb.load(robot_dir, encoded_frames='all')
    )
    server = reverb.Server(
        [tables.uniform('replay', max_size=100_000, signature=signature)], port=None
    )
    try:
        address = f'localhost:{server.port}'
        code, out, err = run_cli(
            'push', robot_dir, '--split', 'train[:20]', '--server', address,
            '--encoded-frames', 'all', '--no-progress',
        )  # fmt: skip
        assert code == 0, err
        assert 'Pushed' in out
        code, out, _ = run_cli('status', '--server', address)
        assert code == 0
        assert 'encoded: observation/image (jpeg 24x32x3)' in out
        # Without the flag, the frames are decoded: the table refuses them, saying why.
        code, _, err = run_cli(
            'push', robot_dir, '--split', 'train[:20]', '--server', address, '--no-progress'
        )
        assert code != 0 and 'encoded_frames' in err
    finally:
        server.stop()


def test_push_and_serve_take_the_flag_as_load_option(robot_dir):
    parser = app.build_parser()
    for argv in (
        ['serve', str(robot_dir), '--port', '1', '--encoded-frames', rd.IMAGE_PATH],
        ['push', str(robot_dir), '--server', 'x:1', '--encoded-frames', rd.IMAGE_PATH],
    ):
        args = parser.parse_args(argv)
        assert cli_common.read_encoded_frames(args) == (rd.IMAGE_PATH,)
        episodes = cli_common.load_source(args)
        assert list(episodes.frame_formats) == [rd.IMAGE_PATH]
    args = parser.parse_args(['push', str(robot_dir), '--encoded-frames', 'all'])
    assert cli_common.read_encoded_frames(args) == 'all'
    assert cli_common.read_encoded_frames(parser.parse_args(['push', str(robot_dir)])) is None


def test_push_servers_refuses_encoded_frames(robot_dir, run_cli):
    code, _, err = run_cli(
        'push', robot_dir, '--servers', 'localhost:1,localhost:2', '--encoded-frames', 'all'
    )
    assert code != 0 and '--servers runs the Apache Beam pipeline' in err


def test_info_lists_the_frame_fields(robot_dir, run_cli):
    code, out, _ = run_cli('info', robot_dir)
    assert code == 0
    assert (
        'frame fields (push them encoded with --encoded-frames PATH or all):\n'
        '  observation/image: jpeg 24x32x3\n'
        '  observation/overhead: png 8x8x3\n'
        '  observation/wrist_image: jpeg 16x16x3'
    ) in out
    # Through load too (a dataset name in a data dir is read by TF).
    code, out2, _ = run_cli('info', 'robot_rlds', '--data-dir', robot_dir.parents[1])
    assert code == 0 and '  observation/image: jpeg 24x32x3' in out2
