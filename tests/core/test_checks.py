"""Integer options go through `core.checks`: one message, and fractions or booleans refused.

Each case calls a public function with one integer option out of range and with a fraction;
both raise `ValueError` naming the option, before anything is started or written.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.core import checks, types
from rlds_reverb.distribute import routing
from rlds_reverb.examples import cartpole, collect, cql_dqn, demo, synthetic
from rlds_reverb.export import table_copy
from rlds_reverb.learn import priorities, sampling
from rlds_reverb.storage import tfds_writer
from rlds_reverb.write import observers


def _open_table_reader(path, value):
    with table_copy.open_table_reader('replay', checkpoint=path, part_rows=value):
        pass


def _write_dataset(path, value):
    features = tfds_writer.make_rlds_features(
        {types.REWARD: tfds.features.Scalar(dtype=np.float32)}
    )
    tfds_writer.RldsDatasetWriter(
        path / 'out', features=features, name='checks', episodes_per_shard=value
    )


_SPEC = tf.TensorSpec([], tf.float32)
# (argument, its minimum, a call with the value), ids naming the function.
CASES = [
    pytest.param('part_rows', 1, _open_table_reader, id='open_table_reader'),
    pytest.param(
        'max_sequence_length',
        1,
        lambda _, v: observers.ReverbAddEpisodeObserver(None, 't', v),
        id='ReverbAddEpisodeObserver',
    ),
    pytest.param(
        'episode_length',
        1,
        lambda _, v: synthetic.make_synthetic_episodes(num_episodes=1, episode_length=v),
        id='make_synthetic_episodes-length',
    ),
    pytest.param(
        'num_episodes',
        0,
        lambda _, v: synthetic.make_synthetic_episodes(num_episodes=v, episode_length=2),
        id='make_synthetic_episodes-episodes',
    ),
    pytest.param(
        'num_servers',
        1,
        lambda _, v: demo.seed_tables(None, None, num_steps=1, num_servers=v),
        id='seed_tables',
    ),
    pytest.param(
        'num_episodes',
        1,
        lambda path, v: collect.record_episodes(path, num_episodes=v),
        id='record_episodes',
    ),
    pytest.param(
        'num_episodes',
        0,
        lambda _, v: next(cartpole.simulate_episodes(num_episodes=v)),
        id='simulate_episodes-episodes',
    ),
    pytest.param(
        'max_episode_steps',
        1,
        lambda _, v: next(cartpole.simulate_episodes(num_episodes=1, max_episode_steps=v)),
        id='simulate_episodes-steps',
    ),
    pytest.param(
        'num_episodes',
        1,
        lambda _, v: cql_dqn.evaluate_policy(None, num_episodes=v),
        id='evaluate_policy',
    ),
    pytest.param('episodes_per_shard', 1, _write_dataset, id='RldsDatasetWriter'),
    pytest.param(
        'num_steps',
        1,
        lambda _, v: priorities.linear_beta_schedule(tf.Variable(0), num_steps=v),
        id='linear_beta_schedule',
    ),
    pytest.param(
        'num_groups', 1, lambda _, v: routing.group_shard_ranges([], v), id='group_shard_ranges'
    ),
    pytest.param(
        'num_servers', 1, lambda _, v: routing.assign_servers([1], v), id='assign_servers'
    ),
    pytest.param(
        'rate_limiter_timeout_ms',
        -1,
        lambda _, v: sampling.LearnerDataset(
            'localhost:1', 't', data_spec=_SPEC, batch_size=1, rate_limiter_timeout_ms=v
        ),
        id='LearnerDataset',
    ),
]


@pytest.mark.parametrize('bad', ['below', 'fraction'])
@pytest.mark.parametrize(('argument', 'minimum', 'call'), CASES)
def test_integer_options_are_checked_by_core_checks(argument, minimum, call, bad, tmp_path):
    value = minimum - 1 if bad == 'below' else minimum + 0.5
    with pytest.raises(ValueError) as raised:
        call(tmp_path, value)
    with pytest.raises(ValueError) as expected:
        checks.check_int_at_least(value, minimum, argument=argument)
    assert str(raised.value) == str(expected.value)
