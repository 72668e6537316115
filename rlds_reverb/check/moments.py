"""Count, mean, variance, min and max per dimension, merged exactly (Chan et al.), in float64.

`Moments` holds, per dimension, the count n of finite values, their mean, M2 (the sum of
squared deviations from the mean), min and max, and how many values were NaN and how
many infinite. Two sets of moments merge with the pairwise formulas of Chan, Golub and
LeVeque ("Updating formulae and a pairwise algorithm for computing sample variances",
1979): with δ = mean_B − mean_A and n = n_A + n_B,

    mean = mean_A + δ n_B / n,    M2 = M2_A + M2_B + δ² n_A n_B / n,

so the moments of A and B merged are those of A ∪ B (to float64 rounding) for any split,
and the order of merges does not matter beyond rounding. Each part's own moments come from
a two-pass sum over its values (`compute_moments` in NumPy; `statistics` computes the same
per episode in TF), which keeps M2 accurate when the mean is large.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

# Helpers of `rlds_reverb.check.statistics`.
__all__: list[str] = []


@dataclasses.dataclass
class Moments:
    """Per-dimension moments of the finite values seen (every field a `[D]` array).

    Attributes:
      count: int64: finite values.
      mean: float64 mean of the finite values (0 where count is 0).
      m2: float64 sum of squared deviations from the mean.
      minimum: float64 smallest finite value (+inf where count is 0).
      maximum: float64 largest finite value (−inf where count is 0).
      nan_count: int64: NaN values.
      inf_count: int64: ±inf values.
    """

    count: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray
    nan_count: np.ndarray
    inf_count: np.ndarray

    @classmethod
    def empty(cls, dims: int) -> Moments:
        """Returns the moments of no value."""
        zeros = np.zeros(dims, np.int64)
        return cls(
            count=zeros,
            mean=np.zeros(dims),
            m2=np.zeros(dims),
            minimum=np.full(dims, np.inf),
            maximum=np.full(dims, -np.inf),
            nan_count=zeros.copy(),
            inf_count=zeros.copy(),
        )

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Moments:
        """Returns moments from a dict of their fields' arrays (one episode's TF reduction)."""
        return cls(
            count=np.asarray(arrays['count'], np.int64),
            mean=np.asarray(arrays['mean'], np.float64),
            m2=np.asarray(arrays['m2'], np.float64),
            minimum=np.asarray(arrays['minimum'], np.float64),
            maximum=np.asarray(arrays['maximum'], np.float64),
            nan_count=np.asarray(arrays['nan_count'], np.int64),
            inf_count=np.asarray(arrays['inf_count'], np.int64),
        )

    def merge(self, other: Moments) -> Moments:
        """Returns the moments of both sets of values (Chan et al.'s pairwise formulas)."""
        count = self.count + other.count
        safe = np.maximum(count, 1).astype(np.float64)
        delta = other.mean - self.mean
        mean = np.where(count > 0, self.mean + delta * (other.count / safe), 0.0)
        m2 = self.m2 + other.m2 + delta * delta * (self.count * (other.count / safe))
        return Moments(
            count=count,
            mean=mean,
            m2=np.where(count > 0, m2, 0.0),
            minimum=np.minimum(self.minimum, other.minimum),
            maximum=np.maximum(self.maximum, other.maximum),
            nan_count=self.nan_count + other.nan_count,
            inf_count=self.inf_count + other.inf_count,
        )

    def compute_std(self) -> np.ndarray:
        """Returns the population standard deviation (ddof 0; NaN where count is 0)."""
        with np.errstate(divide='ignore', invalid='ignore'):
            return np.where(self.count > 0, np.sqrt(self.m2 / self.count), np.nan)


def compute_moments(values: np.ndarray) -> Moments:
    """Returns the moments of `values`, `[N, D]` (the NumPy twin of the per-episode TF pass).

    Example:
      >>> compute_moments(np.array([[1.0], [3.0]])).mean
      array([2.])
    """
    values = np.asarray(values, np.float64)
    values = values.reshape(len(values), int(np.prod(values.shape[1:], dtype=np.int64)))
    finite = np.isfinite(values)
    count = finite.sum(axis=0)
    kept = np.where(finite, values, 0.0)
    mean = kept.sum(axis=0) / np.maximum(count, 1)
    deviation = np.where(finite, values - mean, 0.0)
    return Moments(
        count=count.astype(np.int64),
        mean=mean,
        m2=(deviation * deviation).sum(axis=0),
        minimum=np.where(finite, values, np.inf).min(axis=0, initial=np.inf),
        maximum=np.where(finite, values, -np.inf).max(axis=0, initial=-np.inf),
        nan_count=np.isnan(values).sum(axis=0).astype(np.int64),
        inf_count=np.isinf(values).sum(axis=0).astype(np.int64),
    )
