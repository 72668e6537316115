"""The `rlds-reverb` info and validate commands, in-process and as a real program."""

import pathlib

import numpy as np
import pytest

from tests import builders


def test_info_prints_counts_spec_and_returns(cartpole_dir, run_cli):
    code, out, err = run_cli('info', cartpole_dir)
    assert code == 0, err
    assert 'episodes: 12' in out
    assert 'terminated: 8  truncated: 4' in out
    assert 'return: mean' in out
    assert 'observation: float32[4]' in out


def test_validate_passes_on_valid_data(cartpole_dir, run_cli):
    code, out, err = run_cli('validate', cartpole_dir)
    assert code == 0, err
    assert 'valid 12, invalid 0' in out


@pytest.fixture(scope='module')
def invalid_dir(tmp_path_factory) -> pathlib.Path:
    good = builders.episode(3)
    bad = builders.episode(4, discount=np.array([1.0, 1.0, 3.0, 1.0], np.float32))
    return builders.write_tfds(tmp_path_factory.mktemp('invalid'), (good, bad, good), name='broken')


def test_validate_reports_problems_and_exits_non_zero(invalid_dir, run_cli):
    code, out, _ = run_cli('validate', invalid_dir)
    assert code == 1
    assert 'episode 1, step 2, field discount, rule discount_in_0_1' in out
    assert 'valid 2, invalid 1' in out


@pytest.mark.slow
def test_validate_raise_mode_gives_one_line_error_without_traceback(invalid_dir, run_cli):
    code, _, err = run_cli('validate', invalid_dir, '--on-invalid', 'raise', subprocess=True)
    assert code == 1
    assert 'Episode 1 is invalid' in err
    assert 'Traceback' not in err


def test_missing_path_is_a_clear_error(tmp_path, run_cli):
    code, _, err = run_cli('info', tmp_path / 'nowhere')
    assert code == 2
    assert 'the path does not exist' in err


def test_debug_flag_raises_instead(tmp_path, run_cli):
    with pytest.raises(FileNotFoundError, match='the path does not exist'):
        run_cli('--debug', 'info', tmp_path / 'nowhere')
