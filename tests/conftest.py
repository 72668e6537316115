"""Shared pytest fixtures: real datasets in temporary directories, a real Reverb server, the CLI.

* `cartpole_dir`, `cartpole_episodes`: a small CartPole RLDS dataset, written once.
* `users_dir`, `users_plain_dir`: RLDS datasets shaped like users' data, written once by
  TFDS's own writer with its defaults (`tests/users_data.py`): shuffled, 100 or more
  episodes per shard, lengths 1 to 1,000; with images and strings, or plain tensors only.
* `reverb_server`, `reverb_client`: one in-process Reverb server with a FIFO-read table per
  case item (`tests/reverb_tables.py`), and a client of it with every table emptied.
* `run_cli`: runs the `rlds-reverb` command line in-process or as a program, and checks
  that the command left no listening port (in-process) and no process (as a program).
* `subprocess_env`: the environment for Python subprocesses of the tests.
* test-fast runs a sample of each large case table (`pytest_collection_modifyitems`).
* `make test` runs the suite on two pytest-xdist workers (`--dist loadgroup`); tests that
  must share a worker carry an `xdist_group` (`_XDIST_GROUPS`, the `timing` marker).
* Ctrl-C reaches the tests and their programs however the suite was started
  (`pytest_configure`).
"""

from __future__ import annotations

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pathlib  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402
import reverb  # noqa: E402
import tensorflow as tf  # noqa: E402

from rlds_reverb import cli  # noqa: E402
from rlds_reverb.examples import cartpole  # noqa: E402
from rlds_reverb.read.loading import load  # noqa: E402
from tests import ports, reverb_tables, robot_data, users_data  # noqa: E402

# 12 episodes of seed 0: 4 truncated at 500 steps, 8 terminated (returns 19 to 250).
CARTPOLE_ARGS = {'num_episodes': 12, 'seed': 0, 'episodes_per_shard': 5}
_ROOT = pathlib.Path(__file__).resolve().parent.parent
# Users' data: 200 episodes (7,412 steps) in 2 shards with images and strings (about 4 s to
# write); 300 episodes (8,462 steps) in 3 shards of plain tensors (about 1 s).
USERS_SPEC = users_data.users_spec(200, num_shards=2, max_drawn=100)
USERS_PLAIN_SPEC = users_data.users_spec(
    300, num_shards=3, max_drawn=100, seed=1, images=False, strings=False
)


@pytest.fixture(scope='session')
def cartpole_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A small CartPole RLDS dataset in TFDS format (3 shards), both endings present."""
    path = cartpole.generate(tmp_path_factory.mktemp('cartpole'), **CARTPOLE_ARGS)
    stats = cartpole.read_stats(path)
    if not (stats['num_terminated'] and stats['num_truncated']):
        raise RuntimeError(f'The CartPole fixture needs both episode endings; got {stats}.')
    return path


@pytest.fixture(scope='session')
def cartpole_episodes(cartpole_dir: pathlib.Path) -> tf.data.Dataset:
    """The CartPole fixture, opened with `rlds_reverb.load`."""
    return load(cartpole_dir)


@pytest.fixture(scope='session')
def users_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """`USERS_SPEC` written by TFDS (images, strings, episode metadata; 2 shuffled shards)."""
    return users_data.write(tmp_path_factory.mktemp('users'), USERS_SPEC)


@pytest.fixture(scope='session')
def users_plain_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """`USERS_PLAIN_SPEC` written by TFDS (no images or strings; 3 shuffled shards)."""
    return users_data.write(tmp_path_factory.mktemp('users_plain'), USERS_PLAIN_SPEC)


@pytest.fixture(scope='session')
def robot_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """`robot_data.ROBOT_SPEC` written by TFDS's own writer (one shuffled shard of 120
    episodes: JPEG and PNG cameras, dict observations, instructions); modules that need
    another robot layout define their own `robot_dir`."""
    return robot_data.shared_dir(tmp_path_factory, robot_data.ROBOT_SPEC)


@pytest.fixture(scope='session')
def reverb_server():
    """A real Reverb server on a loopback port with one FIFO-read table per case item."""
    server = reverb.Server(reverb_tables.make_tables(), port=None)
    yield server
    server.stop()


@pytest.fixture
def reverb_client(reverb_server) -> reverb.Client:
    """A client of `reverb_server`, with every table emptied before the test."""
    return reverb_tables.clean_client(reverb_server)


@pytest.fixture(scope='session')
def subprocess_env() -> dict[str, str]:
    """The environment of Python subprocesses: quiet TensorFlow, this checkout importable."""
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONPATH=str(_ROOT))


class CliRunner:
    """Runs `rlds-reverb ARGS`: `cli.main(argv)` in this process, or `python -m rlds_reverb.cli`."""

    def __init__(self, capsys: pytest.CaptureFixture, env: dict[str, str]):
        self._capsys = capsys
        self._env = env

    def command(self, *args) -> list[str]:
        """The command line of the program."""
        return [sys.executable, '-m', 'rlds_reverb.cli', *map(str, args)]

    def __call__(
        self, *args, subprocess: bool = False, timeout: float = 300, env: dict | None = None
    ) -> tuple[int, str, str]:
        """Runs the command to its end; returns (exit code, stdout, stderr).

        In-process (the default) exceptions propagate (as with `--debug`), and the output is
        what this command printed. `subprocess=True` runs a real program (bounded by
        `timeout` seconds) in `env` (default: `subprocess_env`). Either way the command
        must leave nothing running: no new listening port in this process, no process of
        the program's session (its workers included).
        """
        if subprocess:
            result = _run(self.command(*args), timeout=timeout, env=env or self._env)
            return result.returncode, result.stdout, result.stderr
        self._capsys.readouterr()  # Output printed before this command is not its output.
        listening = ports.list_listening_ports()
        try:
            code = cli.main([str(arg) for arg in args])
        finally:
            left = ports.list_listening_ports() - listening
            assert not left, f'rlds-reverb {" ".join(map(str, args))} left ports {left} open.'
        captured = self._capsys.readouterr()
        return code, captured.out, captured.err

    def start(
        self, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env: dict | None = None
    ) -> subprocess.Popen:
        """Starts the program without waiting (a server, or a push to interrupt); text I/O."""
        return subprocess.Popen(
            self.command(*args), stdout=stdout, stderr=stderr, text=True, env=env or self._env
        )


def _run(command: list[str], *, timeout: float, env: dict[str, str]):
    """Runs `command` in its own session; fails if any process of that session outlives it.

    The output goes to files, not pipes: a process left behind would hold a pipe open.
    """
    with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
        process = subprocess.Popen(
            command, stdout=out, stderr=err, text=True, env=env, start_new_session=True
        )
        try:
            process.wait(timeout=timeout)
        finally:
            left = ports.list_session_processes(process.pid)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            process.wait()
        assert not left, f'{" ".join(command)} left processes {left} running.'
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())


@pytest.fixture
def run_cli(capsys, subprocess_env) -> CliRunner:
    """`run_cli(*args, subprocess=False) -> (code, out, err)`; `run_cli.start(*args)` -> Popen."""
    return CliRunner(capsys, subprocess_env)


# --- test-fast: a sample of each large case table ------------------------------------------
# `make test-fast` (-m 'not slow') must finish in a few minutes on 2 cores; the case tables
# (hand-computed cases, the fault corpus) are most of the suite. A parametrized test with more
# than _MAX_FAST_CASES cases keeps every _FAST_CASE_STRIDE-th case (the first included) in
# test-fast; its other cases are marked slow, and `make test` runs them all.
_MAX_FAST_CASES = 3
_FAST_CASE_STRIDE = 10


# --- make test: two xdist workers (`-n 2 --dist loadgroup`) ----------------------------------
# A group runs on one worker. Expensive module fixtures are built once only when all their
# tests share a worker; tests that bound wall-clock times run one after another (the other
# worker still runs beside them: their bounds hold on a loaded host). A new test that asserts
# a wall-clock bound takes `@pytest.mark.timing`.
_XDIST_GROUPS = {
    'fixture:fresh_venv': 'packaging',  # A fresh venv with the whole stack: minutes.
    'fixture:site': 'docs_site',  # mkdocs build --strict.
    # Module fixtures that record with envlogger, one in a program killed mid-recording.
    'tests/read/test_envlogger.py': 'envlogger',
    'tests/system/test_dead_servers.py': 'timing',
    'tests/reliability/test_faults.py': 'timing',
    'tests/reliability/test_soak.py': 'timing',
    'tests/serve/test_status.py': 'timing',
}


# A test id that holds an object's address (`ids=str` of an object without its own repr)
# differs between xdist workers, and xdist then refuses to run at all.
_ADDRESS_IN_ID = re.compile(r' at 0x[0-9a-fA-F]+')


def _add_xdist_group(item: pytest.Item) -> None:
    """Adds the `xdist_group` of `_XDIST_GROUPS` (or of the `timing` marker) to `item`."""
    if item.get_closest_marker('xdist_group') is not None:
        return
    group = 'timing' if item.get_closest_marker('timing') is not None else None
    for key, name in _XDIST_GROUPS.items():
        kind, _, value = key.partition(':')
        if (kind == 'fixture' and value in getattr(item, 'fixturenames', ())) or (
            item.nodeid.startswith(key)
        ):
            group = name
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config: pytest.Config) -> None:
    """Gives SIGINT Python's own handler when the suite started with it ignored.

    A non-interactive shell starts a background job with SIGINT ignored, and the xdist
    workers and every program a test starts inherit that: a test that interrupts itself or
    a program with SIGINT would see nothing happen. A handled signal is reset to its
    default in programs started from here, so they install Python's handler too.
    """
    del config
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # Before `-m` deselects by mark, and before xdist reads groups.
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks slow all but a sample of each large case table (see `_FAST_CASE_STRIDE`).

    Also adds each test's xdist group (`_add_xdist_group`).
    """
    for item in items:
        if _ADDRESS_IN_ID.search(item.nodeid):
            raise pytest.UsageError(
                f'{item.nodeid}: the test id holds an address, which differs between runs '
                '(and between xdist workers); give the parametrization stable ids.'
            )
        _add_xdist_group(item)
    tables: dict[tuple, list[pytest.Item]] = {}
    for item in items:
        if getattr(item, 'callspec', None) is not None:
            key = (item.path, getattr(item, 'cls', None), getattr(item, 'originalname', item.name))
            tables.setdefault(key, []).append(item)
    for cases in tables.values():
        if len(cases) > _MAX_FAST_CASES:
            for index, item in enumerate(cases):
                if index % _FAST_CASE_STRIDE:
                    item.add_marker(pytest.mark.slow)
