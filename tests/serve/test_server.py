"""Seeding, checkpointing and restoring servers; the `serve` and `push` commands."""

from __future__ import annotations

import signal

import numpy as np
import portpicker
import pytest
import reverb

from rlds_reverb import cli
from rlds_reverb.core import errors
from rlds_reverb.serve import checkpoints, tables
from rlds_reverb.transform import items
from rlds_reverb.write import seed
from tests import builders, expected
from tests.cases import n_step_cases, two_step_cases
from tests.cases.episodes import THREE_EPISODES
from tests.reverb_tables import as_lists, read_items


def _three_episodes():
    """THREE_EPISODES (tests/cases/episodes.py) as an RLDS dataset."""
    return builders.case_dataset(THREE_EPISODES)


def _case(cases, name):
    (case,) = (c for c in cases if c['testcase_name'] == name)
    return case


def test_checkpoint_round_trip_restores_the_same_items(tmp_path):
    first = seed.seed_server(
        _three_episodes(), table='replay', preset='fifo', checkpoint_dir=tmp_path
    )
    assert (first.outcome, first.items) == (seed.SeedOutcome.PUSHED, 5)
    assert checkpoints.find_latest_checkpoint(tmp_path) is not None
    first.server.stop()
    second = seed.seed_server(
        _three_episodes(), table='replay', preset='fifo', checkpoint_dir=tmp_path
    )
    try:
        assert (second.outcome, second.items) == (seed.SeedOutcome.RESTORED, 5)
        client = reverb.Client(second.address)
        restored = [as_lists(s.data) for s in read_items(client, 'replay')]
    finally:
        second.server.stop()
    want = expected.two_step_items(_case(two_step_cases.CASES, 'three_episodes'))
    assert [np.ravel(r.observation).tolist() for r in restored] == [
        np.ravel(item['observation']).astype(float).tolist() for item in want
    ]
    assert [r.step_type for r in restored] == [item['step_type'].tolist() for item in want]


def test_restoring_under_another_table_name_raises(tmp_path):
    first = seed.seed_server(_three_episodes(), table='replay', checkpoint_dir=tmp_path)
    first.server.stop()
    with pytest.raises(errors.TableError, match="Could not restore .* table 'other'"):
        seed.seed_server(_three_episodes(), table='other', checkpoint_dir=tmp_path)


def test_seed_prioritized_with_n_step_priorities():
    result = seed.seed_server(
        _three_episodes(),
        preset='prioritized',
        item=items.NStep(**_case(n_step_cases.CASES, 'three_episodes')['params']),
        priority=lambda batch: abs(batch['n_step_return']) + 1.0,
    )
    try:
        info = reverb.Client(result.address).server_info()['replay']
        assert info.current_size == result.items == 5
    finally:
        result.server.stop()


def test_unknown_preset_raises():
    with pytest.raises(ValueError, match="table_preset='lifo' is not valid"):
        tables.make_table('lifo', 't', signature=None, max_size=10)


def _start(run_cli, args, log_path):
    """Starts `serve`; its stderr (Reverb's logs) goes to a file so no pipe fills up."""
    with open(log_path, 'a') as log:
        return run_cli.start(*args, stderr=log)


def _read_until_serving(process) -> list[str]:
    lines = []
    for line in process.stdout:
        lines.append(line.strip())
        if line.startswith('Serving on'):
            return lines
    raise AssertionError(f'serve exited early: {lines}')


def _stop(process) -> str:
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    return out


@pytest.mark.slow
def test_cli_serve_push_and_restore(cartpole_dir, tmp_path, run_cli):
    port = portpicker.pick_unused_port()
    serve_args = [
        'serve',
        str(cartpole_dir),
        '--port',
        str(port),
        '--table-preset',
        'prioritized',
        '--item',
        'two-step',
        '--max-size',
        '100000',
        '--checkpoint-dir',
        str(tmp_path / 'checkpoints'),
    ]
    serving = _start(run_cli, serve_args, tmp_path / 'serve.log')
    try:
        lines = _read_until_serving(serving)
        assert lines[-2].startswith('Pushed ') and 'checkpoint written to' in lines[-2]
        seeded = int(lines[-2].split()[1])
        code, out, err = run_cli(
            'push',
            cartpole_dir,
            '--server',
            f'localhost:{port}',
            '--table',
            'replay',
            '--workers',
            '2',
            subprocess=True,
        )
        assert code == 0, err
        assert f'Pushed {seeded} items' in out
        assert 'steps' in err  # The tqdm bar.
        size = reverb.Client(f'localhost:{port}').server_info()['replay'].current_size
        assert size == 2 * seeded
    finally:
        assert 'Stopped.' in _stop(serving)
    restarted = _start(run_cli, serve_args, tmp_path / 'serve.log')
    try:
        lines = _read_until_serving(restarted)
        assert lines[-2].startswith(f"Restored table 'replay' ({seeded} items)")
    finally:
        _stop(restarted)


def test_cli_push_errors_are_one_clear_line(cartpole_dir, reverb_server, run_cli):
    address = f'localhost:{reverb_server.port}'
    code, _, err = run_cli('push', cartpole_dir, '--server', address, '--table', 'x')
    assert code == cli.EXIT_ERROR
    assert "rlds-reverb push: error: Could not find table 'x'" in err
    assert 'Traceback' not in err


def test_cli_push_debug_shows_the_exception(cartpole_dir, run_cli):
    with pytest.raises(errors.ReverbConnectionError, match='localhost:1'):
        run_cli('push', cartpole_dir, '--server', 'localhost:1', '--timeout-ms', '500', '--debug')


def test_cli_push_rejects_bad_workers(cartpole_dir, run_cli):
    code, _, err = run_cli('push', cartpole_dir, '--server', 'localhost:1', '--workers', '0')
    assert code == cli.EXIT_ERROR
    assert '--workers=0 is not valid' in err


@pytest.mark.parametrize(
    ('options', 'message'),
    [
        (['--resume', '--workers', '2'], '--resume and --checkpoint-every need one writer'),
        (['--checkpoint-every', '0'], '--checkpoint-every=0 is not valid'),
    ],
)
def test_cli_push_rejects_bad_resume_options(cartpole_dir, run_cli, options, message):
    code, _, err = run_cli('push', cartpole_dir, '--server', 'localhost:1', *options)
    assert code == cli.EXIT_ERROR
    assert message in err


def test_a_server_without_a_checkpoint_dir_leaves_no_temp_dir(tmp_path, monkeypatch):
    """Reverb's own default checkpointer makes a temp dir it never removes; ours goes."""
    import tempfile

    from rlds_reverb.serve import server

    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    running = server.start_server([tables.uniform('replay', max_size=10)])
    try:
        (scratch,) = tmp_path.iterdir()
        reverb.Client(f'localhost:{running.port}').checkpoint()
        assert checkpoints.find_latest_checkpoint(scratch) is not None
    finally:
        running.stop()
    assert list(tmp_path.iterdir()) == []
