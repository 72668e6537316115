"""The reverse linear recurrence y_t = x_t + c_t y_{t+1} (y_T = 0), solved by doubling.

GAE (and any discounted reverse cumulative sum) is this recurrence. `tf.scan` would run one
graph step per time step. Here each pass composes the recurrence with itself shifted by a
doubling span: after the pass of span s, y_t = x_t + c_t y_{t+2s}, with x and c updated by
x_t += c_t x_{t+s} and c_t *= c_{t+s} (zero past the end). After ceil(log2 T) passes c is
zero everywhere and x is y. Each pass is a few whole-tensor ops (one `tf.while_loop`
iteration: a small graph that traces fast); products of `c` are plain
multiplications (no logs, no division), so zeros in `c` are exact: a zero factor is how
callers keep episodes laid end to end from leaking into each other. (A blocked form with no
loop, products within blocks of 32 steps, measured slower here: more ops per episode.)
"""

from __future__ import annotations

import tensorflow as tf


def solve_reverse_recurrence(x: tf.Tensor, c: tf.Tensor) -> tf.Tensor:
    """Returns y with y_t = x_t + c_t * y_{t+1} along axis 0, and y_T = 0.

    Args:
      x: A `[T, ...]` float tensor.
      c: A `[T, ...]` tensor of x's shape and dtype (the per-step factors).

    Returns:
      A tensor shaped like `x`.
    """
    length = tf.shape(x)[0]
    zeros = tf.zeros_like(x)  # What lies past the end, sliced to each pass's span.

    def _body(span, x, c):
        # One doubling pass: x_t + c_t x_{t+span} and c_t c_{t+span}, zero past the end.
        tail = zeros[: tf.minimum(span, length)]
        x_out = x + c * tf.concat([x[span:], tail], axis=0)
        c_out = c * tf.concat([c[span:], tail], axis=0)
        # Keep the static shape, which `tf.while_loop` requires of its loop variables.
        x_out.set_shape(x.shape)
        c_out.set_shape(c.shape)
        return span * 2, x_out, c_out

    _, x, _ = tf.while_loop(lambda span, x, c: span < length, _body, (tf.constant(1), x, c))
    return x
