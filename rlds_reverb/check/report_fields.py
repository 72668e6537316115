"""What a report reduces each episode to, in one `tf.data` map (`rlds_reverb.check.report`).

`EpisodeFields` sorts the step fields by what is gathered of them: numeric reductions
(`reduce_numeric`), distinct strings, the first and last frame of image fields (uint8
`[H, W, C]`, or encoded frames: only those two are decoded), the actions, and the
statistics' reductions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.check import stats, validation
from rlds_reverb.check.statistics_fields import plan_fields, reduce_episode
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import frames, types

# Helpers of the report only: nothing here is public API.
__all__: list[str] = []

# Image fields: uint8 steps of shape [H, W, C] with one of these channel counts.
_IMAGE_CHANNELS = (1, 3, 4)
_SEPARATOR = '.'


def _join(path: tuple) -> str:
    return _SEPARATOR.join(map(str, path))


def flatten_fields(nest: Any) -> dict[str, Any]:
    return {_join(path): leaf for path, leaf in tree.flatten_with_path(nest)}


def _is_image(spec: tf.TensorSpec) -> bool:
    shape = spec.shape
    return spec.dtype == tf.uint8 and shape.rank == 3 and shape[-1] in _IMAGE_CHANNELS


def reduce_numeric(values: tf.Tensor) -> dict[str, tf.Tensor]:
    """Min, max and sum (NaN left out), NaN count and size of one field's values, in float64.

    Integers keep their dtype for the minimum and maximum, and small ones are summed per
    step in float32 (exact below 2**24 per step): an image episode is never copied whole
    into float64 (eight times its size).
    """
    if values.dtype == tf.bool:
        values = tf.cast(values, tf.uint8)
    size = tf.size(values, out_type=tf.int64)
    inf = tf.constant(np.inf, tf.float64)
    if values.dtype.is_integer:
        small = values.dtype.size <= 2
        per_step = tf.reduce_sum(
            tf.reshape(
                tf.cast(values, tf.float32 if small else tf.float64), [tf.shape(values)[0], -1]
            ),
            axis=1,
        )
        return {
            # An empty tensor's min and max are the dtype's limits: +-inf, as for floats.
            'min': tf.where(size > 0, tf.cast(tf.reduce_min(values), tf.float64), inf),
            'max': tf.where(size > 0, tf.cast(tf.reduce_max(values), tf.float64), -inf),
            'sum': tf.reduce_sum(tf.cast(per_step, tf.float64)),
            'nan': tf.constant(0, tf.int64),
            'size': size,
        }
    nan = tf.math.is_nan(values)
    kept = tf.where(nan, tf.zeros_like(values), values)
    return {
        'min': tf.cast(
            tf.reduce_min(tf.where(nan, tf.cast(inf, values.dtype), values)), tf.float64
        ),
        'max': tf.cast(
            tf.reduce_max(tf.where(nan, tf.cast(-inf, values.dtype), values)), tf.float64
        ),
        'sum': tf.reduce_sum(tf.cast(kept, tf.float64)),
        'nan': tf.reduce_sum(tf.cast(nan, tf.int64)),
        'size': size,
    }


def _first_and_last(values: tf.Tensor) -> tf.Tensor:
    """Steps 0 and T - 1 (`[2, ...]`; `[0, ...]` for an empty episode)."""
    return tf.concat([values[:1], values[-1:]], axis=0)


def _distinct_strings(values: tf.Tensor) -> tf.Tensor:
    return tf.unique(tf.reshape(values, [-1])).y


class EpisodeFields:
    """Which step fields get which reductions, from the step spec (and the formats of the
    fields holding encoded frames: only their first and last frames are decoded)."""

    def __init__(self, step_spec: dict, frame_formats: frames.FrameFormats):
        self.specs = flatten_fields(step_spec)
        self.encoded = {p.replace('/', _SEPARATOR): f for p, f in frame_formats.items()}
        self.strings = [
            n for n, s in self.specs.items() if s.dtype == tf.string and n not in self.encoded
        ]
        self.numeric = [n for n, s in self.specs.items() if s.dtype != tf.string]
        self.images = [n for n, s in self.specs.items() if _is_image(s)] + list(self.encoded)
        self.actions = [
            n
            for n in flatten_fields({types.ACTION: step_spec[types.ACTION]})
            # Histograms need a fixed number of dimensions.
            if self.specs[n].dtype != tf.string and self.specs[n].shape.is_fully_defined()
        ]
        self.statistics_plans = plan_fields(step_spec, None)[0]

    def summarize(self, episode: dict) -> dict[str, Any]:
        """Reduces one episode (whole `[T, ...]` step tensors) to what the report needs."""
        steps = episode[types.STEPS]
        flat = flatten_fields(steps)
        length = episodes_lib.episode_length(steps)
        return {
            'info': stats.summarize_episode(steps),
            'validation': validation.summarize_episode(steps),
            'numeric': {n: reduce_numeric(flat[n]) for n in self.numeric},
            'actions': {n: tf.reshape(flat[n], [length, -1]) for n in self.actions},
            'frames': {n: self._first_and_last_frames(flat[n], n) for n in self.images},
            'strings': {n: _distinct_strings(flat[n]) for n in self.strings},
            'metadata': {k: v for k, v in episode.items() if k != types.STEPS},
            'statistics': reduce_episode(steps, self.statistics_plans),
        }

    def _first_and_last_frames(self, values: tf.Tensor, name: str) -> tf.Tensor:
        pair = _first_and_last(values)
        fmt = self.encoded.get(name)
        return pair if fmt is None else frames.decode_frames(pair, fmt)[0]
