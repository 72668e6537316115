"""No entry point leaves files in the temp directory (issue 20, "Nothing left behind").

Each test points `tempfile.tempdir` at an empty folder, runs entry points in this process and
checks that the folder is empty afterwards. The Beam pipeline has its own test
(`tests/distribute/test_beam.py::test_a_push_leaves_nothing_in_the_temp_dir`).
"""

from __future__ import annotations

import tempfile

import pytest
import reverb

import adders
import rlds_reverb
from rlds_reverb.learn import sampling
from rlds_reverb.read.loading import load
from rlds_reverb.serve import server, tables
from rlds_reverb.transform import items


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """An empty folder that `tempfile` hands out for the length of the test."""
    folder = tmp_path / 'tmp'
    folder.mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(folder))
    return folder


def _list_left(folder) -> list[str]:
    """The files left in `folder`; for AutoGraph's, the function it converted."""
    left = []
    for path in sorted(folder.rglob('*')):
        text = path.read_text(errors='replace') if path.name.startswith('__autograph') else ''
        converted = text[text.find('tf__') :][:80] if 'tf__' in text else ''
        left.append(f'{path.relative_to(folder)} {converted}'.strip())
    return left


def test_reading_converting_and_the_adders_leave_no_temp_files(cartpole_dir, scratch):
    episodes = load(cartpole_dir)
    rlds_reverb.validate(episodes, on_invalid='report')
    steps = sum(1 for _ in rlds_reverb.convert_rlds_to_trajectories(episodes).batch(256))
    assert steps > 0
    # (`gae` with a `value_fn` lets AutoGraph convert the user's function: TF writes its
    # generated source to the temp dir and removes it when the process exits.)
    for transform in (adders.n_step(3, 0.99), adders.stack_frames(2)):
        assert sum(1 for _ in episodes.apply(transform)) == 12
    assert _list_left(scratch) == []


@pytest.mark.slow  # Push, exports, a recording, a copy, a report: 30-60 s.
def test_the_commands_leave_no_temp_files(cartpole_dir, tmp_path, scratch, run_cli):
    episodes = load(cartpole_dir)
    signature = tables.signature_for(items.TwoStep(), episodes)
    running = server.start_server(
        [tables.uniform('replay', max_size=10**5, signature=signature)],
        checkpoint_dir=tmp_path / 'ckpt',
    )
    address = f'localhost:{running.port}'
    try:
        for args in (
            ('info', cartpole_dir),
            ('validate', cartpole_dir),
            ('push', cartpole_dir, '--server', address, '--table', 'replay', '--no-progress'),
            ('export', '--server', address, '--server-checkpoint-dir', tmp_path / 'ckpt',
             '--table', 'replay', '--no-progress', tmp_path / 'out' / '1.0.0'),
            ('record', '--episodes', 2, '--policy', 'scripted', '--max-episode-steps', 50,
             '--no-progress', tmp_path / 'rec' / '1.0.0'),
            ('convert', cartpole_dir, tmp_path / 'copy' / '1.0.0', '--no-progress'),
            ('report', cartpole_dir, '--out', tmp_path / 'report.html', '--no-progress'),
            ('status', '--server', address),
        ):  # fmt: skip
            code, _, err = run_cli(*args)
            assert code == 0, (args, err)
            assert _list_left(scratch) == [], args[0]
        checkpoint = reverb.Client(address).checkpoint()
        code, _, err = run_cli(
            'export', '--checkpoint', checkpoint, '--table', 'replay', '--no-progress',
            tmp_path / 'again' / '1.0.0',
        )  # fmt: skip
        assert code == 0, err
        assert _list_left(scratch) == []
        learner = sampling.LearnerDataset(
            address, 'replay', data_spec=signature, sequence_length=None, batch_size=8
        )
        next(iter(learner.as_dataset()))
    finally:
        running.stop()
    assert _list_left(scratch) == []
