"""Plain NumPy references for goal relabeling (docs/semantics.md §13).

Written from the distributions' definitions: the probability of each future offset k, its
cumulative sum, and the smallest k whose cumulative probability exceeds the draw u. The
adder computes the same inverse in closed form (`adders.goals.compute_goal_steps`); the
two agree except where a draw sits within rounding of a cumulative probability, which
`reference_goal_steps` reports as the margin.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from rlds_reverb.core import types


def offset_probabilities(left: int, strategy: str, p: float | None, terminal: bool) -> np.ndarray:
    """P(k) for k = 1 .. left (left = L - t >= 1 future steps)."""
    k = np.arange(1, left + 1)
    if strategy == 'future':
        return np.full(left, 1.0 / left)
    geometric = p * (1.0 - p) ** (k - 1)
    if terminal:  # Absorbing: the mass past the end stays on the last step.
        geometric[-1] = (1.0 - p) ** (left - 1)
        return geometric
    return geometric / geometric.sum()  # Conditioned on the recorded future.


def reference_goal_steps(
    uniform: Sequence[float], strategy: str, p: float | None, terminal: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Returns (goal step of each step, the draw's distance to the nearest cumulative
    probability), one step at a time; the last step is its own goal (margin inf)."""
    size = len(uniform)
    steps, margins = np.arange(size), np.full(size, np.inf)
    for t in range(size - 1):
        cumulative = np.cumsum(offset_probabilities(size - 1 - t, strategy, p, terminal))
        u = float(uniform[t])
        steps[t] = t + 1 + int(np.sum(cumulative <= u))  # smallest k with F(k) > u
        margins[t] = np.min(np.abs(cumulative - u))
    return np.minimum(steps, size - 1), margins


def _get(nest, path):
    for key in path:
        nest = nest[key]
    return nest


def _take(nest, index):
    if isinstance(nest, dict):
        return {k: _take(v, index) for k, v in nest.items()}
    return np.asarray(nest)[index]


def reference_relabel(
    steps: dict,
    goal_steps: np.ndarray,
    *,
    goal_field: Sequence[str] = (types.OBSERVATION,),
    reward_fn: Callable | None = None,
    success_fn: Callable | None = None,
) -> dict:
    """Returns one episode relabeled with the given goal steps, one field at a time."""
    size = len(goal_steps)
    field = _get(steps, goal_field)
    goal = _take(field, goal_steps)
    out = {**steps, types.GOAL: goal, types.GOAL_OFFSET: (goal_steps - np.arange(size))}
    achieved = _take(field, np.minimum(np.arange(size) + 1, size - 1))
    if reward_fn is not None:
        out[types.REWARD] = np.asarray(reward_fn(achieved, goal), steps[types.REWARD].dtype)
    if success_fn is not None:
        out[types.GOAL_REACHED] = np.asarray(success_fn(achieved, goal), bool)
    out[types.GOAL_OFFSET] = out[types.GOAL_OFFSET].astype(np.int32)
    return out


def chi_square_p_value(counts: Sequence[int], probabilities: Sequence[float]) -> float:
    """The p-value of Pearson's chi-square test of `counts` against `probabilities`.

    The upper tail of the chi-square distribution with (bins - 1) degrees of freedom, from
    the series of the regularized lower incomplete gamma function (no SciPy here).
    """
    counts = np.asarray(counts, np.float64)
    expected = np.asarray(probabilities, np.float64) * counts.sum()
    statistic = float(np.sum((counts - expected) ** 2 / expected))
    s, x = (len(counts) - 1) / 2.0, statistic / 2.0
    if x == 0:
        return 1.0
    term = total = 1.0 / s
    for n in range(1, 1000):
        term *= x / (s + n)
        total += term
        if term < total * 1e-17:
            break
    lower = math.exp(s * math.log(x) - x - math.lgamma(s)) * total
    return max(0.0, 1.0 - lower)
