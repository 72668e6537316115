"""The `rlds-reverb` info and validate commands, run as real subprocesses."""

import pathlib

import numpy as np
import pytest
import tensorflow_datasets as tfds

from rlds_reverb import cli
from rlds_reverb.core import types
from rlds_reverb.data import tfds_writer
from tests import rlds_builders


def _run_in_process(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_info_prints_counts_spec_and_returns(cartpole_dir, capsys):
    code, out, err = _run_in_process(capsys, 'info', str(cartpole_dir))
    assert code == 0, err
    assert 'episodes: 12' in out
    assert 'terminated: 8  truncated: 4' in out
    assert 'return: mean' in out
    assert 'observation: float32[4]' in out


def test_validate_passes_on_valid_data(cartpole_dir, capsys):
    code, out, err = _run_in_process(capsys, 'validate', str(cartpole_dir))
    assert code == 0, err
    assert 'valid 12, invalid 0' in out


@pytest.fixture(scope='module')
def invalid_dir(tmp_path_factory) -> pathlib.Path:
    good = rlds_builders.make_episode(3)
    bad = rlds_builders.make_episode(4)
    bad[types.DISCOUNT] = np.array([1.0, 1.0, 3.0, 1.0], np.float32)
    features = tfds_writer.make_rlds_features(
        {
            types.OBSERVATION: tfds.features.Tensor(shape=(2,), dtype=np.float32),
            types.ACTION: tfds.features.Scalar(dtype=np.int64),
            types.REWARD: tfds.features.Scalar(dtype=np.float32),
            types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
        }
    )
    return tfds_writer.write_rlds_dataset(
        tmp_path_factory.mktemp('invalid') / 'broken' / '1.0.0',
        [{types.STEPS: steps} for steps in (good, bad, good)],
        features=features,
        name='broken',
    )


def test_validate_reports_problems_and_exits_non_zero(invalid_dir, capsys):
    code, out, _ = _run_in_process(capsys, 'validate', str(invalid_dir))
    assert code == 1
    assert 'episode 1, step 2, field discount, rule discount_in_0_1' in out
    assert 'valid 2, invalid 1' in out


def test_validate_raise_mode_gives_one_line_error_without_traceback(invalid_dir):
    result = rlds_builders.run_cli('validate', str(invalid_dir), '--on-invalid', 'raise')
    assert result.returncode == 1
    assert 'Episode 1 is invalid' in result.stderr
    assert 'Traceback' not in result.stderr


def test_missing_path_is_a_clear_error(tmp_path, capsys):
    code, _, err = _run_in_process(capsys, 'info', str(tmp_path / 'nowhere'))
    assert code == 2
    assert 'the path does not exist' in err


def test_debug_flag_raises_instead(tmp_path):
    with pytest.raises(FileNotFoundError, match='the path does not exist'):
        cli.main(['--debug', 'info', str(tmp_path / 'nowhere')])
