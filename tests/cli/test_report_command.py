"""`rlds-reverb report`: the page it writes, where, its progress, and its errors."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rlds_reverb.examples import cartpole
from tests import builders


def _figures(page: str) -> dict[str, str]:
    """The key figures shown on a report page, by their `data-figure` name."""
    return dict(re.findall(r'data-figure="([\w-]+)" data-value="[^"]*">([^<]*)<', page))


def test_report_writes_the_figures_info_prints(cartpole_dir, tmp_path, run_cli):
    out = tmp_path / 'cartpole.html'
    code, printed, err = run_cli('report', cartpole_dir, '--out', out)
    assert code == 0, err
    assert printed == f'Wrote {out}: 12 episodes, 2970 steps (all valid).\n'
    assert 'episodes=12' in err  # The progress bar, on stderr.
    figures = _figures(out.read_text())
    code, info, _ = run_cli('info', cartpole_dir)
    assert code == 0
    assert f'episodes: {figures["episodes"]}\nsteps: {figures["steps"]}\n' in info
    assert f'terminated: {figures["terminated"]}  truncated: {figures["truncated"]}' in info
    assert f'return: mean {figures["mean-return"]}, std {figures["std-return"]}' in info
    assert f'episode length: mean {figures["mean-length"]}, min' in info


def test_report_writes_report_html_in_the_working_directory(
    cartpole_dir, tmp_path, monkeypatch, run_cli
):
    monkeypatch.chdir(tmp_path)
    code, printed, err = run_cli('report', cartpole_dir, '--split', 'train[:2]', '--no-progress')
    assert code == 0, err
    assert err == ''
    assert printed.startswith('Wrote report.html: 2 episodes')
    assert [p.name for p in tmp_path.iterdir()] == ['report.html']
    assert '<title>' in (tmp_path / 'report.html').read_text()


def test_report_of_invalid_data_shows_the_problems(tmp_path, run_cli):
    bad = builders.episode(4, discount=np.array([1.0, 1.0, 3.0, 1.0], np.float32))
    data = builders.write_tfds(tmp_path, [builders.episode(3), bad], name='broken')
    code, printed, _ = run_cli('report', data, '--out', tmp_path / 'r.html', '--no-progress')
    assert code == 0  # The page was written; it lists the problems.
    assert printed.endswith('2 episodes, 7 steps (1 invalid).\n')
    page = (tmp_path / 'r.html').read_text()
    assert 'discount_in_0_1' in page and '1 invalid episodes' in page


def test_missing_data_is_a_clear_error_and_writes_nothing(tmp_path, run_cli):
    code, printed, err = run_cli('report', tmp_path / 'nowhere', '--out', tmp_path / 'r.html')
    assert (code, printed) == (2, '')
    assert err.startswith('rlds-reverb report: error: ') and 'the path does not exist' in err
    assert 'Traceback' not in err
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_is_no_dataset_is_a_clear_error(tmp_path, run_cli):
    (tmp_path / 'empty').mkdir()
    code, _, err = run_cli('report', tmp_path / 'empty', '--out', tmp_path / 'r.html')
    assert code == 2
    assert err.startswith('rlds-reverb report: error: ') and 'empty' in err
    assert not (tmp_path / 'r.html').exists()


@pytest.mark.parametrize(
    ('out', 'message'),
    [
        ('.', 'it is a directory. Give a file path'),
        ('missing/r.html', 'its directory does not exist. Give a path in an existing directory'),
        ('file/r.html', "file' is not a directory. Give a path in an existing directory"),
    ],
)
def test_an_unwritable_out_is_a_clear_error_before_any_reading(
    cartpole_dir, tmp_path, run_cli, out, message
):
    (tmp_path / 'file').write_text('')
    code, _, err = run_cli('report', cartpole_dir, '--out', tmp_path / out)
    assert code == 2
    assert f"rlds-reverb report: error: Cannot write the report to '{tmp_path / out}" in err
    assert message in err
    assert 'steps' not in err  # No progress: nothing was read.
    # Checked first: even a source that does not exist is not looked at.
    code, _, err = run_cli('report', tmp_path / 'nowhere', '--out', tmp_path / out)
    assert code == 2 and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['file']


def test_report_without_data_shows_the_embedded_dataset(tmp_path, monkeypatch, run_cli):
    # Generates the embedded dataset (250 episodes) in tmp_path: about 5 s here.
    monkeypatch.setenv(cartpole.DATA_DIR_ENV, str(tmp_path / 'data'))
    out = tmp_path / 'embedded.html'
    code, printed, err = run_cli('report', '--out', out, '--no-progress')
    assert code == 0, err
    episodes = cartpole.DEFAULT_NUM_EPISODES
    assert printed.startswith(f'Wrote {out}: {episodes} episodes')
    page = out.read_text()
    assert _figures(page)['episodes'] == str(episodes)
    assert 'the embedded CartPole dataset' in page
    stats = cartpole.read_stats(cartpole.dataset_dir(tmp_path / 'data'))
    assert _figures(page)['terminated'] == str(stats['num_terminated'])


def test_report_help_names_its_options(run_cli, capsys):
    with pytest.raises(SystemExit):
        run_cli('report', '--help')
    helped = capsys.readouterr().out
    assert '--out' in helped and 'embedded CartPole dataset' in helped
