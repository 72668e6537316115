"""Expands the case tables of `tests/cases` into what each implementation must return.

The tables hold hand-computed values in one format per behaviour; the functions here only
re-index them (pairs of per-step trajectories, the steps that start a transition, the
steps a window names), so every implementation is checked against the same numbers.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rlds_reverb.core import types
from tests import builders


def _map(fn, *nests):
    return tf.nest.map_structure(fn, *nests)


def _to_arrays(nest):
    return builders.as_arrays(nest, None)  # Lists of numbers are leaves, dicts are nests.


def _stack(rows: list) -> dict:
    return _map(lambda *xs: np.stack(xs), *rows)


def two_step_items(case: dict) -> list[dict]:
    """The two-step Reverb items of a `two_step_cases` case: each `[2, ...]` per field.

    They are the pairs (t, t + 1) of the case's per-step trajectories inside one episode.
    """
    expected = _to_arrays(case['expected'])
    items, offset = [], 0
    for steps in builders.case_episodes(case['episodes']):
        length = len(steps[types.IS_FIRST])
        for t in range(offset, offset + length - 1):
            items.append(_map(lambda x, t=t: x[t : t + 2], expected))
        offset += length
    return items


def _extra_fields(steps: dict) -> list[str]:
    return [name for name in steps if name not in types.REQUIRED_STEP_FIELDS]


def n_step_items(case: dict) -> list[dict]:
    """The n-step Reverb items of an `n_step_cases` case, in order.

    One per step with `n_step_length > 0`: the step's observation, action and extra
    fields, and its expected n-step fields.
    """
    items = []
    episodes = builders.case_episodes(case['episodes'])
    for steps, expected in zip(episodes, case['expected'], strict=True):
        expected = _to_arrays(expected)
        for t in np.flatnonzero(expected[types.N_STEP_LENGTH] > 0):
            kept = [types.OBSERVATION, types.ACTION, *_extra_fields(steps)]
            item = {name: _map(lambda x, t=t: x[t], steps[name]) for name in kept}
            item.update(_map(lambda x, t=t: x[t], expected))
            items.append(item)
    return items


def _with_terminal_discounts(steps: dict) -> dict:
    """The steps with discount 0 on the last two steps when the episode is terminated."""
    if not steps[types.IS_TERMINAL][-1]:
        return steps
    discount = np.array(steps[types.DISCOUNT], copy=True)
    discount[-2:] = 0
    return {**steps, types.DISCOUNT: discount}


def window_items(case: dict) -> list[dict]:
    """The windows of a `sequence_cases` case: every step field plus `mask`, `[len, ...]`.

    A step id 10 e + t names step t of episode e; None (PAD) a null step (zeros, every flag
    false, `mask` false). A terminated episode's last two steps show discount 0 (the
    transition into the terminal step, and the terminal step: docs/semantics.md §3).
    """
    episodes = [_with_terminal_discounts(e) for e in builders.case_episodes(case['episodes'])]
    null = {**_map(lambda x: np.zeros_like(x[0]), episodes[0]), types.MASK: np.bool_(False)}
    items = []
    for window in case['windows']:
        rows = []
        for step_id in window:
            if step_id is None:
                rows.append(null)
                continue
            index, t = divmod(step_id, 10)
            step = _map(lambda x, t=t: x[t], episodes[index])
            rows.append({**step, types.MASK: np.bool_(True)})
        items.append(_stack(rows))
    return items


def assert_nest_close(
    actual, expected, *, rtol: float = 1e-7, atol: float = 1e-5, where: str = ''
) -> None:
    """Asserts two nests have the same structure, and leaves the same shapes and values.

    Expected leaves may be lists; they are compared in the actual leaf's dtype (bools as
    numbers).
    """
    expected = _to_arrays(expected)
    tf.nest.assert_same_structure(actual, expected)
    for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected), strict=True):
        a = np.asarray(a)
        e = np.asarray(e, dtype=a.dtype if a.dtype != bool else None)
        assert a.shape == e.shape, f'{where}: shape {a.shape} != expected {e.shape}'
        np.testing.assert_allclose(
            a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, err_msg=where
        )
