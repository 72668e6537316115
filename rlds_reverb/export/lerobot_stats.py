"""The statistics a LeRobot dataset holds, computed as LeRobot 0.6.1 computes them.

LeRobot writes, per episode and feature (`stats/<feature>/<stat>` columns of the episodes
table), `min`, `max`, `mean`, `std`, `count` and the quantiles `q01`, `q10`, `q50`, `q90`,
`q99`, and in `meta/stats.json` their aggregate over the episodes; its policies normalise
with them. This module computes the same numbers from the same values (docs/lerobot.md,
"Statistics"; tests/export/test_lerobot_stats.py compares them with the fixtures LeRobot
wrote, and the scratch-venv check with LeRobot's own functions):

* numbers in NumPy 2's dtypes (LeRobot runs on NumPy 2; the project on NumPy 1, whose
  scalar promotion differs, so every mixed operation here names its dtype): values as
  stored promoted with float32 (bool, uint8 and float32 to float32; int64 and float64 to
  float64); `mean` and the mean of squares with `np.mean`, `std` =
  sqrt(max(0, mean of squares - mean^2)); an episode of one frame gets `np.std`'s 0 and
  every quantile equal to its mean;
* quantiles from a 5,000-bin histogram per dimension over [min - 1e-10, max + 1e-10]
  (edges in the values' float dtype, as `np.linspace` makes them under NumPy 2), linearly
  interpolated within the bin that holds the target count;
* images per channel over every pixel of up to `estimate_samples(T)` evenly spaced frames,
  each frame larger than 300 pixels a side taken at every k-th pixel, divided by 255,
  shaped `[C, 1, 1]` (greyscale frames are counted as RGB, as LeRobot loads them);
  `count` is the number of frames sampled;
* the dataset's statistics are the episodes' folded one at a time in episode order
  (`aggregate`): min of mins, max of maxes, count-weighted mean, pooled std, and each
  quantile the count-weighted mean of the episodes' (LeRobot's approximation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

QUANTILES = {'q01': 0.01, 'q10': 0.10, 'q50': 0.50, 'q90': 0.90, 'q99': 0.99}
STAT_NAMES = ('min', 'max', 'mean', 'std', 'count', *QUANTILES)
Stats = dict[str, np.ndarray]
_BINS = 5000
_EDGE_PAD = 1e-10
_MIN_SAMPLES, _MAX_SAMPLES, _SAMPLE_POWER = 100, 10_000, 0.75
_DOWNSAMPLE_ABOVE, _DOWNSAMPLE_TARGET = 300, 150


def _linspace(start: np.generic, stop: np.generic, dtype: np.dtype) -> np.ndarray:
    """`np.linspace(start, stop, _BINS + 1)` computed in `dtype`, as NumPy 2 does for
    start and stop of that dtype (NumPy 1 would compute in float64)."""
    delta = np.subtract(stop, start, dtype=dtype)
    step = delta / dtype.type(_BINS)
    edges = np.arange(0, _BINS + 1, dtype=dtype)
    if step == 0:
        edges = edges / dtype.type(_BINS) * delta
    else:
        edges *= step
    edges += start
    edges[-1] = stop
    return edges


def _quantile(counts: np.ndarray, edges: np.ndarray, target: float) -> np.floating:
    """The value below which `target` of the histogram's counts lie (interpolated)."""
    cumulative = np.cumsum(counts)
    index = int(np.searchsorted(cumulative, target))
    if index == 0:
        return edges[0]
    if index >= len(cumulative):
        return edges[-1]
    before = cumulative[index - 1]
    inside = cumulative[index] - before
    if inside == 0:
        return edges[index]
    fraction = (target - before) / inside
    return edges[index] + fraction * (edges[index + 1] - edges[index])


def _histogram(column: np.ndarray, edges: np.ndarray, levels: np.ndarray | None) -> np.ndarray:
    """`np.histogram(column, bins=edges)[0]`; for uint8 data from its 256 level counts."""
    if levels is None:
        return np.histogram(column, bins=edges)[0].astype(np.float64)
    values = np.arange(256, dtype=edges.dtype)
    counts, _ = np.histogram(values, bins=edges, weights=levels.astype(np.float64))
    return counts


def _running_stats(values: np.ndarray, levels: Sequence[np.ndarray] | None = None) -> Stats:
    """min, max, mean, std and quantiles per column of `values` `[N, D]` (N >= 2).

    Args:
      values: The values, promoted with float32 as LeRobot's running statistics do.
      levels: For uint8 pixels, each column's count of each of the 256 levels (the
        histograms come from them: the same counts, without sorting every pixel).
    """
    dtype = values.dtype
    low, high = values.min(axis=0), values.max(axis=0)
    mean = np.mean(values, axis=0)
    squares = np.mean(values**2, axis=0)
    stats: Stats = {
        'min': low,
        'max': high,
        'mean': mean,
        'std': np.sqrt(np.maximum(dtype.type(0), squares - mean**2)),
        'count': np.array([len(values)]),
    }
    pad = dtype.type(_EDGE_PAD)
    quantiles: dict[str, list] = {name: [] for name in QUANTILES}
    for d in range(values.shape[1]):
        edges = _linspace(low[d] - pad, high[d] + pad, dtype)
        counts = _histogram(values[:, d], edges, None if levels is None else levels[d])
        for name, q in QUANTILES.items():
            quantiles[name].append(_quantile(counts, edges, q * len(values)))
    stats.update({name: np.array(found) for name, found in quantiles.items()})
    return stats


def _basic_stats(values: np.ndarray) -> Stats:
    """LeRobot's statistics of fewer than two rows: np.std's 0, quantiles = the mean."""
    mean = np.mean(values, axis=0)
    stats: Stats = {
        'min': np.min(values, axis=0),
        'max': np.max(values, axis=0),
        'mean': mean,
        'std': np.std(values, axis=0),
        'count': np.array([len(values)]),
    }
    stats.update({name: mean.copy() for name in QUANTILES})
    return stats


def numeric_stats(values: np.ndarray) -> Stats:
    """Returns one episode's statistics of a numeric or bool feature.

    Args:
      values: `[T]` (a scalar feature) or `[T, n]`, as stored (float32, bool, int64 ...).

    Returns:
      `{stat: array}`, each `[n]` (`[1]` for a scalar feature); `count` is `[T]`.
    """
    columns = values.reshape(len(values), -1)
    if len(columns) < 2:
        return _basic_stats(columns)
    return _running_stats(columns.astype(np.result_type(columns.dtype, np.float32)))


def estimate_samples(length: int) -> int:
    """How many frames of an episode of `length` LeRobot's image statistics sample."""
    floor = min(_MIN_SAMPLES, length)
    return max(floor, min(int(length**_SAMPLE_POWER), _MAX_SAMPLES))


def sample_positions(length: int) -> np.ndarray:
    """The frames LeRobot's image statistics sample: evenly spaced, rounded."""
    return np.round(np.linspace(0, length - 1, estimate_samples(length))).astype(int)


def image_stats(frames: np.ndarray) -> Stats:
    """Returns one episode's statistics of a camera (its uint8 `[T, H, W, C]` frames).

    Returns:
      `{stat: array}`, each `[3, 1, 1]` in [0, 1] (greyscale counted as RGB); `count` is
      the number of frames sampled.
    """
    sampled = frames[sample_positions(len(frames))]
    height, width = sampled.shape[1:3]
    if max(height, width) >= _DOWNSAMPLE_ABOVE:
        step = int((width if width > height else height) / _DOWNSAMPLE_TARGET)
        sampled = sampled[:, ::step, ::step]
    if sampled.shape[-1] == 1:
        sampled = np.repeat(sampled, 3, axis=-1)
    # LeRobot holds the samples channels-first, then views them as [pixels, C]: one frame
    # reshapes without a copy (column-major), and NumPy then sums each channel pairwise.
    # The same layout gives the same float32 sums.
    channels_first = np.ascontiguousarray(sampled.transpose(0, 3, 1, 2))
    pixels = channels_first.transpose(0, 2, 3, 1).reshape(-1, channels_first.shape[1])
    if len(pixels) < 2:
        stats = _basic_stats(pixels)
    else:
        levels = [np.bincount(channels_first[:, c].ravel(), minlength=256) for c in range(3)]
        stats = _running_stats(pixels.astype(np.float32, copy=False), levels)
    scaled: Stats = {}
    for name, value in stats.items():
        if name == 'count':
            scaled[name] = np.array([len(sampled)])
        else:
            scaled[name] = (value.reshape(1, -1, 1, 1) / np.float32(255.0))[0]
    return scaled


def aggregate(total: Stats | None, episode: Stats) -> Stats:
    """Returns the statistics of the episodes so far (`total`) and one more, as LeRobot
    folds them: None (no episode yet) gives the episode's own."""
    if total is None:
        return episode
    parts = (total, episode)
    means = np.stack([p['mean'] for p in parts])
    variances = np.stack([p['std'] ** 2 for p in parts])
    counts = np.stack([p['count'] for p in parts])
    count = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    mean = (means * counts).sum(axis=0) / count
    variance = ((variances + (means - mean) ** 2) * counts).sum(axis=0) / count
    out: Stats = {
        'min': np.min(np.stack([p['min'] for p in parts]), axis=0),
        'max': np.max(np.stack([p['max'] for p in parts]), axis=0),
        'mean': mean,
        'std': np.sqrt(variance),
        'count': count,
    }
    for name in QUANTILES:
        out[name] = (np.stack([p[name] for p in parts]) * counts).sum(axis=0) / count
    return out


def to_lists(stats: Mapping[str, np.ndarray]) -> dict[str, list]:
    """Returns statistics as nested lists of Python numbers, in `STAT_NAMES` order."""
    return {name: np.asarray(stats[name]).tolist() for name in STAT_NAMES}


def from_lists(stats: Mapping[str, list]) -> Stats:
    """Returns statistics read back from the episodes table as float64 arrays (int64 counts)."""
    return {
        name: np.asarray(stats[name], dtype=np.int64 if name == 'count' else np.float64)
        for name in STAT_NAMES
    }
