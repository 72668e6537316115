"""Priority updates: bad priorities never reach Reverb; evicted keys are harmless."""

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlds_reverb.learn import priorities
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from rlds_reverb.write import push as writers
from tests import builders

_TABLE = 'prioritized'


def _episodes(count: int = 2) -> tf.data.Dataset:
    return builders.rlds([builders.episode(4) for _ in range(count)])


@pytest.fixture
def server():
    signature = tables.signature_for(items.TwoStep(), _episodes())
    table = tables.prioritized(_TABLE, priority_exponent=1.0, max_size=6, signature=signature)
    server = reverb.Server([table])
    try:
        yield server
    finally:
        server.stop()


def _address(server: reverb.Server) -> str:
    return f'localhost:{server.port}'


def _sample_infos(server: reverb.Server, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Returns (keys, priorities) of `count` samples."""
    dataset = reverb.TrajectoryDataset.from_table_signature(
        _address(server), _TABLE, max_in_flight_samples_per_worker=1, rate_limiter_timeout_ms=5_000
    )
    keys, found = [], []
    for sample in dataset.take(count):
        keys.append(int(sample.info.key))
        found.append(float(sample.info.priority))
    return np.array(keys, np.uint64), np.array(found)


@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf], ids=['nan', 'inf', '-inf'])
def test_non_finite_priorities_are_refused_before_reverb_naming_the_keys(server, bad):
    writers.push(_episodes(), _address(server), _TABLE, timeout_ms=5_000)
    keys, before = _sample_infos(server, 3)
    errors = np.array([0.5, bad, 0.25])
    client = reverb.TFClient(_address(server))
    with pytest.raises(tf.errors.InvalidArgumentError, match='Bad keys:') as info:
        priorities.update_priorities(client, _TABLE, tf.constant(keys), tf.constant(errors))
    assert f'Reverb table {_TABLE}' in info.value.message
    assert str(keys[1]) in info.value.message
    _, after = _sample_infos(server, 20)
    np.testing.assert_array_equal(np.unique(after), np.unique(before))  # Nothing reached Reverb.


def test_negative_priorities_are_refused_naming_the_keys():
    keys = tf.constant([7, 8, 9], tf.uint64)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)Bad keys:'\n8\n"):
        priorities.check_priorities(keys, tf.constant([1.0, -0.5, 2.0], tf.float64), table='t')


def test_updating_evicted_keys_is_harmless(server):
    address = _address(server)
    writers.push(_episodes(2), address, _TABLE, timeout_ms=5_000)  # 6 items: full.
    old_keys, _ = _sample_infos(server, 6)
    writers.push(_episodes(2), address, _TABLE, timeout_ms=5_000, allow_eviction=True)
    client = reverb.TFClient(address)
    priorities.update_priorities(
        client, _TABLE, tf.constant(old_keys), tf.fill([len(old_keys)], 5.0)
    )
    info = reverb.Client(address).server_info()[_TABLE]
    assert info.current_size == 6
    _, after = _sample_infos(server, 30)
    assert set(after.tolist()) == {1.0}  # The live items kept their priorities.
