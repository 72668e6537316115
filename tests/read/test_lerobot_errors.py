"""LeRobot datasets that `load` refuses: older formats, corrupt or inconsistent files; memory.

Each case damages a copy of a fixture LeRobot 0.6.1 wrote (tests/read/test_lerobot.py) in
one way and checks the message names the file and the column or key. Errors found in the
metadata (and in the data files' footers) are raised by `load`; errors found while an
episode is read come out of the `tf.data` iterator (a `tf.errors.OpError` carrying the
same message, as for every reader that reads lazily).
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core.errors import LeRobotFormatError
from rlds_reverb.read.loading import load

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'lerobot' / 'datasets'
DATA = 'data/chunk-000/file-000.parquet'
EPISODES = 'meta/episodes/chunk-000/file-000.parquet'
FRONT_MP4 = 'videos/observation.images.front/chunk-000/file-000.mp4'


def copy(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    return pathlib.Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def read(episodes: tf.data.Dataset) -> list[dict]:
    return list(episodes_lib.to_whole_episodes(episodes).as_numpy_iterator())


def edit_info(root: pathlib.Path, edit) -> None:
    path = root / 'meta' / 'info.json'
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info))


def edit_table(root: pathlib.Path, relative: str, edit) -> None:
    path = root / relative
    pq.write_table(edit(pq.read_table(path)), path)


# --- versions ---------------------------------------------------------------------------


@pytest.mark.parametrize('version', ['v2.1', 'v2.0', 'v1.6'])
def test_older_formats_are_refused_with_the_upgrade_command(tmp_path, version):
    root = copy(tmp_path, 'image-v3')
    edit_info(root, lambda info: info.update(codebase_version=version))
    with pytest.raises(LeRobotFormatError) as raised:
        load(root)
    message = str(raised.value)
    assert f'is format {version}' in message and 'reads format v3.0' in message
    assert 'python -m lerobot.scripts.convert_dataset_v21_to_v30' in message
    assert f'--root={root} --push-to-hub=false' in message
    assert 'a v2.0 dataset must first be converted to v2.1' in message


def test_a_v1_dataset_is_refused_with_its_upgrade_path(tmp_path):
    """Format v1.x, as LeRobot wrote it: meta_data/info.json and Arrow files, no meta/."""
    root = tmp_path / 'pusht'
    (root / 'meta_data').mkdir(parents=True)
    (root / 'data' / 'train').mkdir(parents=True)
    (root / 'meta_data' / 'info.json').write_text('{"codebase_version": "v1.6", "fps": 10}')
    (root / 'meta_data' / 'episode_data_index.safetensors').write_bytes(b'')
    (root / 'data' / 'train' / 'data-00000-of-00001.arrow').write_bytes(b'')
    with pytest.raises(LeRobotFormatError) as raised:
        load(root)
    message = str(raised.value)
    assert 'is format v1.6 (meta_data/info.json codebase_version)' in message
    assert 'reads format v3.0' in message
    assert 'a v1.x dataset (meta_data/) to v2.0 before that' in message
    assert 'lerobot/common/datasets/v2/convert_dataset_v1_to_v2.py' in message
    assert 'convert_dataset_v20_to_v21.py' in message and 'convert_dataset_v21_to_v30' in message


@pytest.mark.slow  # Two CLI subprocesses.
def test_the_command_line_names_the_format_and_the_upgrade(tmp_path, run_cli):
    """A v2.1 dataset as LeRobot 0.2/0.3 wrote it (JSON lines metadata, a file per episode)."""
    root = tmp_path / 'so100'
    (root / 'meta').mkdir(parents=True)
    (root / 'data' / 'chunk-000').mkdir(parents=True)
    info = {'codebase_version': 'v2.1', 'fps': 30, 'total_episodes': 1, 'features': {}}
    (root / 'meta' / 'info.json').write_text(json.dumps(info))
    (root / 'meta' / 'episodes.jsonl').write_text('{"episode_index": 0, "length": 1}\n')
    (root / 'meta' / 'tasks.jsonl').write_text('{"task_index": 0, "task": "pick"}\n')
    pq.write_table(pa.table({'index': [0]}), root / 'data/chunk-000/episode_000000.parquet')
    for command in ('info', 'validate'):
        code, out, err = run_cli(command, root, subprocess=True)
        assert code == 2 and 'Traceback' not in err, (command, err)
        assert f'rlds-reverb {command}: error: The LeRobot dataset {root} is format v2.1' in err
        assert f'convert_dataset_v21_to_v30 --repo-id=<any/name> --root={root}' in err


def test_a_later_v3_minor_version_is_read(tmp_path):
    root = copy(tmp_path, 'image-v3')
    edit_info(root, lambda info: info.update(codebase_version='v3.1'))
    assert len(read(load(root))) == 10


# --- metadata ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    'damage, match',
    [
        (
            lambda r: (r / 'meta/info.json').write_text('{not json'),
            r'info\.json is not readable JSON',
        ),
        (lambda r: edit_info(r, lambda i: i.pop('fps')), r"info\.json: 'fps' is None"),
        (lambda r: edit_info(r, lambda i: i.pop('codebase_version')), 'no codebase_version'),
        (
            lambda r: edit_info(r, lambda i: i.update(total_frames=171)),
            r'hold 170 frames.*total_frames 171',
        ),
        (
            lambda r: edit_info(r, lambda i: i.update(total_episodes=11)),
            r"column 'episode_index'.*total_episodes",
        ),
        (lambda r: (r / 'meta/tasks.parquet').unlink(), r'tasks\.parquet is missing'),
        (
            lambda r: shutil.rmtree(r / 'meta/episodes'),
            r'meta/episodes holds no chunk-\*/file-\*\.parquet',
        ),
        (
            lambda r: edit_table(r, EPISODES, lambda t: t.drop(['dataset_to_index'])),
            r"file-000\.parquet has no column 'dataset_to_index'",
        ),
    ],
    ids=[
        'info-not-json',
        'no-fps',
        'no-version',
        'total-frames',
        'total-episodes',
        'no-tasks',
        'no-episodes',
        'no-to-index',
    ],
)
def test_broken_metadata_is_named(tmp_path, damage, match):
    root = copy(tmp_path, 'image-v3')
    damage(root)
    with pytest.raises(LeRobotFormatError, match=match):
        load(root)


def _set_column(table: pa.Table, name: str, values) -> pa.Table:
    index = table.column_names.index(name)
    return table.set_column(index, name, pa.array(values, table.schema.field(name).type))


def test_lengths_that_disagree_with_the_frame_ranges_are_named(tmp_path):
    root = copy(tmp_path, 'image-v3')
    lengths = [12, 1, 64, 7, 23, 3, 31, 2, 18, 10]
    edit_table(root, EPISODES, lambda t: _set_column(t, 'length', lengths))
    with pytest.raises(
        LeRobotFormatError, match=r'episode 9 has length 10 but frames 161 \.\. 170'
    ):
        load(root)


def test_episodes_out_of_order_are_named(tmp_path):
    root = copy(tmp_path, 'image-v3')
    edit_table(root, EPISODES, lambda t: t.take(pa.array(list(range(10))[::-1])))
    with pytest.raises(LeRobotFormatError, match=r"column 'episode_index' holds \[9, 8, 7"):
        load(root)


# --- data files ---------------------------------------------------------------------------


def test_a_missing_data_file_is_named(tmp_path):
    root = copy(tmp_path, 'image-v3')
    (root / DATA).unlink()
    with pytest.raises(LeRobotFormatError, match=r'data/\*/\*\.parquet: 0 files\) hold 0 frames'):
        load(root)


def test_a_missing_column_is_named_with_its_file(tmp_path):
    root = copy(tmp_path, 'image-v3')
    edit_table(root, DATA, lambda t: t.drop(['action']))
    with pytest.raises(
        LeRobotFormatError, match=re.escape(f"{root / DATA} has no column 'action'")
    ):
        load(root)


def test_a_column_of_the_wrong_shape_is_named_with_its_file(tmp_path):
    root = copy(tmp_path, 'image-v3')
    edit_info(root, lambda info: info['features']['action'].update(shape=[6]))
    with pytest.raises(
        tf.errors.OpError,
        match=r"file-000\.parquet: column 'action' \(episode 0.*holds 84 values for 12 frames",
    ):
        read(load(root))


def test_rows_that_are_not_the_episode_the_table_says_are_named(tmp_path):
    root = copy(tmp_path, 'image-v3')

    def shift(table: pa.Table) -> pa.Table:
        values = table.column('episode_index').to_numpy().copy()
        values[12] = 0  # Episode 1's only frame, marked as episode 0's.
        return _set_column(table, 'episode_index', values)

    edit_table(root, DATA, shift)
    with pytest.raises(
        tf.errors.OpError, match=r"column 'episode_index' holds 0 at row 12.*episode 1"
    ):
        read(load(root))


def test_a_corrupt_png_is_named_with_its_column_and_episode(tmp_path):
    root = copy(tmp_path, 'image-v3')

    def damage(table: pa.Table) -> pa.Table:
        images = table.column('observation.images.wrist').to_pylist()
        images[13]['bytes'] = b'not a png'
        return _set_column(table, 'observation.images.wrist', images)

    edit_table(root, DATA, damage)
    with pytest.raises(
        tf.errors.OpError,
        match=r"column 'observation.images.wrist', frame 0 of episode 2: not a readable image",
    ):
        read(load(root))


def test_next_done_before_the_last_frame_is_named(tmp_path):
    root = copy(tmp_path, 'image-v3')

    def damage(table: pa.Table) -> pa.Table:
        done = table.column('next.done').to_pylist()
        done[3] = True
        return _set_column(table, 'next.done', done)

    edit_table(root, DATA, damage)
    with pytest.raises(
        tf.errors.OpError,
        match=r"column 'next.done' is set on frame 3 of episode 0, which has 12 frames",
    ):
        read(load(root))


# --- videos -------------------------------------------------------------------------------


def test_a_missing_video_is_named(tmp_path):
    root = copy(tmp_path, 'video-v3')
    (root / FRONT_MP4).unlink()
    with pytest.raises(LeRobotFormatError, match=re.escape(f'{root / FRONT_MP4} is missing')):
        load(root)
    # Without that camera the dataset reads.
    assert len(read(load(root, step_fields=['observation/state']))) == 6


def test_a_video_too_short_for_the_timestamps_is_named(tmp_path):
    from rlds_reverb.export import lerobot_video as video_writer
    from rlds_reverb.read import lerobot_video

    root = copy(tmp_path, 'video-v3')
    path = root / FRONT_MP4
    cursor = lerobot_video.VideoCursor('front', (48, 64, 3))
    frames = cursor.read(FIXTURES / 'video-v3' / FRONT_MP4, np.arange(50) / 10, episode=0)
    cursor.close()
    writer = video_writer.VideoWriter(path, fps=10, shape=(48, 64, 3), camera='front')
    writer.add(frames)  # 50 of the file's 118 frames: episode 2 (frames 16 .. 77) is cut.
    writer.close()
    with pytest.raises(
        tf.errors.OpError, match=r'ends at 4\.9\d* s, before the frame of episode 2 at 5\.0'
    ):
        read(load(root))


def test_timestamps_that_miss_the_video_frames_are_named(tmp_path):
    root = copy(tmp_path, 'video-v3')
    column = 'videos/observation.images.front/from_timestamp'
    edit_table(
        root,
        EPISODES,
        lambda t: _set_column(t, column, (t.column(column).to_numpy() + 0.05).tolist()),
    )
    with pytest.raises(
        tf.errors.OpError,
        match=r"no frame of camera 'observation.images.front' within 0.0001 s of 0.050000 s \(episode 0, frame 0",
    ):
        read(load(root))


# --- memory -------------------------------------------------------------------------------

# Peak resident set of this process's own memory (VmHWM, KiB): not ru_maxrss, which on Linux
# keeps the peak of the parent that spawned the process.
_MEMORY_PROBE = """
import re, sys
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.read.loading import load
steps = 0
for episode in episodes_lib.to_episode_tensors(load(sys.argv[1])).as_numpy_iterator():
    steps += len(episode['reward'])
status = open('/proc/self/status').read()
print(steps, re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))
"""


def _write_long(directory: pathlib.Path, count: int, cameras: str) -> pathlib.Path:
    from rlds_reverb.export import lerobot
    from tests import lerobot_checked, lerobot_data

    spec = lerobot_data.RobotSpec((300,) * count, (False,) * count, seed=1)
    episodes = lerobot_checked.as_dataset([lerobot_data.make_episode(spec, 0)] * count)
    lerobot.save_as_lerobot(episodes, directory, fps=10, cameras=cameras, frames_per_file=3000)
    return directory


@pytest.mark.slow
@pytest.mark.parametrize('cameras', ['image', 'video'])
def test_peak_memory_is_flat_in_the_number_of_episodes(tmp_path, cameras, subprocess_env):
    """Reading 4x the episodes (of 300 frames, two cameras) raises peak RSS by < 25 MB."""
    peaks = {}
    for count in (20, 80):
        directory = _write_long(tmp_path / f'{count}', count, cameras)
        out = subprocess.run(
            [sys.executable, '-c', _MEMORY_PROBE, str(directory)],
            env=subprocess_env,
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout.split()
        assert int(out[0]) == count * 300
        peaks[count] = int(out[1]) / 1024  # MiB
    frame_bytes = 300 * (48 * 64 + 32 * 40) * 3  # One episode's frames.
    data_mib = 60 * frame_bytes / 2**20  # What holding 60 more episodes' frames takes.
    assert peaks[80] - peaks[20] < min(25.0, data_mib), (peaks, data_mib)
