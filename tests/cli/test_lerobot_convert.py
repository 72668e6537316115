"""`rlds-reverb convert ... --to lerobot`: the command, its options, and a killed run resumed.

A conversion killed with SIGKILL (the manifest then lists some complete segments) and run
again finishes with files identical to an uninterrupted run's, no episode written twice or
lost (docs/lerobot.md, "Resuming").
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import time

import pytest

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.read.loading import load
from tests import lerobot_checked, lerobot_data

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'lerobot' / 'datasets'


def test_convert_to_lerobot_image_and_video(run_cli, tmp_path):
    code, out, _ = run_cli(
        'convert', FIXTURES / 'image-v3', tmp_path / 'image', '--to', 'lerobot', '--no-progress'
    )
    assert code == 0
    assert 'Converted 10 episodes (170 frames, 3 tasks) from' in out
    assert f'to the LeRobot dataset {tmp_path / "image"}' in out
    assert 'discount: not written (the LeRobot reader made it up)' in out
    code, out, _ = run_cli(
        'convert',
        FIXTURES / 'image-v3',
        tmp_path / 'video',
        '--to',
        'lerobot',
        '--video',
        '--no-progress',
    )
    assert code == 0
    assert 'observation.images.front: AV1 video, PSNR' in out and 'worst frame' in out
    code, out, _ = run_cli('validate', tmp_path / 'video')
    assert code == 0 and 'valid 10, invalid 0' in out


@pytest.mark.parametrize(
    'args, message',
    [
        (
            ['--to', 'lerobot', '--episodes-per-shard', '5'],
            '--episodes-per-shard: not an option of --to lerobot',
        ),
        (['--video'], '--video: not an option of --to rlds'),
        (
            ['--to', 'lerobot', '--encoded-frames', 'all'],
            '--encoded-frames: not an option of --to lerobot',
        ),
        (['--to', 'lerobot', '--fps', '2.5'], 'whole number of frames per second'),
    ],
)
def test_options_of_the_other_format_are_refused(run_cli, tmp_path, args, message):
    code, _, err = run_cli(
        'convert', FIXTURES / 'image-v3', tmp_path / 'out', *args, subprocess=True
    )
    assert code != 0 and message in err
    assert not (tmp_path / 'out').exists()


def _manifest_segments(partial: pathlib.Path) -> int:
    try:
        return len(json.loads((partial / '.rlds_reverb' / 'manifest.json').read_text())['segments'])
    except (OSError, ValueError):
        return 0


@pytest.mark.slow  # A program converted, then killed mid-run and resumed: about 19 s.
def test_a_killed_conversion_resumes_to_the_same_files(run_cli, tmp_path):
    source = lerobot_data.write(tmp_path / 'robot', lerobot_data.robot_spec(60, seed=5))
    args = ['--to', 'lerobot', '--fps', '10', '--frames-per-file', '200', '--no-progress']
    code, _, _ = run_cli('convert', source, tmp_path / 'whole', *args)
    assert code == 0
    target = tmp_path / 'killed'
    partial = tmp_path / '.killed.lerobot-partial'
    process = run_cli.start('convert', source, target, *args)
    deadline = time.monotonic() + 240
    while (
        _manifest_segments(partial) < 2 and process.poll() is None and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert process.poll() is None, 'the conversion ended before it could be killed'
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    kept = _manifest_segments(partial)
    assert kept >= 2 and not target.exists()
    code, out, _ = run_cli('convert', source, target, *args)
    assert code == 0 and 'kept from an interrupted run' in out
    assert not partial.exists()
    assert lerobot_checked.hash_files(target) == lerobot_checked.hash_files(tmp_path / 'whole')
    episodes = list(episodes_lib.to_whole_episodes(load(target)).as_numpy_iterator())
    assert [int(e['episode_index']) for e in episodes] == list(range(60))
