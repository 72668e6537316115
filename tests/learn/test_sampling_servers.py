"""One logical table over several real in-process Reverb servers: per-batch server counts,
importance weights in the logical table (against NumPy), priorities routed back by server;
and tables whose signature has unknown dimensions (issue 10)."""

from __future__ import annotations

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlds_reverb.core.errors import EmptyTableError, ReverbConnectionError
from rlds_reverb.learn import sampling
from rlds_reverb.serve import tables
from tests import reverb_tables

ITEM_SPEC = {
    'observation': tf.TensorSpec([3], tf.float32),
    'source': tf.TensorSpec([], tf.int64),
}
IMAGE_SPEC = {'image': tf.TensorSpec([None, None, 3], tf.uint8)}  # A robosuite `Image()`.
ALPHA = 0.8  # Priority exponent of the prioritized tables.


def _make_tables() -> list[reverb.Table]:
    return [
        tables.prioritized('prio', priority_exponent=ALPHA, max_size=100, signature=ITEM_SPEC),
        tables.uniform('uni', max_size=100, signature=ITEM_SPEC),
        tables.uniform('images', max_size=10, signature=IMAGE_SPEC),
        tables.uniform('no_images', max_size=10, signature=IMAGE_SPEC),
    ]


@pytest.fixture(scope='module')
def servers():
    """Two real servers holding the same tables (one logical table per name)."""
    started = [reverb.Server(_make_tables()), reverb.Server(_make_tables())]
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def clients(servers) -> list[reverb.Client]:
    return [reverb_tables.clean_client(server) for server in servers]


def _insert(client: reverb.Client, table: str, sources, priorities=None) -> None:
    """Inserts one item per id in `sources` (`source` = id), at `priorities` (default 1)."""
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i, source in enumerate(sources):
            writer.append({'observation': np.full([3], source, np.float32), 'source': source})
            item = {k: writer.history[k][-1] for k in ITEM_SPEC}
            writer.create_item(table, 1.0 if priorities is None else float(priorities[i]), item)
        writer.flush()


def _learner(clients, table='uni', **kwargs) -> sampling.LearnerDataset:
    kwargs.setdefault('batch_size', 8)
    return sampling.LearnerDataset(
        [c.server_address for c in clients],
        table,
        data_spec=ITEM_SPEC,
        sequence_length=None,
        **kwargs,
    )


def _read_priorities(client: reverb.Client, table: str, num_items: int) -> dict[int, float]:
    """Returns {key: priority} of every item of a uniform table, by sampling it repeatedly."""
    found: dict[int, float] = {}
    while len(found) < num_items:
        for sample in client.sample(table, num_samples=64, emit_timesteps=False):
            found[int(sample.info.key)] = float(sample.info.priority)
    return found


@pytest.mark.parametrize(
    ('count', 'sizes', 'ratios', 'expected'),
    [
        (256, [15_000, 5_000], None, [192, 64]),
        (10, [12, 6], None, [7, 3]),
        (8, [0, 0], None, [4, 4]),
        (8, [100, 0], None, [8, 0]),
        (9, [100, 100, 100], [1, 1, 1], [3, 3, 3]),
        (10, [5, 500], [3, 1], [8, 2]),
    ],
)
def test_server_counts_are_proportional_with_largest_remainder(count, sizes, ratios, expected):
    assert sampling.compute_server_counts(count, sizes=sizes, ratios=ratios) == expected


@pytest.mark.parametrize(
    ('ratios', 'match'),
    [([1], 'one ratio per server'), ([1, -1], 'finite and >= 0'), ([0, 0], 'positive number')],
)
def test_bad_server_ratios_are_refused(clients, ratios, match):
    with pytest.raises(ValueError, match=match):
        _learner(clients, server_ratios=ratios)


def test_servers_listed_twice_or_none_are_refused(clients):
    address = clients[0].server_address
    with pytest.raises(ValueError, match='names a server twice'):
        _learner([clients[0], clients[0]])
    with pytest.raises(ValueError, match='non-empty list'):
        sampling.LearnerDataset([], 'uni', data_spec=ITEM_SPEC, batch_size=2)
    with pytest.raises(ReverbConnectionError, match='localhost:1 '):
        sampling.LearnerDataset(
            [address, 'localhost:1'], 'uni', data_spec=ITEM_SPEC, batch_size=2,
            sequence_length=None, server_info_timeout_s=1,
        )  # fmt: skip


def test_every_batch_draws_from_servers_in_proportion_to_their_sizes(clients):
    _insert(clients[0], 'uni', range(30))
    _insert(clients[1], 'uni', range(1000, 1010))
    learner = _learner(clients, batch_size=8)
    assert [(s.server_index, s.count) for s in learner.sources] == [(0, 6), (1, 2)]
    for batch in learner.as_dataset().take(5):
        server_index = batch.server_index.numpy()
        np.testing.assert_array_equal(server_index, [0] * 6 + [1] * 2)
        # Each sample really came from the server its index names.
        np.testing.assert_array_equal(batch.experience['source'].numpy() >= 1000, server_index == 1)


def test_server_ratios_set_the_counts(clients):
    _insert(clients[0], 'uni', range(30))
    _insert(clients[1], 'uni', range(1000, 1010))
    learner = _learner(clients, batch_size=8, server_ratios=[1, 3])
    batch = next(iter(learner.as_dataset()))
    np.testing.assert_array_equal(batch.server_index.numpy(), [0] * 2 + [1] * 6)


def test_importance_weights_use_the_logical_table_and_match_numpy(clients):
    """w_i = (N · share_s · P_s(i))^−β / max_j w_j, N summed over the servers."""
    ids = [np.arange(12), 1000 + np.arange(6)]
    priority_of = {int(i): 0.5 + (int(i) % 7) for group in ids for i in group}
    for client, group in zip(clients, ids, strict=True):
        _insert(client, 'prio', group, [priority_of[int(i)] for i in group])
    beta = 0.6
    learner = _learner(clients, 'prio', batch_size=10, beta=beta)
    assert [s.count for s in learner.sources] == [7, 3]  # 10 · 12/18 = 6.67, 10 · 6/18 = 3.33
    for batch in learner.as_dataset().take(3):
        sources = batch.experience['source'].numpy()
        server = batch.server_index.numpy()
        scaled = {s: sum(priority_of[int(i)] ** ALPHA for i in ids[s]) for s in (0, 1)}
        p_server = np.array(
            [priority_of[int(i)] ** ALPHA / scaled[s] for i, s in zip(sources, server, strict=True)]
        )
        np.testing.assert_allclose(batch.info.probability.numpy(), p_server, rtol=1e-6)
        share = np.where(server == 0, 7 / 10, 3 / 10)
        raw = (18 * share * p_server) ** -beta
        np.testing.assert_allclose(batch.weights.numpy(), raw / raw.max(), rtol=1e-5)


def test_uniform_servers_in_proportion_give_uniform_weights(clients):
    _insert(clients[0], 'uni', range(20))
    _insert(clients[1], 'uni', range(1000, 1005))
    learner = _learner(clients, batch_size=5, beta=1.0)  # counts 4 / 1 = the size shares
    batch = next(iter(learner.as_dataset()))
    np.testing.assert_allclose(batch.weights.numpy(), np.ones(5), rtol=1e-6)


def test_priority_updates_reach_the_server_each_key_came_from(clients):
    sizes = (12, 6)
    _insert(clients[0], 'uni', range(sizes[0]))
    _insert(clients[1], 'uni', range(1000, 1000 + sizes[1]))
    learner = _learner(clients, batch_size=9)
    batch = next(iter(learner.as_dataset()))
    keys = batch.info.key.numpy()
    td_errors = np.arange(1, 10, dtype=np.float64)  # Priorities 1.5 ... 9.5 with ε = 0.5.

    @tf.function
    def update(keys, td_errors, server_index):  # As in a train step.
        learner.update_priorities(keys, td_errors, server_index=server_index, epsilon=0.5)

    update(tf.constant(keys), tf.constant(td_errors), batch.server_index)
    stored = [_read_priorities(c, 'uni', n) for c, n in zip(clients, sizes, strict=True)]
    expected: list[dict[int, float]] = [{}, {}]
    for key, server, td_error in zip(keys, batch.server_index.numpy(), td_errors, strict=True):
        expected[server][int(key)] = td_error + 0.5  # A key sampled twice keeps its last.
    for server in (0, 1):
        assert expected[server], 'each server gave samples'
        for key, priority in expected[server].items():
            assert stored[server][key] == priority  # Updated, on its own server.
            assert key not in stored[1 - server]
        untouched = set(stored[server]) - set(expected[server])
        assert all(stored[server][key] == 1.0 for key in untouched)


def test_keys_sent_to_the_wrong_server_are_silently_ignored_by_reverb(clients):
    """Why routing matters: Reverb drops, without an error, keys a server does not hold."""
    _insert(clients[0], 'uni', range(3))
    _insert(clients[1], 'uni', range(1000, 1003))
    keys_of_1 = list(_read_priorities(clients[1], 'uni', 3))
    clients[0].mutate_priorities('uni', updates=dict.fromkeys(keys_of_1, 7.0))  # No error...
    assert set(_read_priorities(clients[1], 'uni', 3).values()) == {1.0}  # ...and no update.


def test_server_index_is_required_across_servers(clients):
    learner = _learner(clients)
    with pytest.raises(ValueError, match='server_index is required'):
        learner.update_priorities(tf.constant([1], tf.uint64), tf.constant([0.5]))


def test_one_server_in_a_list_behaves_as_one_address(clients):
    _insert(clients[0], 'uni', range(5))
    learner = _learner(clients[:1], batch_size=4, beta=0.5)
    batch = next(iter(learner.as_dataset()))
    np.testing.assert_array_equal(batch.server_index.numpy(), [0] * 4)
    np.testing.assert_allclose(batch.weights.numpy(), np.ones(4), rtol=1e-6)


def _insert_images(client: reverb.Client, table: str, count: int) -> None:
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i in range(count):
            writer.append({'image': np.full([4, 5, 3], i, np.uint8)})
            writer.create_item(table, 1.0, {'image': writer.history['image'][-1]})
        writer.flush()


def test_unknown_dimensions_sample_with_a_timeout(clients):
    """Issue 10: an `Image()` of shape (None, None, 3) with rate_limiter_timeout_ms."""
    _insert_images(clients[0], 'images', 3)
    learner = sampling.LearnerDataset(
        clients[0].server_address, 'images', data_spec=IMAGE_SPEC, batch_size=2,
        sequence_length=None, rate_limiter_timeout_ms=1000,
    )  # fmt: skip
    batch = next(iter(learner))
    assert batch.experience['image'].shape == (2, 4, 5, 3)
    assert batch.experience['image'].dtype == tf.uint8


def test_unknown_dimensions_on_an_empty_table_say_it_is_empty(clients):
    learner = sampling.LearnerDataset(
        clients[0].server_address, 'no_images', data_spec=IMAGE_SPEC, batch_size=2,
        sequence_length=None, rate_limiter_timeout_ms=100,
    )  # fmt: skip
    with pytest.raises(EmptyTableError, match='^Reverb table no_images gave no sample'):
        next(iter(learner))


def test_tables_that_limit_samples_are_read_by_one_iterator(clients):
    """A second iterator could hold back the last samples a limiter allows."""
    limited = [
        tables.uniform('uni', max_size=100, signature=ITEM_SPEC, max_times_sampled=1),
        tables.uniform('uni_ratio', max_size=100, signature=ITEM_SPEC, samples_per_insert=2.0,
                       min_size_to_sample=1, error_buffer=10.0),
    ]  # fmt: skip
    server = reverb.Server(limited)
    try:
        client = reverb.Client(f'localhost:{server.port}')
        learner = _learner([client], {'uni': 1, 'uni_ratio': 1}, batch_size=8)
        assert learner.iterator_counts == [[4], [4]]
        assert _learner(clients, batch_size=8).iterator_counts == [[2, 2], [2, 2]]
    finally:
        server.stop()
