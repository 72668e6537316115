"""Server faults: a server killed mid-push, restores from checkpoints, blocked rate limiters.

Every server is real and loopback-only; subprocesses are killed in `finally` blocks and
every wait is bounded.
"""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlds_reverb.core import errors
from rlds_reverb.serve import checkpoints, server, tables
from rlds_reverb.transform import items
from rlds_reverb.write import push as writers
from rlds_reverb.write import resume
from tests import builders

_HELPER = os.path.join(os.path.dirname(__file__), 'server_process.py')
_ABANDONED_PUSH = os.path.join(os.path.dirname(__file__), 'abandoned_push.py')
_PAUSED_PUSH = os.path.join(os.path.dirname(__file__), 'paused_push.py')
_TABLE = 'replay'
_EPISODES = 400
_LENGTH = 20
_CHUNK = 10
# A process whose server dies must exit within this long (correctness, not speed).
_EXITS_WITHIN_S = 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('localhost', 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _server_process(
    port: int, source, checkpoint_dir, env: dict[str, str], *, blocking: bool = False
):
    """A server subprocess; killed (SIGKILL) on exit if still alive."""
    process = subprocess.Popen(
        [sys.executable, _HELPER, '--port', str(port), '--source', str(source)]
        + ['--checkpoint-dir', str(checkpoint_dir)]
        + (['--blocking'] if blocking else []),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        line = process.stdout.readline()  # Bounded: the helper prints 'ready' or exits.
        assert line.strip() == 'ready', f'server did not start: {line!r}'
        yield process
    finally:
        process.kill()
        process.wait(timeout=30)


def _indexed_episode(index: int) -> dict:
    """An episode whose observation is (episode index, step index): items name their origin."""
    observation = np.stack([np.full(_LENGTH, index), np.arange(_LENGTH)], axis=1)
    ending = builders.TERMINATED if index % 2 == 0 else builders.TRUNCATED
    return builders.episode(_LENGTH, observation=observation.astype(np.float32), ending=ending)


@pytest.fixture(scope='module')
def indexed_dir(tmp_path_factory):
    episodes = (_indexed_episode(i) for i in range(_EPISODES))
    return builders.write_tfds(
        tmp_path_factory.mktemp('indexed'), episodes, name='indexed', episodes_per_shard=100
    )


def _drain(address: str, expected: int) -> list[tuple[int, int]]:
    """Samples every item once (FIFO, max_times_sampled=1); returns (episode, step) of each."""
    dataset = reverb.TrajectoryDataset.from_table_signature(
        address, _TABLE, max_in_flight_samples_per_worker=16, rate_limiter_timeout_ms=2_000
    )
    origins = []
    for sample in dataset.take(expected + 1).batch(1024):
        observation = sample.data.observation.numpy()[:, 0]  # First step of each item.
        origins += [(int(e), int(t)) for e, t in observation]
    return origins


def _wait_for_inserts(client: reverb.Client, at_least: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            inserted = resume.count_inserted(client, _TABLE, timeout_ms=2000)
            if inserted >= at_least:
                return inserted
        time.sleep(0.02)
    raise AssertionError(f'fewer than {at_least} items were inserted within {timeout_s} s')


@pytest.mark.slow
def test_killed_server_mid_push_then_resume_writes_every_episode_exactly_once(
    indexed_dir, tmp_path, run_cli, subprocess_env
):
    checkpoints = tmp_path / 'checkpoints'
    items_per_episode = _LENGTH - 1
    total = _EPISODES * items_per_episode
    port = _free_port()
    address = f'localhost:{port}'
    push_args = ['push', indexed_dir, '--server', address, '--table', _TABLE, '--no-progress']
    push_args += ['--checkpoint-every', _CHUNK]  # The default timeout: 60 s per wait.
    with _server_process(port, indexed_dir, checkpoints, subprocess_env) as process:
        push = run_cli.start(*push_args)  # A real program, interrupted by the kill.
        try:
            _wait_for_inserts(reverb.Client(address), total // 4, timeout_s=120)
            process.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            out, err = push.communicate(timeout=60)
            failed_after = time.monotonic() - killed
        finally:
            push.kill()
            push.wait(timeout=30)
    assert push.returncode == 2, out + err
    assert failed_after < _EXITS_WITHIN_S, err  # Named dead, not waited for (60 s).
    assert 'Traceback' not in err
    written = int(re.search(r'episodes 0\.\.(\d+) of the dataset are fully written', err)[1]) + 1
    assert 0 < written < _EPISODES, err

    port = _free_port()
    address = f'localhost:{port}'
    with _server_process(port, indexed_dir, checkpoints, subprocess_env):
        client = reverb.Client(address)
        restored = resume.count_inserted(client, _TABLE)
        assert restored % (_CHUNK * items_per_episode) == 0  # Whole chunks only.
        assert restored <= written * items_per_episode
        start, partial = resume.find_resume_point(restored, np.full(_EPISODES, items_per_episode))
        assert partial == 0  # Whole chunks only.
        resume_argv = ['push', indexed_dir, '--server', address, '--table', _TABLE]
        code, out, _ = run_cli(*resume_argv, '--no-progress', '--resume')
        assert code == 0, out
        assert f'resuming at episode {start} of {_EPISODES}.' in out
        assert f'({_EPISODES - start} episodes, ' in out
        assert resume.count_inserted(client, _TABLE) == total
        assert client.server_info()[_TABLE].current_size == total
        origins = _drain(address, total)
    expected = {(e, t) for e in range(_EPISODES) for t in range(items_per_episode)}
    assert len(origins) == total
    assert set(origins) == expected


def test_resume_point_names_the_partly_written_episode_and_its_items():
    assert resume.find_resume_point(8, np.array([3, 3, 3, 3])) == (2, 2)
    assert resume.find_resume_point(6, np.array([3, 3, 0, 3])) == (3, 0)
    with pytest.raises(resume.ResumeError, match='more than the 12 items of the whole dataset'):
        resume.find_resume_point(13, np.array([3, 3, 3, 3]))


def _ratio_table(signature) -> reverb.Table:
    return tables.uniform(
        _TABLE, max_size=1000, signature=signature, samples_per_insert=1.0, error_buffer=4.0
    )


def _count_samples(address: str, limit: int, timeout_ms: int = 1_000) -> int:
    dataset = reverb.TrajectoryDataset.from_table_signature(
        address, _TABLE, max_in_flight_samples_per_worker=1, rate_limiter_timeout_ms=timeout_ms
    )
    count = 0
    with contextlib.suppress(tf.errors.DeadlineExceededError):
        for _ in dataset.take(limit):
            count += 1
    return count


def _restore_and_sample(signature, checkpoint_dir, *, reset: bool, timeout_ms: int):
    """Restores a server from `checkpoint_dir`; returns (items held, samples of 3 served)."""
    restored = server.start_server(
        [_ratio_table(signature)], checkpoint_dir=checkpoint_dir, reset_rate_limiters=reset
    )
    try:
        address = f'localhost:{restored.port}'
        size = reverb.Client(address).server_info()[_TABLE].current_size
        return size, _count_samples(address, limit=3, timeout_ms=timeout_ms)
    finally:
        restored.stop()


@pytest.mark.slow
def test_restored_server_serves_samples_though_its_limiter_had_blocked_them(tmp_path):
    episodes = builders.rlds([builders.episode(4)])  # 3 items.
    signature = tables.signature_for(items.TwoStep(), episodes)
    first = server.start_server([_ratio_table(signature)], checkpoint_dir=tmp_path)
    try:
        address = f'localhost:{first.port}'
        writers.push(episodes, address, _TABLE, timeout_ms=5_000)
        sampled = _count_samples(address, limit=100)
        assert 0 < sampled < 100  # The ratio limiter stopped sampling.
        reverb.Client(address).checkpoint()
    finally:
        first.stop()
    # Restored as Reverb does it, the limiter's counters block every sample.
    assert _restore_and_sample(signature, tmp_path, reset=False, timeout_ms=1_000) == (3, 0)
    # By default start_server resets the counters first, and the restored table serves.
    assert _restore_and_sample(signature, tmp_path, reset=True, timeout_ms=5_000) == (3, 3)
    assert checkpoints.reset_rate_limiters(tmp_path) == []  # Nothing left to lower.


@pytest.mark.slow
def test_push_into_a_table_whose_limiter_blocks_inserts_times_out_clearly():
    episodes = builders.rlds([builders.episode(10) for _ in range(3)])
    signature = tables.signature_for(items.TwoStep(), episodes)
    blocking = server.start_server([_ratio_table(signature)])
    try:
        started = time.monotonic()
        with pytest.raises(errors.PushError, match=r'0 episode\(s\) were fully written') as info:
            writers.push(episodes, f'localhost:{blocking.port}', _TABLE, timeout_ms=2_000)
        assert time.monotonic() - started < 30
        assert info.value.episodes_written == 0
    finally:
        blocking.stop()


@pytest.mark.slow  # Waits out dead servers: 13-24 s per engine on a loaded host.
@pytest.mark.parametrize('engine', ['structured', 'trajectory', 'observer'])
def test_failed_push_to_a_server_that_then_dies_does_not_hang_later(
    indexed_dir, tmp_path, subprocess_env, engine
):
    # Reverb's writers wait in their destructor, without a timeout, for items the server has
    # not confirmed: a failed push must let go of its writer so that the garbage collector
    # (or the interpreter's exit) does not wait forever for a dead server.
    port = _free_port()
    with _server_process(port, indexed_dir, tmp_path, subprocess_env, blocking=True) as server:
        program = [sys.executable, _ABANDONED_PUSH, '--address', f'localhost:{port}']
        program += ['--source', str(indexed_dir), '--server-pid', str(server.pid)]
        done = subprocess.run(
            [*program, '--engine', engine],
            capture_output=True,
            text=True,
            env=subprocess_env,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    failure = 'observed 10 steps' if engine == 'observer' else 'episode(s) were fully written'
    assert failure in done.stdout
    assert done.stdout.rstrip().endswith('released')


@pytest.mark.slow
@pytest.mark.parametrize('engine', ['structured', 'trajectory'])
def test_a_push_whose_server_is_killed_exits_within_10_s_saying_what_landed(
    indexed_dir, tmp_path, subprocess_env, engine
):
    # The push waits (default timeout: 60 s) for confirmations a killed server never sends;
    # it must name the dead server, say exactly what landed, and exit, in seconds.
    port, whole = _free_port(), 5
    with _server_process(port, indexed_dir, tmp_path, subprocess_env) as server:
        program = [sys.executable, _PAUSED_PUSH, '--address', f'localhost:{port}']
        program += ['--source', str(indexed_dir), '--engine', engine]
        push = subprocess.Popen(
            [*program, '--pause-after', str(whole)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env,
        )
        try:
            assert push.stdout.readline().strip() == f'written {whole}'
            server.send_signal(signal.SIGKILL)
            server.wait(timeout=30)
            killed = time.monotonic()
            out, err = push.communicate('go on\n', timeout=120)
            exited_after = time.monotonic() - killed
        finally:
            push.kill()
            push.wait(timeout=30)
    assert push.returncode != 0, out + err
    assert exited_after < _EXITS_WITHIN_S, err
    assert f'No Reverb server answered at localhost:{port}' in err
    items = whole * (_LENGTH - 1)
    assert f'{whole} episode(s) were fully written ({items} items per table)' in err
    assert f'episode {whole} may be partly written' in err
