"""Every documented `Raises:` of the adders: the message names the argument and its range."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import adders
from rlds_reverb.core import types
from tests import builders


def _dataset(form='rlds', *, with_value=True, **extra):
    spec = dict(reward=[1, 2, 0], ending='truncated')
    (steps,) = builders.case_episodes([{**spec, 'value': [0, 0, 0]} if with_value else spec])
    steps.update(extra)
    return builders.dataset([steps], form)


@pytest.mark.parametrize(
    'make,match',
    [
        (lambda: adders.n_step(0, 0.9), r'n=0 is not valid; expected an integer >= 1'),
        (lambda: adders.n_step(1.5, 0.9), r'n=1.5 is not valid'),
        (lambda: adders.n_step(3, 1.5), r'gamma=1.5 is not valid; expected a number in \[0, 1\]'),
        (lambda: adders.n_step(3, -0.1), r'gamma=-0.1 is not valid'),
        (lambda: adders.n_step(3, 0.9, episodes_per_call=0), r'episodes_per_call=0'),
        (lambda: adders.gae(1.2, 0.9), r'gamma=1.2 is not valid; expected a number in \[0, 1\]'),
        (lambda: adders.gae(0.9, 2.0), r'lambda_=2.0 is not valid; expected a number in \[0, 1\]'),
        (lambda: adders.gae(0.9, 0.9, episodes_per_call=0), r'episodes_per_call=0'),
        (lambda: adders.gae(0.9, 0.9, value_fn=abs, value_field='v'), r'value_fn or value_field'),
        (lambda: adders.sequences(0), r'length=0 is not valid; expected an integer >= 1'),
        (lambda: adders.sequences(3, 0), r'period=0 is not valid; expected an integer >= 1'),
        (
            lambda: adders.sequences(3, burn_in=3),
            r'burn_in=3 is not valid; expected 0 <= burn_in < length=3',
        ),
        (lambda: adders.sequences(3, burn_in=-1), r'burn_in=-1 is not valid'),
        (
            lambda: adders.sequences(3, end='sideways'),
            r"end='sideways' is not valid; expected one of 'truncate'",
        ),
        (lambda: adders.stack_frames(0), r'k=0 is not valid; expected an integer >= 1'),
        (lambda: adders.stack_frames(2, episodes_per_call=0), r'episodes_per_call=0'),
    ],
)
def test_bad_arguments_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_gae_missing_value_field_names_it():
    (steps,) = builders.case_episodes([dict(reward=[1, 0], ending='truncated')])
    with pytest.raises(
        ValueError, match=r"value_field='critic' is not a step field; the steps hold"
    ):
        builders.dataset([steps], 'rlds').apply(adders.gae(0.9, 0.9, value_field='critic'))
    with pytest.raises(ValueError, match=r"value_field='value' is not a step field"):
        builders.dataset([steps], 'tensors').apply(adders.gae(0.9, 0.9))


def test_gae_value_fn_of_wrong_shape_raises_when_applied():
    def two_values_per_step(observation):
        return tf.stack([observation, observation], axis=-1)  # [T, 2] for a scalar reward

    with pytest.raises(
        ValueError, match=r'gae: value_fn gave values of shape \(None, 2\); expected \(None,\)'
    ):
        _dataset(with_value=False).apply(adders.gae(0.9, 0.9, value_fn=two_values_per_step))


def test_gae_value_fn_with_wrong_number_of_values_fails_while_iterating():
    dataset = _dataset(with_value=False).apply(
        adders.gae(0.9, 0.9, value_fn=lambda observation: observation[1:])
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match='other than the number of steps'):
        list(dataset)


def test_gae_refuses_to_overwrite_advantages():
    dataset = _dataset('tensors', advantage=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"gae adds step field\(s\) \['advantage'\]"):
        dataset.apply(adders.gae(0.9, 0.9))


@pytest.mark.parametrize(
    'options,source',
    [
        (dict(value_fn=lambda observation: observation), 'value_fn'),
        (dict(value_field='v'), "value_field='v'"),
    ],
)
def test_gae_refuses_to_overwrite_a_value_field_it_does_not_read(options, source):
    dataset = _dataset('tensors', v=np.ones(3, np.float32))
    with pytest.raises(
        ValueError, match=rf"gae writes the values of {source} to the step field 'value'"
    ):
        dataset.apply(adders.gae(0.9, 0.9, **options))
    # Reading `value` itself is fine: gae writes back the values it used.
    dataset.apply(adders.gae(0.9, 0.9, value_field='value'))


def test_n_step_refuses_to_run_twice():
    once = _dataset().apply(adders.n_step(2, 0.9))
    with pytest.raises(ValueError, match=r'n_step adds step field\(s\) \[.n_step_return.'):
        once.apply(adders.n_step(2, 0.9))


def test_n_step_needs_reward():
    (steps,) = builders.case_episodes([dict(reward=[1, 0], ending='truncated')])
    del steps[types.REWARD]
    with pytest.raises(ValueError, match=r"n_step needs step field\(s\) \['reward'\]"):
        builders.dataset([steps], 'tensors').apply(adders.n_step(2, 0.9))


def test_stack_frames_needs_observation():
    (steps,) = builders.case_episodes([dict(reward=[1, 0], ending='truncated')])
    del steps[types.OBSERVATION]
    with pytest.raises(ValueError, match=r"stack_frames needs step field\(s\) \['observation'\]"):
        builders.dataset([steps], 'rlds').apply(adders.stack_frames(2))


def test_sequences_refuse_to_overwrite_mask():
    with pytest.raises(ValueError, match=r"sequences adds step field\(s\) \['mask'\]"):
        _dataset('tensors', mask=np.ones(3, bool)).apply(adders.sequences(2))


def test_to_dqn_transitions_needs_n_step_fields():
    with pytest.raises(ValueError, match=r'to_dqn_transitions \(after n_step\) needs step field'):
        _dataset().apply(adders.to_dqn_transitions())


def test_transforms_reject_datasets_that_are_not_episodes():
    with pytest.raises(
        ValueError, match='n_step expects an RLDS dataset or a dataset of whole-episode'
    ):
        tf.data.Dataset.range(3).apply(adders.n_step(2, 0.9))


def test_missing_discount_is_one_with_a_warning():
    (steps,) = builders.case_episodes([dict(reward=[1, 2, 0], ending='truncated')])
    del steps[types.DISCOUNT]
    with pytest.warns(UserWarning, match="no 'discount' field; using 1.0"):
        dataset = builders.dataset([steps], 'tensors').apply(adders.n_step(2, 0.5))
    (out,) = builders.read_episodes(dataset)
    np.testing.assert_allclose(out[types.N_STEP_RETURN], [2, 2, 0])


def test_discount_structure_must_match_a_nested_reward():
    spec = dict(
        reward={'a': [1, 0], 'b': [2, 0]}, discount={'a': [1, 1], 'c': [1, 1]}, ending='truncated'
    )
    dataset = builders.dataset(builders.case_episodes([spec]), 'tensors')
    with pytest.raises(ValueError, match='discount must be a single tensor or match the reward'):
        dataset.apply(adders.n_step(2, 0.9))
