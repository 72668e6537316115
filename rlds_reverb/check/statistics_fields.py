"""Which step fields get statistics, each episode reduced in TF, and the running totals.

`plan_fields` picks the fields from the step spec (`statistics.compute_statistics`
documents the rule); `stack_fields` lays one episode's planned fields side by side as
float64 columns, `[T, ΣD]`; `reduce_rows` reduces such rows (one episode's, or a batch of
episodes end to end) in one traced function to the moments (`moments`) of every dimension
and the values for the quantile sketch; `StatisticsTotals` folds those in (NumPy) and
merges with other totals (shards, workers: the Beam stage). Nothing here branches on a
tensor or loops over steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.check import moments as moments_lib
from rlds_reverb.check import quantile_sketch
from rlds_reverb.core import types
from rlds_reverb.core.errors import SpecMismatchError

# Helpers of `rlds_reverb.check.statistics`.
__all__: list[str] = []

PATH_SEPARATOR = '/'
# Image fields (left out unless named): uint8 steps `[H, W, C]` with one of these channels.
_IMAGE_CHANNELS = (1, 3, 4)
# Why a field has no statistics.
SKIP_STRING = 'not numeric (strings)'
SKIP_BOOL = 'not numeric (booleans)'
SKIP_IMAGE = 'an image (uint8 [H, W, C]); name it in fields= to include it'
SKIP_SHAPE = 'its per-step shape is not fixed'
SKIP_EMPTY = 'its steps hold no element (a zero-size shape)'
# Dtypes whose every value float32 holds exactly: their sketch keeps float32 items.
_FLOAT32_EXACT = frozenset({'float16', 'bfloat16', 'float32', 'int8', 'uint8', 'int16', 'uint16'})


@dataclasses.dataclass(frozen=True)
class FieldPlan:
    """One field that gets statistics: its path, dtype name and per-step shape."""

    path: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def dims(self) -> int:
        """D: the elements of one step's value (1 for a scalar)."""
        return int(np.prod(self.shape, dtype=np.int64))


def join_path(path: Sequence[Any]) -> str:
    """Returns a field's key path as a `/`-separated string (`observation/state`)."""
    return PATH_SEPARATOR.join(map(str, path))


def flatten_steps(steps: types.Nest) -> dict[str, Any]:
    """Returns the leaves of a step nest (specs or tensors) by `/` path."""
    return {join_path(path): leaf for path, leaf in tree.flatten_with_path(steps)}


def _is_image(spec: tf.TensorSpec) -> bool:
    shape = spec.shape
    return spec.dtype == tf.uint8 and shape.rank == 3 and shape[-1] in _IMAGE_CHANNELS


def _find_skip_reason(spec: tf.TensorSpec, *, named: bool) -> str | None:
    """Returns why a leaf gets no statistics (None: it gets them)."""
    if spec.dtype == tf.string:
        return SKIP_STRING
    if spec.dtype == tf.bool:
        return SKIP_BOOL
    if not spec.shape.is_fully_defined():
        return SKIP_SHAPE
    if spec.shape.num_elements() == 0:
        return SKIP_EMPTY
    if _is_image(spec) and not named:
        return SKIP_IMAGE
    return None


def _select_named(specs: Mapping[str, tf.TensorSpec], fields: Sequence[str]) -> dict[str, bool]:
    """Returns the leaves `fields` name (a leaf's path, or a parent's), each with whether it
    was named by its own path."""
    chosen: dict[str, bool] = {}
    for field in fields:
        name = field.strip(PATH_SEPARATOR)
        under = [p for p in specs if p == name or p.startswith(name + PATH_SEPARATOR)]
        if not under:
            raise SpecMismatchError(
                f'fields names {field!r}, which the steps do not hold; the step fields are '
                f'{sorted(specs)} (paths are /-separated, such as observation/state).'
            )
        for path in under:
            chosen[path] = chosen.get(path, False) or path == name
    return chosen


def plan_fields(
    step_spec: types.SpecNest, fields: Sequence[str] | None
) -> tuple[list[FieldPlan], dict[str, str]]:
    """Returns the fields that get statistics, in the spec's order, and why the others don't.

    Raises:
      SpecMismatchError: If `fields` names a path the steps do not hold, or a leaf named by
        its own path is not numeric with a fixed, non-empty per-step shape.
    """
    specs = flatten_steps(step_spec)
    named = {p: False for p in specs} if fields is None else _select_named(specs, fields)
    plans, skipped = [], {}
    for path, spec in specs.items():
        if path not in named or (path in types.FLAG_FIELDS and not named[path]):
            continue  # The flags are the episodes' structure, not data.
        reason = _find_skip_reason(spec, named=named[path])
        if reason is not None and named[path]:
            raise SpecMismatchError(
                f'fields names {path!r} ({spec.dtype.name}{spec.shape}), which gets no '
                f'statistics: {reason}. Name numeric fields of a fixed shape only.'
            )
        if reason is None:
            plans.append(FieldPlan(path, spec.dtype.name, tuple(spec.shape.as_list())))
        else:
            skipped[path] = reason
    return plans, skipped


def stack_fields(steps: types.Nest, plans: Sequence[FieldPlan]) -> tf.Tensor:
    """Every planned field of one episode as float64 columns side by side, `[T, ΣD]`."""
    flat = flatten_steps(steps)
    length = tf.shape(steps[types.IS_FIRST])[0]
    columns = [tf.reshape(tf.cast(flat[p.path], tf.float64), [length, p.dims]) for p in plans]
    return tf.concat(columns, axis=1) if columns else tf.zeros([length, 0], tf.float64)


def find_values_dtype(plans: Sequence[FieldPlan]) -> str:
    """Returns how the sketch keeps the fields' values: 'float32' when float32 holds every
    value of every field exactly, else 'float64'."""
    return 'float32' if all(p.dtype in _FLOAT32_EXACT for p in plans) else 'float64'


def reduce_rows(x: tf.Tensor, episodes: tf.Tensor, values_dtype: str) -> dict[str, tf.Tensor]:
    """Reduces the steps `x` (`[N, ΣD]` float64, of `episodes` episodes), in TF.

    One set of moments for every dimension (`moments.compute_moments`, in TF) and the
    values for the quantile sketch (in `values_dtype`): a dozen ops, whatever the number of
    fields and episodes.
    """
    finite = tf.math.is_finite(x)
    count = tf.reduce_sum(tf.cast(finite, tf.int64), axis=0)
    kept = tf.where(finite, x, tf.zeros_like(x))
    mean = tf.reduce_sum(kept, axis=0) / tf.maximum(tf.cast(count, tf.float64), 1.0)
    deviation = tf.where(finite, x - mean, tf.zeros_like(x))
    inf = tf.constant(np.inf, tf.float64)
    return {
        'episodes': tf.cast(episodes, tf.int64),
        'length': tf.shape(x, out_type=tf.int64)[0],
        'count': count,
        'mean': mean,
        'm2': tf.reduce_sum(deviation * deviation, axis=0),
        'minimum': tf.reduce_min(tf.where(finite, x, inf), axis=0),
        'maximum': tf.reduce_max(tf.where(finite, x, -inf), axis=0),
        'nan_count': tf.reduce_sum(tf.cast(tf.math.is_nan(x), tf.int64), axis=0),
        'inf_count': tf.reduce_sum(tf.cast(tf.math.is_inf(x), tf.int64), axis=0),
        'values': tf.cast(x, values_dtype),
    }


def reduce_episode(steps: types.Nest, plans: Sequence[FieldPlan]) -> dict[str, tf.Tensor]:
    """Reduces one episode's whole `[T, ...]` steps (`reduce_rows`; in a `tf.data` map)."""
    return reduce_rows(stack_fields(steps, plans), tf.constant(1), find_values_dtype(plans))


def reduce_episode_batch(
    stacked: tf.Tensor | tf.RaggedTensor, values_dtype: str
) -> dict[str, tf.Tensor]:
    """Reduces a `ragged_batch` of `stack_fields` outputs, its episodes end to end.

    `ragged_batch` gives a ragged `[B, None, ΣD]` batch, or a dense `[B, T, ΣD]` one when
    every episode has the same static length.
    """
    if isinstance(stacked, tf.RaggedTensor):
        return reduce_rows(stacked.values, stacked.nrows(), values_dtype)
    shape = tf.shape(stacked)
    return reduce_rows(tf.reshape(stacked, [-1, shape[2]]), shape[0], values_dtype)


class StatisticsTotals:
    """Running totals of every planned field: moments and a quantile sketch.

    The fields' dimensions sit side by side (`slice_of` says where each field's are): every
    dimension gets one value per step, so they share one sketch and its compactions. Picklable
    (NumPy and plain values only), so a Beam worker's totals travel to be merged.

    Args:
      plans: The fields (`plan_fields`).
      skipped: The fields left out, and why.
      capacity: The quantile sketch's capacity (`quantile_sketch.QuantileSketch`).
    """

    def __init__(self, plans: Sequence[FieldPlan], skipped: Mapping[str, str], *, capacity: int):
        self.plans = list(plans)
        self.skipped = dict(skipped)
        self.capacity = capacity
        self.episodes = 0
        self.steps = 0
        ends = np.cumsum([0] + [p.dims for p in self.plans])
        self._slices = {p.path: slice(ends[i], ends[i + 1]) for i, p in enumerate(self.plans)}
        dims = int(ends[-1])
        self.values_dtype = find_values_dtype(self.plans)
        self.moments = moments_lib.Moments.empty(dims)
        self.sketch = (
            quantile_sketch.QuantileSketch(dims, capacity=capacity, dtype=self.values_dtype)
            if dims
            else None
        )

    def slice_of(self, path: str) -> slice:
        """Returns where the dimensions of the field at `path` sit."""
        return self._slices[path]

    def add_reduction(self, reduced: Mapping[str, Any]) -> None:
        """Folds in a `reduce_rows` output (as NumPy): one episode's, or a batch's."""
        self.episodes += int(reduced['episodes'])
        self.steps += int(reduced['length'])
        self.moments = self.moments.merge(moments_lib.Moments.from_arrays(reduced))
        if self.sketch is not None:
            self.sketch.add(reduced['values'])

    def merge(self, other: StatisticsTotals) -> None:
        """Adds `other`'s totals (of the same plans and capacity) to these.

        Raises:
          ValueError: If the two were planned differently.
        """
        if (other.plans, other.capacity) != (self.plans, self.capacity):
            raise ValueError(
                'Cannot merge statistics of other fields or options: '
                f'{[p.path for p in other.plans]} (capacity {other.capacity}) into '
                f'{[p.path for p in self.plans]} (capacity {self.capacity}).'
            )
        self.episodes += other.episodes
        self.steps += other.steps
        self.moments = self.moments.merge(other.moments)
        if self.sketch is not None and other.sketch is not None:
            self.sketch.merge(other.sketch)
