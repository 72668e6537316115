"""This project's LeRobot output, as LeRobot 0.6.1 itself read it (committed references).

`tests/lerobot_checked.py` writes two datasets (image and video mode, several files); in
LeRobot's scratch venv, `tests/fixtures/lerobot/check_written.py` loaded them with
`LeRobotDataset` (both video backends), compared every frame with the source, recomputed
the statistics with LeRobot's own functions, and committed what it read and its verdicts
(`reference/written-<mode>.npz|json`). Here the datasets are written again: their files
must be the very bytes LeRobot read (so its verdicts apply), and `rlds_reverb.load` must
read back what LeRobot returned.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.read.loading import load
from tests import lerobot_checked, lerobot_data

REFERENCE = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'lerobot' / 'reference'


@pytest.fixture(scope='module')
def written(tmp_path_factory) -> pathlib.Path:
    directory = tmp_path_factory.mktemp('checked')
    for mode in lerobot_checked.MODES:
        lerobot_checked.write_dataset(directory, mode)
    return directory


@pytest.mark.parametrize('mode', ['image', 'video'])
def test_the_files_are_the_ones_lerobot_read(written, mode):
    report = json.loads((REFERENCE / f'written-{mode}.json').read_text())
    assert lerobot_checked.hash_files(written / f'checked-{mode}') == report['files_sha256']
    assert len(report['files_sha256']) > 6  # Several data and video files.


@pytest.mark.parametrize('mode', ['image', 'video'])
def test_lerobot_loaded_every_frame_as_the_source_holds_it(mode):
    report = json.loads((REFERENCE / f'written-{mode}.json').read_text())
    frames = sum(
        lerobot_data.make_episodes(lerobot_checked.SPEC)[i]['steps']['is_first'].size
        for i in range(12)
    )
    assert report['total_frames'] == frames
    assert report['delta']['delta_timestamps loads, action[t] exact']
    backends = ['image'] if mode == 'image' else ['torchcodec', 'pyav']
    assert sorted(report['backends']) == sorted(backends)
    for verdict in report['backends'].values():
        assert verdict['frames'] == frames
        assert all(value for key, value in verdict.items() if key.endswith('exact'))
        assert verdict['index 0..n-1'] and verdict["stats equal to LeRobot's"]
        for camera in ('front', 'wrist'):
            key = f'observation.images.{camera}'
            assert verdict[f'{key} same as rlds_reverb.load'] == frames
            assert verdict[f'{key} same as source'] == (frames if mode == 'image' else 0)


@pytest.mark.parametrize('mode', ['image', 'video'])
def test_load_reads_what_lerobot_returned(written, mode):
    import hashlib

    ref = dict(np.load(REFERENCE / f'written-{mode}.npz'))
    episodes = list(
        episodes_lib.to_whole_episodes(load(written / f'checked-{mode}')).as_numpy_iterator()
    )
    steps = [e[types.STEPS] for e in episodes]
    np.testing.assert_array_equal(np.concatenate([s[types.ACTION] for s in steps]), ref['action'])
    np.testing.assert_array_equal(
        np.concatenate([s[types.REWARD] for s in steps]), ref['next.reward']
    )
    np.testing.assert_array_equal(
        np.concatenate([s[types.IS_TERMINAL] for s in steps]), ref['next.done']
    )
    np.testing.assert_array_equal(
        np.concatenate([s[types.TIMESTAMP] for s in steps]), ref['timestamp']
    )
    tasks = [t.decode() for s in steps for t in s[types.LANGUAGE_INSTRUCTION]]
    assert tasks == ref['task'].tolist()
    for backend in ['image'] if mode == 'image' else ['torchcodec', 'pyav']:
        for camera in ('front', 'wrist'):
            frames = np.concatenate([s['observation']['images'][camera] for s in steps])
            hashes = [hashlib.sha256(np.ascontiguousarray(f).tobytes()).hexdigest() for f in frames]
            np.testing.assert_array_equal(
                hashes, ref[f'sha256/{backend}/observation.images.{camera}']
            )


def test_the_recorded_psnr_is_what_lerobot_gets(written):
    report = json.loads((REFERENCE / 'written-video.json').read_text())
    record = json.loads((written / 'checked-video' / 'meta' / 'rlds_reverb.json').read_text())
    for camera in ('front', 'wrist'):
        key = f'observation.images.{camera}'
        measured = report['backends']['torchcodec'][f'{key} PSNR to source (dB)']
        assert record['video'][key]['psnr_db'] == pytest.approx(measured, abs=1e-3)
