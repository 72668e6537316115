"""The validation rules of docs/semantics.md §2, written once: one table, two array backends.

Each `Rule` has exactly one `RuleEntry` in `RULES` (reporting order): the fields it reads,
its *scope* (how many checks it makes and what its predicate receives), its vectorized
predicate, what to do when it is broken (`advice`, plus TF-Agents' message for the same
defect) and the labels of the details its message adds. Everything else is made from it:

* the TF checks (`validation.compute_problem_masks`, `in_graph.InGraphCheck`) evaluate the
  predicates with `TF` on one episode's `[T, ...]` tensors inside a `tf.data` map;
* the NumPy bulk checks (`record_checks`) evaluate the same predicates with `NUMPY` on the
  flat steps of a batch of records, with `flat_step_index` saying where each step sits;
* the messages (`Problem.describe`, the in-graph message) are `PROBLEM_LINE` filled with
  `RuleEntry.hint` and `RuleEntry.format_hint`.

A predicate is a plain function of an array namespace `xp` (`TF` or `NUMPY`) and arrays: it
uses only `&`, `|`, `~`, comparisons and the few `xp` functions below, never Python
branching on values (a branch on a dtype is static), so it runs unchanged in graph.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.core import types

__all__ = [
    'IN_GRAPH_MESSAGE',
    'NUMPY',
    'PROBLEM_LINE',
    'RULES',
    'Rule',
    'RuleEntry',
    'Scope',
    'StepIndex',
    'TF',
    'episode_step_index',
    'evaluate_step_checks',
    'flat_step_index',
    'format_problem',
    'is_broken',
    'iterate_step_checks',
    'list_step_checks',
]


class Rule(enum.Enum):
    """A validation rule, by its id (docs/semantics.md §2); its entry in `RULES` says the rest.

    `hint` is what to do, followed by TF-Agents' message for the same defect when it has
    one (`tf_agents_message`).
    """

    NON_EMPTY = 'non_empty'
    FIRST_AT_START = 'is_first_at_start'
    FIRST_ONLY_AT_START = 'is_first_only_at_start'
    LAST_AT_END = 'is_last_at_end'
    LAST_ONLY_AT_END = 'is_last_only_at_end'
    TERMINAL_IMPLIES_LAST = 'is_terminal_implies_is_last'
    FINITE = 'finite'
    DISCOUNT_IN_RANGE = 'discount_in_0_1'
    CONSISTENT_SHAPE = 'consistent_shape'
    READABLE = 'readable'

    @property
    def rule_id(self) -> str:
        """The rule's id, as reports and messages name it."""
        return self.value

    @property
    def entry(self) -> RuleEntry:
        """The rule's one entry in `RULES`."""
        return _ENTRIES[self]

    @property
    def hint(self) -> str:
        """What to do when the rule is broken (with TF-Agents' message, if any)."""
        return self.entry.hint

    @property
    def tf_agents_message(self) -> str:
        """TF-Agents' message for the same defect, or ''."""
        return self.entry.tf_agents_message


class Scope(enum.Enum):
    """What a rule checks, and so what its predicate receives and returns.

    * `FLAGS`: one check per episode step, reported on `fields[0]`:
      `predicate(xp, at, *fields)` -> bool `[T]`.
    * `LEAVES`: one check per leaf of each field in `fields`, named by dotted path:
      `predicate(xp, at, leaf)` -> bool `[T]`.
    * `EPISODE`: one check per episode, reported on `steps`, step 0:
      `predicate(xp, length)` -> bool (elementwise over a vector of lengths).
    * `SHAPES`: one check per leaf of every step field, step 0:
      `predicate(xp, shape, reference)` -> bool (per-step shapes, ranks included).
    * `DECODE`: whether a field's values make whole steps: `predicate(xp, length, values,
      step_size)` -> bool (elementwise); in graph the decoder's error says it instead.
    """

    FLAGS = 'flags'
    LEAVES = 'leaves'
    EPISODE = 'episode'
    SHAPES = 'shapes'
    DECODE = 'decode'


class StepIndex(NamedTuple):
    """Where each step sits in its episode: `position` t and its episode's `last` step L.

    `[T]` and a scalar for one episode (`episode_step_index`), or both `[N]` for the flat
    steps of many episodes (`flat_step_index`).
    """

    position: Any
    last: Any


@dataclasses.dataclass(frozen=True)
class RuleEntry:
    """One rule: what it reads, its predicate (see `Scope`) and its message.

    Attributes:
      rule: The rule.
      scope: What the rule checks, and so the predicate's arguments.
      fields: The step fields the predicate reads (`FLAGS`: reported on the first).
      predicate: Returns where the rule is broken; written over an array namespace.
      advice: What to do when it is broken.
      tf_agents_message: TF-Agents' message for the same defect, or ''.
      detail_labels: Labels of the details `format_hint` appends, in order.
    """

    rule: Rule
    scope: Scope
    fields: tuple[str, ...]
    predicate: Callable[..., Any]
    advice: str
    tf_agents_message: str = ''
    detail_labels: tuple[str, ...] = ()

    @property
    def hint(self) -> str:
        """The advice, followed by TF-Agents' message when there is one."""
        if self.tf_agents_message:
            return f'{self.advice} (TF-Agents: {self.tf_agents_message})'
        return self.advice

    def format_hint(self, *details: Any) -> str:
        """Returns the hint with details appended: `hint (label1 v1, label2 v2)`.

        Args:
          *details: Values for the first `len(details)` of `detail_labels`.
        """
        if not details:
            return self.hint
        shown = zip(self.detail_labels[: len(details)], details, strict=True)
        return f'{self.hint} (' + ', '.join(f'{label} {value}' for label, value in shown) + ')'


class _NumpyOps:
    """The array namespace of the NumPy checks (whole batches of flat steps)."""

    @staticmethod
    def is_floating(x: np.ndarray) -> bool:
        return np.issubdtype(x.dtype, np.floating)

    @staticmethod
    def isfinite(x: np.ndarray) -> np.ndarray:
        return np.isfinite(x)

    @staticmethod
    def any_per_step(x: np.ndarray) -> np.ndarray:
        """Reduces a `[T, ...]` bool array to `[T]`."""
        return x if x.ndim == 1 else x.any(axis=tuple(range(1, x.ndim)))

    @staticmethod
    def vectors_differ(a: np.ndarray, b: np.ndarray) -> bool:
        """Whether two small integer vectors differ, lengths included."""
        # Lists of a few ints compare several times faster than np.array_equal.
        return np.asarray(a).tolist() != np.asarray(b).tolist()


class _TfOps:
    """The array namespace of the TF checks (one episode, in graph)."""

    @staticmethod
    def is_floating(x: tf.Tensor) -> bool:
        return x.dtype.is_floating

    @staticmethod
    def isfinite(x: tf.Tensor) -> tf.Tensor:
        return tf.math.is_finite(x)

    @staticmethod
    def any_per_step(x: tf.Tensor) -> tf.Tensor:
        """Reduces a `[T, ...]` bool tensor to `[T]`."""
        if x.shape.rank == 1:  # Already per step (a branch on the static rank).
            return x
        return tf.reduce_any(tf.reshape(x, [tf.shape(x)[0], -1]), axis=1)

    @staticmethod
    def vectors_differ(a: tf.Tensor, b: Any) -> tf.Tensor:
        """Whether two integer vectors differ, lengths included."""
        b = tf.convert_to_tensor(b, a.dtype)
        return tf.cond(
            tf.equal(tf.size(a), tf.size(b)),
            lambda: tf.reduce_any(tf.not_equal(a, b)),
            lambda: tf.constant(True),
        )


NUMPY = _NumpyOps()
TF = _TfOps()

# TF-Agents' converter's messages for the flag rules (`tf_agents.replay_buffers.
# rlds_to_reverb`), kept in ours so that code matching them keeps working.
_TFA_MID_THEN_FIRST = 'Mid step should not be followed by a first step.'
_TFA_LAST_THEN_FIRST = 'Last step of an episode must be followed by a first step.'
_TFA_TERMINAL_IS_LAST = 'Terminal step must be the last step of an episode.'


def _not_finite(xp, at: StepIndex, x):
    # Integer leaves are always finite (an all-false row keeps one row per leaf).
    return xp.any_per_step(~xp.isfinite(x)) if xp.is_floating(x) else at.position < 0


def _outside_0_1(xp, at: StepIndex, x):
    # NaN compares false both ways, so a NaN discount is reported once, as not finite.
    return xp.any_per_step((x < 0) | (x > 1))


RULES: tuple[RuleEntry, ...] = (
    RuleEntry(
        Rule.NON_EMPTY,
        Scope.EPISODE,
        (types.STEPS,),
        lambda xp, length: length == 0,
        'an episode needs at least one step; drop empty episodes',
    ),
    RuleEntry(
        Rule.FIRST_AT_START,
        Scope.FLAGS,
        (types.IS_FIRST,),
        lambda xp, at, is_first: (at.position == 0) & ~is_first,
        'set is_first on the first step of each episode',
        _TFA_LAST_THEN_FIRST,
    ),
    RuleEntry(
        Rule.FIRST_ONLY_AT_START,
        Scope.FLAGS,
        (types.IS_FIRST,),
        lambda xp, at, is_first: (at.position > 0) & is_first,
        'is_first may be true only on step 0; split the episode where a new one starts',
        _TFA_MID_THEN_FIRST,
    ),
    RuleEntry(
        Rule.LAST_AT_END,
        Scope.FLAGS,
        (types.IS_LAST,),
        lambda xp, at, is_last: (at.position == at.last) & ~is_last,
        'set is_last on the final step of each episode',
        _TFA_MID_THEN_FIRST,
    ),
    RuleEntry(
        Rule.LAST_ONLY_AT_END,
        Scope.FLAGS,
        (types.IS_LAST,),
        lambda xp, at, is_last: (at.position < at.last) & is_last,
        'is_last may be true only on the final step; split the episode where it ends',
        _TFA_LAST_THEN_FIRST,
    ),
    RuleEntry(
        Rule.TERMINAL_IMPLIES_LAST,
        Scope.FLAGS,
        (types.IS_TERMINAL, types.IS_LAST),
        lambda xp, at, is_terminal, is_last: is_terminal & ~is_last,
        'is_terminal may be true only on the final step, together with is_last',
        _TFA_TERMINAL_IS_LAST,
    ),
    RuleEntry(
        Rule.FINITE,
        Scope.LEAVES,
        (types.REWARD, types.DISCOUNT),
        _not_finite,
        'replace NaN/Inf values, or drop the episode',
    ),
    RuleEntry(
        Rule.DISCOUNT_IN_RANGE,
        Scope.LEAVES,
        (types.DISCOUNT,),
        _outside_0_1,
        'discounts must lie in [0, 1]',
    ),
    RuleEntry(
        Rule.CONSISTENT_SHAPE,
        Scope.SHAPES,
        (),  # Every step field.
        lambda xp, shape, reference: xp.vectors_differ(shape, reference),
        'every episode must have the same per-step shape as the first one; reshape or drop it',
        detail_labels=('expected per-step shape', 'found'),
    ),
    RuleEntry(
        Rule.READABLE,
        Scope.DECODE,
        (),  # Every step field.
        lambda xp, length, values, step_size: values != length * step_size,
        'the episode could not be decoded (for a TFDS directory, `rlds-reverb validate` or '
        "rlds_reverb.load(..., check_files='full') names its shard, record and field)",
        detail_labels=('TF:',),
    ),
)

_ENTRIES: dict[Rule, RuleEntry] = {entry.rule: entry for entry in RULES}

# One problem, as `Problem.describe` and the in-graph message write it.
PROBLEM_LINE = 'episode {episode}, {where}, field {field}, rule {rule}: {hint}'
# The message a converter's iterator fails with, in graph (`in_graph.InGraphCheck`).
IN_GRAPH_MESSAGE = (
    "Episode {episode} is invalid: {problems}. Fix the data, or pass on_invalid='skip' to "
    'drop invalid episodes whole.'
)


def format_problem(episode: Any, where: str, field: str, rule: Rule, hint: str) -> str:
    """Returns one problem's line (`PROBLEM_LINE`)."""
    return PROBLEM_LINE.format(
        episode=episode, where=where, field=field, rule=rule.rule_id, hint=hint
    )


def _leaf_name(field: str, path: tuple) -> str:
    return '.'.join([field, *map(str, path)])


def list_step_checks(step_spec: dict) -> list[tuple[Rule, str]]:
    """Returns `(rule, field)` of every per-step check, in `evaluate_step_checks`' order.

    Args:
      step_spec: The dataset's step spec (any nest with the step fields as keys).
    """
    checks = []
    for entry in RULES:
        if entry.scope is Scope.FLAGS:
            checks.append((entry.rule, entry.fields[0]))
        elif entry.scope is Scope.LEAVES:
            for field in entry.fields:
                paths = [path for path, _ in tree.flatten_with_path(step_spec[field])]
                checks += [(entry.rule, _leaf_name(field, path)) for path in paths]
    return checks


def iterate_step_checks(xp, at: StepIndex, steps: dict) -> Iterator[Any]:
    """Yields, per check of `list_step_checks`, the bool `[T]` mask of the steps breaking it.

    Args:
      xp: `TF` or `NUMPY`.
      at: Where each step sits in its episode.
      steps: Step fields as `[T, ...]` arrays (flags bool); only the fields the per-step
        rules read are used.
    """
    for entry in RULES:
        if entry.scope is Scope.FLAGS:
            yield entry.predicate(xp, at, *(steps[field] for field in entry.fields))
        elif entry.scope is Scope.LEAVES:
            for field in entry.fields:
                for leaf in tree.flatten(steps[field]):
                    yield entry.predicate(xp, at, leaf)


def evaluate_step_checks(xp, at: StepIndex, steps: dict) -> list[Any]:
    """Returns the masks of `iterate_step_checks` as a list."""
    return list(iterate_step_checks(xp, at, steps))


def episode_step_index(length: tf.Tensor) -> StepIndex:
    """Returns the `StepIndex` of one episode of `length` steps (graph-friendly)."""
    return StepIndex(tf.range(length), length - 1)


def flat_step_index(row_splits: np.ndarray) -> StepIndex:
    """Returns the `StepIndex` of the flat steps of episodes given by their row splits.

    Args:
      row_splits: `[E + 1]` offsets: episode e holds steps `row_splits[e]:row_splits[e + 1]`.
    """
    row_splits = np.asarray(row_splits, np.int64)
    lengths = np.diff(row_splits)
    starts = np.repeat(row_splits[:-1] - row_splits[0], lengths)
    position = np.arange(row_splits[-1] - row_splits[0], dtype=np.int64) - starts
    return StepIndex(position, np.repeat(lengths - 1, lengths))


def is_broken(rule: Rule, xp, *args: Any) -> Any:
    """Evaluates an episode-level rule's predicate (scope `EPISODE`, `SHAPES` or `DECODE`)."""
    return _ENTRIES[rule].predicate(xp, *args)
