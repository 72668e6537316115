"""Specs to TFDS features: the one mapping the recorder and the Reverb export write with.

A TF-Agents trajectory's policy info becomes step fields (`split_policy_info`), each spec
a `tfds.features.Tensor` of its shape and dtype (`make_feature`), and the step and
episode features an RLDS `FeaturesDict` (`make_rlds_features`). Strings (`tf.string`)
are stored as TFDS object tensors, read back as `tf.string`; a string spec named by a
frame format (`frame.jpeg.256x320x3`, an encoded frame field of a Reverb table:
`core.frames`) is stored as a TFDS `Image` of that codec and shape, its bytes written
unchanged (TFDS stores an `Image`'s bytes as given), so TFDS reads it back as the same
image and `load(..., encoded_frames=...)` as the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
import tree

from rlds_reverb.core import frames, types

__all__ = [
    'as_numpy_dtype',
    'make_feature',
    'make_rlds_features',
    'make_rlds_features_from_specs',
    'split_policy_info',
]


def split_policy_info(policy_info: Any) -> dict:
    """Returns a trajectory's policy info as step fields.

    A mapping gives its own entries; TF-Agents' empty policy info (`()`) gives none; any
    other nest is one `policy_info` field.

    Example:
      >>> split_policy_info({'log_prob': spec})
      {'log_prob': spec}
    """
    if isinstance(policy_info, Mapping):
        return dict(policy_info)
    if not tree.flatten(policy_info):
        return {}
    return {types.POLICY_INFO: policy_info}


def as_numpy_dtype(dtype: Any) -> type:
    """Returns the NumPy dtype a field of `dtype` (TF or NumPy) is stored with.

    TFDS takes strings as `np.object_` (tf.string's own NumPy dtype, `object`, it refuses).

    Example:
      >>> as_numpy_dtype(tf.string)
      <class 'numpy.object_'>
    """
    dtype = tf.as_dtype(dtype)
    return np.object_ if dtype == tf.string else dtype.as_numpy_dtype


def make_feature(spec: Any) -> tfds.features.FeatureConnector:
    """Returns the TFDS feature of a spec, or a `FeaturesDict` of a mapping of specs.

    Args:
      spec: A `tf.TensorSpec`, a TF-Agents `ArraySpec` (anything with `shape` and `dtype`),
        or a mapping of them.

    Returns:
      A `tfds.features.Tensor` of the spec's shape and dtype, a `tfds.features.Image` for
      a scalar string spec named by a frame format, or a `FeaturesDict`.

    Raises:
      ValueError: If the spec is (or holds) a tuple or list: TFDS stores dicts of tensors.

    Example:
      >>> make_feature(tf.TensorSpec([4], tf.float32))
    """
    if isinstance(spec, Mapping):
        return tfds.features.FeaturesDict({k: make_feature(v) for k, v in spec.items()})
    if isinstance(spec, list | tuple):
        raise ValueError(
            f'Cannot store a tuple or list field ({spec}) in a TFDS dataset; use dicts of '
            'tensors.'
        )
    fmt = frames.FrameFormat.parse(getattr(spec, 'name', None))
    if fmt is not None and as_numpy_dtype(spec.dtype) is np.object_ and _rank(spec) == 0:
        return tfds.features.Image(shape=fmt.shape, encoding_format=fmt.codec)
    return tfds.features.Tensor(shape=tuple(spec.shape), dtype=as_numpy_dtype(spec.dtype))


def _rank(spec: Any) -> int | None:
    shape = spec.shape
    return shape.rank if isinstance(shape, tf.TensorShape) else len(shape)


def make_rlds_features(
    step_features: Mapping[str, Any], episode_features: Mapping[str, Any] | None = None
) -> tfds.features.FeaturesDict:
    """Returns the TFDS features of an RLDS dataset: `steps` plus episode-level fields.

    Args:
      step_features: Step field name to TFDS feature (or NumPy dtype), flags excluded: the
        boolean `is_first`, `is_last` and `is_terminal` are added here.
      episode_features: Episode field name to TFDS feature, if any.

    Returns:
      A `FeaturesDict` holding a `tfds.features.Dataset` under `steps`.

    Example:
      >>> make_rlds_features({'observation': tfds.features.Tensor(shape=(4,), dtype=np.float32)})
    """
    flags = {flag: tfds.features.Scalar(dtype=np.bool_) for flag in types.FLAG_FIELDS}
    steps = tfds.features.Dataset({**step_features, **flags})
    return tfds.features.FeaturesDict({types.STEPS: steps, **(episode_features or {})})


def make_rlds_features_from_specs(
    step_specs: Mapping[str, Any], episode_specs: Mapping[str, Any] | None = None
) -> tfds.features.FeaturesDict:
    """Returns the RLDS features of step and episode field specs (`make_feature` of each).

    Raises:
      ValueError: If a spec is a tuple or list (`make_feature`).

    Example:
      >>> make_rlds_features_from_specs({'observation': tf.TensorSpec([4], tf.float32)})
    """
    steps = {k: make_feature(v) for k, v in step_specs.items()}
    episode = {k: make_feature(v) for k, v in (episode_specs or {}).items()}
    return make_rlds_features(steps, episode)
