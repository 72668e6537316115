"""Moments merged exactly (Chan et al.) and the quantile sketch's bound, against NumPy on the
pooled data: property tests over random data and random splits into parts.

Tolerances: merged means and standard deviations agree with the pooled data's to a relative
1e-12 of the data's scale (float64 rounding of a few thousand values is ~1e-15); counts,
minima and maxima exactly. The sketch's quantiles are exact (`np.quantile`) below its
capacity, and beyond it each true rank lies within its reported bound.
"""

from __future__ import annotations

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlds_reverb.check import moments as moments_lib
from rlds_reverb.check.quantile_sketch import QuantileSketch

_TOLERANCE = 1e-12
_SETTINGS = {'deadline': None, 'suppress_health_check': [hypothesis.HealthCheck.too_slow]}


def _split(values: np.ndarray, cuts: list[int]) -> list[np.ndarray]:
    points = sorted({min(c, len(values)) for c in cuts})
    return np.split(values, points)


def _merge_parts(parts: list[np.ndarray], order: list[int]) -> moments_lib.Moments:
    total = moments_lib.Moments.empty(parts[0].shape[1])
    for i in order:
        total = total.merge(moments_lib.compute_moments(parts[i]))
    return total


def _scale(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return max(float(np.abs(finite).max()) if finite.size else 0.0, 1.0)


_VALUES = hnp.arrays(
    np.float64,
    st.tuples(st.integers(1, 300), st.integers(1, 4)),
    elements=st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
)


@hypothesis.given(values=_VALUES, cuts=st.lists(st.integers(0, 300), max_size=6), data=st.data())
@hypothesis.settings(max_examples=80, **_SETTINGS)
def test_moments_merged_over_any_split_equal_the_pooled_data(values, cuts, data):
    parts = _split(values, cuts)
    order = data.draw(st.permutations(list(range(len(parts)))))
    merged = _merge_parts(parts, order)
    scale = _scale(values)
    np.testing.assert_array_equal(merged.count, len(values))
    np.testing.assert_array_equal(merged.minimum, values.min(axis=0))
    np.testing.assert_array_equal(merged.maximum, values.max(axis=0))
    np.testing.assert_allclose(merged.mean, values.mean(axis=0), rtol=0, atol=_TOLERANCE * scale)
    np.testing.assert_allclose(
        merged.compute_std(), values.std(axis=0), rtol=0, atol=_TOLERANCE * scale
    )
    whole = moments_lib.compute_moments(values)
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=0, atol=_TOLERANCE * scale)
    np.testing.assert_allclose(merged.m2, whole.m2, rtol=_TOLERANCE, atol=_TOLERANCE * scale**2)


def test_moments_keep_precision_far_from_zero():
    # A naive sum of squares loses every digit here (1e9**2 vs a variance of 1).
    rng = np.random.default_rng(0)
    values = (1e9 + rng.normal(size=(10_000, 1))).astype(np.float64)
    merged = _merge_parts(_split(values, [17, 4000, 9999]), [2, 0, 3, 1])
    np.testing.assert_allclose(merged.compute_std(), values.std(axis=0), rtol=1e-9)


def test_non_finite_values_are_counted_and_left_out():
    values = np.array([[1.0, np.nan], [np.inf, np.nan], [3.0, 2.0], [-np.inf, np.nan]])
    found = moments_lib.compute_moments(values)
    np.testing.assert_array_equal(found.count, [2, 1])
    np.testing.assert_array_equal(found.nan_count, [0, 3])
    np.testing.assert_array_equal(found.inf_count, [2, 0])
    np.testing.assert_array_equal(found.mean, [2.0, 2.0])
    np.testing.assert_array_equal(found.minimum, [1.0, 2.0])
    empty = moments_lib.compute_moments(np.full((3, 1), np.nan))
    assert empty.count[0] == 0 and np.isnan(empty.compute_std()[0])
    assert empty.minimum[0] == np.inf and empty.maximum[0] == -np.inf


def _check_rank_bound(sketch: QuantileSketch, pooled: np.ndarray, levels) -> None:
    """Each returned quantile's true rank lies within the sketch's bound (module docstring)."""
    found = sketch.compute_quantiles(levels)
    for dim in range(pooled.shape[1]):
        column = pooled[:, dim][np.isfinite(pooled[:, dim])]
        n = len(column)
        # Exact quantiles interpolate between two neighbours (np.quantile): one item more.
        error = sketch.error_weight + (1 if sketch.exact else 0)
        for q, value in zip(levels, found[:, dim], strict=True):
            assert (column < value).sum() <= q * n + error
            assert (column <= value).sum() >= q * n - error


_LEVELS = (0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0)


@hypothesis.given(
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(1, 6000),
    capacity=st.sampled_from([2, 8, 64, 256]),
    cuts=st.lists(st.integers(0, 6000), max_size=5),
    distribution=st.sampled_from(['normal', 'integers', 'heavy', 'sorted']),
)
@hypothesis.settings(max_examples=60, **_SETTINGS)
def test_sketch_quantiles_lie_within_the_rank_bound_for_any_split(
    seed, size, capacity, cuts, distribution
):
    rng = np.random.default_rng(seed)
    pooled = {
        'normal': lambda: rng.normal(size=(size, 2)),
        'integers': lambda: rng.integers(-3, 4, size=(size, 2)).astype(np.float64),
        'heavy': lambda: rng.standard_cauchy(size=(size, 2)),
        'sorted': lambda: np.sort(rng.normal(size=(size, 2)), axis=0),
    }[distribution]()
    pooled[rng.random(pooled.shape) < 0.02] = np.nan
    sketches = []
    for part in _split(pooled, cuts):
        sketch = QuantileSketch(2, capacity=capacity)
        for chunk in _split(part, list(rng.integers(0, len(part) + 1, size=3))):
            sketch.add(chunk)
        sketches.append(sketch)
    merged = sketches[0]
    for other in sketches[1:]:
        merged.merge(other)
    np.testing.assert_array_equal(merged.finite_counts, np.isfinite(pooled).sum(axis=0))
    _check_rank_bound(merged, pooled, _LEVELS)
    # The stated bound, whatever the split: N / capacity * (floor(log2(N / capacity)) + 1).
    if size < capacity:
        assert merged.error_weight == 0
    else:
        levels = np.floor(np.log2(size / capacity)) + 1
        assert merged.error_weight <= size / capacity * levels


def test_sketch_is_exact_below_its_capacity():
    rng = np.random.default_rng(1)
    values = rng.normal(size=(5000, 3))
    values[::7, 1] = np.nan
    sketch = QuantileSketch(3, capacity=8192)
    for part in np.array_split(values, 13):
        sketch.add(part)
    assert sketch.exact
    expected = np.nanquantile(values, _LEVELS, axis=0)
    np.testing.assert_array_equal(sketch.compute_quantiles(_LEVELS), expected)
    np.testing.assert_array_equal(sketch.compute_rank_errors(), 0.0)


def test_sketch_bound_at_the_default_capacity_on_200000_values():
    rng = np.random.default_rng(2)
    values = rng.normal(size=(200_000, 1)) * 3 + 1
    sketch = QuantileSketch(1)
    for part in np.array_split(values, 400):
        sketch.add(part)
    assert not sketch.exact
    errors = sketch.compute_rank_errors()
    assert errors[0] <= 5 / 8192  # As documented: 0.06% of the count at 200,000 values.
    _check_rank_bound(sketch, values, (0.01, 0.5, 0.99))
    # The real error is far below the bound.
    found = sketch.compute_quantiles([0.01, 0.99])[:, 0]
    ranks = [(values[:, 0] <= v).mean() for v in found]
    assert abs(ranks[0] - 0.01) < 0.0005 and abs(ranks[1] - 0.99) < 0.0005


def test_a_dimension_without_finite_values_gives_nan_quantiles():
    sketch = QuantileSketch(2, capacity=4)
    sketch.add(np.array([[np.nan, 1.0], [np.inf, 2.0]] * 10))
    found = sketch.compute_quantiles([0.5])
    assert np.isnan(found[0, 0]) and found[0, 1] in (1.0, 2.0)
    assert np.isnan(sketch.compute_rank_errors()[0])
    assert np.isnan(QuantileSketch(1).compute_quantiles([0.5])).all()


def test_the_sketch_never_changes_the_callers_values():
    values = np.array([[3.0], [np.inf], [1.0], [2.0]])
    copy = values.copy()
    sketch = QuantileSketch(1, capacity=2)
    sketch.add(values)
    np.testing.assert_array_equal(values, copy)


def test_float32_items_give_the_float64_quantiles_of_float32_data():
    rng = np.random.default_rng(3)
    values = rng.normal(size=(3000, 2)).astype(np.float32)
    narrow, wide = QuantileSketch(2, dtype=np.float32), QuantileSketch(2)
    for part in np.array_split(values, 7):
        narrow.add(part)
        wide.add(part)
    found = narrow.compute_quantiles(_LEVELS)
    assert found.dtype == np.float64
    np.testing.assert_array_equal(found, np.quantile(values.astype(np.float64), _LEVELS, axis=0))
    np.testing.assert_array_equal(found, wide.compute_quantiles(_LEVELS))
    small_narrow, small_wide = (
        QuantileSketch(2, capacity=16, dtype='float32'),
        QuantileSketch(2, capacity=16),
    )
    small_narrow.add(values)
    small_wide.add(values)
    np.testing.assert_array_equal(  # The same compactions, the same items.
        small_narrow.compute_quantiles(_LEVELS), small_wide.compute_quantiles(_LEVELS)
    )
    _check_rank_bound(small_narrow, values.astype(np.float64), _LEVELS)


@pytest.mark.parametrize(
    ('kwargs', 'message'),
    [
        ({'dims': 1, 'dtype': np.int32}, 'expected float32 or float64'),
        ({'dims': 0}, 'dims=0'),
        ({'dims': 1, 'capacity': 3}, 'even'),
        ({'dims': 1, 'capacity': 0}, 'capacity=0'),
    ],
)
def test_sketch_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        QuantileSketch(**kwargs)


def test_sketches_of_other_shapes_do_not_merge():
    with pytest.raises(ValueError, match='same options'):
        QuantileSketch(2).merge(QuantileSketch(3))
    with pytest.raises(ValueError, match='capacity 8'):
        QuantileSketch(2, capacity=16).merge(QuantileSketch(2, capacity=8))
    with pytest.raises(ValueError, match='float32'):
        QuantileSketch(2).merge(QuantileSketch(2, dtype=np.float32))
