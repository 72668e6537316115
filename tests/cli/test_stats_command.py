"""`rlds-reverb stats`: the tables it prints, the file it writes and reuses, and its errors."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

import rlds_reverb
from rlds_reverb.check.statistics import compute_statistics


@pytest.fixture
def cartpole_copy(cartpole_dir, tmp_path) -> pathlib.Path:
    """The CartPole fixture, copied: the statistics file is written beside its data."""
    return pathlib.Path(shutil.copytree(cartpole_dir, tmp_path / 'cartpole'))


def test_stats_prints_tables_writes_beside_the_data_and_reuses_them(cartpole_copy, run_cli):
    code, printed, err = run_cli('stats', cartpole_copy)
    assert code == 0, err
    saved = cartpole_copy / 'rlds_reverb_statistics-train.json'
    assert printed.endswith(f'\nWrote {saved}.\n') and saved.is_file()
    assert 'steps' in err  # The progress bar, on stderr.
    expected = compute_statistics(rlds_reverb.load(cartpole_copy))
    assert printed.startswith(expected.format())
    header = '  dim' + ''.join(
        f'{label:>13}' for label in ('mean', 'std', 'min', 'q01', 'q99', 'max')
    )
    assert f'\n{header}\n' in printed
    code, again, err = run_cli('stats', cartpole_copy, '--no-progress')
    assert code == 0 and err == ''
    assert again.endswith(f'\nReused {saved} (its fingerprint matches the data).\n')
    assert again.startswith(expected.format())
    code, refreshed, _ = run_cli('stats', cartpole_copy, '--refresh', '--no-progress')
    assert code == 0 and refreshed.endswith(f'\nWrote {saved}.\n')


def test_stats_options_and_json(cartpole_dir, tmp_path, run_cli):
    out = tmp_path / 'stats.json'
    code, printed, err = run_cli(
        'stats',
        cartpole_dir,
        '--out',
        out,
        '--fields',
        'observation,reward',
        '--quantiles',
        '0.05,0.5,0.95',
        '--json',
        '--no-progress',
    )
    assert code == 0, err
    document = json.loads(printed)
    assert document == json.loads(out.read_text())
    assert list(document['fields']) == ['observation', 'reward']
    assert document['options']['quantiles'] == [0.05, 0.5, 0.95]
    found = compute_statistics(
        rlds_reverb.load(cartpole_dir),
        fields=['observation', 'reward'],
        quantiles=[0.05, 0.5, 0.95],
    )
    np.testing.assert_allclose(document['fields']['observation']['mean'], found['observation'].mean)
    assert not list(cartpole_dir.glob('rlds_reverb_statistics*'))  # --out: nothing beside.
    code, printed, _ = run_cli(
        'stats',
        cartpole_dir,
        '--out',
        out,
        '--fields',
        'observation,reward',
        '--quantiles',
        '0.05,0.5,0.95',
        '--no-progress',
    )
    assert code == 0 and 'Reused' in printed and 'q05' in printed and 'q50' in printed


@pytest.mark.parametrize(
    ('arguments', 'message'),
    [
        (['--quantiles', '0.5,1.5'], 'each of quantiles=1.5 is not valid'),
        (['--fields', 'velocity'], "'velocity', which the steps do not hold"),
        (['--sketch-capacity', '3'], 'sketch_capacity=3 is not valid'),
        (['--out', '/nonexistent/dir/s.json'], 'Cannot write statistics'),
    ],
)
def test_bad_options_are_one_line_errors(cartpole_dir, run_cli, arguments, message):
    code, printed, err = run_cli('stats', cartpole_dir, '--no-progress', *arguments)
    assert (code, printed) == (2, '')
    assert err.startswith('rlds-reverb stats: error: ') and message in err, err
    assert 'Traceback' not in err


def test_unparsable_quantiles_and_missing_data(tmp_path, run_cli, capsys):
    with pytest.raises(SystemExit) as exited:
        run_cli('stats', tmp_path, '--quantiles', 'low,high')
    assert exited.value.code == 2
    assert 'comma-separated list of numbers' in capsys.readouterr().err
    code, printed, err = run_cli('stats', tmp_path / 'nowhere')
    assert (code, printed) == (2, '')
    assert 'the path does not exist' in err and 'Traceback' not in err
