"""Learner datasets against a real in-process Reverb server: mixing, weights, priorities."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlds_reverb.core import types
from rlds_reverb.core.errors import (
    EmptyTableError,
    ReverbConnectionError,
    SpecMismatchError,
    TableError,
)
from rlds_reverb.learn import priorities, sampling
from rlds_reverb.serve import tables
from tests import reverb_tables

ITEM_SPEC = {
    'observation': tf.TensorSpec([3], tf.float32),
    'source': tf.TensorSpec([], tf.int64),
    types.DATA_VERSION: tf.TensorSpec([], tf.int64),
}


def _table_presets() -> list[reverb.Table]:
    return [
        tables.uniform('mix_a', max_size=1000, signature=ITEM_SPEC),
        tables.uniform('mix_b', max_size=1000, signature=ITEM_SPEC),
        tables.prioritized('prio', priority_exponent=1.0, max_size=1000, signature=ITEM_SPEC),
        tables.prioritized('empty', priority_exponent=1.0, max_size=10, signature=ITEM_SPEC),
        tables.uniform('versions', max_size=1000, signature=ITEM_SPEC),
        tables.uniform('once', max_size=100, signature=ITEM_SPEC, max_times_sampled=1),
        tables.fifo_queue('queue', max_size=100, signature=ITEM_SPEC),
        reverb.Table.queue('unsigned', max_size=10),
    ]


def _insert(client, table, count, *, source=0, versions=None, priorities_=None):
    """Inserts `count` single-step items (no time axis): `source` tags the table."""
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i in range(count):
            writer.append(
                {
                    'observation': np.full([3], i, np.float32),
                    'source': np.int64(source * 1000 + i),
                    types.DATA_VERSION: np.int64(0 if versions is None else versions[i]),
                }
            )
            item = {k: writer.history[k][-1] for k in ITEM_SPEC}
            priority = 1.0 if priorities_ is None else float(priorities_[i])
            writer.create_item(table, priority, item)
        writer.flush()


@pytest.fixture(scope='module')
def server():
    server = reverb.Server(_table_presets())
    yield server
    server.stop()


@pytest.fixture
def client(server):
    return reverb_tables.clean_client(server)


def _learner(client, tables_, **kwargs) -> sampling.LearnerDataset:
    kwargs.setdefault('batch_size', 10)
    return sampling.LearnerDataset(
        client.server_address, tables_, data_spec=ITEM_SPEC, sequence_length=None, **kwargs
    )


@pytest.mark.parametrize(
    ('ratios', 'batch_size', 'expected'),
    [
        ({'a': 1, 'b': 1, 'c': 1}, 256, {'a': 86, 'b': 85, 'c': 85}),
        ({'a': 0.7, 'b': 0.3}, 10, {'a': 7, 'b': 3}),
        ({'a': 2, 'b': 0}, 5, {'a': 5, 'b': 0}),
        ({'a': 0.15, 'b': 0.15, 'c': 0.7}, 7, {'a': 1, 'b': 1, 'c': 5}),
        ('a', 32, {'a': 32}),
    ],
)
def test_mix_counts_use_largest_remainder(ratios, batch_size, expected):
    counts = sampling.compute_mix_counts(ratios, batch_size)
    assert counts == expected
    assert sum(counts.values()) == batch_size


@pytest.mark.parametrize(
    ('ratios', 'match'),
    [
        ({'a': 0, 'b': 0}, 'sum to a positive number'),
        ({}, 'sum to a positive number'),
        ({'a': -1, 'b': 2}, "ratio of table 'a' must be finite and >= 0"),
        ({'a': float('nan')}, "ratio of table 'a' must be finite"),
        ({'a': 'x'}, "ratio of table 'a' must be a number"),
    ],
)
def test_bad_ratios_are_refused(ratios, match):
    with pytest.raises(ValueError, match=match):
        sampling.compute_mix_counts(ratios, 8)


def test_bad_batch_size_is_refused():
    with pytest.raises(ValueError, match='batch_size=0 is not valid; expected an integer >= 1'):
        sampling.compute_mix_counts('a', 0)


def test_every_batch_mixes_tables_exactly(client):
    _insert(client, 'mix_a', 50, source=1)
    _insert(client, 'mix_b', 50, source=2)
    learner = _learner(client, {'mix_a': 0.7, 'mix_b': 0.3}, num_workers_per_iterator=2)
    for batch in learner.as_dataset().take(20):
        sources = batch.experience['source'].numpy() // 1000
        np.testing.assert_array_equal(np.sort(sources), [1] * 7 + [2] * 3)
        np.testing.assert_array_equal(batch.table_index.numpy(), [0] * 7 + [1] * 3)


def test_unknown_table_is_named(client):
    with pytest.raises(TableError, match=r"Could not find table 'nope'.*tables exist: .*mix_a"):
        _learner(client, {'mix_a': 1.0, 'nope': 1.0})


def test_signature_mismatch_shows_the_diff(client):
    wrong = {**ITEM_SPEC, 'observation': tf.TensorSpec([4], tf.float32)}
    with pytest.raises(
        SpecMismatchError, match=r'observation: expected float32\[3\], found float32\[4\]'
    ):
        sampling.LearnerDataset(
            client.server_address, 'mix_a', data_spec=wrong, batch_size=4, sequence_length=None
        )


def test_importance_weights_match_numpy(client):
    _insert(client, 'prio', 20, priorities_=np.arange(1, 21))
    learner = _learner(client, 'prio', beta=0.6, batch_size=16)
    for batch in learner.as_dataset().take(5):
        n = batch.info.table_size.numpy().astype(np.float64)
        expected = (n * batch.info.probability.numpy()) ** -0.6
        expected /= expected.max()
        np.testing.assert_allclose(batch.weights.numpy(), expected, rtol=1e-5)
        assert batch.weights.dtype == tf.float32


def test_beta_variable_and_schedule_are_read_per_batch(client):
    _insert(client, 'prio', 20, priorities_=np.arange(1, 21))
    beta = tf.Variable(0.0, dtype=tf.float64)
    batches = iter(_learner(client, 'prio', beta=beta, prefetch_batches=0).as_dataset())
    np.testing.assert_allclose(next(batches).weights.numpy(), 1.0)
    step = tf.Variable(0, dtype=tf.int64)
    schedule = priorities.linear_beta_schedule(step, start=0.2, end=1.0, num_steps=10)
    np.testing.assert_allclose(schedule().numpy(), 0.2)
    step.assign(5)
    np.testing.assert_allclose(schedule().numpy(), 0.6)
    step.assign(50)
    np.testing.assert_allclose(schedule().numpy(), 1.0)


@pytest.mark.parametrize('beta', [1.5, -0.1, float('nan')])
def test_beta_outside_unit_interval_is_refused(client, beta):
    with pytest.raises(ValueError, match=r'outside \[0, 1\]'):
        _learner(client, 'prio', beta=beta)


def test_beta_variable_outside_unit_interval_fails_when_read(client):
    _insert(client, 'prio', 5)
    beta = tf.Variable(2.0, dtype=tf.float64)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r'beta must lie in \[0, 1\]'):
        next(iter(_learner(client, 'prio', beta=beta, batch_size=2).as_dataset()))


def test_bad_schedule_arguments_are_refused():
    step = tf.Variable(0)
    with pytest.raises(ValueError, match=r'outside \[0, 1\]'):
        priorities.linear_beta_schedule(step, start=1.2, num_steps=5)
    with pytest.raises(ValueError, match='num_steps=0 is not valid; expected an integer >= 1'):
        priorities.linear_beta_schedule(step, num_steps=0)


def _frequency_of_source(learner, source: int, num_batches: int) -> float:
    sources = [b.experience['source'].numpy() for b in learner.as_dataset().take(num_batches)]
    return float(np.mean(np.concatenate(sources) == source))


def test_priority_update_changes_the_sampling_distribution(client):
    _insert(client, 'prio', 10)
    learner = _learner(client, 'prio', batch_size=50)
    batches = list(learner.as_dataset().take(20))
    # Equal priorities: item 0 comes out about 10% of the time (1,000 draws).
    sources = np.concatenate([b.experience['source'].numpy() for b in batches])
    assert np.mean(sources == 0) < 0.25
    keys = np.concatenate([b.info.key.numpy() for b in batches])
    key_of_item_0 = tf.constant(keys[sources == 0][:1])

    @tf.function
    def train_step(keys):
        # TD error 99 and epsilon 1: priority 100 against 1 for the 9 others.
        learner.update_priorities(keys, tf.constant([99.0]), epsilon=1.0)

    train_step(key_of_item_0)
    # Item 0 now has probability 100 / 109 ≈ 0.92.
    assert _frequency_of_source(learner, 0, 20) > 0.75


def test_priority_update_inside_tf_function_reaches_reverb(client):
    _insert(client, 'prio', 4)
    learner = _learner(client, 'prio', batch_size=4)
    batch = next(iter(learner.as_dataset()))
    chosen = batch.info.key[:1]

    @tf.function
    def update(keys):
        learner.update_priorities(keys, tf.constant([9.0]), epsilon=1.0)

    update(chosen)
    samples = [b for b in learner.as_dataset().take(20)]
    seen = {
        int(k): float(p)
        for b in samples
        for k, p in zip(b.info.key.numpy(), b.info.priority.numpy(), strict=True)
    }
    assert seen[int(chosen[0])] == pytest.approx(10.0)
    assert all(p == pytest.approx(1.0) for k, p in seen.items() if k != int(chosen[0]))


@pytest.mark.parametrize('bad', [float('nan'), float('inf')])
def test_bad_priorities_are_refused_naming_the_keys(client, bad):
    _insert(client, 'prio', 4)
    learner = _learner(client, 'prio', batch_size=4)
    batch = next(iter(learner.as_dataset()))
    td_errors = tf.constant([0.5, bad, 0.5, 0.5])
    bad_key = str(int(batch.info.key[1]))

    @tf.function
    def update(keys, errors):
        learner.update_priorities(keys, errors)

    with pytest.raises(
        tf.errors.InvalidArgumentError, match=f'(?s)Refusing.*table prio.*{bad_key}'
    ):
        update(batch.info.key, td_errors)
    with pytest.raises(tf.errors.InvalidArgumentError, match='Bad keys'):
        learner.update_priorities(batch.info.key, td_errors)  # Eager too.
    priorities_seen = [b.info.priority.numpy() for b in learner.as_dataset().take(5)]
    np.testing.assert_allclose(np.concatenate(priorities_seen), 1.0)  # Nothing reached Reverb.


def test_negative_priorities_and_bad_options_are_refused(client):
    keys = tf.constant([1, 2], tf.uint64)
    with pytest.raises(tf.errors.InvalidArgumentError, match='Refusing.*must be finite and >= 0'):
        priorities.check_priorities(keys, tf.constant([1.0, -1.0], tf.float64), table='t')
    with pytest.raises(ValueError, match='epsilon=-1.0 must be finite and >= 0'):
        priorities.check_priority_options(epsilon=-1.0, exponent=1.0)
    with pytest.raises(ValueError, match='exponent=0.0 must be finite and > 0'):
        priorities.check_priority_options(epsilon=0.0, exponent=0.0)


def test_mix_priority_update_needs_table_index(client):
    learner = _learner(client, {'mix_a': 1, 'mix_b': 1})
    with pytest.raises(ValueError, match='table_index is required'):
        learner.update_priorities(tf.constant([1], tf.uint64), tf.constant([1.0]))


def test_stale_samples_are_dropped_and_counted(client):
    _insert(client, 'versions', 10, versions=np.arange(10))
    version = tf.Variable(9, dtype=tf.int64)
    staleness = sampling.StalenessFilter(version, max_staleness=3)
    learner = _learner(client, 'versions', staleness=staleness, batch_size=8)
    versions = np.concatenate(
        [b.experience[types.DATA_VERSION].numpy() for b in learner.as_dataset().take(10)]
    )
    assert versions.min() >= 6
    assert len(versions) == 80
    assert int(staleness.dropped.numpy()) > 0


def test_staleness_needs_a_version_field(client):
    spec = {'observation': tf.TensorSpec([3], tf.float32)}
    staleness = sampling.StalenessFilter(tf.Variable(0, dtype=tf.int64), max_staleness=1)
    with pytest.raises(ValueError, match="exactly one 'data_version' field"):
        staleness.find_version_path(spec)
    with pytest.raises(ValueError, match='max_staleness=-1 is not valid; expected an integer >= 0'):
        sampling.StalenessFilter(tf.Variable(0), max_staleness=-1)


def test_fifo_table_keeps_order_with_one_worker(client):
    _insert(client, 'queue', 20, source=3)
    # A timeout lets the blocked prefetch end once the queue is drained.
    learner = _learner(client, 'queue', batch_size=5, rate_limiter_timeout_ms=500)
    assert learner.num_workers == [1]  # One per (server, table) stream.
    sources = np.concatenate([b.experience['source'].numpy() for b in learner.as_dataset().take(4)])
    np.testing.assert_array_equal(sources, 3000 + np.arange(20))


def test_fifo_table_refuses_several_workers(client):
    with pytest.raises(TableError, match="'queue' has a FIFO sampler: it must be read by 1 worker"):
        _learner(client, 'queue', num_workers_per_iterator=2)


def test_empty_table_with_timeout_says_it_is_empty(client):
    learner = _learner(client, 'empty', rate_limiter_timeout_ms=200)
    with pytest.raises(tf.errors.InvalidArgumentError, match='table empty .* the table is empty'):
        next(iter(learner.as_dataset()))
    with pytest.raises(EmptyTableError, match=r'^Reverb table empty gave no sample within .*empty'):
        next(iter(learner))


def test_max_times_sampled_comes_through_the_preset(client):
    _insert(client, 'once', 6)
    learner = _learner(client, 'once', batch_size=2, rate_limiter_timeout_ms=200)
    batches = iter(learner.as_dataset())
    seen = np.concatenate([next(batches).experience['source'].numpy() for _ in range(3)])
    np.testing.assert_array_equal(np.sort(seen), np.arange(6))  # Each item exactly once.
    with pytest.raises(tf.errors.InvalidArgumentError, match='max_times_sampled'):
        next(batches)


def test_unsigned_table_is_sampled_with_the_given_spec(client):
    _insert(client, 'unsigned', 4)
    learner = _learner(client, 'unsigned', batch_size=4, rate_limiter_timeout_ms=500)
    batch = next(iter(learner.as_dataset()))
    np.testing.assert_array_equal(batch.experience['source'].numpy(), np.arange(4))


def test_unsupported_beta_and_options_are_refused(client):
    with pytest.raises(ValueError, match="beta='high' must be a float in"):
        _learner(client, 'prio', beta='high')
    with pytest.raises(
        ValueError, match='sequence_length=0 is not valid; expected an integer >= 1'
    ):
        sampling.LearnerDataset(
            client.server_address, 'prio', data_spec=ITEM_SPEC, batch_size=2, sequence_length=0
        )
    with pytest.raises(
        ValueError, match='rate_limiter_timeout_ms=-5 is not valid; expected an integer >= -1'
    ):
        _learner(client, 'prio', rate_limiter_timeout_ms=-5)
    with pytest.raises(ValueError, match='must sum to a positive number'):
        _learner(client, {'mix_a': 0.0})


def test_importance_weights_refuse_a_bad_beta_directly():
    probabilities = tf.constant([0.5, 0.25], tf.float64)
    sizes = tf.constant([4, 4], tf.int64)
    weights = priorities.compute_importance_weights(probabilities, sizes, 1.0)
    np.testing.assert_allclose(weights.numpy(), [0.5, 1.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r'beta must lie in \[0, 1\]'):
        priorities.compute_importance_weights(probabilities, sizes, lambda: tf.constant(1.5))


def test_update_priorities_function_checks_options_and_values(client):
    tf_client = reverb.TFClient(client.server_address)
    keys = tf.constant([1, 2], tf.uint64)
    with pytest.raises(ValueError, match='epsilon=-1.0 must be finite and >= 0'):
        priorities.update_priorities(tf_client, 'prio', keys, tf.constant([1.0, 1.0]), epsilon=-1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match='(?s)Bad keys.*2'):
        priorities.update_priorities(tf_client, 'prio', keys, tf.constant([1.0, np.nan]))


def test_staleness_filter_refuses_bad_arguments():
    with pytest.raises(ValueError, match='current_version must be a tf.Variable'):
        sampling.StalenessFilter(3, max_staleness=1)
    staleness = sampling.StalenessFilter(tf.Variable(0, dtype=tf.int64), max_staleness=1)
    float_version = {types.DATA_VERSION: tf.TensorSpec([], tf.float32)}
    with pytest.raises(ValueError, match="'data_version' field must be an integer"):
        staleness.find_version_path(float_version)


def test_fifo_table_refuses_several_iterators(client):
    with pytest.raises(TableError, match="'queue' has a FIFO sampler: it must be read by 1 iter"):
        _learner(client, 'queue', iterators_per_stream=2)


def test_iterators_split_each_stream_count_exactly(client):
    _insert(client, 'mix_a', 10, source=1)
    learner = _learner(client, 'mix_a', batch_size=7, iterators_per_stream=3)
    assert learner.iterator_counts == [[3, 2, 2]]
    batch = next(iter(learner.as_dataset()))
    assert batch.experience['source'].shape == (7,)
    with pytest.raises(ValueError, match='iterators_per_stream'):
        _learner(client, 'mix_a', iterators_per_stream=0)


def test_server_info_timeout_is_in_milliseconds():
    # A listening socket that never speaks gRPC: the server-info call waits out its timeout,
    # which the error names in milliseconds.
    with socket.socket() as listener:
        listener.bind(('localhost', 0))
        listener.listen()
        address = f'localhost:{listener.getsockname()[1]}'
        with pytest.raises(ReverbConnectionError, match='did not answer within 1000 ms'):
            sampling.LearnerDataset(
                address, 'prio', data_spec=ITEM_SPEC, batch_size=2, server_info_timeout_ms=1000
            )
