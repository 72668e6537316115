"""`rlds_reverb.serve.status`: a live server's numbers equal what was written and sampled.

The server holds one table of each kind (`reverb_tables.make_status_tables`); each test
starts from empty tables, pushes THREE_EPISODES (5 two-step items) with `rlds_reverb.push`,
inserts and samples with a Reverb client, and compares the status with what it did.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest
import reverb

import rlds_reverb
from rlds_reverb.core import errors
from rlds_reverb.serve import status
from tests import builders
from tests.cases.episodes import THREE_EPISODES
from tests.reverb_tables import STATUS_ITEMS_PER_PUSH, make_status_tables

_ITEMS = STATUS_ITEMS_PER_PUSH
_PUSHED = ('uniform', 'prioritized', 'queue')


@pytest.fixture(scope='module')
def server():
    running = reverb.Server(make_status_tables(), port=None)
    yield running
    running.stop()


@pytest.fixture
def client(server) -> reverb.Client:
    """A client of `server`, every table emptied (its counters too)."""
    client = reverb.Client(f'localhost:{server.port}')
    for name in client.server_info():
        client.reset(name)
    return client


def _push(client: reverb.Client, tables=_PUSHED, **options) -> rlds_reverb.PushStats:
    return rlds_reverb.push(builders.case_dataset(THREE_EPISODES), client, list(tables), **options)


def _sample(client: reverb.Client, table: str, count: int) -> list:
    return list(client.sample(table, num_samples=count, emit_timesteps=False))


def test_counts_equal_what_was_pushed_and_sampled(client):
    stats = _push(client)
    _push(client, tables=('uniform',))
    _sample(client, 'uniform', 7)
    _sample(client, 'queue', 2)
    snapshot = status.fetch_server_status(client)
    uniform, prioritized, queue = (snapshot.table(name) for name in _PUSHED)
    assert stats.items == {name: _ITEMS for name in _PUSHED}
    assert (uniform.size, uniform.inserts, uniform.samples, uniform.removed) == (
        2 * _ITEMS,
        2 * _ITEMS,
        7,
        0,
    )
    # Reverb counts the episodes its items refer to: the single-step episode gives no item.
    assert (stats.episodes, uniform.episodes) == (3, 2 * 2)
    assert 1 <= uniform.unique_samples <= 7
    assert (prioritized.size, prioritized.inserts, prioritized.samples) == (_ITEMS, _ITEMS, 0)
    # The queue removed the 2 items it served.
    assert (queue.size, queue.inserts, queue.samples, queue.removed) == (_ITEMS - 2, _ITEMS, 2, 2)
    assert (uniform.max_size, queue.max_size, queue.max_times_sampled) == (1000, 100, 1)
    assert uniform.has_signature and not snapshot.table('unsigned').has_signature
    assert [t.name for t in snapshot.tables] == sorted(t.name for t in snapshot.tables)


def test_selectors_are_named(client):
    snapshot = status.fetch_server_status(client)
    kinds = {t.name: (t.sampler.describe(), t.remover.describe()) for t in snapshot.tables}
    assert kinds['uniform'] == ('uniform', 'FIFO')
    assert kinds['prioritized'] == ('prioritized (exponent 0.6)', 'FIFO')
    assert kinds['queue'] == ('FIFO', 'FIFO')


def test_eviction_counts_as_removed(client):
    _push(client, tables=('small',), allow_eviction=True)
    small = status.fetch_server_status(client).table('small')
    assert (small.size, small.inserts, small.removed) == (3, _ITEMS, _ITEMS - 3)
    assert small.removed_episodes >= 1  # The first episode's items all went.


def test_rate_limiter_gates_follow_reverbs_rule(client):
    # STATUS_RATIO: cursor = inserts - samples, kept in [-1, 3].
    ratio = status.fetch_server_status(client).table('ratio').rate_limiter
    assert (ratio.sampling, ratio.inserting) == (
        status.LimiterGate.BELOW_MIN_SIZE,
        status.LimiterGate.OPEN,
    )
    assert (ratio.samples_per_insert, ratio.min_size_to_sample) == (1.0, 1)
    assert (ratio.min_diff, ratio.max_diff) == (-1.0, 3.0)
    assert 'error buffer 2' in ratio.describe()
    for value in range(3):
        client.insert(np.float32(value), {'ratio': 1.0})
    ratio = status.fetch_server_status(client).table('ratio').rate_limiter
    assert ratio.cursor == 3.0
    assert (ratio.sampling, ratio.inserting) == (
        status.LimiterGate.OPEN,
        status.LimiterGate.AT_MAX_DIFF,
    )
    _sample(client, 'ratio', 4)  # Cursor 3 -> -1: the most the limiter allows.
    ratio = status.fetch_server_status(client).table('ratio').rate_limiter
    assert ratio.cursor == -1.0
    assert (ratio.sampling, ratio.inserting) == (
        status.LimiterGate.AT_MIN_DIFF,
        status.LimiterGate.OPEN,
    )
    uniform = status.fetch_server_status(client).table('uniform').rate_limiter
    assert uniform.is_unbounded and 'MinSize' in uniform.describe()


def test_the_next_sample_blocks_when_the_status_says_so(client):
    # The gate is Reverb's: a sample that status calls blocked does not come within 0.5 s.
    for value in range(3):
        client.insert(np.float32(value), {'ratio': 1.0})
    _sample(client, 'ratio', 4)
    assert status.fetch_server_status(client).table('ratio').rate_limiter.sampling is (
        status.LimiterGate.AT_MIN_DIFF
    )
    infos = status._sample_infos(client, 'ratio', 1, timeout_ms=500)
    assert infos == []
    client.insert(np.float32(3), {'ratio': 1.0})  # Lets the waiting sample through.
    deadline = time.monotonic() + 10
    while status.fetch_server_status(client).table('ratio').samples < 5:
        assert time.monotonic() < deadline, 'the waiting sample never came'
        time.sleep(0.05)


def test_status_alone_changes_nothing(client):
    _push(client)
    first = status.fetch_server_status(client)
    second = status.fetch_server_status(client)
    assert [t.priority_reading for t in first.tables] == [status.PriorityReading.NOT_ASKED] * 6
    assert first.tables == second.tables


def test_priorities_are_read_only_when_asked_and_counted(client):
    for priority in (1.0, 2.0, 3.0, 4.0):
        client.insert(np.float32(priority), {'unsigned': priority})
    _push(client, priority=2.5)
    snapshot = status.fetch_server_status(client, priority_samples=200)
    unsigned = snapshot.table('unsigned')
    assert unsigned.priority_reading is status.PriorityReading.READ
    assert unsigned.samples == 200  # The status's own samples, counted.
    summary = unsigned.priorities
    assert (summary.samples, summary.distinct_items) == (200, 4)
    assert (summary.minimum, summary.maximum) == (1.0, 4.0)
    assert summary.estimated_table_mean == pytest.approx(summary.mean)  # Uniform: P = 1/N.
    prioritized = snapshot.table('prioritized').priorities
    assert (prioritized.minimum, prioritized.maximum) == (2.5, 2.5)
    assert prioritized.estimated_table_mean == pytest.approx(2.5)
    assert 'counted as samples' in snapshot.table('prioritized').format()


def test_a_prioritized_tables_mean_is_estimated_without_its_bias(client):
    # Priorities 1 + the first reward of each item: 1, 2, 21, 22, 23 (mean 13.8).
    _push(client, tables=('prioritized',), priority=lambda batch: batch.reward[:, 0] + 1.0)
    summary = status.fetch_server_status(client, priority_samples=400).table('prioritized')
    summary = summary.priorities
    assert (summary.minimum, summary.maximum) == (1.0, 23.0)
    assert summary.mean > 16  # High priorities are drawn more often than 1 in 5.
    assert summary.estimated_table_mean == pytest.approx(13.8, abs=1.0)


def test_queue_is_never_drained(client):
    _push(client)
    for _ in range(3):
        snapshot = status.fetch_server_status(client, priority_samples=50)
    queue = snapshot.table('queue')
    assert (queue.size, queue.samples, queue.removed) == (_ITEMS, 0, 0)
    assert queue.priority_reading is status.PriorityReading.REMOVES_ITEMS
    assert queue.priorities is None


def test_tables_where_sampling_acts_are_not_sampled(client):
    for value in range(2):
        client.insert(np.float32(value), {'ratio': 1.0})
    snapshot = status.fetch_server_status(client, priority_samples=10)
    assert snapshot.table('ratio').priority_reading is status.PriorityReading.MOVES_LIMITER
    assert snapshot.table('ratio').samples == 0
    assert snapshot.table('small').priority_reading is status.PriorityReading.EMPTY


def test_a_sample_that_never_comes_is_bounded(server):
    fresh = reverb.Server([rlds_reverb.tables.uniform('empty', max_size=10)], port=None)
    try:
        client = reverb.Client(f'localhost:{fresh.port}')
        start = time.monotonic()
        assert status._sample_infos(client, 'empty', 1, timeout_ms=300) == []
        assert time.monotonic() - start < 5
        client.insert(np.float32(0), {'empty': 1.0})  # Releases the waiting sampler thread.
        for thread in threading.enumerate():
            if thread.name == 'status-sample-empty':
                thread.join(10)
    finally:
        fresh.stop()


def test_json_holds_the_same_numbers(client):
    _push(client)
    snapshot = status.fetch_server_status(client)
    plain = json.loads(json.dumps(snapshot.to_json(), allow_nan=False))
    tables = {table['name']: table for table in plain['tables']}
    assert tables['uniform']['inserts'] == _ITEMS
    assert tables['prioritized']['sampler'] == {'kind': 'prioritized', 'priority_exponent': 0.6}
    assert tables['queue']['priority_reading'] == status.PriorityReading.NOT_ASKED.value
    assert plain['address'] == snapshot.address
    assert plain['taken_at'].endswith('+00:00')


def test_format_names_every_number(client):
    _push(client)
    text = status.fetch_server_status(client).format()
    assert text.startswith(f'Reverb server {client.server_address} at ')
    block = text.split("table 'uniform'\n")[1].split('\n\n')[0]
    assert f'size          {_ITEMS} / 1,000 items' in block
    assert f'inserts       {_ITEMS} (0 removed since)' in block
    assert 'sampler       uniform; remover FIFO; max times sampled no limit' in block
    assert 'sampling open; inserts open' in block
    assert 'priorities    not read: no samples asked for' in block


def test_unknown_table_raises_key_error(client):
    with pytest.raises(KeyError, match="No table 'nope'; the server has"):
        status.fetch_server_status(client).table('nope')


def test_bad_arguments_raise(client):
    with pytest.raises(ValueError, match='timeout_ms=0 is not valid'):
        status.fetch_server_status(client, timeout_ms=0)
    with pytest.raises(ValueError, match='priority_samples=-1 is not valid'):
        status.fetch_server_status(client, priority_samples=-1)


def test_dead_server_is_named_at_once():
    with socket.socket() as sock:
        sock.bind(('localhost', 0))
        address = f'localhost:{sock.getsockname()[1]}'
    start = time.monotonic()
    with pytest.raises(
        errors.ReverbConnectionError, match=f'No Reverb server answered at {address}'
    ):
        status.fetch_server_status(address)
    assert time.monotonic() - start < 15
