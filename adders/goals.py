"""Goal relabeling: every step gets a goal from its episode's future (docs/semantics.md §13).

For step t of an episode whose last step is L, a goal step g_t is drawn (`GoalStrategy`):

    FUTURE     g_t uniform on t + 1 .. L
    GEOMETRIC  g_t = t + k, k ~ Geometric(p) on {1, 2, ...}, P(k) = p (1 - p)^(k - 1):
               terminated episode: g_t = min(t + k, L); a terminal state is absorbing,
                 so the mass past the end stays on o_L
               truncated episode: k conditioned on t + k <= L; the future past o_L was
                 not recorded, so it is left out (P renormalized over 1 .. L - t)
    last step  g_L = L: no future, the step is its own goal (offset 0)

and each step gains:

    goal          the goal field (default `observation`, any nest) of step g_t
    goal_offset   g_t - t (int32; 0 only on the last step)
    reward        with `reward_fn`: reward_fn(achieved, goal), achieved being the goal
                  field of step min(t + 1, L), the state the action led to
    goal_reached  with `success_fn`: success_fn(achieved, goal) (bool); a goal-conditioned
                  learner ends the relabeled episode there: discount x (1 - goal_reached)

The draws are u_t ~ U[0, 1) from a stateless generator keyed by (seed, the episode's
position in the stream): the same seed and stream give the same goals, whatever the
parallelism. Apply it after `repeat()` for new goals every epoch (positions keep counting),
before it to reuse them. The episode's own flags and discounts are unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import cast

import tensorflow as tf

from adders import _episode
from rlds_reverb.core import episodes, types

__all__ = [
    'GoalOptions',
    'relabel_goals',
]

# fn(achieved, goal) -> a value per step: nests of `[T, ...]` tensors in, `[T, ...]` out.
GoalFn = Callable[[types.Nest, types.Nest], types.Nest]


def _as_path(value: str | Sequence[str]) -> tuple[str, ...]:
    path = (value,) if isinstance(value, str) else tuple(value)
    if not path or not all(isinstance(key, str) and key for key in path):
        raise ValueError(
            f'goal_field={value!r} is not valid; expected a step field name or a path of '
            "keys into one, e.g. ('observation', 'achieved_goal')."
        )
    return path


@dataclasses.dataclass(frozen=True)
class GoalOptions:
    """How goals are drawn and what is recomputed (see the module docstring).

    Args:
      strategy: A `types.GoalStrategy` or its name ('future', 'geometric').
      p: The geometric parameter in (0, 1]; GEOMETRIC only (required there).
      seed: The integer seed of the draws.
      goal_field: The step field the goals are taken from, or a path of keys into it.
      reward_fn: Optional `fn(achieved, goal) -> reward` per step, replacing `reward`.
      success_fn: Optional `fn(achieved, goal) -> bool` per step, giving `goal_reached`.

    Raises:
      ValueError: If `strategy` names no strategy, `p` is missing or outside (0, 1] for
        GEOMETRIC or given for FUTURE, `seed` is not an integer, `goal_field` is not a
        name or path, or `reward_fn`/`success_fn` is not callable.

    Example:
      >>> GoalOptions('geometric', p=0.1, seed=7, goal_field=('observation', 'position'))
    """

    strategy: types.GoalStrategy | str = types.GoalStrategy.FUTURE
    p: float | None = None
    seed: int = 0
    goal_field: str | Sequence[str] = types.OBSERVATION
    reward_fn: GoalFn | None = None
    success_fn: GoalFn | None = None

    def __post_init__(self):
        strategy = types.as_enum(types.GoalStrategy, self.strategy, argument='strategy')
        geometric = strategy is types.GoalStrategy.GEOMETRIC
        if geometric and not (
            isinstance(self.p, int | float) and not isinstance(self.p, bool) and 0 < self.p <= 1
        ):
            raise ValueError(f"p={self.p!r} is not valid; strategy='geometric' needs 0 < p <= 1.")
        if not geometric and self.p is not None:
            raise ValueError(f"p={self.p!r} applies to strategy='geometric' only; leave it out.")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f'seed={self.seed!r} is not valid; expected an integer.')
        for name in ('reward_fn', 'success_fn'):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ValueError(f'{name}={value!r} is not valid; expected a function or None.')
        object.__setattr__(self, 'strategy', strategy)
        object.__setattr__(self, 'goal_field', _as_path(self.goal_field))


def relabel_goals(
    strategy: types.GoalStrategy | str = types.GoalStrategy.FUTURE,
    *,
    p: float | None = None,
    seed: int = 0,
    goal_field: str | Sequence[str] = types.OBSERVATION,
    reward_fn: GoalFn | None = None,
    success_fn: GoalFn | None = None,
):
    """Returns a transform giving every step a goal from its episode's future.

    Each step keeps its fields (`reward` is replaced when `reward_fn` is given) and gains
    `goal`, `goal_offset` and, with `success_fn`, `goal_reached`. The functions run once
    per episode, on `[T, ...]` tensors.

    Example:
      >>> relabeled = episodes.apply(adders.relabel_goals(
      ...     'geometric', p=0.2, seed=1, goal_field=('observation', 'position'),
      ...     reward_fn=lambda achieved, goal: -tf.norm(achieved - goal, axis=-1)))

    Args:
      strategy: FUTURE (uniform over the future steps, the default) or GEOMETRIC: a
        `types.GoalStrategy` or its name.
      p: GEOMETRIC's parameter in (0, 1] (the mean offset is 1 / p before the end).
      seed: The integer seed: the same seed and stream give the same goals.
      goal_field: The field the goals (and what each step achieved) are read from: a step
        field name or a path of keys into a nested one.
      reward_fn: `fn(achieved, goal)` giving each step's new reward (same structure and
        shape as `reward`); None keeps the rewards.
      success_fn: `fn(achieved, goal)` giving a bool per step, as `goal_reached`.

    Returns:
      A function from an RLDS (or episode-tensor) dataset to one of the same form.

    Raises:
      ValueError: If an option is invalid (see `GoalOptions`), or (when applied) the goal
        field is missing, the steps already hold an added field, or a function's result
        does not fit (`reward_fn`: the reward's structure and shape; `success_fn`: `[T]`).
    """
    options = GoalOptions(strategy, p, seed, goal_field, reward_fn, success_fn)

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        spec = _episode.get_step_spec(dataset, transform='relabel_goals')
        _check_fields(spec, options)
        rlds = _episode.is_rlds(dataset)
        whole = episodes.to_whole_episodes(dataset) if rlds else dataset

        def _relabel(index: tf.Tensor, element):
            steps = element[types.STEPS] if rlds else element
            out = compute_goals(steps, index, options)
            return {**element, types.STEPS: out} if rlds else out

        # User functions may hold Python control flow: AutoGraph only around them.
        user_code = options.reward_fn is not None or options.success_fn is not None
        fn = _relabel if user_code else episodes.without_autograph(_relabel)
        out = whole.enumerate().map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return episodes.from_whole_episodes(out) if rlds else out

    return _transform


def _check_fields(spec: dict, options: GoalOptions) -> None:
    """Checks that the goal field exists and the added fields do not.

    Raises:
      ValueError: Naming the missing path or the fields that would be overwritten.
    """
    added = [types.GOAL, types.GOAL_OFFSET]
    if options.success_fn is not None:
        added.append(types.GOAL_REACHED)
    _episode.refuse_overwrite(spec, added, transform='relabel_goals')
    needed = [types.IS_TERMINAL] + ([types.REWARD] if options.reward_fn is not None else [])
    _episode.require_fields(spec, needed, transform='relabel_goals')
    node = spec
    for depth, key in enumerate(options.goal_field):
        if not isinstance(node, dict) or key not in node:
            found = sorted(node) if isinstance(node, dict) else type(node).__name__
            raise ValueError(
                f'relabel_goals: goal_field={options.goal_field} has no {key!r} at '
                f'{options.goal_field[:depth] or "the step"}; it holds {found}.'
            )
        node = node[key]


def _get_path(steps: types.Step, path: tuple[str, ...]) -> types.Nest:
    for key in path:
        steps = steps[key]
    return steps


def compute_goal_steps(
    uniform: tf.Tensor, terminal: tf.Tensor, strategy: types.GoalStrategy, p: float | None
) -> tf.Tensor:
    """Returns each step's goal step g_t (int32 `[T]`) from its draw u_t in [0, 1).

    The inverse of each strategy's distribution function, in float64: k is the smallest
    offset whose cumulative probability exceeds u_t.

    Example:
      >>> compute_goal_steps(tf.constant([0.5, 0.5, 0.5], tf.float64), True, FUTURE, None)
    """
    size = tf.size(uniform)
    t = tf.range(size)
    left = tf.cast(size - 1 - t, tf.float64)  # n = L - t future steps
    u = tf.cast(uniform, tf.float64)
    if strategy is types.GoalStrategy.FUTURE:
        k = 1.0 + tf.floor(u * left)
    elif p == 1:
        k = tf.ones_like(u)  # Geometric(1): always the next step.
    else:
        log_q = math.log1p(-float(cast(float, p)))  # log(1 - p) < 0
        absorbed = 1.0 + tf.floor(tf.math.log1p(-u) / log_q)  # then min(t + k, L)
        mass = -tf.math.expm1(left * log_q)  # 1 - q^n: the recorded future's probability
        conditioned = 1.0 + tf.floor(tf.math.log1p(-u * mass) / log_q)
        k = tf.where(terminal, absorbed, conditioned)
    k = tf.cast(tf.clip_by_value(k, 1.0, tf.maximum(left, 1.0)), tf.int32)
    return tf.where(t < size - 1, t + k, t)


def compute_goals(steps: types.Step, index: tf.Tensor, options: GoalOptions) -> types.Step:
    """Returns one whole episode's steps with goals, offsets and what the functions give.

    Args:
      steps: One episode's `[T, ...]` steps.
      index: The episode's position in the stream (int64), which keys its draws.
      options: The relabeling options.

    Raises:
      ValueError: If a function's result does not fit (see `relabel_goals`).
    """
    size = episodes.episode_length(steps)
    seed = tf.stack([tf.constant(options.seed, tf.int64), tf.cast(index, tf.int64)])
    uniform = tf.random.stateless_uniform([size], seed=seed, dtype=tf.float64)
    terminal = tf.reduce_any(steps[types.IS_TERMINAL][size - 1 :])
    p = None if options.p is None else float(options.p)
    strategy = cast(types.GoalStrategy, options.strategy)  # Made enums by GoalOptions.
    goal_steps = compute_goal_steps(uniform, terminal, strategy, p)
    field = _get_path(steps, tuple(options.goal_field))
    goal = tf.nest.map_structure(lambda x: tf.gather(x, goal_steps), field)
    out = {**steps, types.GOAL: goal, types.GOAL_OFFSET: goal_steps - tf.range(size)}
    if options.reward_fn is None and options.success_fn is None:
        return out
    next_steps = tf.minimum(tf.range(size) + 1, size - 1)
    achieved = tf.nest.map_structure(lambda x: tf.gather(x, next_steps), field)
    if options.reward_fn is not None:
        out[types.REWARD] = _fit_reward(options.reward_fn(achieved, goal), steps[types.REWARD])
    if options.success_fn is not None:
        out[types.GOAL_REACHED] = _fit_success(options.success_fn(achieved, goal))
    return out


def _fit_reward(new: types.Nest, reward: types.Nest) -> types.Nest:
    """Returns `reward_fn`'s rewards in the reward's dtypes.

    Raises:
      ValueError: If their structure or static shapes differ from the reward's.
    """
    try:
        tf.nest.assert_same_structure(new, reward)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f'relabel_goals: reward_fn returned {new}, not shaped like the reward {reward}: {e}'
        ) from e

    def _fit(x, r):
        x = tf.cast(x, r.dtype)
        if not x.shape.is_compatible_with(r.shape):
            raise ValueError(
                f'relabel_goals: reward_fn returned shape {x.shape}; the reward is {r.shape} '
                '(one value per step, shaped like the reward).'
            )
        return tf.ensure_shape(x, r.shape)

    return tf.nest.map_structure(_fit, new, reward)


def _fit_success(reached: tf.Tensor) -> tf.Tensor:
    """Returns `success_fn`'s result as bool `[T]`.

    Raises:
      ValueError: If it is not one value per step.
    """
    reached = tf.convert_to_tensor(reached)
    if reached.shape.rank != 1:
        raise ValueError(
            f'relabel_goals: success_fn returned shape {reached.shape}; expected [T], one '
            'bool per step.'
        )
    return tf.cast(reached, tf.bool)
