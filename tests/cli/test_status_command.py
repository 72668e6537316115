"""`rlds-reverb status`: a live server's tables, once, as JSON, watched while written to."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import threading
import time

import numpy as np
import pytest
import reverb

import rlds_reverb
from tests import builders
from tests.cases.episodes import THREE_EPISODES
from tests.reverb_tables import STATUS_ITEMS_PER_PUSH, make_status_tables

_CLEAR_SCREEN = '\x1b[H\x1b[2J'


@pytest.fixture(scope='module')
def server():
    running = reverb.Server(make_status_tables(), port=None)
    yield running
    running.stop()


@pytest.fixture
def address(server) -> str:
    """The server's address, every table emptied (its counters too)."""
    client = reverb.Client(f'localhost:{server.port}')
    for name in client.server_info():
        client.reset(name)
    return f'localhost:{server.port}'


def _push(address: str, tables: tuple[str, ...] = ('uniform', 'queue')) -> None:
    rlds_reverb.push(builders.case_dataset(THREE_EPISODES), address, list(tables))


def _block(out: str, table: str) -> str:
    return out.split(f"table '{table}'\n")[1].split('\n\n')[0]


def test_prints_each_tables_numbers(address, run_cli):
    _push(address)
    list(reverb.Client(address).sample('uniform', num_samples=3))
    code, out, err = run_cli('status', '--server', address)
    assert code == 0, err
    assert re.match(rf'Reverb server {address} at \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC: 6 ', out)
    uniform = _block(out, 'uniform')
    assert f'size          {STATUS_ITEMS_PER_PUSH} / 1,000 items' in uniform
    assert f'inserts       {STATUS_ITEMS_PER_PUSH} (0 removed since)' in uniform
    assert 'samples       3 (' in uniform
    assert 'cursor unbounded (MinSize)' in uniform
    queue = _block(out, 'queue')
    assert 'sampler       FIFO; remover FIFO; max times sampled 1' in queue
    assert 'cursor kept in [0, 100]' in queue
    assert 'prioritized (exponent 0.6)' in _block(out, 'prioritized')
    assert 'inserts blocked' not in out


def test_json_and_opt_in_priorities_leave_the_queue_alone(address, run_cli):
    _push(address)
    code, out, err = run_cli('status', '--server', address, '--json', '--priorities', '10')
    assert code == 0, err
    tables = {table['name']: table for table in json.loads(out)['tables']}
    assert tables['uniform']['samples'] == 10
    assert tables['uniform']['priorities']['samples'] == 10
    assert (tables['queue']['size'], tables['queue']['samples']) == (STATUS_ITEMS_PER_PUSH, 0)
    assert tables['queue']['priorities'] is None


def test_watch_shows_the_numbers_change_while_a_thread_writes(address, run_cli):
    client = reverb.Client(address)
    stop = threading.Event()

    def _write() -> None:
        value = 0
        while not stop.is_set():
            client.insert(np.float32(value), {'unsigned': 1.0})
            value += 1
            time.sleep(0.02)

    writer = threading.Thread(target=_write, daemon=True)
    writer.start()
    try:
        code, out, err = run_cli(
            'status', '--server', address, '--watch', '0.3', '--count', '3', '--json'
        )
    finally:
        stop.set()
        writer.join(10)
    assert code == 0, err
    snapshots = [json.loads(line) for line in out.splitlines()]
    assert len(snapshots) == 3
    inserts = [
        next(t['inserts'] for t in s['tables'] if t['name'] == 'unsigned') for s in snapshots
    ]
    assert inserts[0] < inserts[1] < inserts[2], inserts
    assert len({s['taken_at'] for s in snapshots}) == 3


def test_watch_off_a_terminal_prints_block_after_block(address, run_cli):
    code, out, err = run_cli('status', '--server', address, '--watch', '0.05', '--count', '2')
    assert code == 0, err
    assert out.count(f'Reverb server {address} at ') == 2
    assert _CLEAR_SCREEN not in out


@pytest.mark.slow  # A real program on a pseudo-terminal: about 10 s (TensorFlow's import).
def test_watch_on_a_terminal_clears_it_and_ctrl_c_ends_with_exit_0(address, run_cli):
    controller, terminal = pty.openpty()
    process = run_cli.start('status', '--server', address, '--watch', '0.2', stdout=terminal)
    os.close(terminal)
    seen, deadline = '', time.monotonic() + 120
    try:
        while seen.count('Reverb server') < 2:
            assert time.monotonic() < deadline, f'no second refresh: {seen!r}'
            if select.select([controller], [], [], 1.0)[0]:
                seen += os.read(controller, 65536).decode(errors='replace')
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(controller)
    assert process.returncode == 0, err
    assert seen.startswith(_CLEAR_SCREEN)
    assert seen.count(_CLEAR_SCREEN) >= 2
    assert 'Traceback' not in err


def test_dead_server_is_a_one_line_error(run_cli):
    with socket.socket() as sock:
        sock.bind(('localhost', 0))
        dead = f'localhost:{sock.getsockname()[1]}'
    start = time.monotonic()
    code, out, err = run_cli('status', '--server', dead, '--watch', '1')
    assert code == 2
    assert err.startswith(f'rlds-reverb status: error: No Reverb server answered at {dead}')
    assert 'Check the address, that the server is running' in err
    assert out == ''
    assert time.monotonic() - start < 15


@pytest.mark.parametrize(
    ('options', 'message'),
    [
        (['--count', '2'], '--count N counts the refreshes of --watch'),
        (['--watch', '0'], '--watch=0.0 is not valid'),
        (['--priorities', '-1'], '--priorities=-1 is not valid'),
        (['--timeout-ms', '0'], '--timeout-ms=0 is not valid'),
    ],
)
def test_bad_options_are_named(address, run_cli, options, message):
    code, _, err = run_cli('status', '--server', address, *options)
    assert code == 2
    assert message in err


def test_status_is_listed_in_help(run_cli, capsys):
    with pytest.raises(SystemExit):
        run_cli('--help')
    assert 'status' in capsys.readouterr().out
