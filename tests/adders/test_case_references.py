"""The hand-computed case tables of `tests/cases` through the plain NumPy references.

Every implementation is checked against the case tables (`tests/adders/test_adders.py`,
`tests/transform/test_convert.py`, `tests/write/test_push.py`, ...), and against the NumPy references
on random episodes (`tests/adders/test_adders_properties.py`, `tests/item_references.py`). Here
the two meet: each hand-computed case goes through the reference of its kind, so a slip in
a table or in a reference shows up on its own, not only as a disagreement with the code.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rlds_reverb.core import types
from rlds_reverb.transform import items as items_lib
from tests import builders, expected, item_references
from tests.adders.test_adders_properties import (
    reference_gae,
    reference_n_step,
    reference_sequences,
    reference_stack,
)
from tests.cases import adders_cases, n_step_cases, sequence_cases, two_step_cases


def _cases(table: list[dict]) -> list:
    return [pytest.param(case, id=case['testcase_name']) for case in table]


def _concatenate(rows: list[dict]) -> dict:
    return tf.nest.map_structure(lambda *xs: np.concatenate(xs), *rows)


# --- Two-step trajectories and items (docs/semantics.md §3) -----------------------------------


@pytest.mark.parametrize('case', _cases(two_step_cases.CASES))
def test_two_step_cases_equal_the_reference(case):
    episodes = builders.case_episodes(case['episodes'])
    per_episode = [item_references.reference_trajectories(steps) for steps in episodes]
    want = case['expected']
    trajectories = _concatenate([{k: rows[k] for k in want} for rows in per_episode])
    expected.assert_nest_close(trajectories, want, rtol=0, atol=0, where=case['testcase_name'])
    items = item_references.reference_items(
        items_lib.TwoStep(), [{types.STEPS: steps} for steps in episodes]
    )
    want_items = expected.two_step_items(case)
    assert len(items) == len(want_items)
    for i, (item, want_item) in enumerate(zip(items, want_items, strict=True)):
        item = {k: item[k] for k in want_item}
        expected.assert_nest_close(item, want_item, rtol=0, atol=0, where=f'item {i}')


# --- N-step transitions and items (§4) --------------------------------------------------------


@pytest.mark.parametrize('case', _cases(n_step_cases.CASES))
def test_n_step_cases_equal_the_reference(case):
    episodes = builders.case_episodes(case['episodes'])
    params = case['params']
    assert len(episodes) == len(case['expected'])
    for steps, want in zip(episodes, case['expected'], strict=True):
        out = {**reference_n_step(steps, params['n'], params['gamma']), **steps}
        expected.assert_nest_close({k: out[k] for k in want}, want, where=case['testcase_name'])
    items = item_references.reference_items(
        items_lib.NStep(**params), [{types.STEPS: steps} for steps in episodes]
    )
    want_items = expected.n_step_items(case)
    assert len(items) == len(want_items)
    for i, (item, want_item) in enumerate(zip(items, want_items, strict=True)):
        expected.assert_nest_close(item, want_item, where=f'item {i}')


# --- Sequence windows and episode items (§6, §9) ------------------------------------------


@pytest.mark.parametrize('case', _cases(sequence_cases.CASES))
def test_sequence_cases_equal_the_reference(case):
    episodes = builders.case_episodes(case['episodes'])
    params = case['params']
    burn_in = params.get('burn_in', 0)
    period = params.get('period', params['length'] - burn_in)
    windows = reference_sequences(episodes, params['length'], period, params['end'], burn_in)
    want_windows = expected.window_items(case)
    given = case.get('expected', {})
    assert len(windows) == len(want_windows)
    for i, (window, want) in enumerate(zip(windows, want_windows, strict=True)):
        no_burn_in = np.zeros(len(want[types.MASK]), bool)
        want = {**want, types.IS_BURN_IN: given.get(types.IS_BURN_IN, [no_burn_in] * (i + 1))[i]}
        expected.assert_nest_close(window, want, rtol=0, atol=0, where=f'window {i}')
        for name, values in given.items():
            expected.assert_nest_close(window[name], values[i], where=f'{name} of window {i}')


@pytest.mark.parametrize('case', _cases(sequence_cases.EPISODE_CASES))
def test_episode_item_cases_equal_the_reference(case):
    episodes = builders.case_episodes(case['episodes'])
    items = item_references.reference_items(
        items_lib.Episode(**case['params']), [{types.STEPS: steps} for steps in episodes]
    )
    want_items = expected.window_items(case)
    assert len(items) == len(want_items)
    for i, (item, want) in enumerate(zip(items, want_items, strict=True)):
        expected.assert_nest_close(item, want, rtol=0, atol=0, where=f'item {i}')


# --- GAE and frame stacking (§5, §7) ------------------------------------------------------


@pytest.mark.parametrize('case', _cases(adders_cases.GAE_CASES))
def test_gae_cases_equal_the_reference(case):
    episodes = builders.case_episodes(case['episodes'])
    assert len(episodes) == len(case['expected'])
    for steps, want in zip(episodes, case['expected'], strict=True):
        out = reference_gae(steps, **case['params'])
        expected.assert_nest_close({k: out[k] for k in want}, want, where=case['testcase_name'])


@pytest.mark.parametrize('case', _cases(adders_cases.STACK_CASES))
def test_stack_cases_equal_the_reference(case):
    episodes = builders.case_episodes(case['episodes'])
    assert len(episodes) == len(case['expected'])
    for steps, want in zip(episodes, case['expected'], strict=True):
        out = reference_stack(steps, **case['params'])
        expected.assert_nest_close(out, want[types.OBSERVATION], rtol=0, atol=0)
