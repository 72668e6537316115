"""LeRobot v3.0 datasets through `rlds_reverb.load`: LeRobot 0.6.1's own files and reader.

`tests/fixtures/lerobot/datasets/` holds datasets written by LeRobot 0.6.1 itself (image
mode: PNG frames in the data parquet; video mode: AV1, all episodes of a camera in one mp4;
state only, without a reward: make_state_fixture.py),
and `reference/` what `LeRobotDataset[i]` returned for every frame, with both of its video
backends (`make_fixtures.py`, run in a scratch venv). Every frame read here is compared with
it: numbers bit for bit, frames by SHA-256. Then the toolkit on these episodes (validate,
convert, push into a real Reverb server, the adders, the report), the selections, and the
format errors (tests/read/test_lerobot_errors.py has the corrupt files).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tree

import adders
import rlds_reverb
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import SourceError, SpecMismatchError
from rlds_reverb.read import lerobot
from rlds_reverb.read.loading import find_reader, load
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from tests import reverb_tables

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'lerobot'
IMAGE, VIDEO = FIXTURES / 'datasets' / 'image-v3', FIXTURES / 'datasets' / 'video-v3'
CAMERAS = ('front', 'wrist')
# Per fixture: the episodes terminated by `next.done` on their last frame.
TERMINATED = {'image-v3': [0, 2, 4, 5, 8], 'video-v3': [0, 2, 4]}


def read(episodes: tf.data.Dataset) -> list[dict]:
    return list(episodes_lib.to_whole_episodes(episodes).as_numpy_iterator())


def reference(name: str) -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURES / 'reference' / f'{name}.npz'))


def concat(episodes: list[dict], *path: str) -> np.ndarray:
    values = []
    for episode in episodes:
        node = episode[types.STEPS]
        for key in path:
            node = node[key]
        values.append(node)
    return np.concatenate(values)


def sha256(frames: np.ndarray) -> np.ndarray:
    return np.asarray(
        [hashlib.sha256(np.ascontiguousarray(f).tobytes()).hexdigest() for f in frames]
    )


def bits(array: np.ndarray) -> np.ndarray:
    """Float arrays as their bits: -0.0 (the fixtures' first reward) differs from 0.0."""
    array = np.asarray(array)
    return array.view(np.uint32) if array.dtype == np.float32 else array


@pytest.fixture(scope='module', params=['image-v3', 'video-v3'])
def fixture(request) -> tuple[str, list[dict]]:
    name = request.param
    return name, read(load(FIXTURES / 'datasets' / name))


# --- what LeRobot's reader returns, frame for frame ----------------------------------------


def test_every_number_is_what_lerobot_returns(fixture):
    name, episodes = fixture
    ref = reference(name)
    fields = {
        'observation.state': ('observation', 'state'),
        'action': ('action',),
        'observation.gripper': ('observation', 'gripper'),
        'next.reward': ('reward',),
        'timestamp': ('timestamp',),
    }
    for key, path in fields.items():
        got = concat(episodes, *path)
        assert got.dtype == ref[key].dtype and got.shape == ref[key].shape, key
        np.testing.assert_array_equal(bits(got), bits(ref[key]), err_msg=key)
    tasks = [t.decode() for t in concat(episodes, types.LANGUAGE_INSTRUCTION)]
    assert tasks == ref['task'].tolist()
    lengths = [len(e[types.STEPS][types.IS_FIRST]) for e in episodes]
    np.testing.assert_array_equal(
        np.repeat(np.arange(len(episodes)), lengths), ref['episode_index']
    )


def test_every_frame_is_what_both_lerobot_backends_return(fixture):
    name, episodes = fixture
    ref = reference(name)
    backends = ['image'] if name.startswith('image') else ['torchcodec', 'pyav']
    item = json.loads((FIXTURES / 'reference' / f'{name}.json').read_text())['backends']
    item = item[backends[0]]['item']  # What LeRobot's items held: cameras as float CHW.
    for camera in CAMERAS:
        frames = concat(episodes, 'observation', 'images', camera)
        channels, height, width = item[f'observation.images.{camera}']['shape']
        assert frames.dtype == np.uint8 and frames.shape[1:] == (height, width, channels)
        for backend in backends:
            want = ref[f'sha256/{backend}/observation.images.{camera}']
            np.testing.assert_array_equal(sha256(frames), want, err_msg=f'{camera} {backend}')
    if name.startswith('image'):  # Image mode is lossless: the frames LeRobot was given.
        for camera in CAMERAS:
            frames = concat(episodes, 'observation', 'images', camera)
            np.testing.assert_array_equal(
                sha256(frames), ref[f'source_sha256/observation.images.{camera}']
            )


def test_next_done_on_the_last_frame_is_a_termination_else_a_truncation(fixture):
    name, episodes = fixture
    ref = reference(name)
    ends = np.cumsum([len(e[types.STEPS][types.IS_FIRST]) for e in episodes]) - 1
    assert [
        i for i, e in enumerate(episodes) if e[types.STEPS][types.IS_TERMINAL][-1]
    ] == TERMINATED[name]
    np.testing.assert_array_equal(
        ref['next.done'][ends], [i in TERMINATED[name] for i in range(len(episodes))]
    )
    for index, episode in enumerate(episodes):
        steps = episode[types.STEPS]
        length = len(steps[types.IS_FIRST])
        np.testing.assert_array_equal(steps[types.IS_FIRST], np.arange(length) == 0)
        np.testing.assert_array_equal(steps[types.IS_LAST], np.arange(length) == length - 1)
        assert steps[types.IS_TERMINAL][:-1].sum() == 0
        # dm_env's discounts: 0 into a terminal last step and on it (docs/semantics.md).
        want = np.ones(length, np.float32)
        if index in TERMINATED[name]:
            want[-2:] = 0
        np.testing.assert_array_equal(steps[types.DISCOUNT], want)


def test_episode_fields_and_metadata(fixture):
    name, episodes = fixture
    assert [int(e[types.EPISODE_INDEX]) for e in episodes] == list(range(len(episodes)))
    assert all(float(e[types.FPS]) == 10.0 for e in episodes)
    found = lerobot.read_lerobot_metadata(load(FIXTURES / 'datasets' / name))
    info = json.loads((FIXTURES / 'datasets' / name / 'meta' / 'info.json').read_text())
    assert found.fps == 10 and found.version == 'v3.0' and found.robot_type == 'so100_follower'
    assert found.names['observation/state'] == info['features']['observation.state']['names']
    assert found.names['observation/gripper'] == ['width_m']
    assert found.features['reward'] == 'next.reward'
    assert found.features['observation/images/front'] == 'observation.images.front'
    assert found.tasks[2] == 'put the mug on the café shelf'
    assert found.derived == (types.DISCOUNT,)
    assert lerobot.read_lerobot_metadata(load(FIXTURES / 'datasets' / name).take(2)) == found


def test_the_spec_comes_from_info_json():
    spec = load(IMAGE).element_spec
    steps = spec[types.STEPS].element_spec
    assert steps[types.OBSERVATION]['images']['front'] == tf.TensorSpec([48, 64, 3], tf.uint8)
    assert steps[types.OBSERVATION]['images']['wrist'] == tf.TensorSpec([32, 40, 3], tf.uint8)
    assert steps[types.OBSERVATION]['state'] == tf.TensorSpec([7], tf.float32)
    assert steps[types.OBSERVATION]['gripper'] == tf.TensorSpec([], tf.float32)
    assert steps[types.REWARD] == tf.TensorSpec([], tf.float32)
    assert steps[types.LANGUAGE_INSTRUCTION] == tf.TensorSpec([], tf.string)
    assert spec[types.EPISODE_INDEX] == tf.TensorSpec([], tf.int64)
    assert find_reader(IMAGE).name == 'lerobot'


def test_a_dataset_without_next_reward_gets_zero_rewards_with_a_warning(tmp_path):
    import shutil

    root = pathlib.Path(shutil.copytree(IMAGE, tmp_path / 'copy'))
    info = json.loads((root / 'meta' / 'info.json').read_text())
    del info['features']['next.reward']
    (root / 'meta' / 'info.json').write_text(json.dumps(info))
    with pytest.warns(UserWarning, match="no 'next.reward' feature: the steps get reward 0.0"):
        episodes = load(root)
    first = read(episodes.take(1))[0][types.STEPS]
    np.testing.assert_array_equal(first[types.REWARD], np.zeros(12, np.float32))
    assert lerobot.read_lerobot_metadata(episodes).derived == (types.REWARD, types.DISCOUNT)


# --- selections ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    'split, indices',
    [
        ('train', list(range(10))),
        ('train[:3]', [0, 1, 2]),
        ('train[-2:]', [8, 9]),
        ('train[50%:70%]', [5, 6]),
    ],
)
def test_a_slice_of_the_split_selects_the_episodes(split, indices):
    got = read(load(IMAGE, split=split))
    assert [int(e[types.EPISODE_INDEX]) for e in got] == indices


def test_take_skip_and_shard_select_from_the_source():
    episodes = load(VIDEO)
    selected = episodes.skip(1).shard(2, 0).take(2)
    assert isinstance(selected, episodes_lib.EpisodeDataset)
    assert isinstance(episodes_lib.find_source(selected), lerobot.LeRobotSource)
    got = read(selected)
    assert [int(e[types.EPISODE_INDEX]) for e in got] == [1, 3]
    whole = read(episodes)
    for a, b in zip(got, [whole[1], whole[3]], strict=True):
        tree.map_structure(np.testing.assert_array_equal, a, b)


def test_a_split_info_json_names_is_read(tmp_path):
    import shutil

    root = pathlib.Path(shutil.copytree(IMAGE, tmp_path / 'copy'))
    info = json.loads((root / 'meta' / 'info.json').read_text())
    info['splits'] = {'train': '0:8', 'test': '8:10'}
    (root / 'meta' / 'info.json').write_text(json.dumps(info))
    assert [int(e[types.EPISODE_INDEX]) for e in read(load(root, split='test'))] == [8, 9]
    assert [int(e[types.EPISODE_INDEX]) for e in read(load(root, split='test[1:]'))] == [9]
    with pytest.raises(SourceError, match=r"no split 'valid'.*splits: \['test', 'train'\]"):
        load(root, split='valid')


def test_step_fields_keeps_the_named_fields_and_skips_the_cameras():
    episodes = load(VIDEO, step_fields=['observation/state'])
    steps = episodes.element_spec[types.STEPS].element_spec
    assert list(steps[types.OBSERVATION]) == ['state']
    assert types.LANGUAGE_INSTRUCTION not in steps and types.REWARD in steps
    assert sum(len(e[types.STEPS][types.REWARD]) for e in read(episodes)) == 118
    with pytest.raises(SpecMismatchError, match='observation/depth'):
        load(VIDEO, step_fields=['observation/depth'])


def test_options_a_lerobot_dataset_does_not_take_are_refused():
    with pytest.raises(SourceError, match='read by the lerobot reader, which does not take'):
        load(IMAGE, check_files='full')


# --- the toolkit on LeRobot episodes ----------------------------------------------------------


@pytest.mark.parametrize('root', [IMAGE, VIDEO], ids=['image', 'video'])
def test_validate_counts_the_endings(root):
    report = rlds_reverb.validate(load(root))
    name = root.name
    assert report.ok and report.invalid == 0
    assert (report.terminated, report.truncated) == (
        len(TERMINATED[name]),
        report.valid - len(TERMINATED[name]),
    )


def test_convert_gives_tf_agents_trajectories():
    episodes = load(IMAGE)
    spec = rlds_reverb.create_trajectory_data_spec(episodes)
    assert spec.observation['images']['front'] == tf.TensorSpec([48, 64, 3], tf.uint8)
    (batch,) = list(rlds_reverb.convert_rlds_to_trajectories(episodes, batch_size=200))
    assert batch.step_type.shape[0] == 170
    whole = read(episodes)
    np.testing.assert_array_equal(batch.observation['state'], concat(whole, 'observation', 'state'))
    # Episode 1 has one frame: (LAST, LAST); episode 0 terminated: discount 0 into its end.
    assert batch.step_type[12].numpy() == 2
    assert batch.discount[10].numpy() == 0.0 and batch.discount[9].numpy() == 1.0


def test_push_writes_every_two_step_item_into_a_real_server():
    episodes = load(VIDEO)
    kind = items.TwoStep()
    table = reverb_tables.make_fifo_table('lerobot', tables.signature_for(kind, episodes))
    server = reverb.Server([table], port=None)
    try:
        client = server.localhost_client()
        stats = rlds_reverb.push(episodes, client, 'lerobot', item=kind)
        assert stats.episodes == 6 and stats.steps == 118
        assert stats.items == {'lerobot': 118 - 6}
        written = reverb_tables.read_items(client, 'lerobot')
        first = read(episodes.take(1))[0][types.STEPS][types.OBSERVATION]['images']['front']
        np.testing.assert_array_equal(written[0].data.observation['images']['front'][0], first[0])
    finally:
        server.stop()


def test_the_adders_read_a_lerobot_source_as_its_nested_steps():
    episodes = load(IMAGE, step_fields=['observation/state'])
    plain = episodes.whole_episodes.map(
        lambda e: {**e, types.STEPS: tf.data.Dataset.from_tensor_slices(e[types.STEPS])}
    )
    fast, slow = read(adders.n_step(3, 0.9)(episodes)), read(adders.n_step(3, 0.9)(plain))
    assert len(fast) == len(slow) == 10
    for a, b in zip(fast, slow, strict=True):
        tree.map_structure(np.testing.assert_array_equal, a, b)


def test_the_report_describes_a_lerobot_dataset(tmp_path):
    report = rlds_reverb.write_report(load(VIDEO), tmp_path / 'report.html')
    assert report.stats.episodes == 6 and report.validation.ok
    # The first and last frames of 4 episodes per camera, as the reader decodes them.
    assert {f.field for f in report.frames} == {
        'observation.images.front',
        'observation.images.wrist',
    }
    first = read(load(VIDEO).take(1))[0][types.STEPS][types.OBSERVATION]['images']['front']
    np.testing.assert_array_equal(report.frames[0].first, first[0])
    assert (tmp_path / 'report.html').stat().st_size > 0


def test_statistics_of_a_lerobot_directory_are_saved_beside_it_and_reused(run_cli, tmp_path):
    """`rlds-reverb stats` and `ensure_statistics` on LeRobot's own files, cameras included."""
    from rlds_reverb.check.statistics import compute_statistics
    from rlds_reverb.check.statistics_files import ensure_statistics

    root = pathlib.Path(shutil.copytree(VIDEO, tmp_path / 'video-v3'))
    saved = root / 'rlds_reverb_statistics-train.json'
    code, out, err = run_cli('stats', root, '--no-progress')
    assert code == 0 and out.endswith(f'\nWrote {saved}.\n'), err
    assert 'observation/state  float32[7]  (118 values per dimension)' in out
    code, out, _ = run_cli('stats', root, '--no-progress')
    assert code == 0 and out.endswith(f'\nReused {saved} (its fingerprint matches the data).\n')
    fields = ['observation/state', 'reward', 'observation/images/front']
    found = ensure_statistics(root, fields=fields)
    assert not found.reused and found.fingerprint
    expected = compute_statistics(load(VIDEO), fields=fields)
    assert found.format() == expected.format()
    assert ensure_statistics(root, fields=fields).reused
    state = concat(read(load(root)), 'observation', 'state')  # Still read, file beside it.
    np.testing.assert_allclose(found.fields['observation/state'].mean, state.mean(0), rtol=1e-5)


def test_the_command_line_reads_a_lerobot_directory(run_cli, tmp_path):
    code, out, _ = run_cli('validate', IMAGE)
    assert code == 0 and 'valid 10, invalid 0' in out
    code, out, _ = run_cli('info', VIDEO)
    assert code == 0 and 'terminated: 3  truncated: 3' in out
    code, out, _ = run_cli('convert', VIDEO, tmp_path / 'copy' / '1.0.0', '--no-progress')
    assert code == 0 and 'Converted 6 episodes (118 steps)' in out
    for a, b in zip(read(load(tmp_path / 'copy' / '1.0.0')), read(load(VIDEO)), strict=True):
        tree.map_structure(np.testing.assert_array_equal, a, b)


def test_the_command_line_reports_and_pushes_a_lerobot_directory(run_cli, tmp_path):
    code, out, _ = run_cli('report', VIDEO, '--out', tmp_path / 'report.html', '--no-progress')
    assert code == 0 and (tmp_path / 'report.html').stat().st_size > 0
    kind = items.TwoStep()
    table = reverb_tables.make_fifo_table('replay', tables.signature_for(kind, load(VIDEO)))
    server = reverb.Server([table], port=None)
    try:
        address = f'localhost:{server.port}'
        for root in (VIDEO, IMAGE):  # Image and video mode: the same spec, one table.
            code, out, err = run_cli('push', root, '--server', address, '--table', 'replay')
            assert code == 0, err
        sizes = (118 - 6) + (170 - 10)  # Two-step items: one per step but the last.
        assert server.localhost_client().server_info()['replay'].current_size == sizes
    finally:
        server.stop()


def test_a_state_only_dataset_without_next_reward_as_lerobot_wrote_it(tmp_path):
    """LeRobot 0.6.1's own state-only fixture (make_state_fixture.py): no camera, no reward."""
    from rlds_reverb.export import lerobot as writer

    root = FIXTURES / 'datasets' / 'state-v3'
    ref = reference('state-v3')
    with pytest.warns(UserWarning, match="no 'next.reward'"):
        episodes = read(load(root))
    np.testing.assert_array_equal(
        concat(episodes, 'observation', 'state'), ref['observation.state']
    )
    np.testing.assert_array_equal(concat(episodes, 'action'), ref['action'])
    np.testing.assert_array_equal(concat(episodes, 'reward'), np.zeros(26, np.float32))
    assert [t.decode() for t in concat(episodes, types.LANGUAGE_INSTRUCTION)] == ref[
        'task'
    ].tolist()
    assert [bool(e[types.STEPS][types.IS_TERMINAL][-1]) for e in episodes] == [
        True,
        False,
        True,
        False,
    ]
    assert [float(e[types.FPS]) for e in episodes] == [15.0] * 4
    # Written back: the same data file and tasks, no reward or discount made up.
    with pytest.warns(UserWarning, match="no 'next.reward'"):
        stats = writer.save_as_lerobot(root, tmp_path / 'out')
    assert 'reward: not written (the LeRobot reader made it up)' in stats.not_written
    for relative in ('data/chunk-000/file-000.parquet', 'meta/tasks.parquet'):
        import pyarrow.parquet as pq

        assert pq.read_table(tmp_path / 'out' / relative).equals(pq.read_table(root / relative))
    assert json.loads((tmp_path / 'out/meta/stats.json').read_text()) == json.loads(
        (root / 'meta/stats.json').read_text()
    )
