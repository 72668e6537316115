"""Broadcasting discounts (and values) to rewards, as Acme does.

A reward may be a nest (e.g. a dict) of tensors of any shape. A single discount (or value)
leaf is repeated to the reward's structure; then each pair of leaves broadcasts numpy-style
per step, so a scalar discount multiplies every component of a vector reward.
"""

from __future__ import annotations

import tensorflow as tf

from rlds_reverb.core import types


def broadcast_structure(x: types.Nest, template: types.Nest, *, what: str) -> types.Nest:
    """Returns `x` repeated to `template`'s structure when `x` is a single leaf.

    Raises:
      ValueError: If both are nested with different structures.
    """
    if not tf.nest.is_nested(x):
        return tf.nest.map_structure(lambda _: x, template)
    try:
        tf.nest.assert_same_structure(x, template)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f'{what} must be a single tensor or match the reward structure: {e}'
        ) from e
    return x


def compute_dtype(dtype: tf.dtypes.DType) -> tf.dtypes.DType:
    """Returns the float dtype used for arithmetic on a reward leaf of `dtype`."""
    return dtype if tf.as_dtype(dtype).is_floating else tf.float32


def align_pair(a: tf.Tensor, b: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Broadcasts two `[T, ...]` leaves to one shape, aligning their per-step shapes right."""
    if a.shape[1:].is_fully_defined() and a.shape[1:] == b.shape[1:]:
        return a, b  # Already alike (the common scalar case): no op.
    rank = max(a.shape.rank, b.shape.rank)
    a, b = _expand_rank(a, rank), _expand_rank(b, rank)
    return a * tf.ones_like(b, a.dtype), b * tf.ones_like(a, b.dtype)


def _expand_rank(x: tf.Tensor, rank: int) -> tf.Tensor:
    """Inserts size-1 axes after the time axis until `x` has `rank` dims."""
    missing = rank - x.shape.rank
    if missing == 0:
        return x
    shape = tf.shape(x)
    return tf.reshape(x, tf.concat([shape[:1], tf.ones([missing], tf.int32), shape[1:]], 0))


def broadcast_rewards(reward: types.Nest, discount: types.Nest) -> tuple[types.Nest, types.Nest]:
    """Returns rewards and discounts (`[T, ...]` leaves) as two nests of equal structure/shapes.

    The structure is the reward's (or the discount's when only it is nested); both come out
    in the reward's float dtype (float32 for integer rewards).
    """
    if tf.nest.is_nested(reward) or not tf.nest.is_nested(discount):
        discount = broadcast_structure(discount, reward, what='discount')
    else:
        reward = broadcast_structure(reward, discount, what='reward')

    flat_r, flat_d = [], []
    for r, d in zip(tf.nest.flatten(reward), tf.nest.flatten(discount), strict=True):
        dtype = compute_dtype(r.dtype)
        r, d = align_pair(tf.cast(r, dtype), tf.cast(d, dtype))
        flat_r.append(r)
        flat_d.append(d)
    return tf.nest.pack_sequence_as(reward, flat_r), tf.nest.pack_sequence_as(reward, flat_d)
