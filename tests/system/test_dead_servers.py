"""Dead servers: every entry point names an address where nothing answers, at once.

Each case calls one entry point with its default timeouts (60 s for a push) on a port
where nothing listens (a port bound and closed again), and checks that the error names
the address and says what to check, within `_NAMED_WITHIN_S`: a correctness bound, not a
benchmark (Reverb's server-info call alone waited its whole deadline before). The probe's
own unit (`table_info.probe_server`) and the writers' waits (`engines.wait_on_server`) are
tested here too; a server killed mid-push is in `tests/reliability/test_faults.py`.
"""

from __future__ import annotations

import socket
import time

import pytest
import reverb

from rlds_reverb import cli
from rlds_reverb.core import errors
from rlds_reverb.export import reverb_export
from rlds_reverb.learn import sampling
from rlds_reverb.read.loading import load
from rlds_reverb.serve import checkpoints, table_info, tables
from rlds_reverb.transform import convert, items
from rlds_reverb.write import engines, observers, resume
from rlds_reverb.write import push as writers
from tests import builders

_TABLE = 'replay'
# The defect took 33 to 66 s; 15 s leaves room for a loaded host (2 cores, 8 test runs).
_NAMED_WITHIN_S = 15.0
_NAMED = 'No Reverb server answered at {address} within 3 s'


def _free_port() -> int:
    """A port nothing listens on: bound, then closed again."""
    with socket.socket() as sock:
        sock.bind(('localhost', 0))
        return sock.getsockname()[1]


@pytest.fixture
def dead_address() -> str:
    return f'localhost:{_free_port()}'


@pytest.fixture(scope='module')
def live_address():
    server = reverb.Server([tables.uniform(_TABLE, max_size=10)], port=None)
    yield f'localhost:{server.port}'
    server.stop()


@pytest.fixture(scope='module')
def source(tmp_path_factory):
    episodes = [builders.episode(6) for _ in range(3)]
    return builders.write_tfds(tmp_path_factory.mktemp('dead'), episodes, name='small')


def _push(source, address):
    writers.push(load(source), address, _TABLE)


def _push_client(source, address):
    writers.push(load(source), reverb.Client(address), _TABLE)


def _push_resumable(source, address):
    resume.push_resumable(load(source), address, _TABLE)


def _push_with_beam(source, address):
    pipeline = pytest.importorskip('rlds_reverb.distribute.pipeline')  # The `beam` extra.
    pipeline.push_with_beam(source, [address], _TABLE)


def _learner(source, address):
    spec = tables.signature_for(items.TwoStep(), load(source))
    sampling.LearnerDataset(address, _TABLE, data_spec=spec, batch_size=2, sequence_length=None)


def _export(source, address):
    reverb_export.export_table(
        source.parent.parent / 'out' / '1.0.0',
        _TABLE,
        server=address,
        server_checkpoint_dir=source.parent.parent,
    )


def _checkpoint(source, address):
    checkpoints.checkpoint_server(reverb.Client(address))


def _observer_signature(source, address):
    observers.ReverbAddTrajectoryObserver(reverb.Client(address), _TABLE, 2).get_table_signature()


@pytest.mark.parametrize(
    'entry_point',
    [
        _push,
        _push_client,
        _push_resumable,
        _push_with_beam,
        _learner,
        _export,
        _checkpoint,
        _observer_signature,
    ],
)
def test_every_entry_point_names_a_dead_server_at_once(entry_point, source, dead_address):
    started = time.monotonic()
    with pytest.raises(errors.ReverbConnectionError) as info:
        entry_point(source, dead_address)
    elapsed = time.monotonic() - started
    assert elapsed < _NAMED_WITHIN_S, f'{entry_point.__name__} took {elapsed:.1f} s'
    message = str(info.value)
    assert _NAMED.format(address=dead_address) in message
    assert 'Check the address, that the server is running' in message


@pytest.mark.parametrize(
    'argv',
    [
        ['push', '{source}', '--server', '{address}', '--no-progress'],
        ['push', '{source}', '--server', '{address}', '--resume', '--no-progress'],
        ['push', '{source}', '--server', '{address}', '--checkpoint-every', '1'],
        [
            'export',
            '--server',
            '{address}',
            '--server-checkpoint-dir',
            '{checkpoints}',
            '--table',
            _TABLE,
            '--no-progress',
            '{out}',
        ],  # fmt: skip
    ],
    ids=['push', 'push-resume', 'push-checkpoint-every', 'export'],
)
def test_every_command_names_a_dead_server_at_once(argv, source, dead_address, run_cli):
    root = source.parent.parent
    fill = dict(source=source, address=dead_address, out=root / 'cli_out', checkpoints=root)
    started = time.monotonic()
    code, _, err = run_cli(*[arg.format(**fill) for arg in argv])
    assert time.monotonic() - started < _NAMED_WITHIN_S
    assert code == cli.EXIT_ERROR
    assert f'error: {_NAMED.format(address=dead_address)}' in err
    assert 'Traceback' not in err


def test_probe_passes_a_live_server_and_names_a_dead_one(live_address, dead_address):
    table_info.probe_server(live_address)
    with pytest.raises(errors.ReverbConnectionError, match='Connection refused'):
        table_info.probe_server(dead_address)
    table_info.probe_server('unix:/no/such/socket')  # Not 'host:port': left to Reverb.


def test_probe_is_skipped_behind_a_grpc_proxy(dead_address, monkeypatch):
    monkeypatch.setenv('grpc_proxy', 'http://proxy.invalid:3128')
    table_info.probe_server(dead_address)  # gRPC would not connect directly: not probed.


def test_a_host_that_does_not_answer_is_named_after_the_probe_timeout():
    # 192.0.2.0/24 (TEST-NET-1) is never routed: the connection neither succeeds nor is
    # refused, so only the probe's deadline ends it.
    started = time.monotonic()
    with pytest.raises(errors.ReverbConnectionError, match=r'192\.0\.2\.1:8000 within 0\.5 s'):
        table_info.probe_server('192.0.2.1:8000', timeout_ms=500)
    assert time.monotonic() - started < 3


def test_a_live_server_that_does_not_answer_in_time_is_told_apart(dead_address):
    # A listening socket that never speaks gRPC: the connection is accepted, the
    # server-info call gets no answer.
    with socket.socket() as listener:
        listener.bind(('localhost', 0))
        listener.listen()
        address = f'localhost:{listener.getsockname()[1]}'
        with pytest.raises(errors.ReverbConnectionError, match='accepted a connection but did'):
            table_info.fetch_server_info(reverb.Client(address), timeout_ms=1_000)


@pytest.mark.parametrize('timeout_ms', [60_000, None])
def test_waits_end_at_a_dead_server_within_a_slice(dead_address, timeout_ms):
    calls = []

    def wait(timeout_ms: int) -> None:  # A flush whose confirmations never come.
        calls.append(timeout_ms)
        time.sleep(timeout_ms / 1000)
        raise reverb.errors.DeadlineExceededError('no confirmations')

    started = time.monotonic()
    with pytest.raises(errors.ReverbConnectionError, match=dead_address):
        engines.wait_on_server(wait, address=dead_address, timeout_ms=timeout_ms)
    assert calls == [engines.WAIT_SLICE_MS]
    assert time.monotonic() - started < 2


def test_waits_on_a_live_server_take_the_whole_timeout(live_address):
    calls = []

    def wait(timeout_ms: int) -> None:  # A table whose rate limiter blocks inserts.
        calls.append(timeout_ms)
        time.sleep(timeout_ms / 1000)
        raise reverb.errors.DeadlineExceededError('no confirmations')

    started = time.monotonic()
    with pytest.raises(reverb.errors.DeadlineExceededError):
        engines.wait_on_server(wait, address=live_address, timeout_ms=2_500)
    assert time.monotonic() - started >= 2.4
    # Slices until the deadline: the server answers each probe in between.
    assert len(calls) == 3
    assert calls[:2] == [engines.WAIT_SLICE_MS] * 2


@pytest.mark.parametrize('kind', ['trajectory', 'episode'])
def test_an_observer_whose_server_died_names_it_on_close(source, kind):
    # TF-Agents' observers wait without a timeout for their items, forever once the server
    # is gone; ours wait as long, but name a dead server, and release the writer.
    episodes = load(source)
    signature = tables.signature_for(items.TwoStep(), episodes)
    server = reverb.Server([tables.uniform(_TABLE, max_size=100, signature=signature)])
    client = reverb.Client(f'localhost:{server.port}')
    if kind == 'trajectory':
        observer = observers.ReverbAddTrajectoryObserver(client, _TABLE, 2)
        waits = [observer.close]
    else:  # Its items are created when the episode ends (`reset`); `close` drops the cache.
        observer = observers.ReverbAddEpisodeObserver(client, _TABLE, 100)
        waits = [observer.reset, observer.close]
    trajectories = list(convert.convert_rlds_to_trajectories(episodes).take(4).as_numpy_iterator())
    observer(trajectories[0])  # The writer is made while the server lives.
    server.stop()
    for trajectory in trajectories[1:]:
        observer(trajectory)  # Items the dead server never confirms.
    for wait in waits:
        started = time.monotonic()
        with pytest.raises(errors.ReverbConnectionError, match=client.server_address):
            wait()
        assert time.monotonic() - started < _NAMED_WITHIN_S
    observer.close()  # Released: closing again does nothing.


def test_an_observer_whose_server_died_before_its_first_step_names_it(source):
    # Creating Reverb's writer for a stopped in-process server could crash the process; the
    # observer names the dead server at the first step instead.
    episodes = load(source)
    signature = tables.signature_for(items.TwoStep(), episodes)
    server = reverb.Server([tables.uniform(_TABLE, max_size=100, signature=signature)])
    client = reverb.Client(f'localhost:{server.port}')
    observer = observers.ReverbAddTrajectoryObserver(client, _TABLE, 2)
    trajectory = next(convert.convert_rlds_to_trajectories(episodes).as_numpy_iterator())
    server.stop()
    started = time.monotonic()
    with pytest.raises(errors.ReverbConnectionError, match=client.server_address):
        observer(trajectory)
    assert time.monotonic() - started < _NAMED_WITHIN_S
    observer.close()
