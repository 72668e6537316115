"""`rlds-reverb convert SRC OUT_DIR`: the copy, its progress and summary, and its errors.

Real TFDS directories in tmp (the embedded CartPole data, users' data written by TFDS's
own writer); the copy is checked with `rlds-reverb validate` and read back with TFDS and
`load`, episode by episode (tests/export/test_rlds_copy.py checks every source kind).
"""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow_datasets as tfds
import tree

import rlds_reverb
from rlds_reverb.cli import app
from rlds_reverb.read.loading import load
from tests import robot_data, users_data
from tests.rlds_copies import assert_same_episodes, read_both_ways


def test_convert_writes_the_same_episodes_and_validate_passes(cartpole_dir, tmp_path, run_cli):
    out = tmp_path / 'copy' / '1.0.0'
    code, stdout, stderr = run_cli('convert', cartpole_dir, out, '--episodes-per-shard', 4)
    assert code == app.EXIT_OK, stderr
    source = users_data.read_with_tfds(cartpole_dir)
    steps = sum(len(e['steps']['is_first']) for e in source)
    assert stdout.startswith(f'Converted {len(source)} episodes ({steps} steps) from ')
    assert f'to {out} in ' in stdout
    # The progress bar counts steps and episodes on stderr.
    assert f'{steps} steps' in stderr
    assert f'episodes={len(source)}' in stderr
    by_tfds, by_load = read_both_ways(out)
    assert_same_episodes(source, by_tfds)
    assert_same_episodes(source, by_load)
    info = tfds.builder_from_directory(str(out)).info
    assert (info.name, info.splits['train'].num_shards) == ('copy', 3)
    code, stdout, _ = run_cli('validate', out)
    assert code == app.EXIT_OK
    assert f'valid {len(source)}, invalid 0' in stdout


def test_convert_takes_name_split_and_no_progress(users_plain_dir, tmp_path, run_cli):
    out = tmp_path / 'part'
    code, _, stderr = run_cli(
        'convert', users_plain_dir, out, '--split', 'train[:10]', '--name', 'part_of_it',
        '--no-progress', '--unordered',
    )  # fmt: skip
    assert code == app.EXIT_OK, stderr
    assert stderr == ''
    info = tfds.builder_from_directory(str(out)).info
    assert (info.name, info.disable_shuffling) == ('part_of_it', False)
    assert_same_episodes(
        users_data.read_with_tfds(users_plain_dir, split='train[:10]'),
        users_data.read_with_tfds(out),
    )


def test_an_existing_out_dir_needs_overwrite(cartpole_dir, tmp_path, run_cli):
    out = tmp_path / 'out'
    assert run_cli('convert', cartpole_dir, out, '--no-progress')[0] == app.EXIT_OK
    code, stdout, stderr = run_cli('convert', cartpole_dir, out)
    assert code == app.EXIT_ERROR
    assert stdout == ''
    assert stderr.startswith(f'rlds-reverb convert: error: The output directory {out} exists')
    assert '--overwrite' in stderr
    assert len(stderr.splitlines()) == 1
    code, _, stderr = run_cli('convert', cartpole_dir, out, '--overwrite', '--no-progress')
    assert code == app.EXIT_OK, stderr


def test_an_unreadable_source_is_one_line(tmp_path, run_cli):
    code, stdout, stderr = run_cli('convert', tmp_path / 'missing', tmp_path / 'out')
    assert code == app.EXIT_ERROR
    assert stdout == ''
    assert stderr.startswith('rlds-reverb convert: error: ')
    assert 'missing' in stderr
    assert len(stderr.splitlines()) == 1
    assert not (tmp_path / 'out').exists()


def test_a_bad_episodes_per_shard_is_one_line(cartpole_dir, tmp_path, run_cli):
    code, _, stderr = run_cli('convert', cartpole_dir, tmp_path / 'out', '--episodes-per-shard', 0)
    assert code == app.EXIT_ERROR
    assert '--episodes-per-shard' in stderr


def test_a_corrupt_shard_says_nothing_landed(cartpole_dir, tmp_path, run_cli):
    # Flipped bytes keep the shard's size: the copy fails part way, on reading it.
    source = tmp_path / 'source'
    shutil.copytree(cartpole_dir, source)
    shard = sorted(source.glob('*.tfrecord-*'))[-1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(data)
    out = tmp_path / 'out'
    code, stdout, stderr = run_cli('convert', source, out, '--no-progress')
    assert code == app.EXIT_ERROR
    assert stdout == ''
    note, error = stderr.splitlines()
    assert note.startswith(f'rlds-reverb convert: Nothing was written to {out}')
    # Shards of 5, 5 and 2 episodes: the middle byte of the last one is in its second.
    assert 'the save stopped after 11 episode(s)' in note
    assert error.startswith('rlds-reverb convert: error: ')
    assert sorted(p.name for p in tmp_path.iterdir()) == ['source']


@pytest.mark.slow  # A real program: TensorFlow's import, about 10 s on a loaded host.
def test_convert_as_a_program_shows_progress_and_no_library_noise(cartpole_dir, tmp_path, run_cli):
    out = tmp_path / 'copy'
    code, stdout, stderr = run_cli('convert', cartpole_dir, out, subprocess=True)
    assert code == app.EXIT_OK, stderr
    assert stdout.startswith('Converted 12 episodes (')
    assert 'episodes=12' in stderr
    assert 'tensorflow' not in stderr.lower() and 'Gym' not in stderr
    assert (out / 'dataset_info.json').is_file()


_MINARI = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'minari'


@pytest.mark.parametrize('name', ['image-hdf5', 'image-arrow'])
def test_convert_writes_a_minari_dataset_as_rlds(name, tmp_path, run_cli):
    # Files written by minari 0.5.4 itself (tests/fixtures/minari): the copy holds the same
    # episodes (JPEG frames decoded to uint8; float64 at float32 precision, as TFDS stores it).
    dataset_id = json.loads((_MINARI / 'expected.json').read_text())[name]['dataset_id']
    source = _MINARI / 'datasets' / dataset_id
    out = tmp_path / 'copy' / '1.0.0'
    code, stdout, stderr = run_cli('convert', source, out)
    assert code == app.EXIT_OK, stderr
    assert stdout.startswith('Converted 6 episodes (')
    assert 'episodes=6' in stderr
    want = users_data.read_numpy(load(source))
    for got in read_both_ways(out):
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            tree.map_structure(_assert_stored_equal, a, b)
    assert run_cli('validate', out)[0] == app.EXIT_OK


def _assert_stored_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    if want.dtype == np.float64:
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_convert_keeps_encoded_frames_as_their_bytes(tmp_path_factory, tmp_path, run_cli):
    # JPEG and PNG cameras written by TFDS's own writer: the copy holds the same bytes, as
    # TFDS Image features (tests/export/test_rlds_copy_frames.py checks them in depth).
    source = robot_data.shared_dir(tmp_path_factory, robot_data.SMALL_SPEC)
    out = tmp_path / 'copy' / '1.0.0'
    code, _, stderr = run_cli('convert', source, out, '--encoded-frames', 'all', '--no-progress')
    assert code == app.EXIT_OK, stderr
    formats = rlds_reverb.list_frame_fields(source)
    assert formats and rlds_reverb.list_frame_fields(out) == formats
    encoded = [users_data.read_numpy(load(d, encoded_frames='all')) for d in (source, out)]
    assert_same_episodes(*encoded)
    assert_same_episodes(users_data.read_numpy(load(source)), users_data.read_numpy(load(out)))


def test_convert_names_a_source_without_encoded_frames(tmp_path, run_cli):
    # Minari stores raw arrays: its reader refuses encoded_frames by name.
    dataset_id = json.loads((_MINARI / 'expected.json').read_text())['image-hdf5']['dataset_id']
    out = tmp_path / 'copy'
    code, _, stderr = run_cli(
        'convert', _MINARI / 'datasets' / dataset_id, out, '--encoded-frames', 'all'
    )
    assert code != app.EXIT_OK
    assert 'encoded_frames' in stderr and 'minari' in stderr
    assert not out.exists()
