"""Exact streaming histograms: fixed memory per dimension, counts never estimated.

`StreamingHistogram` counts values as they stream in (a dataset report's action
distributions, `report.compute_report`): the bins of each dimension have a power-of-two
width and start at a multiple of it, so when a value falls outside them the width doubles
and whole bins merge, and every count stays exact.
"""

from __future__ import annotations

import math

import numpy as np

from rlds_reverb.core import checks

__all__ = ['StreamingHistogram']


class StreamingHistogram:
    """Exact counts of values in a fixed number of equal bins, per dimension, as values stream.

    The range of a dimension's bins grows to hold every finite value: the bin width is a
    power of two and the bins start at a multiple of it, so doubling the width merges
    whole bins and no count is ever estimated. Memory is `dims * num_bins` counts, however
    many values are added; the range is at most four times the data's spread (empty bins at
    the edges, which `bins` leaves out). NaN and infinite values are not counted.

    Args:
      dims: The number of dimensions (columns of the values `add` takes).
      num_bins: The number of bins per dimension.

    Example:
      >>> histogram = StreamingHistogram(2)
      >>> histogram.add(np.array([[0.0, 1.0], [0.5, 3.0]]))
      >>> edges, counts = histogram.bins(0)
    """

    def __init__(self, dims: int, num_bins: int = 64):
        self._num_bins = checks.check_int_at_least(num_bins, 2, argument='num_bins')
        dims = checks.check_int_at_least(dims, 1, argument='dims')
        self._start = np.full(dims, np.nan)
        self._width = np.full(dims, np.nan)
        self._counts = np.zeros((dims, self._num_bins), np.int64)

    def add(self, values: np.ndarray) -> None:
        """Counts `values`, an array `[N, dims]` (numbers of any dtype)."""
        values = np.asarray(values, np.float64).reshape(len(values), len(self._start))
        finite = np.isfinite(values)
        if not finite.any():
            return
        lows = np.where(finite, values, np.inf).min(axis=0)
        highs = np.where(finite, values, -np.inf).max(axis=0)
        ends = self._start + self._num_bins * self._width
        for dim in np.flatnonzero(finite.any(axis=0)):
            if np.isnan(self._start[dim]):
                self._start[dim], self._width[dim] = self._fit(lows[dim], highs[dim], None)
            elif lows[dim] < self._start[dim] or highs[dim] >= ends[dim]:
                self._grow(dim, lows[dim], highs[dim])
        # Dimensions without a range yet have no finite value: any bin will do, none counts.
        start = np.nan_to_num(self._start)
        width = np.where(np.isnan(self._width), 1.0, self._width)
        index = _find_bins(np.where(finite, values, start), start, width)
        index = np.clip(index, 0, self._num_bins - 1)
        flat = (np.arange(len(self._start)) * self._num_bins + index)[finite]
        self._counts += np.bincount(flat, minlength=self._counts.size).reshape(self._counts.shape)

    def _fit(self, low: float, high: float, width: float | None) -> tuple[float, float]:
        """Returns (start, width): the narrowest power-of-two bins (>= `width`) over [low, high]."""
        if width is None:
            # At least 2**-20 of the magnitude: bin indices stay far inside float64 precision.
            spread = max(high - low, max(abs(low), abs(high)) * 2.0**-20) or 1.0
            width = 2.0 ** math.floor(math.log2(spread / self._num_bins))
        while True:
            start = math.floor(low / width) * width
            if high < start + self._num_bins * width:
                return start, width
            width *= 2.0

    def _grow(self, dim: int, low: float, high: float) -> None:
        old_start, old_width = self._start[dim], self._width[dim]
        old_end = old_start + self._num_bins * old_width
        # The new bins cover the old ones (up to the last one's start) and the new values.
        start, width = self._fit(min(low, old_start), max(high, old_end - old_width), old_width)
        # Old bins lie wholly inside new ones: the new width is a multiple of the old one.
        lows = old_start + np.arange(self._num_bins) * old_width
        target = _find_bins(lows, np.float64(start), np.float64(width))
        merged = np.bincount(target, weights=self._counts[dim], minlength=self._num_bins)
        self._counts[dim] = merged.astype(np.int64)
        self._start[dim], self._width[dim] = start, width

    def total(self, dim: int) -> int:
        """Returns how many values of dimension `dim` were counted."""
        return int(self._counts[dim].sum())

    def bins(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """Returns (edges `[K + 1]`, counts `[K]`) of dimension `dim`, empty edge bins left out.

        Both are empty when the dimension has no finite value.
        """
        counts = self._counts[dim]
        used = np.flatnonzero(counts)
        if not used.size:
            return np.zeros(0), np.zeros(0, np.int64)
        first, last = used[0], used[-1] + 1
        edges = self._start[dim] + np.arange(first, last + 1) * self._width[dim]
        return edges, counts[first:last].copy()


def _find_bins(
    values: np.ndarray, start: np.ndarray | np.floating, width: np.ndarray | np.floating
) -> np.ndarray:
    """Returns the bin index of each value: bins `[start + i width, start + (i + 1) width)`.

    The division can round across a bin edge (a tiny value next to a wide bin); the edges
    themselves are exact (a power-of-two width, a start that is a multiple of it), so one
    comparison with them puts each value in its bin.
    """
    index = np.floor((values - start) / width)
    low_edge = start + index * width
    index -= values < low_edge
    index += values >= low_edge + width
    return index.astype(np.int64)
