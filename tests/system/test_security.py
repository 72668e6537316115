"""Who can reach the data (docs/security.md): the open-port notice, private directories,
no code run from a dataset's files, and no server outliving what started it.

Modes are checked under a permissive umask (0), where anything not set on purpose would come
out world-writable.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import socket
import stat
import tempfile
import threading

import numpy as np
import portpicker
import pytest
import reverb

import rlds_reverb
from rlds_reverb.check import report_html
from rlds_reverb.core import errors, files, types
from rlds_reverb.examples import cartpole
from rlds_reverb.export import reverb_export, rlds_copy, table_copy
from rlds_reverb.read import loading
from rlds_reverb.serve import checkpoints, server, tables
from rlds_reverb.storage import tfds_writer
from rlds_reverb.transform import items
from rlds_reverb.write import seed
from tests import builders, ports


@pytest.fixture
def permissive_umask():
    """Sets the umask to 0 for the test (nothing is masked), then restores it."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def _read_mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _list_world_writable(root) -> list[str]:
    """Returns every entry under `root` (itself included) with the world-write bit."""
    entries = [str(root)]
    for parent, dirs, names in os.walk(root):
        entries += [os.path.join(parent, n) for n in (*dirs, *names)]
    return [p for p in entries if not os.path.islink(p) and os.lstat(p).st_mode & stat.S_IWOTH]


def _list_reachable_world_writable(root) -> list[str]:
    """Returns the entries under `root` with the world-write bit that others could reach.

    Reachable: through directories that others may enter (`o+x`), `root` counted as one; a
    private (0700) directory the toolkit writes in is not entered. Entries removed while
    they are listed are skipped.
    """
    found, pending = [], [os.fspath(root)]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                continue
            if mode & stat.S_IWOTH:
                found.append(entry.path)
            if stat.S_ISDIR(mode) and mode & stat.S_IXOTH:
                pending.append(entry.path)
    return found


@contextlib.contextmanager
def _watch_world_writable(root):
    """Yields a set that gathers every reachable world-writable entry under `root`, seen
    while the block runs (looked for every millisecond, from a thread) or after it."""
    seen: set[str] = set()
    done = threading.Event()

    def watch():
        while not done.wait(0.001):
            seen.update(_list_reachable_world_writable(root))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join()
        seen.update(_list_reachable_world_writable(root))


@pytest.fixture(scope='module')
def invalid_dir(tmp_path_factory):
    good = builders.episode(3)
    bad = builders.episode(4, discount=np.array([1.0, 1.0, 3.0, 1.0], np.float32))
    return builders.write_tfds(tmp_path_factory.mktemp('invalid'), (good, bad), name='broken')


# --- Said where it matters ------------------------------------------------------------------


def test_serve_says_once_the_port_is_open_and_stops_its_server_on_an_error(invalid_dir, run_cli):
    port = portpicker.pick_unused_port()
    # run_cli fails if the server seeded before the invalid episode stayed up.
    code, out, err = run_cli('serve', invalid_dir, '--port', port)
    assert code == 1 and 'discount' in err
    notices = [line for line in err.splitlines() if 'without authentication' in line]
    assert notices == [
        f'rlds-reverb serve: note: Reverb listens on port {port} on every interface (IPv4 and '
        'IPv6) without authentication or TLS, so anyone who can reach it can read, change and '
        'delete the tables; keep it private with a firewall rule or an SSH tunnel '
        '(README.md#security).'
    ]
    assert out == ''


def _list_local_addresses(port: int) -> set[str]:
    """Returns the local addresses (hex, as /proc shows them) listening on `port`."""
    found = set()
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        with open(table) as lines:
            next(lines)
            for line in lines:
                local, state = line.split()[1], line.split()[3]
                address, _, hex_port = local.rpartition(':')
                if state == '0A' and int(hex_port, 16) == port:
                    found.add(address)
    return found


def _find_outgoing_ipv4() -> str | None:
    """Returns this host's address on its default route (no packet is sent), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(('192.0.2.1', 9))  # TEST-NET-1: only picks the route.
        except OSError:
            return None
        return probe.getsockname()[0]


def test_a_reverb_server_listens_on_every_interface():
    """The fact docs/security.md states: `*:PORT` in `ss -ltn`, IPv6 and IPv4."""
    running = reverb.Server([tables.uniform('replay', max_size=10)], port=None)
    try:
        assert _list_local_addresses(running.port) == {'0' * 32}  # [::], dual-stack.
        address = _find_outgoing_ipv4()
        if address is not None:  # Reached on the host's network address too, not only lo.
            with socket.socket() as connection:
                connection.connect((address, running.port))
    finally:
        running.stop()
    assert running.port not in ports.list_listening_ports()


@pytest.mark.slow  # A real `rlds-reverb serve` program: about 10 s.
def test_serve_program_prints_the_notice_once_and_frees_its_port_on_sigint(
    cartpole_dir, tmp_path, run_cli
):
    port = portpicker.pick_unused_port()
    process = run_cli.start('serve', cartpole_dir, '--port', port, '--max-size', 100_000)
    try:
        line = process.stdout.readline()
        while line and not line.startswith('Serving on'):
            line = process.stdout.readline()
        assert line.startswith(f'Serving on localhost:{port}')
        assert port in ports.list_listening_ports(process.pid)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait(timeout=30)
    assert process.returncode == 0 and 'Stopped.' in out
    assert err.count('without authentication') == 1
    assert not _list_local_addresses(port)


# --- What the toolkit controls, it keeps private ---------------------------------------------


def test_make_private_dirs_creates_each_missing_directory_0700(tmp_path, permissive_umask):
    (tmp_path / 'user').mkdir(mode=0o755)
    made = files.make_private_dirs(tmp_path / 'user' / 'a' / 'b')
    assert _read_mode(tmp_path / 'user') == 0o755  # The user's own: left alone.
    assert _read_mode(tmp_path / 'user' / 'a') == 0o700 and _read_mode(made) == 0o700
    with pytest.raises(NotADirectoryError, match='is not a directory'):
        files.make_private_dirs(_make_file(tmp_path))


def _make_file(tmp_path):
    path = tmp_path / 'a_file'
    path.write_text('')
    return path


def test_make_shared_dirs_is_never_world_writable(tmp_path, permissive_umask):
    made = files.make_shared_dirs(tmp_path / 'a' / 'b')
    assert _read_mode(made) == 0o775 and _read_mode(tmp_path / 'a') == 0o775
    with pytest.raises(NotADirectoryError, match='is not a directory'):
        files.make_shared_dirs(_make_file(tmp_path))


def test_checkpoint_dirs_the_toolkit_creates_are_private(
    cartpole_episodes, tmp_path, permissive_umask
):
    directory = tmp_path / 'new' / 'ckpt'
    result = seed.seed_server(cartpole_episodes.take(2), checkpoint_dir=directory)
    result.server.stop()
    assert _read_mode(tmp_path / 'new') == 0o700 and _read_mode(directory) == 0o700
    assert os.listdir(directory)  # Reverb's checkpoint, written under umask 0...
    assert _list_world_writable(directory) == []  # ...and not world-writable.


def test_an_existing_checkpoint_dir_keeps_its_mode(cartpole_episodes, tmp_path, permissive_umask):
    directory = tmp_path / 'mine'
    directory.mkdir(mode=0o750)
    running = server.start_server([tables.uniform('replay', max_size=10)], checkpoint_dir=directory)
    try:
        path = checkpoints.checkpoint_server(reverb.Client(f'localhost:{running.port}'))
    finally:
        running.stop()
    assert _read_mode(directory) == 0o750
    assert _list_world_writable(path) == []


def test_dataset_writer_stages_privately_and_writes_nothing_world_writable(
    tmp_path, permissive_umask
):
    target = tmp_path / 'data' / 'toy' / '1.0.0'
    with tfds_writer.RldsDatasetWriter(
        target, features=builders.step_features(), name='toy'
    ) as writer:
        writer.add_episode({types.STEPS: builders.episode(3)})
        (staging,) = target.parent.glob('.1.0.0*')
        assert _read_mode(staging) == 0o700
    assert (
        _read_mode(target) == 0o775 and _read_mode(tmp_path / 'data') == 0o775
    )  # The umask's, -o+w.
    assert _list_world_writable(tmp_path / 'data') == []
    assert sum(1 for _ in loading.load(target)) == 1


def test_record_writes_nothing_world_writable(tmp_path, run_cli, permissive_umask):
    code, _, err = run_cli(
        'record', '--episodes', '2', '--policy', 'scripted', tmp_path / 'rec' / '1.0.0'
    )
    assert code == 0, err
    assert os.listdir(tmp_path / 'rec' / '1.0.0')
    assert _list_world_writable(tmp_path) == []


def test_export_copies_in_a_private_temp_dir_and_writes_nothing_world_writable(
    cartpole_episodes, tmp_path, monkeypatch, permissive_umask
):
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path / 'tmp'))
    (tmp_path / 'tmp').mkdir(mode=0o700)
    episode = items.Episode(max_length=600)
    result = seed.seed_server(
        cartpole_episodes.take(2), item=episode, checkpoint_dir=tmp_path / 'ckpt'
    )
    result.server.stop()
    with table_copy.open_table_reader('replay', checkpoint=tmp_path / 'ckpt') as reader:
        (root,) = (tmp_path / 'tmp').glob('rlds_reverb_export_*')
        assert _read_mode(root) == 0o700 and _list_world_writable(root) == []
        assert reader.num_items == 2
    assert not root.exists()
    reverb_export.export_table(tmp_path / 'out' / '1.0.0', 'replay', checkpoint=tmp_path / 'ckpt')
    assert _list_world_writable(tmp_path) == []


@pytest.mark.slow  # A Beam pipeline: about 15 s.
def test_the_beam_pipelines_default_result_dir_is_private(
    cartpole_dir, tmp_path, monkeypatch, permissive_umask
):
    from rlds_reverb.distribute import pipeline

    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    signature = tables.signature_for(items.TwoStep(), loading.load(cartpole_dir))
    running = server.start_server([tables.uniform('replay', max_size=10**5, signature=signature)])
    modes = set()  # The directory's mode while the push runs (it is removed at the end).

    def record_modes(_):
        modes.update(_read_mode(path) for path in tmp_path.glob('rlds_reverb_beam_*'))

    try:
        result = pipeline.push_with_beam(
            cartpole_dir, [f'localhost:{running.port}'], 'replay', progress=record_modes
        )
    finally:
        running.stop()
    assert result.servers[0].inserted > 0
    assert modes == {0o700}
    assert not list(tmp_path.glob('rlds_reverb_beam_*'))


@pytest.mark.slow  # A Beam pipeline: about 15 s.
def test_the_beam_pipelines_counts_in_a_given_result_dir_are_never_world_writable(
    cartpole_dir, tmp_path, permissive_umask
):
    from rlds_reverb.distribute import pipeline

    results = tmp_path / 'results'
    results.mkdir(mode=0o755)  # The user's, reachable by others.
    signature = tables.signature_for(items.TwoStep(), loading.load(cartpole_dir))
    running = server.start_server([tables.uniform('replay', max_size=10**5, signature=signature)])
    try:
        with _watch_world_writable(tmp_path) as seen:
            result = pipeline.push_with_beam(
                cartpole_dir, [f'localhost:{running.port}'], 'replay', result_dir=str(results)
            )
    finally:
        running.stop()
    assert result.servers[0].inserted > 0
    assert seen == set() and os.listdir(results) == ['server-00000.json']


@pytest.mark.slow  # Generates the demo's 250 CartPole episodes: about 10-20 s.
def test_the_demo_cache_is_private(tmp_path, monkeypatch, permissive_umask):
    monkeypatch.setenv('HOME', str(tmp_path))
    monkeypatch.delenv(cartpole.DATA_DIR_ENV, raising=False)
    path = cartpole.ensure_default_dataset()
    assert path.is_relative_to(tmp_path / '.cache' / 'rlds_reverb')
    assert _read_mode(tmp_path / '.cache') == 0o700
    assert _read_mode(tmp_path / '.cache' / 'rlds_reverb') == 0o700
    assert _list_world_writable(tmp_path / '.cache') == []


def test_the_cli_never_writes_world_writable_files_and_restores_the_umask(
    cartpole_dir, tmp_path, run_cli, permissive_umask
):
    signature = tables.signature_for(items.TwoStep(), loading.load(cartpole_dir))
    running = server.start_server(
        [tables.uniform('replay', max_size=10**5, signature=signature)],
        checkpoint_dir=tmp_path / 'ckpt',
    )
    try:
        address = f'localhost:{running.port}'
        code, _, err = run_cli(
            'push', cartpole_dir, '--server', address, '--checkpoint-every', 6, '--no-progress'
        )
        assert code == 0, err
    finally:
        running.stop()
    assert os.listdir(tmp_path / 'ckpt')
    assert _list_world_writable(tmp_path) == []  # Reverb's checkpoints, under the command's umask.
    assert files.read_umask() == 0  # The caller's umask is back.


# --- Files the Python API writes: never world-writable, under any umask -----------------------
# (The command line adds o-w to the umask; from Python, each writer follows core/files.py.)


def test_replace_file_writes_privately_then_publishes_without_world_write(
    tmp_path, permissive_umask
):
    path = tmp_path / 'out.json'
    with files.replace_file(path, text=True) as out:
        (temporary,) = tmp_path.iterdir()
        assert _read_mode(temporary) == 0o600 and not path.exists()
        out.write('{}')
    assert path.read_text() == '{}' and _read_mode(path) == 0o664
    with pytest.raises(RuntimeError), files.replace_file(path) as out:
        out.write(b'half')
        raise RuntimeError
    assert path.read_text() == '{}' and list(tmp_path.iterdir()) == [path]


def test_create_shared_file_is_never_world_writable(tmp_path, permissive_umask):
    path = files.create_shared_file(tmp_path / 'a')
    assert _read_mode(path) == 0o664
    path.write_text('old')
    os.chmod(path, 0o666)
    files.create_shared_file(path)
    assert _read_mode(path) == 0o664 and path.read_text() == ''


def test_write_report_from_python_writes_nothing_world_writable(
    cartpole_dir, tmp_path, monkeypatch, permissive_umask
):
    """The page, and its temporary file while the page is written (it was 0666 in 0.2)."""
    while_rendering = {}
    render = report_html.render_html

    def look_and_render(found):
        while_rendering.update({p.name: _read_mode(p) for p in tmp_path.iterdir()})
        return render(found)

    monkeypatch.setattr(report_html, 'render_html', look_and_render)
    with _watch_world_writable(tmp_path) as seen:
        rlds_reverb.write_report(loading.load(cartpole_dir), tmp_path / 'report.html')
    ((name, mode),) = while_rendering.items()
    assert name.startswith('.report.html.') and mode == 0o600
    assert _read_mode(tmp_path / 'report.html') == 0o664
    assert seen == set() and os.listdir(tmp_path) == ['report.html']


def test_the_demos_plot_and_summary_are_never_world_writable(tmp_path, permissive_umask):
    from rlds_reverb.examples import cql_dqn, demo, plots

    history = cql_dqn.TrainHistory(
        losses=[1.0, 0.5],
        eval_iterations=[0, 1],
        eval_returns=[9.0, 20.0],
        last_priorities={0: 1.0, 1: 0.5},
    )
    output = tmp_path / 'out'
    with _watch_world_writable(tmp_path) as seen:
        plot = plots.plot_training(history, behaviour_return=10.0, path=output / 'p.png')
        summary = demo.save_summary({'eval_return': 20.0}, output)
    assert seen == set()
    assert _read_mode(output) == 0o775
    assert _read_mode(plot) == 0o664 and _read_mode(summary) == 0o664
    assert json.loads(summary.read_text()) == {'eval_return': 20.0}
    assert sorted(os.listdir(output)) == ['p.png', demo.SUMMARY_NAME]


def test_rewriting_a_checkpoints_tables_writes_nothing_world_writable(
    cartpole_episodes, tmp_path, permissive_umask
):
    directory = tmp_path / 'ckpt'
    directory.mkdir(mode=0o755)  # The user's, reachable by others.
    result = seed.seed_server(cartpole_episodes.take(1), checkpoint_dir=directory)
    result.server.stop()
    latest = checkpoints.find_latest_checkpoint(directory)
    tables_read = checkpoints.read_table_checkpoints(latest)
    with _watch_world_writable(tmp_path) as seen:
        checkpoints.write_table_checkpoints(latest, tables_read)
    assert seen == set()
    assert checkpoints.read_table_checkpoints(latest) == tables_read


def test_save_as_rlds_and_the_recorder_write_nothing_world_writable(
    cartpole_dir, tmp_path, permissive_umask
):
    from rlds_reverb.examples import collect

    with _watch_world_writable(tmp_path) as seen:
        rlds_copy.save_as_rlds(cartpole_dir, tmp_path / 'copy' / '1.0.0')
        collect.record_episodes(
            tmp_path / 'rec' / '1.0.0', num_episodes=1, policy='scripted', max_episode_steps=20
        )
    assert seen == set()
    assert os.listdir(tmp_path / 'copy' / '1.0.0') and os.listdir(tmp_path / 'rec' / '1.0.0')
    assert _read_mode(tmp_path / 'copy' / '1.0.0') == 0o775


# --- Nothing executes from data --------------------------------------------------------------


class _Payload:
    """Unpickling this creates the marker file: the proof that something ran."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, 'w'))


def _copy_dataset(source, destination):
    shutil.copytree(source, destination)
    return destination


def test_metadata_holding_pickles_and_code_is_read_as_data(cartpole_dir, tmp_path):
    marker = tmp_path / 'marker'
    directory = _copy_dataset(cartpole_dir, tmp_path / 'cartpole_v1' / '1.0.0')
    payload = pickle.dumps(_Payload(str(marker)))
    code = f"__import__('os').system('touch {marker}')"
    info = json.loads((directory / 'dataset_info.json').read_text())
    info['description'] = code
    (directory / 'dataset_info.json').write_text(json.dumps(info))
    metadata = json.loads((directory / 'metadata.json').read_text())
    metadata.update(pickled=payload.decode('latin-1'), code=code)
    (directory / 'metadata.json').write_text(json.dumps(metadata))
    features = json.loads((directory / 'features.json').read_text())
    features['description'] = code
    (directory / 'features.json').write_text(json.dumps(features))
    for name in ('dataset_info.pkl', 'features.pkl', 'metadata.pkl'):
        (directory / name).write_bytes(payload)
    episodes = loading.load(directory)
    assert sum(1 for _ in episodes) == 12
    builder = loading.open_builder(directory)
    assert builder.info.description == code
    assert builder.info.metadata['code'] == code
    assert not marker.exists()


def _write_module(directory, name: str, marker) -> None:
    """A module whose import creates `marker`: what a dataset could make TFDS import."""
    (directory / f'{name}.py').write_text(f'open({str(marker)!r}, "w").close()\n')


@pytest.mark.parametrize('where', ['features.json', 'dataset_info.json'])
def test_a_feature_class_tfds_would_import_is_refused(cartpole_dir, tmp_path, monkeypatch, where):
    marker = tmp_path / 'marker'
    module = f'planted_feature_{where.split(".")[0]}'
    _write_module(tmp_path, module, marker)
    monkeypatch.syspath_prepend(str(tmp_path))
    directory = _copy_dataset(cartpole_dir, tmp_path / 'cartpole_v1' / '1.0.0')
    features = json.loads((directory / 'features.json').read_text())
    if where == 'features.json':
        features['featuresDict']['features']['steps']['pythonClassName'] = f'{module}.Evil'
        (directory / 'features.json').write_text(json.dumps(features))
    else:  # TFDS reads the features from dataset_info.json when they are there.
        features['pythonClassName'] = f'{module}.Evil'
        info = json.loads((directory / 'dataset_info.json').read_text())
        info['features'] = features
        (directory / 'dataset_info.json').write_text(json.dumps(info))
    with pytest.raises(errors.SourceError, match=rf'{module}\.Evil, which are not TFDS features'):
        loading.load(directory)
    with pytest.raises(errors.SourceError, match='not TFDS features'):
        loading.load('cartpole_v1', data_dir=tmp_path)
    assert not marker.exists()


def test_a_legacy_features_file_naming_a_module_is_refused(tmp_path, monkeypatch):
    marker = tmp_path / 'marker'
    _write_module(tmp_path, 'planted_legacy', marker)
    monkeypatch.syspath_prepend(str(tmp_path))
    directory = builders.write_tfds(tmp_path, [builders.episode(3)], name='toy')
    legacy = {'type': 'planted_legacy.Evil', 'content': {}}
    (directory / 'features.json').write_text(json.dumps(legacy))
    with pytest.raises(errors.SourceError, match='planted_legacy'):
        loading.load(directory)
    assert not marker.exists()


def test_a_community_namespace_name_is_refused(tmp_path):
    with pytest.raises(errors.SourceError, match='community namespace'):
        loading.load('huggingface:mnist', data_dir=tmp_path)


# --- Servers the toolkit starts stop with it ---------------------------------------------------


def test_seed_server_stops_its_server_when_seeding_fails_or_is_interrupted(
    cartpole_episodes, invalid_dir
):
    before = ports.list_listening_ports()
    with pytest.raises(errors.InvalidEpisodeError):
        seed.seed_server(loading.load(invalid_dir))
    assert ports.list_listening_ports() == before

    def interrupt(episodes, steps):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        seed.seed_server(cartpole_episodes, progress=interrupt)
    assert ports.list_listening_ports() == before


@pytest.mark.slow  # Imports the demo (TF-Agents) and seeds: about 15 s.
def test_the_demos_servers_stop_when_seeding_one_of_them_fails(invalid_dir):
    from rlds_reverb.examples import demo

    before = ports.list_listening_ports()
    config = demo.make_config(quick=True, seed=0)
    # Shard 0 (the valid episode) seeds server 0; shard 1 (the invalid one) fails.
    with pytest.raises(errors.InvalidEpisodeError):
        demo.seed_tables(loading.load(invalid_dir), config, num_steps=100, num_servers=2)
    assert ports.list_listening_ports() == before


def test_exports_temporary_server_stops_when_the_reader_is_left_by_an_error(
    cartpole_episodes, tmp_path
):
    result = seed.seed_server(
        cartpole_episodes.take(2), item=items.Episode(max_length=600), checkpoint_dir=tmp_path
    )
    result.server.stop()
    before = ports.list_listening_ports()
    reading = table_copy.open_table_reader('replay', checkpoint=tmp_path)
    with pytest.raises(KeyboardInterrupt) as caught, reading as reader:
        for _ in reader.iterate_parts():
            assert len(ports.list_listening_ports() - before) == 1
            raise KeyboardInterrupt
    # Stopped when the reader's context exits, whoever still holds the parts' generator.
    assert caught.traceback and ports.list_listening_ports() == before


def test_run_cli_fails_when_a_program_leaves_a_process_behind(subprocess_env):
    from tests import conftest

    orphan = [
        'python3',
        '-c',
        'import subprocess; subprocess.Popen(["sleep", "30"])',
    ]
    with pytest.raises(AssertionError, match='left processes'):
        conftest._run(orphan, timeout=30, env=subprocess_env)
