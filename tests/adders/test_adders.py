"""The adders against the hand-computed case tables of `tests/cases`.

N-step (`n_step_cases.py`) and sequence (`sequence_cases.py`) tables are shared with the
Reverb items (`tests/write/test_push.py` pushes them); GAE and frame stacking
(`adders_cases.py`) are adders-only. Cases alternate between the dataset forms (RLDS
episodes, whole-episode tensors) and one or several episodes per TF call, which must give
the same numbers; the property tests run every form on random episodes. (One form per case
keeps tracing time, and the suite, short.)
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import adders
from rlds_reverb.core import types
from tests import builders, expected
from tests.cases import adders_cases, n_step_cases, sequence_cases

_KNOBS = [('rlds', 1), ('tensors', 3)]


def _with_knobs(cases):
    """Returns (case, form, episodes per call) params, cycling through the knobs."""
    params = []
    for i, case in enumerate(cases):
        form, per_call = _KNOBS[i % len(_KNOBS)]
        name = f'{case["testcase_name"]}-{form}-{per_call}'
        params.append(pytest.param(case, form, per_call, id=name))
    return params


@pytest.mark.parametrize('case,form,per_call', _with_knobs(n_step_cases.CASES))
def test_n_step_matches_case(case, form, per_call):
    inputs = builders.case_episodes(case['episodes'])
    out = builders.run_transform(
        adders.n_step(**case['params'], episodes_per_call=per_call), inputs, form
    )
    assert len(out) == len(case['expected'])
    for steps, given, want in zip(out, inputs, case['expected'], strict=True):
        expected.assert_nest_close({k: steps[k] for k in want}, want, where=case['testcase_name'])
        assert steps[types.N_STEP_LENGTH].dtype == np.int32
        for name, value in given.items():  # every input field is kept as it was
            expected.assert_nest_close(steps[name], value)


@pytest.mark.parametrize('case,form,per_call', _with_knobs(adders_cases.GAE_CASES))
def test_gae_matches_case(case, form, per_call):
    inputs = builders.case_episodes(case['episodes'])
    out = builders.run_transform(
        adders.gae(**case['params'], episodes_per_call=per_call), inputs, form
    )
    for steps, want in zip(out, case['expected'], strict=True):
        expected.assert_nest_close({k: steps[k] for k in want}, want, where=case['testcase_name'])


@pytest.mark.parametrize('case,form,_', _with_knobs(sequence_cases.CASES))
def test_sequences_match_case(case, form, _):
    episodes = builders.case_episodes(case['episodes'])
    windows = builders.dataset(episodes, form).apply(adders.sequences(**case['params']))
    windows = [tf.nest.map_structure(lambda x: x.numpy(), w) for w in windows]
    given = case.get('expected', {})
    expected_windows = expected.window_items(case)
    assert len(windows) == len(expected_windows)
    for i, (window, want) in enumerate(zip(windows, expected_windows, strict=True)):
        burn_in = given.get('is_burn_in', [np.zeros(len(want[types.MASK]))] * len(windows))
        want = {**want, types.IS_BURN_IN: burn_in[i]}
        expected.assert_nest_close(window, want, where=f'{case["testcase_name"]}: window {i}')
        for name, values in given.items():
            expected.assert_nest_close(window[name], values[i], where=f'{name} of window {i}')
        assert window[types.MASK].dtype == bool and window[types.IS_BURN_IN].dtype == bool


@pytest.mark.parametrize('case,form,per_call', _with_knobs(adders_cases.STACK_CASES))
def test_stack_frames_matches_case(case, form, per_call):
    episodes = builders.case_episodes(case['episodes'])
    out = builders.run_transform(
        adders.stack_frames(**case['params'], episodes_per_call=per_call), episodes, form
    )
    for steps, want in zip(out, case['expected'], strict=True):
        expected.assert_nest_close(steps[types.OBSERVATION], want[types.OBSERVATION])


def test_transforms_keep_episode_fields_of_rlds_episodes():
    (steps,) = builders.case_episodes([dict(reward=[1, 2, 0], value=[0, 0, 0], ending='truncated')])
    dataset = builders.rlds([steps]).map(lambda e: {**e, 'episode_id': tf.constant(7)})
    for transform in (adders.n_step(2, 0.9), adders.gae(0.9, 0.9), adders.stack_frames(2)):
        episode = next(iter(dataset.apply(transform)))
        assert int(episode['episode_id']) == 7
        assert isinstance(episode[types.STEPS], tf.data.Dataset)


def test_gae_then_sequences_compose():
    spec = dict(reward=[1, 1, 1, 0], value=[1, 2, 3, 4], ending='terminated')
    dataset = builders.case_dataset([spec])
    windows = list(dataset.apply(adders.gae(0.5, 1.0)).apply(adders.sequences(2, end='pad')))
    advantages = [w[types.ADVANTAGE].numpy().tolist() for w in windows]
    assert advantages == [[0.75, -0.5], [-2.0, 0.0]]
    assert [w[types.RETURN].numpy().tolist() for w in windows] == [[1.75, 1.5], [1.0, 0.0]]


def test_stack_frames_then_n_step_stacks_next_observation():
    spec = dict(reward=[1, 1, 1, 0], ending='truncated')
    dataset = builders.episode_tensors(builders.case_episodes([spec]))
    (steps,) = builders.read_episodes(
        dataset.apply(adders.stack_frames(2)).apply(adders.n_step(2, 1.0))
    )
    np.testing.assert_array_equal(steps[types.OBSERVATION], [[0, 0], [0, 1], [1, 2], [2, 3]])
    np.testing.assert_array_equal(steps[types.NEXT_OBSERVATION], [[1, 2], [2, 3], [2, 3], [0, 0]])


def test_gae_value_fn_keras_model_is_called_on_observations():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, kernel_initializer='ones')])
    model.build([None, 1])
    spec = dict(reward=[1, 1, 0], ending='truncated')
    (episode,) = builders.case_episodes([spec])
    episode[types.OBSERVATION] = episode[types.OBSERVATION][:, None]  # [T, 1]
    (steps,) = builders.run_transform(adders.gae(1.0, 1.0, value_fn=model), [episode], 'rlds')
    # V(o) = o (weights one, bias zero): values 0, 1, 2 and returns 1 + 1 + 2, 1 + 2, 2.
    np.testing.assert_allclose(steps[types.VALUE], [0, 1, 2])
    np.testing.assert_allclose(steps[types.RETURN], [4, 3, 2])


def test_gae_value_fn_with_python_control_flow_on_tensors_is_converted():
    def value_fn(observation):  # Python `if` on a tensor: needs AutoGraph.
        if tf.reduce_sum(observation) > 100.0:
            return tf.zeros_like(observation[:, 0])
        return observation[:, 0]

    spec = dict(reward=[1, 1, 0], ending='truncated')
    (episode,) = builders.case_episodes([spec])
    episode[types.OBSERVATION] = episode[types.OBSERVATION][:, None]  # [T, 1]
    (steps,) = builders.run_transform(adders.gae(1.0, 1.0, value_fn=value_fn), [episode], 'rlds')
    np.testing.assert_allclose(steps[types.VALUE], [0, 1, 2])
    np.testing.assert_allclose(steps[types.RETURN], [4, 3, 2])


def test_gae_value_field_other_than_value_is_kept():
    spec = dict(reward=[1, 0], ending='terminated', extras={'critic': [3, 9]})
    (steps,) = builders.run_transform(
        adders.gae(1.0, 1.0, value_field='critic'), builders.case_episodes([spec]), 'rlds'
    )
    np.testing.assert_allclose(steps['critic'], [3, 9])
    np.testing.assert_allclose(steps[types.VALUE], [3, 0])
    np.testing.assert_allclose(steps[types.ADVANTAGE], [-2, 0])
