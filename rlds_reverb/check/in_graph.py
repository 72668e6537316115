"""The validation rules as graph ops, for lazy checks inside a converter's `tf.data` maps.

`InGraphCheck` evaluates the rules of docs/semantics.md §2 (`validation.compute_problem_masks`,
the episode-level checks) on one episode's whole tensors, in the map that decodes and
converts it: `raise` mode fails the iterator with the message `Problem.describe` would give
(`describe_invalid_episode`), `skip` mode filters on `is_valid`. Only for an invalid episode
do its masks reach Python, to write that message.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.check import rules
from rlds_reverb.check.rules import Rule
from rlds_reverb.check.validation import (
    Check,
    check_step_spec,
    compute_problem_masks,
    compute_step_shapes,
    list_checks,
    list_leaf_names,
)
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types

# Used by the converters (transform/convert.py) and mixtures (transform/mixture.py) only:
# nothing here is public API.
__all__: list[str] = []


def describe_invalid_episode(
    episode_index: int,
    masks: np.ndarray,
    episode_broken: np.ndarray,
    lines: list[tuple[str, Rule, str]],
) -> str:
    """Returns the message a converter's iterator fails with (`rules.IN_GRAPH_MESSAGE`).

    One line per broken check, at its first bad step (step 0 for the episode-level checks).

    Args:
      episode_index: The episode's index.
      masks: The `[num_checks, T]` masks of `compute_problem_masks`.
      episode_broken: Whether each episode-level check (empty, shapes) is broken.
      lines: `(field, rule, hint)` of every check: the per-step ones, then the
        episode-level ones.
    """
    rows = list(masks) + [np.array([broken]) for broken in episode_broken]
    problems = [
        rules.format_problem(episode_index, f'step {int(np.argmax(row))}', *line)
        for row, line in zip(rows, lines, strict=True)
        if row.any()
    ]
    return rules.IN_GRAPH_MESSAGE.format(episode=episode_index, problems='; '.join(problems))


def _describe_in_graph(
    episode_index: tf.Tensor,
    masks: tf.Tensor,
    checks: list[Check],
    episode_checks: list[tuple[tf.Tensor, Check, str]],
) -> tf.Tensor:
    """Returns `describe_invalid_episode`'s message as a string tensor, for an invalid episode.

    The message is written in Python (`tf.numpy_function`), only when an episode is invalid:
    built from string ops in graph, it cost about 30 traced ops, a quarter of a converter's
    set-up time, for a branch that valid data never runs. The op is declared stateless, so
    a dataset holding it keeps its iterators checkpointable.
    """
    lines = [(c.field, c.rule, c.rule.hint) for c in checks]
    lines += [(c.field, c.rule, hint) for _, c, hint in episode_checks]

    def _describe(index: np.ndarray, masks: np.ndarray, broken: np.ndarray) -> bytes:
        return describe_invalid_episode(int(index), masks, broken, lines).encode()

    broken = tf.stack([b for b, _, _ in episode_checks])
    return tf.numpy_function(_describe, [episode_index, masks, broken], tf.string, stateful=False)


def _compute_episode_ok(
    steps: types.Nest, checks: list[Check], reference: tuple[list, list[str]] | None
) -> tuple[tf.Tensor, tf.Tensor, list[tuple[tf.Tensor, Check, str]]]:
    """Returns (ok, masks, episode-level checks) for one episode."""
    length = episodes_lib.episode_length(steps)
    masks = compute_problem_masks(steps, length=length)
    episode_checks = [
        (
            rules.is_broken(Rule.NON_EMPTY, rules.TF, length),
            Check(Rule.NON_EMPTY, types.STEPS),
            Rule.NON_EMPTY.hint,
        )
    ]
    if reference is not None:
        shapes, names = reference
        for shape, ref, name in zip(compute_step_shapes(steps), shapes, names, strict=True):
            episode_checks.append(
                (
                    rules.is_broken(Rule.CONSISTENT_SHAPE, rules.TF, shape, ref),
                    Check(Rule.CONSISTENT_SHAPE, name),
                    Rule.CONSISTENT_SHAPE.entry.format_hint(list(ref)),
                )
            )
    broken = tf.reduce_any(masks)
    for episode_broken, _, _ in episode_checks:
        broken |= episode_broken
    return ~broken, masks, episode_checks


def _find_reference_shapes(episodes: tf.data.Dataset, step_spec: dict) -> tuple | None:
    """Returns the first non-empty episode's per-step shapes when the spec leaves dims open.

    tf.data enforces fully known shapes itself, so this peek happens only for datasets whose
    spec has unknown dimensions.
    """
    if all(spec.shape.is_fully_defined() for spec in tree.flatten(step_spec)):
        return None
    tensors = episodes_lib.to_episode_tensors(episodes)
    non_empty = tensors.filter(
        episodes_lib.without_autograph(lambda s: episodes_lib.episode_length(s) > 0)
    )
    for steps in non_empty.take(1):
        return [s.numpy() for s in compute_step_shapes(steps)], list_leaf_names(step_spec)
    return None


class InGraphCheck:
    """The validation rules as graph ops on one episode, for lazy checks inside `tf.data` maps.

    The converters use it in the same map that decodes and converts an episode: `raise`
    mode fails the iterator with the message `Problem.describe` would give (first bad step
    per rule), `skip` mode filters on `is_valid`. The consistent-shape rule compares with
    the first non-empty episode, peeked once when the spec leaves dimensions open.

    Args:
      episodes: The RLDS dataset the check is for.
      step_spec: Its step spec.

    Raises:
      SpecMismatchError: If flags are not bool, or rewards/discounts not numeric.

    Example:
      >>> check = InGraphCheck(episodes, specs.get_step_spec(episodes))
      >>> steps = check.assert_valid(index, steps)
    """

    def __init__(self, episodes: tf.data.Dataset, step_spec: dict):
        check_step_spec(step_spec)
        self._checks = list_checks(step_spec)
        self._reference = _find_reference_shapes(episodes, step_spec)

    def is_valid(self, steps: types.Nest) -> tf.Tensor:
        """Returns a scalar bool: whether the episode breaks no rule."""
        return _compute_episode_ok(steps, self._checks, self._reference)[0]

    def assert_valid(
        self, episode_index: tf.Tensor, steps: types.Nest, *, check_first: bool = False
    ) -> types.Nest:
        """Returns `steps`; the map fails with an `InvalidArgumentError` naming every problem.

        tf.data functions run their stateful ops (the `Assert`) with every element, so the
        steps need no control dependency on it (an `Identity` per field, each traced op
        costing set-up time), unless code that may fail on invalid steps reads them.

        Args:
          episode_index: The episode's index in the dataset.
          steps: The episode's steps as whole `[T, ...]` tensors.
          check_first: Return the steps only after the check (for a user's function).
        """
        ok, masks, episode_checks = _compute_episode_ok(steps, self._checks, self._reference)
        message = tf.cond(
            ok,
            lambda: tf.constant(''),
            lambda: _describe_in_graph(episode_index, masks, self._checks, episode_checks),
        )
        check = tf.debugging.Assert(ok, [message], summarize=1)
        if not check_first:
            return steps
        with tf.control_dependencies([check]):
            return tf.nest.map_structure(tf.identity, steps)
