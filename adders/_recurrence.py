"""The reverse linear recurrence y_t = x_t + c_t y_{t+1} (y_T = 0), solved with matrices.

GAE (and any discounted reverse cumulative sum) is this recurrence. `tf.scan` would run one
graph step per time step; here the episode is cut into blocks of about sqrt(T) steps and
each block is solved with a small matrix product, then the blocks are chained with one more
(it is the same recurrence over the blocks' first steps). Products of `c` are formed by
multiplication only (masked cumulative products: no logs, no division), so zeros in `c`
are exact and nothing underflows early.
"""

from __future__ import annotations

import tensorflow as tf

# Bounds of the block size; ~sqrt(T) in between keeps both matrix levels small.
_MIN_BLOCK = 8
_MAX_BLOCK = 256


def solve_reverse_recurrence(x: tf.Tensor, c: tf.Tensor) -> tf.Tensor:
    """Returns y with y_t = x_t + c_t * y_{t+1} along axis 0, and y_{T} = 0.

    Args:
      x: A `[T, ...]` float tensor.
      c: A `[T, ...]` tensor of x's shape and dtype (the per-step factors).

    Returns:
      A tensor shaped like `x`.
    """
    shape = tf.shape(x)
    length = shape[0]
    # [T, ...] -> [m, T]: every trailing component is an independent recurrence.
    x2 = tf.transpose(tf.reshape(x, [length, -1]))
    c2 = tf.transpose(tf.reshape(c, [length, -1]))
    sqrt = tf.cast(tf.math.ceil(tf.sqrt(tf.cast(length, tf.float32))), tf.int32)
    block = tf.clip_by_value(sqrt, _MIN_BLOCK, _MAX_BLOCK)
    num_blocks = tf.maximum((length + block - 1) // block, 1)
    pad = [[0, 0], [0, num_blocks * block - length]]
    blocked_shape = tf.stack([tf.shape(x2)[0], num_blocks, block])
    xb = tf.reshape(tf.pad(x2, pad), blocked_shape)
    cb = tf.reshape(tf.pad(c2, pad), blocked_shape)
    local, through = _solve_blocks(xb, cb)
    # The value at each block's first step obeys the same recurrence across blocks.
    heads, _ = _solve_blocks(local[:, None, :, 0], through[:, None, :, 0])
    heads = heads[:, 0, :]
    next_heads = tf.concat([heads[:, 1:], tf.zeros_like(heads[:, :1])], axis=1)
    y = local + through * next_heads[:, :, None]
    y = tf.reshape(y, [tf.shape(x2)[0], -1])[:, :length]
    return tf.reshape(tf.transpose(y), shape)


def _solve_blocks(x: tf.Tensor, c: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Solves the recurrence inside each block of the last axis, with zero after the block.

    Args:
      x: `[..., K]` tensor.
      c: `[..., K]` tensor.

    Returns:
      `(local, through)`: local[..., t] = sum_{s>=t} (prod_{t<=j<s} c_j) x_s, and
      through[..., t] = prod_{t<=j<K} c_j (how y after the block reaches step t).
    """
    size = tf.shape(x)[-1]
    index = tf.range(size)
    upper = index[None, :] >= index[:, None]  # [t, s]: s >= t
    # Row t keeps c_j for j >= t and ones before, so an exclusive cumprod along j gives
    # prod_{t<=j<s} c_j at column s >= t.
    rows = tf.where(upper, c[..., None, :], tf.ones_like(c[..., None, :]))
    products = tf.math.cumprod(rows, axis=-1, exclusive=True)
    matrix = tf.where(upper, products, tf.zeros_like(products))
    local = tf.linalg.matvec(matrix, x)
    through = products[..., -1] * c[..., -1:]
    return local, through
