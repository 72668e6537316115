"""Generalized advantage estimation as new step fields (docs/semantics.md §5).

With values V_t, L the index of the last step and, for t < L,

    delta_t = r_t + gamma d_t V_{t+1} - V_t
    A_t     = sum_{i < L-t} (gamma lambda)^i (prod_{j<i} d_{t+j}) delta_{t+i}
    return_t = A_t + V_t

where V_L, the bootstrap value, is replaced by 0 when the episode terminates (`is_terminal`
on its last step). A truncated episode bootstraps from V(o_L); so does a segment whose
final step lacks `is_last` (a chunk of a longer stream), as DI-engine's
`get_gae_with_default_last_value` does. The last step carries no advantage: `advantage` 0
and `return` equal to its bootstrap value. `value` holds the values used: V_t for t < L and
the bootstrap value on the last step, so `return = advantage + value` on every step.
When the values come from the `value` field itself, that field is replaced by the values
used: only the last step of a terminated episode changes (to 0, the value of a terminal
state).

A_t obeys A_t = delta_t + gamma lambda d_t A_{t+1}, solved by doubling passes rather than a
per-step `tf.scan` (see `adders._recurrence`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import tensorflow as tf

from adders import _broadcast, _episode, _recurrence
from rlds_reverb.core import checks, episodes, types

__all__ = [
    'ValueFn',
    'add_gae_fields',
    'gae',
]

ValueFn = Callable[[types.Nest], types.Nest]


def gae(
    gamma: float,
    lambda_: float,
    value_fn: ValueFn | None = None,
    value_field: str | None = None,
    *,
    episodes_per_call: int = 1,
):
    """Returns a transform adding `advantage`, `return` and `value` to every step.

    Values come from `value_fn` (a Keras model or any function of the observation batch,
    called once per episode on its `[T, ...]` observations) or from the step field
    `value_field`; with neither, from the `value` field. Values take the reward's structure
    and shape (a single value leaf broadcasts to a nested reward; a trailing axis of size 1,
    as Keras models return, is dropped for scalar rewards).

    Example:
      >>> with_advantages = episodes.apply(adders.gae(0.99, 0.95, value_fn=critic))

    Args:
      gamma: The discount factor, in [0, 1].
      lambda_: The GAE lambda, in [0, 1] (0: one-step TD errors; 1: Monte Carlo returns
        minus values).
      value_fn: A function of the observation batch returning `[T]` (or `[T, 1]`) values.
      value_field: The step field holding values; defaults to `value` without `value_fn`.
      episodes_per_call: Episodes processed together in one TF call, >= 1: a speed knob
        that amortizes TF's per-op cost over short episodes, at the price of batching
        copies (for 1,000-step episodes one per call measured fastest); the output is the
        same. `value_fn` is called once per call: once per episode by default, else on
        the observations of the call's episodes laid end to end.

    Returns:
      A function from an RLDS (or episode-tensor) dataset to one of the same form.

    Raises:
      ValueError: If `gamma` or `lambda_` is outside [0, 1], `episodes_per_call` < 1,
        both `value_fn` and `value_field` are given, or (when applied) the value field is
        missing, the steps already hold `advantage` or `return` (or `value` when the
        values come from elsewhere), or `value_fn`'s output shape is statically not
        `[T, *reward_shape]`.
      tf.errors.InvalidArgumentError: While iterating, if `value_fn` returns a number of
        values other than the number of steps of an episode.
    """
    gamma = checks.check_unit_interval(gamma, argument='gamma')
    lambda_ = checks.check_unit_interval(lambda_, argument='lambda_')
    episodes_per_call = checks.check_int_at_least(
        episodes_per_call, 1, argument='episodes_per_call'
    )
    if value_fn is not None and value_field is not None:
        raise ValueError('gae takes value_fn or value_field, not both.')
    if value_fn is None and value_field is None:
        value_field = types.VALUE

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        spec = _episode.get_step_spec(dataset, transform='gae')
        needed = [types.REWARD, types.IS_TERMINAL]
        # Exactly one source by now: value_fn (of the observations), or value_field.
        needed.append(types.OBSERVATION if value_field is None else value_field)
        try:
            _episode.require_fields(spec, needed, transform='gae')
        except ValueError as e:
            if value_field is not None and value_field not in spec:
                raise ValueError(
                    f'gae: value_field={value_field!r} is not a step field; the steps hold '
                    f'{sorted(spec)}. Pass value_field=<field> or value_fn=<model>.'
                ) from e
            raise
        _episode.refuse_overwrite(spec, (types.ADVANTAGE, types.RETURN), transform='gae')
        if value_field != types.VALUE and types.VALUE in spec:
            # gae writes the values it used to `value`: another field's would be lost.
            source = 'value_fn' if value_fn is not None else f'value_field={value_field!r}'
            raise ValueError(
                f"gae writes the values of {source} to the step field '{types.VALUE}', which "
                'the steps already hold; rename that field first, or pass '
                f"value_field='{types.VALUE}' to use it."
            )
        _episode.warn_if_no_discount(spec, transform='gae')
        # AutoGraph converts the user's value_fn alone (it may hold Python control flow on
        # tensors), traced as a function of its own; the map around it, our own maths, is
        # traced as written (converting it too cost most of the value_fn's set-up).
        get_values = tf.function(value_fn) if value_fn is not None else (lambda _: None)
        return _episode.map_episodes(
            dataset,
            lambda steps, bounds: compute_gae_fields(
                steps, bounds, gamma, lambda_, get_values(steps[types.OBSERVATION]), value_field
            ),
            episodes_per_call=episodes_per_call,
        )

    return _transform


def add_gae_fields(
    steps: types.Step,
    gamma: float,
    lambda_: float,
    values: types.Nest | None = None,
    value_field: str | None = None,
) -> types.Step:
    """Returns one whole episode's `steps` (`[T, ...]`) with `advantage`, `return`, `value`.

    Args:
      steps: A dict of `[T, ...]` tensors.
      gamma: The discount factor.
      lambda_: The GAE lambda.
      values: The `[T, ...]` values (a nest), or None to read `steps[value_field]`.
      value_field: Where the values are when `values` is None.

    Returns:
      `steps` with the GAE fields.

    Raises:
      ValueError: If the values' static shape does not fit the reward's.
    """
    return compute_gae_fields(
        steps, _episode.episode_bounds(steps), gamma, lambda_, values, value_field
    )


def compute_gae_fields(
    steps: types.Step,
    bounds: _episode.Bounds,
    gamma: float,
    lambda_: float,
    values: types.Nest | None = None,
    value_field: str | None = None,
) -> types.Step:
    """Returns a flat stream of whole episodes (`[N, ...]`) with the GAE fields added."""
    discount = steps.get(types.DISCOUNT, tf.ones_like(steps[types.IS_FIRST], tf.float32))
    rewards, discounts = _broadcast.broadcast_rewards(steps[types.REWARD], discount)
    source = 'value_fn' if values is not None else f'value_field={value_field!r}'
    # Callers give value_field whenever values is None (`add_gae_fields`' Args).
    values = steps[cast(str, value_field)] if values is None else values
    values = _broadcast.broadcast_structure(values, rewards, what=f'The values of {source}')
    size = tf.shape(bounds.t)[0]
    flat = [
        _gae_leaf(r, d, _as_value_leaf(v, r, size, source), bounds, gamma, lambda_)
        for r, d, v in zip(
            tf.nest.flatten(rewards),
            tf.nest.flatten(discounts),
            tf.nest.flatten(values),
            strict=True,
        )
    ]
    return {
        **steps,
        types.ADVANTAGE: tf.nest.pack_sequence_as(rewards, [f[0] for f in flat]),
        types.RETURN: tf.nest.pack_sequence_as(rewards, [f[1] for f in flat]),
        types.VALUE: tf.nest.pack_sequence_as(rewards, [f[2] for f in flat]),
    }


def _as_value_leaf(value, reward: tf.Tensor, length: tf.Tensor, source: str) -> tf.Tensor:
    """Returns one value leaf shaped like `reward`'s leaf after checking its shape."""
    value = tf.convert_to_tensor(value)
    step_shape = reward.shape[1:]
    if value.shape.rank == step_shape.rank + 2 and value.shape[-1] == 1:
        value = tf.squeeze(value, axis=-1)  # Keras models return [T, 1].
    expected = tf.TensorShape([None]).concatenate(step_shape)
    if value.shape.rank is not None and not expected.is_compatible_with(value.shape):
        raise ValueError(
            f'gae: {source} gave values of shape {value.shape}; expected {expected} '
            '(one value per step, shaped like the reward).'
        )
    assert_length = tf.debugging.assert_equal(
        tf.shape(value)[0],
        length,
        message=f'gae: {source} gave a number of values other than the number of steps',
    )
    with tf.control_dependencies([assert_length]):
        # An op made here (a same-dtype cast makes none) so every use waits for the check.
        return tf.identity(tf.cast(value, reward.dtype))


def _gae_leaf(r, d, v, bounds: _episode.Bounds, gamma: float, lambda_: float):
    """Returns (advantage, return, value used) for one reward leaf, all `[N, ...]`."""
    at_last = tf.equal(bounds.t, bounds.last)
    terminal_end = episodes.expand_like(tf.logical_and(at_last, bounds.terminal), v)
    at_last = episodes.expand_like(at_last, v)
    v = tf.where(terminal_end, tf.zeros_like(v), v)
    next_v = tf.concat([v[1:], tf.zeros_like(v[:1])], axis=0)
    # The last step has no delta, and a zero factor so nothing flows in from the next episode.
    delta = tf.where(at_last, tf.zeros_like(r), r + gamma * d * next_v - v)
    factor = tf.where(at_last, tf.zeros_like(d), (gamma * lambda_) * d)
    advantage = _recurrence.solve_reverse_recurrence(delta, factor)
    return advantage, advantage + v, v
