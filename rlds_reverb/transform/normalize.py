"""Normalize and unnormalize step fields with dataset statistics, as `tf.data` transforms.

A `Normalizer` is built from a `DatasetStatistics` (`rlds_reverb.check.statistics`) and the
fields to change, each with a `NormalizationMode`. Per dimension d of a field it holds a
center c_d and a half-range h_d, and maps

    normalize:    y = (x − c) / h      (then clipped to [−1, 1] in the bounds modes)
    unnormalize:  x = y · h + c

* `MEAN_STD`: c = mean, h = std (zero mean, unit variance; never clipped);
* `QUANTILES`: [q_low, q_high] (the statistics' q01 and q99 by default) mapped to [−1, 1]:
  c = (q_low + q_high) / 2, h = (q_high − q_low) / 2;
* `MIN_MAX`: [min, max] mapped to [−1, 1] likewise.

In the bounds modes the result is clipped to [−1, 1] by default (`clip=False` keeps values
outside the bounds beyond ±1); clipping makes normalization lossy outside the bounds:
unnormalizing gives back x clipped to [low, high]. Inside them, and everywhere for
`MEAN_STD` or without clipping, `unnormalize(normalize(x))` is x to float rounding.

Left unchanged, exactly (the data's own values, bit for bit, never clipped): dimensions
the `mask` leaves out (a gripper dimension, say), zero-variance dimensions (all values
equal: std 0, or q_high == q_low, min == max in the bounds modes), dimensions without a
finite value in the statistics, and dimensions whose h is not a normal number in the
data's dtype (a float32 std below 1.2e-38, which TF's flush-to-zero would make 0).
Nothing is ever divided by zero.

Where it applies. Every leaf named by a field's `/` path (`observation/state`, `action`)
whose trailing dimensions are the field's per-step shape is transformed, whatever its
leading dimensions: whole episodes `[T, ...]`, trajectories (`Trajectory` fields by name),
single steps, and batches sampled from Reverb, `[B, ...]` or `[B, T, ...]`. `normalize()` and
`unnormalize()` return `tf.data` transforms: an RLDS dataset is changed episode by episode
on its whole-episode tensors (and stays an `EpisodeDataset`, so `take`/`skip`/`shard` and
the toolkit's readers keep their fast path); any other dataset element by element:
episode-tensor dicts, trajectories, items, and `SampleBatch`es (their `experience`).
Floating fields keep their dtype (computed in it; float16 and bfloat16 in float32);
integer fields become float32, and unnormalize gives float32. The constants are cast to the
data's dtype, so the round trip of float32 data is exact to float32 rounding.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.check.statistics import DatasetStatistics, FieldStatistics
from rlds_reverb.core import checks, sources, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core.errors import SpecMismatchError

__all__ = [
    'FieldNormalization',
    'NormalizationMode',
    'Normalizer',
    'normalize',
    'unnormalize',
]

_SEPARATOR = '/'
_DEFAULT_BOUNDS = (0.01, 0.99)


class NormalizationMode(enum.Enum):
    """How a field is normalized (module docstring).

    MEAN_STD: (x − mean) / std: zero mean, unit variance; never clipped.
    QUANTILES: [q_low, q_high] (q01, q99 by default) mapped to [−1, 1], clipped by default.
    MIN_MAX: [min, max] mapped to [−1, 1], clipped by default.
    """

    MEAN_STD = 'mean_std'
    QUANTILES = 'quantiles'
    MIN_MAX = 'min_max'


@dataclasses.dataclass(frozen=True, kw_only=True)
class FieldNormalization:
    """How one field is normalized.

    Attributes:
      mode: A `NormalizationMode` (or its value, `'mean_std'`, `'quantiles'`, `'min_max'`).
      mask: Per dimension (D values, the step's elements in row-major order, or an array of
        the step's shape; kept as a flat tuple), True where the dimension is normalized;
        None: every dimension.
      clip: Clip to [−1, 1] in the bounds modes (default True); `MEAN_STD` never clips
        (None or False only).
      bounds: The quantile levels mapped to −1 and 1 (`QUANTILES` only); the statistics
        must hold them.
      statistics_field: Whose statistics to use (default: the field's own path), e.g.
        `'observation'` for an n-step item's `next_observation`.

    Raises:
      ValueError: If `mode` is not a mode, `clip=True` is given with `MEAN_STD`, `bounds`
        are not two increasing levels in [0, 1], or `mask` holds non-booleans.

    Example:
      >>> FieldNormalization(mode='quantiles', mask=[True] * 6 + [False])  # gripper alone
    """

    mode: NormalizationMode | str = NormalizationMode.MEAN_STD
    mask: Sequence[bool] | None = None
    clip: bool | None = None
    bounds: tuple[float, float] = _DEFAULT_BOUNDS
    statistics_field: str | None = None

    def __post_init__(self) -> None:
        mode = types.as_enum(NormalizationMode, self.mode, argument='mode')
        object.__setattr__(self, 'mode', mode)
        if self.clip is not None:
            checks.check_bool(self.clip, argument='clip')
            if self.clip and mode is NormalizationMode.MEAN_STD:
                raise ValueError(
                    "clip=True is not valid with mode 'mean_std', which has no bounds to clip "
                    "to; use 'quantiles' or 'min_max' to map values into [-1, 1]."
                )
        low, high = (checks.check_unit_interval(b, argument='bounds') for b in self.bounds)
        if not low < high:
            raise ValueError(
                f'bounds={self.bounds!r} is not valid; expected (low, high), low < high.'
            )
        object.__setattr__(self, 'bounds', (low, high))
        if self.mask is not None:
            mask = np.asarray(self.mask)
            if mask.dtype != np.bool_:
                raise ValueError(f'mask must hold booleans (True: normalized); got {self.mask!r}.')
            object.__setattr__(self, 'mask', tuple(bool(b) for b in mask.reshape(-1)))

    @property
    def clips(self) -> bool:
        """Whether values are clipped to [−1, 1]."""
        return self.mode is not NormalizationMode.MEAN_STD and self.clip is not False


@dataclasses.dataclass(frozen=True)
class _Constants:
    """A field's per-dimension constants, in the step's shape (float64)."""

    shape: tuple[int, ...]
    center: np.ndarray
    half: np.ndarray
    active: np.ndarray
    clips: bool

    def cast(self, dtype: tf.DType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Returns (center, half, active) in `dtype`: a dimension whose constants are not
        normal finite numbers there (a std below float32's smallest normal, which TF's
        flush-to-zero would make 0) stays unchanged too."""
        np_dtype = dtype.as_numpy_dtype
        center, half = self.center.astype(np_dtype), self.half.astype(np_dtype)
        usable = np.isfinite(center) & np.isfinite(half) & (half >= np.finfo(np_dtype).tiny)
        active = self.active & usable
        return (
            np.where(active, center, 0).astype(np_dtype),
            np.where(active, half, 1).astype(np_dtype),
            active,
        )


def _find_bounds(field: FieldStatistics, how: FieldNormalization) -> tuple[np.ndarray, np.ndarray]:
    if how.mode is NormalizationMode.MIN_MAX:
        return field.minimum, field.maximum
    try:
        return field.get_quantile(how.bounds[0]), field.get_quantile(how.bounds[1])
    except KeyError as e:
        raise ValueError(
            f'The statistics of {field.path!r} hold the quantiles {list(field.quantile_levels)}; '
            f'bounds={how.bounds} needs both: compute the statistics with '
            f'quantiles={list(how.bounds)}.'
        ) from e


def _make_constants(path: str, field: FieldStatistics, how: FieldNormalization) -> _Constants:
    mask = np.ones(field.dims, bool) if how.mask is None else np.asarray(how.mask).reshape(-1)
    if mask.size != field.dims:
        raise ValueError(
            f'The mask of {path!r} has {mask.size} entries; the field has {field.dims} '
            f'dimensions (per-step shape {list(field.shape)}).'
        )
    if how.mode is NormalizationMode.MEAN_STD:
        center, half = field.mean, field.std
    else:
        low, high = _find_bounds(field, how)
        center, half = (low + high) / 2, (high - low) / 2
    # Zero-variance, zero-range and empty dimensions stay as they are: never divided by 0.
    active = mask & (field.count > 0) & np.isfinite(center) & np.isfinite(half) & (half > 0)
    return _Constants(
        shape=field.shape,
        center=field.reshape(np.where(active, center, 0.0)),
        half=field.reshape(np.where(active, half, 1.0)),
        active=field.reshape(active),
        clips=how.clips,
    )


def _as_field_normalization(value: Any) -> FieldNormalization:
    if isinstance(value, FieldNormalization):
        return value
    return FieldNormalization(mode=value)


def _compute_dtype(dtype: tf.DType) -> tf.DType:
    if dtype in (tf.float32, tf.float64):
        return dtype
    return tf.float32


class Normalizer:
    """Normalizes and unnormalizes chosen fields with dataset statistics (module docstring).

    Args:
      statistics: The dataset's statistics (`compute_statistics`, `ensure_statistics`).
      fields: `/` path -> a `FieldNormalization` or a `NormalizationMode` (or its value).

    Raises:
      TypeError: If `statistics` is not a `DatasetStatistics`.
      KeyError: If a field (or its `statistics_field`) has no statistics.
      ValueError: If `fields` is empty, a mode is not valid, a mask's length is not the
        field's dimensions, or the statistics lack a `QUANTILES` field's bounds.

    Example:
      >>> normalizer = Normalizer(statistics, {
      ...     'action': FieldNormalization(mode='quantiles', mask=[True] * 6 + [False]),
      ...     'observation/state': 'mean_std'})
      >>> batch = normalizer.normalize(batch)          # a step, an episode, a [B, T] batch
      >>> action = normalizer.unnormalize({'action': predicted})['action']
    """

    def __init__(
        self, statistics: DatasetStatistics, fields: Mapping[str, FieldNormalization | Any]
    ):
        if not isinstance(statistics, DatasetStatistics):
            raise TypeError(
                f'statistics must be a DatasetStatistics; got {type(statistics).__name__}.'
            )
        if not fields:
            raise ValueError('fields names no field to normalize; give {path: mode, ...}.')
        self.fields = {
            path.strip(_SEPARATOR): _as_field_normalization(how) for path, how in fields.items()
        }
        self._constants = {}
        for path, how in self.fields.items():
            field = statistics[how.statistics_field or path]
            self._constants[path] = _make_constants(path, field, how)

    def normalize(self, element: types.Nest) -> types.Nest:
        """Returns `element` with its chosen fields normalized (usable in `tf.data` maps).

        Raises:
          SpecMismatchError: If a chosen field is missing or its trailing shape is not the
            field's per-step shape.
        """
        return self._apply(element, forward=True)

    def unnormalize(self, element: types.Nest) -> types.Nest:
        """Returns `element` with its chosen fields mapped back to the data's scale.

        Raises:
          SpecMismatchError: If a chosen field is missing or its trailing shape is not the
            field's per-step shape.
        """
        return self._apply(element, forward=False)

    def _apply(self, element: types.Nest, *, forward: bool) -> types.Nest:
        if isinstance(element, dict) and types.STEPS in element:  # A whole episode.
            return {**element, types.STEPS: self._apply(element[types.STEPS], forward=forward)}
        fields = getattr(element, '_fields', ())
        if 'experience' in fields:  # A learner's SampleBatch.
            return element._replace(experience=self._apply(element.experience, forward=forward))
        if fields == ('info', 'data'):  # Reverb's ReplaySample.
            return element._replace(data=self._apply(element.data, forward=forward))
        paths = [_SEPARATOR.join(map(str, p)) for p, _ in tree.flatten_with_path(element)]
        missing = [p for p in self.fields if p not in paths]
        if missing:
            raise SpecMismatchError(
                f'Cannot normalize {missing}: the element holds no such field; its fields are '
                f'{paths}.'
            )

        def _leaf(path: tuple, value: Any) -> Any:
            name = _SEPARATOR.join(map(str, path))
            if name not in self.fields:
                return value
            return self._transform(name, tf.convert_to_tensor(value), forward=forward)

        return tree.map_structure_with_path(_leaf, element)

    def _transform(self, name: str, x: tf.Tensor, *, forward: bool) -> tf.Tensor:
        constants = self._constants[name]
        rank = len(constants.shape)
        known = x.shape.rank is not None and x.shape.rank >= rank
        if not known or not x.shape[x.shape.rank - rank :].is_compatible_with(constants.shape):
            raise SpecMismatchError(
                f'Cannot normalize {name!r}: its statistics are of per-step shape '
                f'{list(constants.shape)}, but the element holds shape {x.shape} (the '
                'per-step shape must be its trailing dimensions).'
            )
        dtype = _compute_dtype(x.dtype)
        value = tf.cast(x, dtype)
        center, half, active = constants.cast(dtype)
        if not active.any():
            return value
        if forward:
            changed = (value - tf.constant(center)) / tf.constant(half)
            if constants.clips:
                changed = tf.clip_by_value(changed, -1.0, 1.0)
        else:
            changed = value * tf.constant(half) + tf.constant(center)
        # Unchanged dimensions are the data's own values, bit for bit (subnormals too).
        return changed if active.all() else tf.where(tf.constant(active), changed, value)


def _is_rlds(dataset: tf.data.Dataset) -> bool:
    spec = dataset.element_spec
    return isinstance(spec, dict) and isinstance(spec.get(types.STEPS), tf.data.DatasetSpec)


def _make_transform(normalizer: Normalizer, *, forward: bool) -> Callable:
    apply = normalizer.normalize if forward else normalizer.unnormalize
    fn = episodes_lib.without_autograph(apply)

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        if not _is_rlds(dataset):
            return dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        source = episodes_lib.find_source(dataset)
        # Frame fields are strings, never normalized: their formats still hold.
        formats = episodes_lib.find_frame_formats(dataset)
        if source is not None:  # Selections still reach the source's fast readers.
            return episodes_lib.from_source(sources.MappedSource(source, fn), frame_formats=formats)
        whole = episodes_lib.to_whole_episodes(dataset)
        return episodes_lib.from_whole_episodes(
            whole.map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True),
            frame_formats=formats,
        )

    return _transform


def normalize(
    statistics: DatasetStatistics, fields: Mapping[str, FieldNormalization | Any]
) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """Returns a `tf.data` transform normalizing `fields` with `statistics`.

    Args:
      statistics: The dataset's statistics.
      fields: `/` path -> a `FieldNormalization` or a `NormalizationMode` (or its value).

    Returns:
      A function from a dataset to the same dataset with the fields normalized: an RLDS
      dataset stays an RLDS dataset (module docstring), any other dataset is mapped
      element by element.

    Raises:
      KeyError: If a field has no statistics.
      ValueError: If a mode, mask or bounds is not valid for the field.
      SpecMismatchError: (when applied) If the elements lack a field, or hold it in another
        per-step shape.

    Example:
      >>> statistics = rlds_reverb.ensure_statistics(path)
      >>> episodes = rlds_reverb.load(path).apply(
      ...     normalize(statistics, {'action': 'quantiles', 'observation/state': 'mean_std'}))
    """
    return _make_transform(Normalizer(statistics, fields), forward=True)


def unnormalize(
    statistics: DatasetStatistics, fields: Mapping[str, FieldNormalization | Any]
) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """Returns a `tf.data` transform mapping normalized `fields` back to the data's scale.

    The inverse of `normalize` with the same arguments (exact to float rounding, except
    values that clipping moved to the bounds).

    Args:
      statistics: The dataset's statistics.
      fields: As given to `normalize`.

    Returns:
      A function from a dataset to the same dataset with the fields unnormalized.

    Raises:
      KeyError: If a field has no statistics.
      ValueError: If a mode, mask or bounds is not valid for the field.
      SpecMismatchError: (when applied) If the elements lack a field, or hold it in another
        per-step shape.

    Example:
      >>> predictions.apply(unnormalize(statistics, {'action': 'quantiles'}))
    """
    return _make_transform(Normalizer(statistics, fields), forward=False)
