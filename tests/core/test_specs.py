"""Specs: the trajectory spec, leaf-by-leaf diffs, and dataset statistics."""

import numpy as np
import pytest
import tensorflow as tf

import rlds_reverb
from rlds_reverb import tables
from rlds_reverb.check import stats
from rlds_reverb.core import errors, specs, types
from rlds_reverb.transform import items
from tests import builders


def test_get_rlds_step_features_matches_tf_agents():
    from tf_agents.replay_buffers import rlds_to_reverb

    assert rlds_reverb.get_rlds_step_features() == rlds_to_reverb.get_rlds_step_features()


def test_extra_fields_are_dropped_or_become_policy_info_spec_on_request():
    episode = builders.episode(2)
    episode['log_prob'] = np.zeros(2, np.float32)
    data = builders.rlds([episode])
    assert rlds_reverb.create_trajectory_data_spec(data).policy_info == ()  # As TF-Agents.
    spec = rlds_reverb.create_trajectory_data_spec(data, extra_fields='policy_info')
    assert spec.policy_info == {'log_prob': tf.TensorSpec([], tf.float32)}
    # The push item keeps them by default, with the same spec.
    signature = tables.signature_for(items.TwoStep(), data)
    assert signature.policy_info == {'log_prob': tf.TensorSpec([None], tf.float32)}


def test_diff_specs_lists_each_leaf():
    expected = {
        'observation': {'pixels': tf.TensorSpec([84, 84, 3], tf.uint8)},
        'reward': tf.TensorSpec([], tf.float32),
    }
    actual = {
        'observation': {'pixels': tf.TensorSpec([84, 84, 3], tf.float32)},
        'extra': tf.TensorSpec([2], tf.int32),
    }
    assert specs.diff_specs(expected, actual) == [
        'extra: unexpected field int32[2]',
        'observation.pixels: expected uint8[84, 84, 3], found float32[84, 84, 3]',
        'reward: expected float32[], missing',
    ]
    assert specs.diff_specs(expected, expected) == []


def test_check_specs_match_raises_with_the_diff():
    expected = {'action': tf.TensorSpec([6], tf.float32)}
    with pytest.raises(
        errors.SpecMismatchError,
        match=r'table: specs differ.*\n  action: expected float32\[6\], found float32\[5\]',
    ):
        specs.check_specs_match(expected, {'action': tf.TensorSpec([5], tf.float32)}, what='table')
    specs.check_specs_match(expected, {'action': tf.TensorSpec([6], tf.float32)}, what='table')


def test_table_signature_has_an_outer_dimension():
    spec = rlds_reverb.create_trajectory_data_spec(builders.rlds([builders.episode(2)]))
    signature = specs.add_outer_dim(spec)
    assert signature.observation.shape.as_list() == [None, 2]


def test_describe_dataset_counts_endings_and_returns():
    episodes = [
        builders.episode(3, ending='terminated'),
        builders.episode(2, ending='truncated'),
    ]
    summary = stats.describe_dataset(builders.rlds(episodes))
    assert (summary.episodes, summary.steps, summary.terminated, summary.truncated) == (2, 5, 1, 1)
    np.testing.assert_allclose(summary.returns, [0 + 1 + 2, 0 + 1])
    assert 'observation: float32[2]' in summary.format()


def test_describe_dataset_needs_rlds_steps():
    with pytest.raises(errors.SourceError):
        stats.describe_dataset(tf.data.Dataset.from_tensors({'x': 1}))
    episode = builders.episode(2)
    del episode[types.REWARD]
    with pytest.raises(errors.SpecMismatchError, match=r"missing step field\(s\) \['reward'\]"):
        stats.describe_dataset(builders.rlds([episode]))
