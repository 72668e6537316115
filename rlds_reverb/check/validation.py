"""Episode validation (docs/semantics.md §2): every rule checked on whole-episode tensors.

The checks run inside `tf.data` maps, one episode at a time, on whole tensors; only small
per-rule masks reach Python. Three entry points share them:

* `validate(episodes, mode=...)` walks the dataset and returns a `ValidationReport`
  (raising `InvalidEpisodeError` at the first invalid episode in `raise` mode). A dataset
  `load` read from TFRecord shards is first checked from its records in bulk
  (`record_checks`); only one with a problem, or with encoded step fields, is walked.
* `in_graph.InGraphCheck` is the lazy, in-graph form the converters use inside their
  `tf.data` maps: `raise` fails the iterator with the same message, `skip` drops invalid
  episodes whole.
* `find_episode_problems(...)` turns one episode's masks into `Problem` records.

`read_episodes` walks a dataset of one element per episode; an episode that does not
decode is an `UnreadableEpisode` value in its place.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.check import record_checks, rules
from rlds_reverb.check.rules import Rule
from rlds_reverb.core import compat, specs, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core.errors import InvalidEpisodeError, SpecMismatchError
from rlds_reverb.read import records

__all__ = [
    'Problem',
    'Rule',
    'ValidationReport',
    'validate',
]

# How many step indices a problem lists before it says "and N more".
_SHOWN_STEPS = 5
# How TF's example parser names the field it failed on.
_PARSER_KEY = re.compile(r'Key: (?:steps/)?([\w/]+)')


@dataclasses.dataclass(frozen=True)
class Problem:
    """One broken rule in one episode: which steps, which field, and what to do."""

    episode: int
    step: int
    field: str
    rule: Rule
    hint: str
    steps: tuple[int, ...] = ()

    def describe(self) -> str:
        """Returns a one-line description naming episode, step(s), field, rule and hint."""
        where = f'step {self.step}'
        if len(self.steps) > 1:
            shown = ', '.join(str(s) for s in self.steps[:_SHOWN_STEPS])
            more = len(self.steps) - _SHOWN_STEPS
            where = f'steps {shown}' + (f' and {more} more' if more > 0 else '')
        return rules.format_problem(self.episode, where, self.field, self.rule, self.hint)

    def as_row(self) -> tuple[int, int, str, str, str]:
        """Returns (episode index, step index, field, rule, hint)."""
        return (self.episode, self.step, self.field, self.rule.rule_id, self.hint)


@dataclasses.dataclass
class ValidationReport:
    """What validation found: every problem, and counts of episodes by kind."""

    problems: list[Problem] = dataclasses.field(default_factory=list)
    valid: int = 0
    invalid: int = 0
    terminated: int = 0
    truncated: int = 0
    steps: int = 0
    invalid_episodes: list[int] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every episode is valid."""
        return self.invalid == 0

    @property
    def episodes(self) -> int:
        """The number of episodes seen."""
        return self.valid + self.invalid

    def format(self) -> str:
        """Returns the report as text: counts, then one line per problem."""
        lines = [
            f'episodes: {self.episodes} (valid {self.valid}, invalid {self.invalid}); '
            f'valid episodes terminated {self.terminated}, truncated {self.truncated}; '
            f'steps in valid episodes: {self.steps}'
        ]
        lines += [f'  - {p.describe()}' for p in self.problems]
        return '\n'.join(lines)


@dataclasses.dataclass(frozen=True)
class Check:
    """One per-step check: a rule on one field (`list_checks`)."""

    rule: Rule
    field: str


def _numeric_leaves(step_spec: dict, field: str) -> list[tuple[str, tf.TensorSpec]]:
    """Returns (dotted name, spec) for every leaf of a reward/discount field."""
    leaves = []
    for path, spec in tree.flatten_with_path(step_spec[field]):
        name = '.'.join([field, *map(str, path)])
        if not (spec.dtype.is_floating or spec.dtype.is_integer):
            raise SpecMismatchError(
                f"Step field '{name}' has dtype {spec.dtype.name}; rewards and discounts must "
                'be numeric (float or int). Convert the field before loading.'
            )
        leaves.append((name, spec))
    return leaves


def check_step_spec(step_spec: dict) -> None:
    """Checks what the dataset spec alone decides: flags are bool, rewards/discounts numeric.

    Raises:
      SpecMismatchError: Naming the field and its dtype.
    """
    for flag in types.FLAG_FIELDS:
        dtype = step_spec[flag].dtype
        if dtype != tf.bool:
            raise SpecMismatchError(
                f"Step field '{flag}' has dtype {dtype.name}; it must be bool. Cast it first."
            )
    _numeric_leaves(step_spec, types.REWARD)
    _numeric_leaves(step_spec, types.DISCOUNT)


def list_checks(step_spec: dict) -> list[Check]:
    """Returns the per-step checks, in the order `compute_problem_masks` stacks them.

    Raises:
      SpecMismatchError: If a reward or discount leaf is not numeric.
    """
    for field in (types.REWARD, types.DISCOUNT):
        _numeric_leaves(step_spec, field)
    return [Check(rule, field) for rule, field in rules.list_step_checks(step_spec)]


def compute_problem_masks(steps: types.Nest, *, length: tf.Tensor | None = None) -> tf.Tensor:
    """Returns a [num_checks, T] bool tensor: which step breaks which check.

    Graph-friendly (no Python branching on tensors): the predicates of `rules.RULES`,
    evaluated with TF; the row order is `list_checks`'.

    Args:
      steps: One episode's steps as whole `[T, ...]` tensors.
      length: T, if already computed (`episodes.episode_length`).
    """
    if length is None:
        length = episodes_lib.episode_length(steps)
    at = rules.episode_step_index(length)
    return tf.stack(rules.evaluate_step_checks(rules.TF, at, steps))


def compute_step_shapes(steps: types.Nest) -> list[tf.Tensor]:
    """Returns the per-step shape of every leaf (shape without the time dimension)."""
    return [tf.shape(x, out_type=tf.int32)[1:] for x in tree.flatten(steps)]


class EpisodeSummary(NamedTuple):
    """What validation needs of one episode, computed in graph as small tensors.

    Fields:
      length: int32 scalar T.
      masks: bool `[num_checks, T]`: which step breaks which check (`list_checks` order).
      terminal: bool scalar: whether the episode ends with `is_terminal`.
      shapes: One int32 vector per leaf: its per-step shape (without the time axis).
    """

    length: Any
    masks: Any
    terminal: Any
    shapes: tuple


def summarize_episode(steps: types.Nest) -> EpisodeSummary:
    """Computes everything validation needs from one episode, as small tensors.

    Args:
      steps: One episode's steps as whole `[T, ...]` tensors (graph-friendly).

    Returns:
      The `EpisodeSummary` that `EpisodeChecker.find_problems` reads.
    """
    return EpisodeSummary(
        length=episodes_lib.episode_length(steps),
        masks=compute_problem_masks(steps),
        terminal=tf.reduce_any(steps[types.IS_TERMINAL] & steps[types.IS_LAST]),
        shapes=tuple(compute_step_shapes(steps)),
    )


def find_episode_problems(
    episode_index: int, length: int, masks: np.ndarray, checks: list[Check]
) -> list[Problem]:
    """Turns one episode's problem masks into `Problem` records (one per rule and field)."""
    if rules.is_broken(Rule.NON_EMPTY, rules.NUMPY, length):
        return [Problem(episode_index, 0, types.STEPS, Rule.NON_EMPTY, Rule.NON_EMPTY.hint)]
    problems = []
    for check, row in zip(checks, masks, strict=True):
        bad = np.flatnonzero(row)
        if bad.size:
            problems.append(
                Problem(
                    episode_index,
                    int(bad[0]),
                    check.field,
                    check.rule,
                    check.rule.hint,
                    tuple(int(s) for s in bad),
                )
            )
    return problems


def _find_shape_problems(
    episode_index: int,
    shapes: Sequence[np.ndarray],
    reference: Sequence[np.ndarray],
    names: list[str],
) -> list[Problem]:
    problems = []
    for name, shape, ref in zip(names, shapes, reference, strict=True):
        if rules.is_broken(Rule.CONSISTENT_SHAPE, rules.NUMPY, shape, ref):
            hint = Rule.CONSISTENT_SHAPE.entry.format_hint(ref.tolist(), shape.tolist())
            problems.append(Problem(episode_index, 0, name, Rule.CONSISTENT_SHAPE, hint, (0,)))
    return problems


def list_leaf_names(step_spec: dict) -> list[str]:
    """Returns the dotted name of every leaf of a step spec, in `tree.flatten` order."""
    return ['.'.join(map(str, path)) for path, _ in tree.flatten_with_path(step_spec)]


@dataclasses.dataclass(frozen=True)
class UnreadableEpisode:
    """An episode that did not decode, in place of its element (`read_episodes`).

    Attributes:
      index: The episode's position in the dataset read (counted from 0).
      error_message: TensorFlow's message, whole.
      field: The step field the parser names (`observation.image`), else `steps`.
    """

    index: int
    error_message: str
    field: str = types.STEPS

    @classmethod
    def from_error(cls, index: int, error: tf.errors.OpError) -> UnreadableEpisode:
        """Returns the unreadable episode at `index`, from the error TF raised reading it."""
        key = _PARSER_KEY.search(_first_line(error.message))
        field = key.group(1).replace('/', '.') if key else types.STEPS
        return cls(index, error.message, field)

    def to_problem(self, episode_index: int) -> Problem:
        """Returns the episode's problem (rule `readable`), naming TF's reason.

        Args:
          episode_index: The episode's index in the dataset (`index`, or counted from
            wherever the read started).
        """
        hint = Rule.READABLE.entry.format_hint(_first_line(self.error_message))
        return Problem(episode_index, 0, self.field, Rule.READABLE, hint, (0,))


def _first_line(message: str) -> str:
    """TF's reason in one line: the message's first line, without the op's `{{...}}` context."""
    return message.strip().splitlines()[0].split('}}')[-1].strip()


def read_episodes(per_episode: tf.data.Dataset) -> Iterator[tuple[int, Any | UnreadableEpisode]]:
    """Yields (episode index, element), or (index, `UnreadableEpisode`) for one that fails.

    A record that fails to decode (`InvalidArgumentError` from the parser or from slicing
    steps of uneven lengths) is one episode's problem and reading goes on; other read
    errors (corrupt files) end the walk.

    Args:
      per_episode: A dataset with one element per episode (for example summaries).
    """
    iterator = _iterate_numpy(per_episode)
    for index in itertools.count():
        try:
            yield index, next(iterator)
        except StopIteration:
            return
        except tf.errors.InvalidArgumentError as e:
            yield index, UnreadableEpisode.from_error(index, e)


def _iterate_numpy(dataset: tf.data.Dataset) -> Iterator[Any]:
    """Returns an iterator of `dataset`'s elements as NumPy, as `as_numpy_iterator` gives them.

    Elements of plain tensors come through tf.data as one flat tuple and are nested again
    by dm-tree: tf.data's own nesting of an episode plan's few dozen leaves took about 1 ms
    of the writing thread an episode, a tenth of a push's CPU on image data
    (benchmarks/README.md). Like tf.data's iterator, it goes on after an element fails.
    """
    spec = dataset.element_spec
    if not all(isinstance(s, tf.TensorSpec) for s in tf.nest.flatten(spec)):
        return dataset.as_numpy_iterator()
    return _FlatNumpyIterator(dataset, spec)


class _FlatNumpyIterator:
    """`_iterate_numpy`'s iterator (a class: a generator would end at the first error)."""

    def __init__(self, dataset: tf.data.Dataset, spec: Any):
        self._spec = spec
        self._leaves = iter(dataset.map(lambda *element: tuple(tf.nest.flatten(element))))

    def __iter__(self) -> _FlatNumpyIterator:
        return self

    def __next__(self) -> Any:
        leaves = next(self._leaves)
        return tree.unflatten_as(self._spec, [compat.tensor_to_numpy(t) for t in leaves])


class EpisodeChecker:
    """Finds the problems of each episode of one dataset, in order, from its summary.

    The consistent-shape rule compares every non-empty episode with the first non-empty
    one, so episodes must be checked in dataset order, each once.

    Args:
      step_spec: The dataset's step spec.

    Raises:
      SpecMismatchError: If flags are not bool, or rewards/discounts not numeric.

    Example:
      >>> checker = EpisodeChecker(specs.get_step_spec(episodes))
      >>> problems = checker.find_problems(0, summary)
    """

    def __init__(self, step_spec: dict):
        check_step_spec(step_spec)
        self.checks = list_checks(step_spec)
        self._names = list_leaf_names(step_spec)
        self._reference: tuple[np.ndarray, ...] | None = None

    def find_problems(
        self, episode_index: int, summary: EpisodeSummary | UnreadableEpisode
    ) -> list[Problem]:
        """Returns the episode's problems (empty when it is valid).

        Args:
          episode_index: The episode's index in the dataset.
          summary: The numpy `summarize_episode` of the episode, or the `UnreadableEpisode`
            `read_episodes` gave in its place.
        """
        if isinstance(summary, UnreadableEpisode):
            return [summary.to_problem(episode_index)]
        length = int(summary.length)
        problems = find_episode_problems(episode_index, length, summary.masks, self.checks)
        if not length:
            return problems
        if self._reference is None:
            self._reference = summary.shapes
        else:
            problems += _find_shape_problems(
                episode_index, summary.shapes, self._reference, self._names
            )
        return problems


def count_episode(
    report: ValidationReport,
    index: int,
    problems: list[Problem],
    summary: EpisodeSummary | UnreadableEpisode,
) -> None:
    """Counts one checked episode into `report`, as `validate`'s walk in 'report' mode does.

    Args:
      report: The report to add to.
      index: The episode's index in the dataset.
      problems: What `EpisodeChecker.find_problems` found (none for a valid episode).
      summary: What it found them in.
    """
    if problems or isinstance(summary, UnreadableEpisode):
        report.problems += problems
        report.invalid += 1
        report.invalid_episodes.append(index)
        return
    report.valid += 1
    report.steps += int(summary.length)
    report.terminated += int(summary.terminal)
    report.truncated += int(not summary.terminal)


def validate(
    episodes: tf.data.Dataset,
    *,
    on_invalid: types.ValidationMode | str = types.ValidationMode.RAISE,
) -> ValidationReport:
    """Validates every episode of an RLDS dataset against the rules of docs/semantics.md §2.

    The rules: at least one step; `is_first` on step 0 and only there; `is_last` on the final
    step and only there; `is_terminal` implies `is_last`; the same per-step shapes in every
    episode; finite rewards and discounts; discounts in [0, 1].

    A dataset `rlds_reverb.load` read from TFRecord shards whose step fields are plain
    tensors is decided from its records in bulk first (`rlds_reverb.check.record_checks`);
    the dataset is walked episode by episode only when that finds a problem, to name it.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).
      on_invalid: `'raise'` (default) stops at the first invalid episode; `'skip'` and
        `'report'` walk the whole dataset and list every problem (with `'skip'`, the invalid
        episodes are the ones a converter or push would drop: `report.invalid_episodes`).

    Returns:
      A `ValidationReport`.

    Raises:
      InvalidEpisodeError: In `raise` mode, for the first invalid episode (a
        `tf.errors.InvalidArgumentError`), naming each of its problems.
      SourceError: If the dataset holds no RLDS steps.
      SpecMismatchError: If step fields are missing or have the wrong dtype.
      ValueError: If `on_invalid` is not one of the modes.

    Example:
      >>> report = rlds_reverb.validate(episodes, on_invalid='report')
      >>> print(report.format())
    """
    mode = types.as_enum(types.ValidationMode, on_invalid, argument='on_invalid')
    step_spec = specs.get_step_spec(episodes)
    checker = EpisodeChecker(step_spec)
    counts = _count_from_records(episodes, step_spec)
    if counts is not None:
        return ValidationReport(
            valid=counts.episodes,
            terminated=counts.terminated,
            truncated=counts.episodes - counts.terminated,
            steps=counts.steps,
        )
    summaries = episodes_lib.to_episode_tensors(episodes).map(
        episodes_lib.without_autograph(summarize_episode),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    report = ValidationReport()
    for index, summary in read_episodes(summaries):
        problems = checker.find_problems(index, summary)
        if problems and mode is types.ValidationMode.RAISE:
            raise InvalidEpisodeError(index, problems)
        count_episode(report, index, problems, summary)
    return report


def _count_from_records(
    episodes: tf.data.Dataset, step_spec: dict
) -> record_checks.EpisodeCounts | None:
    """Returns the counts of an all-valid dataset `load` read from TFRecord shards, else None.

    Deciding from the records in bulk skips the traced walk (its set-up and one Python step
    per episode); a dataset with any problem, or whose steps need decoding, is walked.
    """
    source = records.find_record_source(episodes)
    return None if source is None else record_checks.count_valid_episodes(source, step_spec)
