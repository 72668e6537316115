"""The Beam pipeline into several Reverb servers: routing, exact counts, exactly once, faults.

Real parts only: TFDS directories written to tmp, in-process and subprocess Reverb servers,
Beam's DirectRunner. Every episode's observation is (episode index, step index), so each
item names its origin and a drained table shows duplicates and gaps.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import reverb
import tensorflow_datasets as tfds
import tree

from rlds_reverb.core import errors, specs, types
from rlds_reverb.distribute import routing
from rlds_reverb.examples import cartpole
from rlds_reverb.read.loading import load, open_builder
from rlds_reverb.serve import table_info, tables
from rlds_reverb.transform import items
from rlds_reverb.transform.plans import count_items_per_episode, make_episode_plans
from rlds_reverb.write import engines, resume
from rlds_reverb.write import push as push_lib
from tests import builders, reverb_tables

pipeline = pytest.importorskip('rlds_reverb.distribute.pipeline')  # The `beam` extra.
counting = pytest.importorskip('rlds_reverb.distribute.counting')

_TABLE = 'replay'
_LENGTHS = [12, 30, 7, 25, 18, 3, 40, 10, 22]
_INVALID = 4  # Its reward is NaN in the dataset with an invalid episode.
_NO_BEAM_LOGS = {'TF_CPP_MIN_LOG_LEVEL': '3'}


def _indexed_episode(
    index: int, length: int, *, invalid: bool = False, ending: str = builders.TERMINATED
) -> dict:
    observation = np.stack([np.full(length, index), np.arange(length)], axis=1)
    reward = np.arange(length, dtype=np.float32)
    if invalid:
        reward[1] = np.nan
    return builders.episode(
        length, observation=observation.astype(np.float32), reward=reward, ending=ending
    )


def _write(directory, lengths, *, invalid=None, name='indexed', per_shard=3, endings=None):
    endings = endings or [builders.TERMINATED] * len(lengths)
    episodes = [
        _indexed_episode(i, n, invalid=i == invalid, ending=ending)
        for i, (n, ending) in enumerate(zip(lengths, endings, strict=True))
    ]
    return builders.write_tfds(directory, episodes, name=name, episodes_per_shard=per_shard)


@pytest.fixture(scope='module')
def dataset_dir(tmp_path_factory):
    return _write(tmp_path_factory.mktemp('beam'), _LENGTHS)


@pytest.fixture(scope='module')
def invalid_dir(tmp_path_factory):
    return _write(tmp_path_factory.mktemp('beam_invalid'), _LENGTHS, invalid=_INVALID)


def _fifo_table(signature, max_size=10_000) -> reverb.Table:
    return reverb_tables.make_fifo_table(_TABLE, signature, max_size=max_size)


@pytest.fixture
def servers(dataset_dir):
    signature = tables.signature_for(items.TwoStep(), load(dataset_dir))
    running = [reverb.Server([_fifo_table(signature)]) for _ in range(2)]
    yield [f'localhost:{s.port}' for s in running]
    for server in running:
        server.stop()


def _inserted(address: str) -> int:
    return resume.count_inserted(reverb.Client(address), _TABLE, timeout_ms=2_000)


def _wait_inserted(address: str, timeout_s: float = 120) -> int:
    """The insert count of a server just restarted (gRPC backs off reconnecting to a port)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _inserted(address)
        except errors.ReverbConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _drain(address: str) -> list[tuple[int, int]]:
    """Samples every item once (FIFO, removed when sampled); returns (episode, step) of each."""
    count = reverb.Client(address).server_info()[_TABLE].current_size
    if count == 0:
        return []
    dataset = reverb.TrajectoryDataset.from_table_signature(
        address, _TABLE, max_in_flight_samples_per_worker=16, rate_limiter_timeout_ms=2_000
    )
    origins = []
    for sample in dataset.take(count).batch(1024):
        observation = sample.data.observation.numpy()[:, 0]  # First step of each item.
        origins += [(int(e), int(t)) for e, t in observation]
    return origins


def _expected(lengths, skip=()) -> list[tuple[int, int]]:
    return [(e, t) for e, n in enumerate(lengths) if e not in skip for t in range(n - 1)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('localhost', 0))
        return sock.getsockname()[1]


# --- Routing (no Beam) -----------------------------------------------------------------------


def test_assign_servers_balances_items_and_is_stable():
    counts = [500, 20, 20, 300, 10, 200, 0, 50]
    placement = routing.assign_servers(counts, 2)
    assert placement.tolist() == routing.assign_servers(counts, 2).tolist()
    per_server = [sum(c for c, s in zip(counts, placement, strict=True) if s == k) for k in (0, 1)]
    assert abs(per_server[0] - per_server[1]) <= max(counts)
    assert routing.assign_servers([5, 1, 1, 3], 2).tolist() == [0, 1, 1, 1]
    for num_servers in range(1, 6):  # One consecutive range each, within one episode's items.
        placement = routing.assign_servers(counts, num_servers)
        assert (np.diff(placement) >= 0).all() and placement.max() < num_servers
        per_server = np.bincount(placement, weights=counts, minlength=num_servers)
        assert (abs(per_server - sum(counts) / num_servers) <= max(counts)).all()
    assert routing.assign_servers([0, 0, 0, 0], 2).tolist() == [0, 0, 1, 1]  # No items.
    assert routing.compute_spread([100, 100]) == 0.0
    with pytest.raises(ValueError, match='num_servers=0'):
        routing.assign_servers(counts, 0)


def test_list_shard_ranges_covers_the_split_by_shard(dataset_dir):
    ranges = routing.list_shard_ranges(open_builder(dataset_dir), 'train')
    assert [(r.first, r.count) for r in ranges] == [(0, 3), (3, 3), (6, 3)]
    assert len({r.filename for r in ranges}) == 3
    with pytest.raises(ValueError, match='reads whole splits by shard'):
        routing.list_shard_ranges(open_builder(dataset_dir), 'train[:50%]')
    with pytest.raises(ValueError, match="split='test' is not a split"):
        routing.list_shard_ranges(open_builder(dataset_dir), 'test')


def test_group_shard_ranges_joins_neighbours_into_balanced_groups():
    ranges = [routing.ShardRange(f'shard-{i}', 5 * i, 5) for i in range(7)]
    for num_groups in range(1, 10):
        groups = routing.group_shard_ranges(ranges, num_groups)
        assert len(groups) == min(num_groups, 7)
        # Consecutive, whole shards, covering episodes 0..34 once.
        assert [g.first for g in groups] == [0, *np.cumsum([g.count for g in groups])[:-1]]
        assert sum(g.count for g in groups) == 35
        assert all(g.count % 5 == 0 for g in groups)
        assert max(g.count for g in groups) - min(g.count for g in groups) <= 5
    assert routing.group_shard_ranges(ranges, 2)[1].filename == 'shard-4 .. shard-6'
    with pytest.raises(ValueError, match='num_groups=0'):
        routing.group_shard_ranges(ranges, 0)


# --- Item-level resume (no Beam) -------------------------------------------------------------


def test_find_resume_point_counts_items_of_a_partly_written_episode():
    assert resume.find_resume_point(8, np.array([3, 3, 3, 3])) == (2, 2)
    assert resume.find_resume_point(6, np.array([3, 3, 0, 3])) == (3, 0)
    assert resume.find_resume_point(0, np.array([], dtype=np.int64)) == (0, 0)
    with pytest.raises(resume.ResumeError, match='more than the 12 items'):
        resume.find_resume_point(13, np.array([3, 3, 3, 3]))


def test_push_resumable_completes_a_partly_written_episode(dataset_dir, servers):
    episodes, item = load(dataset_dir), items.TwoStep()
    client = reverb.Client(servers[0])
    counts = count_items_per_episode(episodes, item)
    plans = list(make_episode_plans(episodes, item).as_numpy_iterator())
    engine = engines.TrajectoryEngine(
        client, item, [_TABLE], priority=1.0, max_in_flight_items=8, timeout_ms=5_000
    )
    engine.write_episode(plans[0])
    first_items = resume.order_items(plans[1])[:10]  # What a crash would have left.
    engine.write_episode(
        plans[1]._replace(
            starts=plans[1].starts[np.sort(first_items)], sizes=plans[1].sizes[np.sort(first_items)]
        )
    )
    assert _inserted(servers[0]) == counts[0] + 10
    stats = resume.push_resumable(episodes, client, _TABLE, item=item)
    assert stats.items[_TABLE] == counts.sum() - counts[0] - 10
    assert sorted(_drain(servers[0])) == _expected(_LENGTHS)
    with pytest.raises(ValueError, match='held=99 is not valid'):
        resume.write_remaining_items(client, _TABLE, plans[5], 99, item=item, priority=1.0)


# --- The pipeline ----------------------------------------------------------------------------


@pytest.mark.slow
def test_replayed_bundles_and_reruns_write_every_item_exactly_once(invalid_dir, servers, tmp_path):
    options = ['--runner=DirectRunner', '--direct_runner_bundle_repeat=1']
    result = pipeline.push_with_beam(
        invalid_dir, servers, _TABLE, on_invalid='skip', pipeline_options=options
    )
    counts = count_items_per_episode(load(invalid_dir), items.TwoStep())
    assert result.items == counts.sum() == len(_expected(_LENGTHS, skip={_INVALID}))
    assert result.skipped_episodes == 1
    assert result.episodes == len(_LENGTHS) - 1
    assert result.steps == sum(_LENGTHS) - _LENGTHS[_INVALID]
    for server in result.servers:  # What the pipeline says is what the servers report.
        info = reverb.Client(server.address).server_info()[_TABLE]
        assert server.items == server.inserted == info.current_size
        assert server.items == table_info.count_inserted(info)
    assert abs(result.servers[0].items - result.servers[1].items) <= max(counts)
    assert 'spread' in result.format()

    given = tmp_path / 'results'  # A result_dir the caller gives is theirs: kept.
    again = pipeline.push_with_beam(  # A re-run writes nothing: everything is there.
        invalid_dir,
        servers,
        _TABLE,
        on_invalid='skip',
        pipeline_options=options,
        result_dir=str(given),
    )
    assert sorted(os.listdir(given)) == ['server-00000.json', 'server-00001.json']
    assert [s.inserted for s in again.servers] == [s.inserted for s in result.servers]
    drained = [_drain(address) for address in servers]
    assert sorted(drained[0] + drained[1]) == _expected(_LENGTHS, skip={_INVALID})
    placed = [{e for e, _ in origins} for origins in drained]
    assert not placed[0] & placed[1]  # Every episode on one server, whole.


@pytest.mark.slow
def test_a_push_leaves_nothing_in_the_temp_dir(
    dataset_dir, invalid_dir, servers, tmp_path, monkeypatch
):
    scratch = tmp_path / 'tmp'
    scratch.mkdir()
    monkeypatch.setenv('TMPDIR', str(scratch))
    monkeypatch.setattr(tempfile, 'tempdir', str(scratch))
    result = pipeline.push_with_beam(dataset_dir, servers, _TABLE)
    assert result.items == len(_expected(_LENGTHS))
    with pytest.raises(pipeline.DistributedPushError, match='is invalid'):  # Failing, too.
        pipeline.push_with_beam(invalid_dir, servers, _TABLE)
    assert sorted(os.listdir(scratch)) == []


def test_a_server_down_at_start_is_named_before_any_work(dataset_dir, servers):
    dead = f'localhost:{_free_port()}'
    with pytest.raises(errors.ReverbConnectionError, match=f'{dead}.*Nothing was read or written'):
        pipeline.push_with_beam(dataset_dir, [servers[0], dead], _TABLE, timeout_ms=1_000)
    assert _inserted(servers[0]) == 0


@pytest.mark.slow  # A Beam pipeline: about 14 s on a loaded host.
def test_an_invalid_episode_in_raise_mode_fails_before_anything_is_written(invalid_dir, servers):
    with pytest.raises(pipeline.DistributedPushError, match=f'Episode {_INVALID} is invalid'):
        pipeline.push_with_beam(invalid_dir, servers, _TABLE)
    assert [_inserted(a) for a in servers] == [0, 0]


def test_options_are_checked_before_any_work(dataset_dir, servers):
    with pytest.raises(ValueError, match='cross episodes'):
        pipeline.push_with_beam(
            dataset_dir,
            servers,
            _TABLE,
            item=items.Sequence(2, 1, 'continue'),
        )
    with pytest.raises(ValueError, match='distinct host:port'):
        pipeline.push_with_beam(dataset_dir, [servers[0], servers[0]], _TABLE)
    with pytest.raises(errors.TableError, match="Could not find table 'other'"):
        pipeline.push_with_beam(dataset_dir, servers, 'other')


# --- TFDS's default layout: shuffling allowed, shards of more than 16 episodes -----------------

# Unequal lengths (1 to 60 steps), both endings, shards of 25, 25 and 10 episodes: TFDS (and
# `load`) read such shards interleaved 16 episodes at a time, not in shard order.
_LAYOUT_LENGTHS = np.random.default_rng(7).integers(1, 61, size=60).tolist()
_LAYOUT_ENDINGS = [builders.ENDINGS[i % 2] for i in range(len(_LAYOUT_LENGTHS))]
# One worker: the count stage reads two groups of shards, one of them two shards long.
_ONE_WORKER = ['--runner=DirectRunner', '--direct_num_workers=1']


@pytest.fixture(scope='module')
def layout_dir(tmp_path_factory):
    return _write(
        tmp_path_factory.mktemp('beam_layout'),
        _LAYOUT_LENGTHS,
        name='layout',
        per_shard=25,
        endings=_LAYOUT_ENDINGS,
    )


def _drain_items(address: str) -> list[tuple[float, tuple[bytes, ...]]]:
    """Samples every item once (FIFO); returns each item's first observation value and
    contents (every field's bytes)."""
    count = reverb.Client(address).server_info()[_TABLE].current_size
    if count == 0:
        return []
    dataset = reverb.TrajectoryDataset.from_table_signature(
        address, _TABLE, max_in_flight_samples_per_worker=16, rate_limiter_timeout_ms=2_000
    )
    found = []
    for sample in dataset.take(count).batch(1024):
        leaves = [leaf.numpy() for leaf in tree.flatten(sample.data)]
        origins = sample.data.observation.numpy()[:, 0, 0]  # First step, first value.
        found += [
            (float(o), tuple(leaf[i].tobytes() for leaf in leaves)) for i, o in enumerate(origins)
        ]
    return found


def _push_with_beam_and_push(path, num_servers: int, options=None):
    """Pushes with Beam into `num_servers` servers and with `push` into one; checks that
    the servers hold the same items, each once; returns the Beam servers' items."""
    assert not open_builder(path).info.disable_shuffling  # TFDS's default.
    signature = tables.signature_for(items.TwoStep(), load(path))
    reference = reverb.Server([_fifo_table(signature, max_size=100_000)])
    running = [
        reverb.Server([_fifo_table(signature, max_size=100_000)]) for _ in range(num_servers)
    ]
    addresses = [f'localhost:{s.port}' for s in running]
    try:
        push_lib.push(load(path), f'localhost:{reference.port}', _TABLE)
        expected = sorted(_drain_items(f'localhost:{reference.port}'))
        result = pipeline.push_with_beam(path, addresses, _TABLE, pipeline_options=options)
        assert result.items == len(expected)
        drained = [_drain_items(address) for address in addresses]
        assert [len(d) for d in drained] == [s.items for s in result.servers]
        assert sorted(item for d in drained for item in d) == expected
        return drained
    finally:
        for server in [reference, *running]:
            server.stop()


@pytest.mark.parametrize('num_servers', [1, pytest.param(2, marks=pytest.mark.slow)])
def test_beam_push_of_tfds_default_layout_gives_the_items_push_gives(layout_dir, num_servers):
    drained = _push_with_beam_and_push(layout_dir, num_servers, _ONE_WORKER)
    assert len({contents for d in drained for _, contents in d}) == sum(map(len, drained))
    placed = [{int(episode) for episode, _ in d} for d in drained]
    assert sum(len(p) for p in placed) == len(set().union(*placed))  # Whole episodes.
    # Each server's episodes are one index range (its writer reads those shards only).
    ranges = [(min(p), max(p)) for p in placed]
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))


@pytest.mark.slow
def test_beam_push_of_the_embedded_cartpole_dataset_gives_the_items_push_gives(tmp_path):
    path = cartpole.generate(tmp_path)  # The defaults: 250 episodes, shards of 100, 100, 50.
    _push_with_beam_and_push(path, 2)


# --- What the workers read: each episode decoded once, whatever the number of servers ---------


# Every built-in kind that stays within episodes (the Beam pipeline refuses the others).
_PER_EPISODE_KINDS = [
    items.TwoStep(),
    items.NStep(3, 0.9),
    *[
        items.Sequence(4, 3, end=end)
        for end in types.EndBehavior
        if not items.Sequence(4, 3, end=end).crosses_episodes
    ],
    items.Episode(8, overflow='split'),
    items.Episode(8, overflow='truncate'),
    items.Episode(50),
]


@pytest.mark.parametrize('kind', _PER_EPISODE_KINDS, ids=str)
def test_item_counts_from_lengths_equal_the_decoded_counts(dataset_dir, tmp_path, kind):
    # The count stage counts items from the scanned lengths, not from decoded episodes.
    episodes = load(dataset_dir)
    one_step = builders.write_tfds(tmp_path, [_indexed_episode(0, 1)], name='one')
    lengths = np.array([*_LENGTHS, 1], dtype=np.int64)
    counted = counting.count_items_by_length(kind, lengths, specs.get_step_spec(episodes))
    decoded = count_items_per_episode(episodes, kind).tolist()
    decoded += count_items_per_episode(load(one_step), kind).tolist()
    assert counted.tolist() == decoded


@pytest.mark.slow
@pytest.mark.parametrize('num_servers', [1, 2, 4])
def test_beam_decodes_each_episode_once_whatever_the_servers(users_plain_dir, num_servers):
    # TFDS's own writer: 300 episodes in 3 shuffled shards; two workers, so the count stage
    # reads several shard groups and the writers one index range each.
    # In shard order, as the pipeline numbers episodes (a plain read interleaves shards).
    episodes = load(users_plain_dir, read_config=tfds.ReadConfig(interleave_cycle_length=1))
    counts = count_items_per_episode(episodes, items.TwoStep())
    signature = tables.signature_for(items.TwoStep(), episodes)
    running = [
        reverb.Server([_fifo_table(signature, max_size=100_000)]) for _ in range(num_servers)
    ]
    try:
        result = pipeline.push_with_beam(
            users_plain_dir,
            [f'localhost:{s.port}' for s in running],
            _TABLE,
            pipeline_options=['--runner=DirectRunner', '--direct_num_workers=2'],
        )
    finally:
        for server in running:
            server.stop()
    assert result.items == counts.sum() == sum(s.inserted for s in result.servers)
    # The count stage scans every record's bytes once (steps not decoded); each writer
    # decodes its own index range only, from its first episode that gives items (a
    # one-step episode gives no two-step item: the resume point passes it unread).
    placement = routing.assign_servers(counts, num_servers)
    runs = [counts[placement == k] for k in range(num_servers)]
    written = sum(len(run) - resume.find_resume_point(0, run).episode for run in runs)
    assert result.reads == pipeline.ReadCounts(
        records_scanned=len(counts), decoded_to_count=0, decoded_to_write=written
    )
    assert len(counts) - num_servers <= result.reads.decoded <= len(counts)


@pytest.mark.slow
def test_beam_decodes_to_count_only_the_invalid_episode(invalid_dir, servers):
    result = pipeline.push_with_beam(invalid_dir, servers, _TABLE, on_invalid='skip')
    assert result.skipped_episodes == 1
    assert result.items == len(_expected(_LENGTHS, skip={_INVALID}))
    reads = result.reads
    assert (reads.records_scanned, reads.decoded_to_count) == (len(_LENGTHS), 1)
    # A writer whose index range holds the skipped episode decodes it too, and drops it.
    assert len(_LENGTHS) - 1 <= reads.decoded_to_write <= len(_LENGTHS)


@pytest.mark.slow
def test_beam_decodes_image_episodes_to_count_as_the_scan_cannot(tmp_path):
    # PNG-encoded observations: the bulk scan cannot decide them, so the count stage
    # decodes every episode (as before), and the writers decode each once more.
    features = builders.step_features(
        **{types.OBSERVATION: tfds.features.Image(shape=(4, 4, 3), encoding_format='png')}
    )
    lengths = [3, 5, 2, 4, 6, 3]
    episodes = []
    for length in lengths:
        steps = builders.episode(length)
        steps[types.OBSERVATION] = np.zeros((length, 4, 4, 3), np.uint8)
        episodes.append({types.STEPS: steps})
    tfds.dataset_builders.store_as_tfds_dataset(
        name='images',
        version='1.0.0',
        features=features,
        split_datasets={'train': [(str(i), e) for i, e in enumerate(episodes)]},
        data_dir=str(tmp_path),
        disable_shuffling=True,
    )
    path = tmp_path / 'images' / '1.0.0'
    signature = tables.signature_for(items.TwoStep(), load(path))
    running = [reverb.Server([_fifo_table(signature)]) for _ in range(2)]
    try:
        result = pipeline.push_with_beam(path, [f'localhost:{s.port}' for s in running], _TABLE)
    finally:
        for server in running:
            server.stop()
    assert result.items == sum(n - 1 for n in lengths)
    assert result.reads == pipeline.ReadCounts(
        records_scanned=0, decoded_to_count=len(lengths), decoded_to_write=len(lengths)
    )


# --- Faults: a worker killed mid-episode, a server killed and restarted -----------------------

# Long episodes: a kill lands inside one, and a checkpoint taken mid-push returns well before
# the push ends (with 300-step episodes a checkpoint once outlasted the remote server's whole
# share, and the kill came after the push had finished).
_LONG = [1000] * 8


@pytest.fixture(scope='module')
def long_dir(tmp_path_factory):
    return _write(tmp_path_factory.mktemp('beam_long'), _LONG, name='long', per_shard=2)


def _partition_counts(lengths, num_servers):
    counts = [n - 1 for n in lengths]
    placement = routing.assign_servers(counts, num_servers)
    return [
        np.array([c for c, s in zip(counts, placement, strict=True) if s == k])
        for k in range(num_servers)
    ]


@pytest.mark.slow
def test_a_worker_killed_mid_episode_then_a_rerun_writes_exactly_once(long_dir, subprocess_env):
    signature = tables.signature_for(items.TwoStep(), load(long_dir))
    running = [reverb.Server([_fifo_table(signature)]) for _ in range(2)]
    addresses = [f'localhost:{s.port}' for s in running]
    script = (
        'import sys; from rlds_reverb.distribute import pipeline; '
        'pipeline.push_with_beam(sys.argv[1], sys.argv[2], "replay", max_in_flight_items=2)'
    )
    worker = subprocess.Popen(
        [sys.executable, '-c', script, str(long_dir), ','.join(addresses)],
        env=dict(subprocess_env, **_NO_BEAM_LOGS),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    partitions = _partition_counts(_LONG, 2)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and worker.poll() is None:
            held = [_inserted(a) for a in addresses]
            points = [resume.find_resume_point(h, c) for h, c in zip(held, partitions, strict=True)]
            if any(p.items for p in points):
                os.kill(worker.pid, signal.SIGKILL)  # In the middle of an episode.
                break
            time.sleep(0.002)
    finally:
        worker.kill()
        worker.wait(timeout=30)
    time.sleep(0.5)  # Items the server had received land.
    held = [_inserted(a) for a in addresses]
    assert 0 < sum(held) < sum(_LONG) - len(_LONG), 'the kill did not land mid-push'
    result = pipeline.push_with_beam(long_dir, addresses, _TABLE)
    assert [s.inserted for s in result.servers] == [int(c.sum()) for c in partitions]
    drained = _drain(addresses[0]) + _drain(addresses[1])
    assert sorted(drained) == _expected(_LONG)
    for server in running:
        server.stop()


@pytest.mark.slow
def test_a_server_killed_mid_pipeline_is_named_and_a_restart_and_rerun_complete_it(
    long_dir, tmp_path, run_cli
):
    signature = tables.signature_for(items.TwoStep(), load(long_dir))
    local = reverb.Server([_fifo_table(signature)])
    port = _free_port()
    remote = f'localhost:{port}'
    serve_args = ['serve', long_dir, '--count', 1, '--port', port, '--table-preset', 'fifo']
    serve_args += ['--checkpoint-dir', tmp_path / 'ckpt']

    @contextlib.contextmanager
    def remote_server():
        process = run_cli.start(*serve_args)
        try:
            line = process.stdout.readline()
            assert f'on {remote};' in line, line
            yield process
        finally:
            process.kill()
            process.wait(timeout=30)

    addresses = [remote, f'localhost:{local.port}']
    # The failing push runs as its own program, as `rlds-reverb push` does: a Reverb writer
    # whose server died keeps its pending items while its process lives, and would send
    # them to a server restarted on the same address (see docs/distributed.md); the
    # program must exit on its own once it has reported the failure.
    with remote_server() as process:
        push = run_cli.start(
            'push',
            long_dir,
            '--servers',
            ','.join(addresses),
            '--timeout-ms',
            3000,
            '--no-progress',
        )
        client = reverb.Client(remote)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and _inserted(remote) < 200:
            time.sleep(0.002)
        low = _inserted(remote)
        client.checkpoint()
        high = _inserted(remote)
        while time.monotonic() < deadline and _inserted(remote) < high + 50:
            time.sleep(0.002)
        process.send_signal(signal.SIGKILL)
        err = ''
        while 'rlds-reverb push: error:' not in err:  # Bounded: the push fails in 3 s.
            line = push.stderr.readline()
            assert line, err
            err += line
        # The failed writer is closed (WriterEngine.close): the program exits by itself.
        try:
            assert push.wait(timeout=60) == 2
        finally:
            push.kill()
    assert f'Reverb server at {remote}' in err
    assert f'{remote}: not answering' in err

    with remote_server():
        restored = _wait_inserted(remote)  # The checkpoint's items; later ones are lost.
        assert low <= restored <= high < 4 * (_LONG[0] - 1)
        result = pipeline.push_with_beam(long_dir, addresses, _TABLE)
        partitions = _partition_counts(_LONG, 2)
        assert [s.inserted for s in result.servers] == [int(c.sum()) for c in partitions]
        drained = _drain(remote) + _drain(addresses[1])
    assert sorted(drained) == _expected(_LONG)
    local.stop()


# --- The command line ------------------------------------------------------------------------


@pytest.mark.slow  # The CLI on a Beam pipeline: about 5 s of CPU, 20 s on a loaded host.
def test_cli_push_servers_runs_the_pipeline(run_cli, dataset_dir, servers):
    code, out, err = run_cli(
        'push',
        dataset_dir,
        '--servers',
        ','.join(servers),
        '--runner',
        'DirectRunner',
        '--table',
        _TABLE,
        '--no-progress',
        '--direct_runner_bundle_repeat=1',
    )
    assert code == 0, err
    total = len(_expected(_LENGTHS))
    assert f'Pushed {total} items ({len(_LENGTHS)} episodes' in out
    assert 'spread' in out
    assert sum(_inserted(a) for a in servers) == total


def test_cli_push_refuses_beam_options_without_servers(run_cli, dataset_dir, servers):
    code, _, err = run_cli('push', dataset_dir, '--server', servers[0], '--direct_num_workers=2')
    assert code == 2 and 'unrecognized arguments: --direct_num_workers=2' in err
    code, _, err = run_cli('push', dataset_dir, '--servers', servers[0], '--workers', 2)
    assert code == 2 and '--servers runs the Beam pipeline' in err
    with pytest.raises(SystemExit):
        run_cli('info', dataset_dir, '--direct_num_workers=2')
