"""Importance weights, β schedules and priority updates for prioritized Reverb tables.

Prioritized replay (Schaul et al., 2016) samples item i with probability P(i) and corrects
the bias this introduces with importance weights

    w_i = (N · P(i))^(−β) / max_j w_j,

where N is the table size and P(i) the probability Reverb returns with each sample (both in
`reverb.replay_sample.SampleInfo`). The maximum is taken over the batch (Tianshou's
convention; DI-engine divides by the buffer-wide maximum, which Reverb cannot give cheaply),
so every weight lies in (0, 1] and the rarest sample of a batch has weight 1. β ∈ [0, 1] is
annealed towards 1 over training: β = 0 gives uniform weights, β = 1 the full correction.

Priorities come back from TD errors as p_i = (|δ_i| + ε)^exponent. Reverb's prioritized
selector raises stored priorities to its own `priority_exponent` α when sampling, so keep
`exponent=1` with such tables (the usual case) to avoid applying α twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import reverb
import tensorflow as tf

from rlds_reverb.core import checks

__all__ = [
    'Beta',
    'compute_importance_weights',
    'compute_priorities',
    'linear_beta_schedule',
    'update_priorities',
]

# A β: a Python float, a variable holding β, or a zero-argument callable returning β
# (typically a schedule closed over a step variable, see `linear_beta_schedule`).
Beta: TypeAlias = float | tf.Variable | Callable[[], tf.Tensor]


def check_beta(beta: Beta | None) -> None:
    """Raises `ValueError` if a Python-number β lies outside [0, 1].

    Variables and schedules are checked each time they are read (see `read_beta`).

    Args:
      beta: The β to check, or None (no importance weights).

    Raises:
      ValueError: If `beta` is a number outside [0, 1] (or NaN), or of an unsupported type.

    Example:
      >>> check_beta(0.4)
    """
    if beta is None or isinstance(beta, tf.Variable) or callable(beta):
        return
    if not isinstance(beta, int | float):
        raise ValueError(
            f'beta={beta!r} must be a float in [0, 1], a tf.Variable or a zero-argument '
            'callable returning beta (for example linear_beta_schedule(...)).'
        )
    if not 0.0 <= float(beta) <= 1.0:
        raise ValueError(
            f'beta={beta!r} is outside [0, 1]: importance-sampling exponents are in [0, 1] '
            '(0: no correction, 1: full correction).'
        )


def read_beta(beta: Beta) -> tf.Tensor:
    """Returns β as a float64 scalar tensor, asserting at run time that it lies in [0, 1].

    Args:
      beta: A float, a `tf.Variable` or a zero-argument callable returning β.

    Returns:
      The current β.

    Raises:
      tf.errors.InvalidArgumentError: When the value read lies outside [0, 1].

    Example:
      >>> beta = read_beta(tf.Variable(0.5))
    """
    value = beta() if callable(beta) and not isinstance(beta, tf.Variable) else beta
    value = tf.cast(tf.convert_to_tensor(value), tf.float64)
    in_range = tf.logical_and(value >= 0.0, value <= 1.0)
    check = tf.debugging.Assert(
        in_range, ['beta must lie in [0, 1] (importance-sampling exponent); got', value]
    )
    with tf.control_dependencies([check]):
        return tf.identity(value)


def linear_beta_schedule(
    step: tf.Variable, *, start: float = 0.4, end: float = 1.0, num_steps: int
) -> Callable[[], tf.Tensor]:
    """Returns a β schedule: linear from `start` to `end` over `num_steps` of `step`, then flat.

    Args:
      step: The step variable the schedule reads (for example `agent.train_step_counter`).
      start: β at step 0.
      end: β from step `num_steps` on.
      num_steps: The length of the ramp, in steps (> 0).

    Returns:
      A zero-argument callable returning the current β as a float64 tensor.

    Raises:
      ValueError: If `start` or `end` is outside [0, 1], or `num_steps` is not positive.

    Example:
      >>> beta = linear_beta_schedule(agent.train_step_counter, num_steps=20_000)
    """
    check_beta(start)
    check_beta(end)
    checks.check_int_at_least(num_steps, 1, argument='num_steps')

    def schedule() -> tf.Tensor:
        fraction = tf.minimum(tf.cast(step, tf.float64) / float(num_steps), 1.0)
        return start + (end - start) * fraction

    return schedule


def compute_importance_weights(
    probabilities: tf.Tensor, table_sizes: tf.Tensor, beta: Beta
) -> tf.Tensor:
    """Returns w_i = (N_i · P(i))^(−β) / max_j w_j over one batch, as float32.

    Args:
      probabilities: P(i), float64 `[B]`, as in `SampleInfo.probability`.
      table_sizes: N_i, int64 `[B]`: the size of the table sample i came from.
      beta: β (float, variable or schedule), checked to lie in [0, 1].

    Returns:
      float32 `[B]` weights in (0, 1]; the largest of the batch is 1.

    Raises:
      tf.errors.InvalidArgumentError: If β is outside [0, 1] when read.

    Example:
      >>> w = compute_importance_weights(info.probability, info.table_size, 0.4)
    """
    scaled = tf.cast(table_sizes, tf.float64) * tf.cast(probabilities, tf.float64)
    # log-space keeps tiny probabilities finite: log w = −β log(N·P).
    log_weights = -read_beta(beta) * tf.math.log(scaled)
    return tf.cast(tf.exp(log_weights - tf.reduce_max(log_weights)), tf.float32)


def compute_priorities(td_errors: tf.Tensor, *, epsilon: float, exponent: float) -> tf.Tensor:
    """Returns priorities (|δ| + ε)^exponent as float64 (NaN/inf in, NaN/inf out).

    Args:
      td_errors: TD errors δ, any float dtype, `[B]`.
      epsilon: ε ≥ 0, keeps zero-error items sampleable.
      exponent: The exponent (> 0); keep 1 when the table's selector has its own.

    Returns:
      float64 `[B]` priorities.

    Example:
      >>> compute_priorities(loss_info.extra.td_error, epsilon=1e-3, exponent=1.0)
    """
    magnitude = tf.abs(tf.cast(td_errors, tf.float64)) + epsilon
    return magnitude if exponent == 1.0 else tf.pow(magnitude, exponent)


def check_priorities(keys: tf.Tensor, priorities: tf.Tensor, *, table: str) -> tf.Operation:
    """Returns an op failing, naming the keys, if any priority is NaN, infinite or negative.

    Args:
      keys: uint64 `[B]` item keys.
      priorities: float64 `[B]` priorities.
      table: The table name, for the message.

    Returns:
      The assertion op (run it before the update).

    Example:
      >>> check = check_priorities(keys, priorities, table='replay')
    """
    bad = tf.logical_or(tf.logical_not(tf.math.is_finite(priorities)), priorities < 0.0)
    return tf.debugging.Assert(
        tf.logical_not(tf.reduce_any(bad)),
        [
            f'Refusing to update priorities in Reverb table {table}: priorities must be '
            'finite and >= 0 (check the TD errors for NaN/inf). Bad keys:',
            tf.boolean_mask(keys, bad),
            'bad priorities:',
            tf.boolean_mask(priorities, bad),
        ],
        summarize=16,
    )


def check_priority_options(*, epsilon: float, exponent: float) -> None:
    """Raises `ValueError` unless ε ≥ 0 and the exponent is positive, both finite.

    Example:
      >>> check_priority_options(epsilon=1e-3, exponent=1.0)
    """
    if not (0.0 <= epsilon < float('inf')):
        raise ValueError(f'epsilon={epsilon!r} must be finite and >= 0.')
    if not (0.0 < exponent < float('inf')):
        raise ValueError(f'exponent={exponent!r} must be finite and > 0.')


def update_priorities(
    client: reverb.TFClient,
    table: str,
    keys: tf.Tensor,
    td_errors: tf.Tensor,
    *,
    epsilon: float = 1e-3,
    exponent: float = 1.0,
) -> tf.Operation:
    """Sets the priorities of `keys` in `table` to (|δ| + ε)^exponent; usable in a tf.function.

    Invalid priorities (NaN, infinite or negative) are refused before they reach Reverb.

    Args:
      client: A `reverb.TFClient` (build it once, outside the train step).
      table: The table the keys were sampled from.
      keys: uint64 `[B]` keys (`SampleInfo.key`).
      td_errors: `[B]` TD errors δ.
      epsilon: ε ≥ 0 added to |δ|.
      exponent: Exponent (> 0); keep 1.0 with a prioritized selector (it applies its own).

    Returns:
      The update op (in eager mode the update has already run).

    Raises:
      ValueError: If `epsilon` < 0 or `exponent` <= 0.
      tf.errors.InvalidArgumentError: If a priority is NaN, infinite or negative; the
        message names the table, the bad keys and their priorities.

    Example:
      >>> update_priorities(tf_client, 'replay', info.key, loss_info.extra.td_error)
    """
    check_priority_options(epsilon=epsilon, exponent=exponent)
    priorities = compute_priorities(td_errors, epsilon=epsilon, exponent=exponent)
    keys = tf.cast(keys, tf.uint64)
    with tf.control_dependencies([check_priorities(keys, priorities, table=table)]):
        return client.update_priorities(table, keys, tf.identity(priorities))
