"""`save_as_lerobot`: round trips both ways, the files' structure against LeRobot's own, refusals.

Round trips: RLDS written by TFDS's own writer, shaped like users' robot data
(`tests/lerobot_data.py`: two cameras, dict observations, 7-d actions, instructions, both
endings, lengths 1 to 300, 110 episodes) -> LeRobot -> RLDS gives back every field exactly
in image mode (frames within the recorded PSNR in video mode); LeRobot's own fixtures ->
RLDS -> LeRobot give back the same files in image mode (the PNG bytes, statistics and
metadata LeRobot wrote) and the same frame data, tasks and boundaries in video mode.
(What LeRobot itself reads from this output: tests/export/test_lerobot_checked.py.)
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
import tree

import rlds_reverb
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import LeRobotExportError
from rlds_reverb.export import lerobot
from rlds_reverb.export.lerobot_video import compute_psnr
from rlds_reverb.read.loading import load
from tests import lerobot_checked, lerobot_data

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'lerobot' / 'datasets'
DATA = 'data/chunk-000/file-000.parquet'
EPISODES = 'meta/episodes/chunk-000/file-000.parquet'


def read(episodes) -> list[dict]:
    return list(episodes_lib.to_whole_episodes(episodes).as_numpy_iterator())


def leaves(episode: dict) -> dict:
    return {'/'.join(map(str, p)): v for p, v in tree.flatten_with_path(episode)}


@pytest.fixture(scope='module')
def robot_dir(tmp_path_factory) -> pathlib.Path:
    """110 robot episodes written by TFDS's own writer."""
    return lerobot_data.write(tmp_path_factory.mktemp('robot'), lerobot_data.robot_spec())


@pytest.fixture(scope='module')
def robot_lerobot(robot_dir, tmp_path_factory) -> tuple[pathlib.Path, lerobot.LeRobotSaveStats]:
    out = tmp_path_factory.mktemp('robot-lerobot') / 'so100'
    return out, lerobot.save_as_lerobot(robot_dir, out, fps=10, frames_per_file=2500)


# --- RLDS -> LeRobot -> RLDS ------------------------------------------------------------------


def test_rlds_to_lerobot_to_rlds_gives_back_every_field(robot_lerobot):
    out, stats = robot_lerobot
    spec = lerobot_data.robot_spec()
    source = lerobot_data.make_episodes(spec)
    back = read(load(out))
    assert (stats.episodes, stats.frames) == (110, sum(spec.lengths))
    assert len(back) == len(source) == 110
    assert len(list((out / 'data').rglob('*.parquet'))) > 1  # Several files.
    for index, (want, got) in enumerate(zip(source, back, strict=True)):
        got_leaves = leaves(got)
        for key, value in leaves(want).items():
            assert np.asarray(got_leaves[key]).dtype == np.asarray(value).dtype, (index, key)
            np.testing.assert_array_equal(got_leaves[key], value, err_msg=f'{index} {key}')
        # What the reader adds: the time of each frame, the episode index, the frame rate.
        length = spec.lengths[index]
        np.testing.assert_array_equal(
            got[types.STEPS][types.TIMESTAMP], (np.arange(length) / 10).astype(np.float32)
        )
        assert (int(got[types.EPISODE_INDEX]), float(got[types.FPS])) == (index, 10.0)
    assert stats.not_written == [
        'is_first: not written (the episode boundaries say it)',
        'is_last: not written (the episode boundaries say it)',
    ]


def test_the_rl_semantics_are_in_lerobots_terms(robot_lerobot):
    out, _ = robot_lerobot
    spec = lerobot_data.robot_spec()
    info = json.loads((out / 'meta' / 'info.json').read_text())
    assert info['features']['next.reward'] == {'dtype': 'float32', 'shape': [1], 'names': None}
    assert info['features']['next.done'] == {'dtype': 'bool', 'shape': [1], 'names': None}
    assert info['features']['discount']['dtype'] == 'float32'
    table = pq.read_table(out / 'data', columns=['episode_index', 'next.done'])
    done = table.column('next.done').to_numpy(zero_copy_only=False)
    ends = np.cumsum(spec.lengths) - 1
    np.testing.assert_array_equal(done[ends], spec.terminated)
    assert done.sum() == sum(spec.terminated)  # Never before an episode's last frame.
    tasks = pq.read_table(out / 'meta' / 'tasks.parquet').column('task').to_pylist()
    assert sorted(tasks) == sorted(lerobot_data.TASKS)
    record = json.loads((out / 'meta' / 'rlds_reverb.json').read_text())
    assert record['episode_fields'] == {
        'rlds/episode_metadata/episode_id': {'dtype': 'int64', 'shape': []},
        'rlds/episode_metadata/operator': {'dtype': 'string', 'shape': []},
    }


def test_video_mode_frames_come_back_within_the_recorded_psnr(robot_dir, tmp_path):
    spec = lerobot_data.robot_spec()
    stats = lerobot.save_as_lerobot(
        robot_dir, tmp_path / 'video', fps=10, cameras='video', split='train[:30]'
    )
    source = lerobot_data.make_episodes(spec)[:30]
    back = read(load(tmp_path / 'video'))
    record = json.loads((tmp_path / 'video' / 'meta' / 'rlds_reverb.json').read_text())
    for camera in ('front', 'wrist'):
        want = np.concatenate([e[types.STEPS]['observation']['images'][camera] for e in source])
        got = np.concatenate([e[types.STEPS]['observation']['images'][camera] for e in back])
        error = float(np.sum((got.astype(np.int64) - want) ** 2))
        psnr = compute_psnr(error, want.size)
        name = f'observation.images.{camera}'
        assert psnr == pytest.approx(stats.psnr_db[name], abs=1e-9) and psnr > 20
        assert record['video'][name]['psnr_db'] == round(psnr, 3)
    for want, got in zip(source, back, strict=True):  # Everything else exactly.
        np.testing.assert_array_equal(
            got[types.STEPS][types.ACTION], want[types.STEPS][types.ACTION]
        )
        np.testing.assert_array_equal(
            got[types.STEPS][types.IS_TERMINAL], want[types.STEPS][types.IS_TERMINAL]
        )


# --- LeRobot -> RLDS -> LeRobot -----------------------------------------------------------------


def _same_table(a: pathlib.Path, b: pathlib.Path) -> None:
    left, right = pq.read_table(a), pq.read_table(b)
    assert left.schema.remove_metadata() == right.schema.remove_metadata(), a.name
    assert left.equals(right), a.name


def test_lerobot_image_mode_through_rlds_gives_back_lerobots_own_files(tmp_path):
    stats = lerobot.save_as_lerobot(FIXTURES / 'image-v3', tmp_path / 'out')
    for relative in ('meta/info.json', 'meta/stats.json'):
        assert json.loads((tmp_path / 'out' / relative).read_text()) == json.loads(
            (FIXTURES / 'image-v3' / relative).read_text()
        )
    for relative in (DATA, EPISODES, 'meta/tasks.parquet'):  # PNG bytes, statistics, tasks.
        _same_table(FIXTURES / 'image-v3' / relative, tmp_path / 'out' / relative)
    assert pq.ParquetFile(tmp_path / 'out' / DATA).metadata.num_row_groups == 10
    assert stats.not_written[-1] == 'discount: not written (the LeRobot reader made it up)'


def test_lerobot_video_mode_through_rlds_keeps_frame_data_tasks_and_boundaries(tmp_path):
    lerobot.save_as_lerobot(FIXTURES / 'video-v3', tmp_path / 'out', cameras='video')
    ours, theirs = tmp_path / 'out', FIXTURES / 'video-v3'
    _same_table(theirs / DATA, ours / DATA)
    _same_table(theirs / 'meta/tasks.parquet', ours / 'meta/tasks.parquet')
    columns = ['episode_index', 'tasks', 'length', 'dataset_from_index', 'dataset_to_index']
    assert pq.read_table(ours / EPISODES, columns=columns).equals(
        pq.read_table(theirs / EPISODES, columns=columns)
    )
    for a, b in zip(read(load(ours)), read(load(theirs)), strict=True):
        for key, value in leaves(b).items():
            if 'images' not in key:
                np.testing.assert_array_equal(leaves(a)[key], value, err_msg=key)


def test_lerobot_through_an_rlds_tfds_copy_and_back(tmp_path):
    rlds_reverb.save_as_rlds(FIXTURES / 'image-v3', tmp_path / 'copy' / '1.0.0')
    lerobot.save_as_lerobot(tmp_path / 'copy' / '1.0.0', tmp_path / 'out')
    ours, theirs = tmp_path / 'out', FIXTURES / 'image-v3'
    for column in (
        'observation.images.front',
        'observation.state',
        'next.reward',
        'next.done',
        'task_index',
        'index',
    ):
        assert (
            pq.read_table(ours / DATA)
            .column(column)
            .equals(pq.read_table(theirs / DATA).column(column))
        )
    _same_table(theirs / 'meta/tasks.parquet', ours / 'meta/tasks.parquet')
    info = json.loads((ours / 'meta' / 'info.json').read_text())
    assert 'discount' in info['features']  # The copy holds load's discount as data.
    assert info['fps'] == 10  # From the copy's `fps` episode field.


# --- the files' structure, against LeRobot's own ------------------------------------------


def test_the_files_have_lerobots_structure(tmp_path):
    ours = tmp_path / 'out'
    lerobot.save_as_lerobot(
        lerobot_checked.as_dataset(lerobot_data.make_episodes(lerobot_checked.SPEC)),
        ours,
        fps=10,
        cameras='video',
    )
    theirs = FIXTURES / 'video-v3'
    info, their_info = (json.loads((d / 'meta' / 'info.json').read_text()) for d in (ours, theirs))
    assert list(info) == list(their_info)
    assert (
        info['features']['observation.images.front']
        == their_info['features']['observation.images.front']
    )
    assert list(info['features'])[-5:] == [
        'timestamp',
        'frame_index',
        'episode_index',
        'index',
        'task_index',
    ]
    ours_schema, their_schema = pq.read_schema(ours / DATA), pq.read_schema(theirs / DATA)
    for field in their_schema:
        assert ours_schema.field(field.name).type == field.type, field.name
    hf, their_hf = (json.loads(s.metadata[b'huggingface']) for s in (ours_schema, their_schema))
    for name, feature in their_hf['info']['features'].items():
        assert hf['info']['features'][name] == feature
    episodes, their_episodes = pq.read_schema(ours / EPISODES), pq.read_schema(theirs / EPISODES)
    for field in their_episodes:
        assert episodes.field(field.name).type == field.type, field.name
    lerobots = [n for n in their_episodes.names if not n.startswith('stats/')]
    assert [n for n in episodes.names if not n.startswith('stats/')][: len(lerobots)] == lerobots
    assert pq.read_schema(ours / 'meta/tasks.parquet').metadata.keys() == {b'pandas'}
    assert (
        pq.ParquetFile(ours / DATA).metadata.num_row_groups
        == pq.read_table(ours / EPISODES).num_rows
    )


def test_cartpole_steps_become_frames_with_next_done_and_next_reward(cartpole_dir, tmp_path):
    with pytest.raises(LeRobotExportError, match=r'does not say its frame rate.*pass fps='):
        lerobot.save_as_lerobot(cartpole_dir, tmp_path / 'none')
    stats = lerobot.save_as_lerobot(
        cartpole_dir, tmp_path / 'out', fps=50, default_task='balance the pole'
    )
    source = read(load(cartpole_dir))
    assert stats.frames == sum(len(e[types.STEPS][types.IS_FIRST]) for e in source)
    table = pq.read_table(tmp_path / 'out' / 'data')
    ends = np.cumsum([len(e[types.STEPS][types.IS_FIRST]) for e in source]) - 1
    np.testing.assert_array_equal(
        table.column('next.done').to_numpy()[ends],
        [e[types.STEPS][types.IS_TERMINAL][-1] for e in source],
    )
    np.testing.assert_array_equal(
        table.column('next.reward').to_numpy(),
        np.concatenate([e[types.STEPS][types.REWARD] for e in source]),
    )
    assert pq.read_table(tmp_path / 'out' / 'meta/tasks.parquet').column('task').to_pylist() == [
        'balance the pole'
    ]
    back = read(load(tmp_path / 'out'))
    for want, got in zip(source, back, strict=True):
        for key, value in leaves(want).items():
            np.testing.assert_array_equal(leaves(got)[key], value, err_msg=key)


# --- refusals ---------------------------------------------------------------------------------


def _one_episode(**steps) -> tf.data.Dataset:
    length = 3
    base = {
        types.OBSERVATION: {'state': np.zeros((length, 2), np.float32)},
        types.ACTION: np.zeros((length, 2), np.float32),
        types.REWARD: np.zeros(length, np.float32),
        types.DISCOUNT: np.ones(length, np.float32),
        types.IS_FIRST: np.arange(length) == 0,
        types.IS_LAST: np.arange(length) == length - 1,
        types.IS_TERMINAL: np.zeros(length, bool),
    }
    base.update(steps)
    return episodes_lib.from_whole_episodes(tf.data.Dataset.from_tensors({types.STEPS: base}))


@pytest.mark.parametrize(
    'steps, match',
    [
        (
            {'camera': np.zeros((3, 16, 24, 3), np.uint8)},
            r"'camera' has frames of 16x24.*at least 32 wide",
        ),
        ({'camera': np.zeros((3, 33, 64, 3), np.uint8)}, r'odd sizes'),
        ({'camera': np.zeros((3, 32, 32, 4), np.uint8)}, r'4 channel\(s\)'),
        ({'words': np.full((3, 2), b'x')}, r"'words' holds strings of shape \[2\]"),
        ({'index': np.zeros(3, np.int64)}, r"'index' would be LeRobot feature 'index'"),
        ({types.OBSERVATION: {'a.b': np.zeros(3, np.float32)}}, r'"\." or "/"'),
    ],
    ids=['too-small', 'odd', 'rgba', 'string-array', 'reserved', 'dotted'],
)
def test_what_lerobot_cannot_hold_is_refused_by_name(tmp_path, steps, match):
    with pytest.raises(LeRobotExportError, match=match):
        lerobot.save_as_lerobot(_one_episode(**steps), tmp_path / 'out', fps=10, cameras='video')
    assert not (tmp_path / 'out').exists()


def test_video_mode_refuses_timestamps_that_are_not_frame_over_fps(tmp_path):
    camera = np.zeros((3, 32, 32, 3), np.uint8)
    late = np.array([0.0, 0.1, 0.25], np.float32)
    episodes = _one_episode(camera=camera, timestamp=late)
    with pytest.raises(
        LeRobotExportError,
        match=r'Episode 0: its timestamp field differs .* 0\.050000 s \(at frame 2\)',
    ):
        lerobot.save_as_lerobot(episodes, tmp_path / 'video', fps=10, cameras='video')
    lerobot.save_as_lerobot(episodes, tmp_path / 'image', fps=10)  # Image mode keeps them.
    (back,) = read(load(tmp_path / 'image'))
    np.testing.assert_array_equal(back[types.STEPS][types.TIMESTAMP], late)


def test_nested_rewards_and_arrays_come_back_with_their_shapes(tmp_path):
    rewards = {'task': np.arange(3, dtype=np.float32), 'effort': np.ones(3, np.float32)}
    matrix = np.arange(3 * 2 * 4, dtype=np.float64).reshape(3, 2, 4)
    column = np.arange(3, dtype=np.int16).reshape(3, 1)
    episodes = _one_episode(reward=rewards, matrix=matrix, column=column)
    lerobot.save_as_lerobot(episodes, tmp_path / 'out', fps=10)
    info = json.loads((tmp_path / 'out' / 'meta' / 'info.json').read_text())
    assert info['features']['reward.task']['shape'] == [1]
    assert info['features']['matrix'] == {'dtype': 'float64', 'shape': [8], 'names': None}
    (back,) = read(load(tmp_path / 'out'))
    steps = back[types.STEPS]
    np.testing.assert_array_equal(steps[types.REWARD]['task'], rewards['task'])
    np.testing.assert_array_equal(steps['matrix'], matrix)
    assert steps['column'].shape == (3, 1) and steps['column'].dtype == np.int16


def test_invalid_episodes_raise_or_are_skipped(tmp_path):
    bad = {types.IS_LAST: np.array([False, False, False])}
    episodes = _one_episode().concatenate(_one_episode(**bad)).concatenate(_one_episode())
    with pytest.raises(
        LeRobotExportError, match=r'episode 1, step 2, field is_last, rule is_last_at_end'
    ):
        lerobot.save_as_lerobot(episodes, tmp_path / 'out', fps=10)
    stats = lerobot.save_as_lerobot(episodes, tmp_path / 'out', fps=10, on_invalid='skip')
    assert (stats.episodes, stats.skipped_episodes) == (2, 1)
    record = json.loads((tmp_path / 'out' / 'meta' / 'rlds_reverb.json').read_text())
    assert record['skipped_episodes'] == 1


def test_the_target_must_be_new_empty_or_a_lerobot_dataset_to_overwrite(tmp_path):
    (tmp_path / 'full').mkdir()
    (tmp_path / 'full' / 'keep.txt').write_text('mine')
    with pytest.raises(FileExistsError, match='not empty'):
        lerobot.save_as_lerobot(_one_episode(), tmp_path / 'full', fps=10)
    with pytest.raises(FileExistsError, match='replaces a LeRobot dataset only'):
        lerobot.save_as_lerobot(_one_episode(), tmp_path / 'full', fps=10, overwrite=True)
    with pytest.raises(ValueError, match='is \\(or holds\\) the source'):
        lerobot.save_as_lerobot(FIXTURES / 'image-v3', FIXTURES / 'image-v3', overwrite=True)
    lerobot.save_as_lerobot(_one_episode(), tmp_path / 'ds', fps=10)
    stats = lerobot.save_as_lerobot(FIXTURES / 'image-v3', tmp_path / 'ds', overwrite=True)
    assert stats.episodes == 10 and len(read(load(tmp_path / 'ds'))) == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ['ds', 'full']


def test_a_failed_write_leaves_the_target_as_it_was_and_says_what_was_kept(tmp_path):
    def fail_at_third(index, episode):
        tf.debugging.assert_less(index, tf.constant(2, tf.int64), message='the source broke')
        return episode

    whole = episodes_lib.to_whole_episodes(load(FIXTURES / 'image-v3'))
    broken = episodes_lib.from_whole_episodes(whole.enumerate().map(fail_at_third))
    with pytest.raises(tf.errors.InvalidArgumentError, match='the source broke') as raised:
        lerobot.save_as_lerobot(broken, tmp_path / 'out', fps=10, frames_per_file=10)
    assert not (tmp_path / 'out').exists()
    note = ' '.join(raised.value.__notes__)
    # Episode 0 (12 frames) filled segment 0; episode 1 was in the unfinished segment 1.
    assert '1 episode(s) in 1 complete segment(s) are kept in' in note
    assert 'run the same conversion again' in note
    with pytest.raises(LeRobotExportError, match=r'holds no episode') as raised:
        lerobot.save_as_lerobot(FIXTURES / 'image-v3', tmp_path / 'none', split='train[:0]')
    assert 'Nothing was written' in ' '.join(raised.value.__notes__)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['.out.lerobot-partial']


def test_workers_write_the_same_files_as_one_process(robot_dir, tmp_path):
    options = dict(fps=10, frames_per_file=700, split='train[:40]')
    one = lerobot.save_as_lerobot(robot_dir, tmp_path / 'one', **options)
    two = lerobot.save_as_lerobot(robot_dir, tmp_path / 'two', workers=2, **options)
    assert (one.episodes, one.frames) == (two.episodes, two.frames)
    assert lerobot_checked.hash_files(tmp_path / 'one') == lerobot_checked.hash_files(
        tmp_path / 'two'
    )
    assert len(list((tmp_path / 'two' / 'data').rglob('*.parquet'))) >= 3
    with pytest.raises(ValueError, match='workers > 1 needs a source each worker process can open'):
        lerobot.save_as_lerobot(_one_episode(), tmp_path / 'three', fps=10, workers=2)


def test_nothing_written_is_world_writable_even_under_umask_0(tmp_path):
    import os
    import stat

    previous = os.umask(0)
    try:
        lerobot.save_as_lerobot(FIXTURES / 'video-v3', tmp_path / 'out', cameras='video')
    finally:
        os.umask(previous)
    entries = [tmp_path / 'out', *(tmp_path / 'out').rglob('*')]
    assert [p for p in entries if p.lstat().st_mode & stat.S_IWOTH] == []
    assert stat.S_IMODE((tmp_path / 'out').stat().st_mode) == 0o775
    assert stat.S_IMODE((tmp_path / 'out' / 'videos').stat().st_mode) == 0o775
