"""Statistics of an RLDS dataset's numeric step fields, per dimension: exact and mergeable.

`compute_statistics` reads a dataset once, one whole episode at a time: a `tf.data` map
reduces each episode's `[T, ...]` step tensors (no per-step Python), and NumPy folds the
reductions into running totals (`statistics_fields.StatisticsTotals`). For every numeric
step field (nested fields by their `/` path: `observation/state`, `action`, `reward`, any
numeric extra field) and every dimension of it:

* `count`, `mean`, `std` (population, ddof 0), `minimum`, `maximum`, in float64: the means
  and variances of episodes, shards and workers merge with Chan et al.'s pairwise formulas
  (`moments`), so the statistics of A and B merged equal those of A ∪ B to float64
  rounding, for any split (tested to a relative 1e-12);
* quantiles (`quantile_levels`, q01 and q99 by default, any list on request) from a
  mergeable sketch (`quantile_sketch`): exact (`np.quantile`, linear interpolation) while
  a field has fewer than `sketch_capacity` (8,192) values per dimension; beyond, each carries
  a deterministic rank-error bound, `quantile_rank_error` (a fraction of the count: the
  true rank of a returned q-quantile lies within q ± that bound), which
  stays below 0.2% up to 10^8 values per dimension. Quantiles of merged data are never
  averages of the parts' quantiles (the error that put one published dataset's q99 at
  13.6 where the data's is 39.3).

Dimensions. Every per-dimension figure is a vector of D = the number of elements of one
step's value, in row-major order: a scalar field (`reward`) gives vectors of length 1,
never a scalar, and a `[2, 3]` field length 6 (`FieldStatistics.reshape` gives them back
in the step's shape). Non-finite values are not values: NaN and ±inf are counted
(`nan_count`, `inf_count`, and the dimensions that hold any in `nan_dims`, `inf_dims`) and
left out of every other figure. A dimension whose finite values are all equal
(`minimum == maximum`) is *zero-variance*: its `std` is exactly 0 and it is listed in
`zero_variance_dims` (normalization leaves it unchanged); one without any finite value has
NaN figures and is listed in `empty_dims`.

Fields. By default every numeric step field (integers and floats) whose per-step shape is
fixed; left out, with the reason in `DatasetStatistics.skipped`: strings (and so frames kept
encoded), booleans (the flags `is_first`, `is_last`, `is_terminal` are not listed), fields
of unknown or zero size, and images (uint8 `[H, W, C]` with 1, 3 or 4 channels), which get
statistics only when named in `fields` by their own path. Statistics cover every episode
read, valid or not (validate first, or load with invalid episodes skipped, to leave them
out). `statistics_files` saves them beside the dataset with a fingerprint of the data;
`rlds_reverb.transform.normalize` normalizes with them; `rlds_reverb.distribute.statistics`
computes the same with Apache Beam.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf

from rlds_reverb.check import quantile_sketch, statistics_text
from rlds_reverb.check.statistics_fields import (
    FieldPlan,
    StatisticsTotals,
    plan_fields,
    reduce_episode_batch,
    stack_fields,
)
from rlds_reverb.core import checks, specs, types
from rlds_reverb.core import episodes as episodes_lib

__all__ = [
    'DEFAULT_QUANTILES',
    'DatasetStatistics',
    'FieldStatistics',
    'StatisticsOptions',
    'compute_statistics',
]

DEFAULT_QUANTILES = (0.01, 0.99)
DEFAULT_SKETCH_CAPACITY = quantile_sketch.DEFAULT_CAPACITY
# Episodes reduced together in one TF call (and folded in one Python step).
EPISODES_PER_CALL = 16


def _check_quantiles(quantiles: object) -> tuple[float, ...]:
    if isinstance(quantiles, str | bytes) or not isinstance(quantiles, Sequence):
        raise TypeError(f'quantiles must be a sequence of numbers in [0, 1]; got {quantiles!r}.')
    levels = [checks.check_unit_interval(q, argument='each of quantiles') for q in quantiles]
    return tuple(sorted(set(levels)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class StatisticsOptions:
    """What `compute_statistics` computes (part of the fingerprint of saved statistics).

    Attributes:
      fields: The step fields, as `/` paths (`'observation/state'`, `'action'`; a parent
        path names the fields under it, images left out unless named by their own path);
        None: every numeric field (module docstring).
      quantiles: The quantile levels, each in [0, 1] (kept sorted, without repeats).
      sketch_capacity: Values per dimension kept exactly before the quantile sketch
        compacts (even, >= 2; more is more accurate and uses more memory).

    Raises:
      TypeError: If `fields` or `quantiles` is not a sequence (of strings, of numbers).
      ValueError: If a quantile is outside [0, 1], or `sketch_capacity` is not an even
        integer >= 2.

    Example:
      >>> StatisticsOptions(fields=['action'], quantiles=[0.05, 0.5, 0.95])
    """

    fields: Sequence[str] | None = None
    quantiles: Sequence[float] = DEFAULT_QUANTILES
    sketch_capacity: int = DEFAULT_SKETCH_CAPACITY

    def __post_init__(self) -> None:
        if self.fields is not None:
            if isinstance(self.fields, str) or not all(isinstance(f, str) for f in self.fields):
                raise TypeError(
                    f"fields must be a sequence of field paths such as ['action', "
                    f"'observation/state']; got {self.fields!r}."
                )
            object.__setattr__(self, 'fields', tuple(self.fields))
        object.__setattr__(self, 'quantiles', _check_quantiles(self.quantiles))
        capacity = checks.check_int_at_least(self.sketch_capacity, 2, argument='sketch_capacity')
        if capacity % 2:
            raise ValueError(f'sketch_capacity={capacity} is not valid; expected an even integer.')


def _list_dims(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.flatnonzero(mask))


@dataclasses.dataclass(frozen=True, eq=False)
class FieldStatistics:
    """The statistics of one step field, per dimension (each figure a `[D]` vector).

    Attributes:
      path: The field's `/` path.
      dtype: The field's dtype name.
      shape: The shape of one step's value (D = its number of elements; 1 for `()`).
      count: int64: finite values per dimension.
      mean: float64 mean of the finite values (NaN without any).
      std: float64 population standard deviation (ddof 0); exactly 0 where every finite
        value is equal.
      minimum: float64 smallest finite value.
      maximum: float64 largest finite value.
      quantile_levels: The levels computed, sorted.
      quantiles: float64 `[Q, D]`, row i the `quantile_levels[i]` quantile.
      quantile_rank_error: float64: the bound on each quantile's rank error, as a fraction
        of `count` (0: exact).
      nan_count: int64: NaN values per dimension.
      inf_count: int64: ±inf values per dimension.
    """

    path: str
    dtype: str
    shape: tuple[int, ...]
    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray
    quantile_levels: tuple[float, ...]
    quantiles: np.ndarray
    quantile_rank_error: np.ndarray
    nan_count: np.ndarray
    inf_count: np.ndarray

    @property
    def dims(self) -> int:
        """D, the number of dimensions."""
        return len(self.count)

    @property
    def zero_variance_dims(self) -> tuple[int, ...]:
        """Dimensions whose finite values are all equal (at least one)."""
        return _list_dims((self.count > 0) & (self.minimum == self.maximum))

    @property
    def empty_dims(self) -> tuple[int, ...]:
        """Dimensions without any finite value."""
        return _list_dims(self.count == 0)

    @property
    def nan_dims(self) -> tuple[int, ...]:
        """Dimensions holding a NaN."""
        return _list_dims(self.nan_count > 0)

    @property
    def inf_dims(self) -> tuple[int, ...]:
        """Dimensions holding +inf or −inf."""
        return _list_dims(self.inf_count > 0)

    def get_quantile(self, level: float) -> np.ndarray:
        """Returns the `level` quantile of every dimension, `[D]`.

        Raises:
          KeyError: If `level` was not computed (the message lists the levels that were).

        Example:
          >>> statistics['action'].get_quantile(0.99)
        """
        for i, computed in enumerate(self.quantile_levels):
            if math.isclose(computed, level, rel_tol=0.0, abs_tol=1e-12):
                return self.quantiles[i]
        raise KeyError(
            f'The {level} quantile of {self.path!r} was not computed; computed: '
            f'{list(self.quantile_levels)}. Compute statistics with quantiles=[..., {level}].'
        )

    def reshape(self, values: np.ndarray) -> np.ndarray:
        """Returns a `[D]` figure (`mean`, `std`, ...) in the step's shape (`()` for scalars)."""
        return np.asarray(values).reshape(self.shape)


@dataclasses.dataclass(frozen=True, eq=False)
class DatasetStatistics:
    """The statistics of a dataset: per field, and what was left out.

    Attributes:
      fields: `FieldStatistics` by `/` path, in the step spec's order.
      skipped: The step fields without statistics, each with the reason.
      episodes: Episodes read.
      steps: Steps read.
      options: What was computed.
      fingerprint: The fingerprint of the data described (`statistics_files`), or None.
      reused: Whether these were read from a saved file whose fingerprint matched.
    """

    fields: Mapping[str, FieldStatistics]
    skipped: Mapping[str, str]
    episodes: int
    steps: int
    options: StatisticsOptions
    fingerprint: str | None = None
    reused: bool = False

    def __getitem__(self, path: str) -> FieldStatistics:
        """Returns the statistics of the field at `path`.

        Raises:
          KeyError: If there are none (the message says why, or lists the fields).
        """
        path = path.strip('/')
        if path in self.fields:
            return self.fields[path]
        if path in self.skipped:
            raise KeyError(f'{path!r} has no statistics: {self.skipped[path]}.')
        raise KeyError(f'{path!r} has no statistics; fields with statistics: {list(self.fields)}.')

    def format(self) -> str:
        """Returns the statistics as text: a table per field (what `rlds-reverb stats` prints)."""
        return statistics_text.format_statistics(self)


def _finish_field(
    plan: FieldPlan, totals: StatisticsTotals, quantiles: np.ndarray, levels: tuple[float, ...]
) -> FieldStatistics:
    where = totals.slice_of(plan.path)
    moments = totals.moments
    count, low, high = moments.count[where], moments.minimum[where], moments.maximum[where]
    present = count > 0
    std = np.where(present & (low == high), 0.0, moments.compute_std()[where])
    errors = totals.sketch.compute_rank_errors()[where] if totals.sketch else np.zeros(0)
    return FieldStatistics(
        path=plan.path,
        dtype=plan.dtype,
        shape=plan.shape,
        count=count,
        mean=np.where(present, moments.mean[where], np.nan),
        std=std,
        minimum=np.where(present, low, np.nan),
        maximum=np.where(present, high, np.nan),
        quantile_levels=levels,
        quantiles=quantiles[:, where].reshape(len(levels), plan.dims),
        quantile_rank_error=errors,
        nan_count=moments.nan_count[where],
        inf_count=moments.inf_count[where],
    )


def finish_statistics(totals: StatisticsTotals, options: StatisticsOptions) -> DatasetStatistics:
    """Returns the statistics of running totals (one pass's, or merged ones)."""
    levels = tuple(options.quantiles)
    sketch = totals.sketch
    quantiles = sketch.compute_quantiles(levels) if sketch else np.zeros((len(levels), 0))
    return DatasetStatistics(
        fields={p.path: _finish_field(p, totals, quantiles, levels) for p in totals.plans},
        skipped=dict(totals.skipped),
        episodes=totals.episodes,
        steps=totals.steps,
        options=options,
    )


def start_totals(step_spec: types.SpecNest, options: StatisticsOptions) -> StatisticsTotals:
    """Returns empty totals for the fields `options` picks from `step_spec`.

    Raises:
      SpecMismatchError: If `options.fields` names a missing or non-numeric field.
    """
    plans, skipped = plan_fields(step_spec, options.fields)
    return StatisticsTotals(plans, skipped, capacity=options.sketch_capacity)


def read_totals(
    episodes: tf.data.Dataset,
    totals: StatisticsTotals,
    progress: types.EpisodeProgressFn | None = None,
) -> None:
    """Folds every episode of `episodes` (an RLDS dataset) into `totals`, in one pass.

    Each episode's planned fields are stacked in a `tf.data` map; `EPISODES_PER_CALL` of
    them are reduced together (their steps end to end: statistics do not depend on where
    an episode ends), so short episodes pay TF's per-op cost and Python's fold once per
    batch, not once each.
    """
    plans = totals.plans
    reduced = (
        episodes_lib.to_episode_tensors(episodes)
        .map(
            episodes_lib.without_autograph(lambda steps: stack_fields(steps, plans)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        .ragged_batch(EPISODES_PER_CALL)
        .map(
            episodes_lib.without_autograph(
                lambda stacked: reduce_episode_batch(stacked, totals.values_dtype)
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    )
    for found in reduced.prefetch(tf.data.AUTOTUNE).as_numpy_iterator():
        totals.add_reduction(found)
        if progress is not None:
            progress(int(found['episodes']), int(found['length']))


def compute_statistics(
    episodes: tf.data.Dataset,
    *,
    fields: Sequence[str] | None = None,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    sketch_capacity: int = DEFAULT_SKETCH_CAPACITY,
    progress: types.EpisodeProgressFn | None = None,
) -> DatasetStatistics:
    """Computes the statistics of an RLDS dataset's numeric step fields, in one pass.

    See the module docstring for what is computed, the quantiles' bound, and which fields.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`), as `rlds_reverb.load` gives.
      fields: The step fields (`/` paths; a parent names the fields under it); None: every
        numeric field, images left out.
      quantiles: The quantile levels, each in [0, 1].
      sketch_capacity: Values per dimension kept exactly before the quantile sketch
        compacts (even, >= 2).
      progress: Optional `fn(episodes, steps)`, called after each batch of episodes read
        (`EPISODES_PER_CALL` at most).

    Returns:
      A `DatasetStatistics`.

    Raises:
      SourceError: If the dataset holds no RLDS steps.
      SpecMismatchError: If required step fields are missing, or `fields` names a path the
        steps do not hold or a field that gets no statistics (a string, say).
      TypeError: If `fields` or `quantiles` is not a sequence.
      ValueError: If a quantile is outside [0, 1], or `sketch_capacity` is not an even
        integer >= 2.

    Example:
      >>> statistics = compute_statistics(rlds_reverb.load(path), quantiles=[0.01, 0.99])
      >>> statistics['action'].get_quantile(0.99), statistics['action'].std
    """
    options = StatisticsOptions(fields=fields, quantiles=quantiles, sketch_capacity=sketch_capacity)
    totals = start_totals(specs.get_step_spec(episodes), options)
    read_totals(episodes, totals, progress)
    return finish_statistics(totals, options)
