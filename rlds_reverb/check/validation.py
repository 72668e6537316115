"""Episode validation (docs/semantics.md §2): every rule checked on whole-episode tensors.

The checks run inside `tf.data` maps, one episode at a time, on whole tensors; only small
per-rule masks reach Python. Three entry points share them:

* `validate(episodes, mode=...)` walks the dataset and returns a `ValidationReport`
  (raising `InvalidEpisodeError` at the first invalid episode in `raise` mode). A dataset
  `load` read from TFRecord shards is first checked from its records in bulk
  (`record_checks`); only one with a problem, or with encoded step fields, is walked.
* `InGraphCheck` is the lazy, in-graph form the converters use inside their `tf.data`
  maps: `raise` fails the iterator with the same message, `skip` drops invalid episodes
  whole.
* `find_episode_problems(...)` turns one episode's masks into `Problem` records.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.check import record_checks
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import specs, types
from rlds_reverb.core.errors import InvalidEpisodeError, SpecMismatchError
from rlds_reverb.read import records

# How many step indices a problem lists before it says "and N more".
_SHOWN_STEPS = 5
# How TF's example parser names the field it failed on.
_PARSER_KEY = re.compile(r'Key: (?:steps/)?([\w/]+)')


# TF-Agents' converter's messages for the flag rules (`tf_agents.replay_buffers.
# rlds_to_reverb`), kept in ours so that code matching them keeps working.
_TFA_MID_THEN_FIRST = 'Mid step should not be followed by a first step.'
_TFA_LAST_THEN_FIRST = 'Last step of an episode must be followed by a first step.'
_TFA_TERMINAL_IS_LAST = 'Terminal step must be the last step of an episode.'


class Rule(enum.Enum):
    """A validation rule: its id, what to do when it is broken, and TF-Agents' sentence.

    `hint` is what to do, followed by TF-Agents' message for the same defect when it has
    one (`tf_agents_message`).
    """

    NON_EMPTY = ('non_empty', 'an episode needs at least one step; drop empty episodes')
    FIRST_AT_START = (
        'is_first_at_start',
        'set is_first on the first step of each episode',
        _TFA_LAST_THEN_FIRST,
    )
    FIRST_ONLY_AT_START = (
        'is_first_only_at_start',
        'is_first may be true only on step 0; split the episode where a new one starts',
        _TFA_MID_THEN_FIRST,
    )
    LAST_AT_END = (
        'is_last_at_end',
        'set is_last on the final step of each episode',
        _TFA_MID_THEN_FIRST,
    )
    LAST_ONLY_AT_END = (
        'is_last_only_at_end',
        'is_last may be true only on the final step; split the episode where it ends',
        _TFA_LAST_THEN_FIRST,
    )
    TERMINAL_IMPLIES_LAST = (
        'is_terminal_implies_is_last',
        'is_terminal may be true only on the final step, together with is_last',
        _TFA_TERMINAL_IS_LAST,
    )
    FINITE = ('finite', 'replace NaN/Inf values, or drop the episode')
    DISCOUNT_IN_RANGE = ('discount_in_0_1', 'discounts must lie in [0, 1]')
    CONSISTENT_SHAPE = (
        'consistent_shape',
        'every episode must have the same per-step shape as the first one; reshape or drop it',
    )
    READABLE = (
        'readable',
        'the episode could not be decoded (for a TFDS directory, `rlds-reverb validate` or '
        "rlds_reverb.load(..., check_files='full') names its shard, record and field)",
    )

    def __init__(self, rule_id: str, advice: str, tf_agents_message: str = ''):
        self.rule_id = rule_id
        self.tf_agents_message = tf_agents_message
        self.hint = f'{advice} (TF-Agents: {tf_agents_message})' if tf_agents_message else advice


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
        return (
            f'episode {self.episode}, {where}, field {self.field}, '
            f'rule {self.rule.rule_id}: {self.hint}'
        )

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
class _Check:
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


def list_checks(step_spec: dict) -> list[_Check]:
    """Returns the per-step checks, in the order `compute_problem_masks` stacks them."""
    checks = [
        _Check(Rule.FIRST_AT_START, types.IS_FIRST),
        _Check(Rule.FIRST_ONLY_AT_START, types.IS_FIRST),
        _Check(Rule.LAST_AT_END, types.IS_LAST),
        _Check(Rule.LAST_ONLY_AT_END, types.IS_LAST),
        _Check(Rule.TERMINAL_IMPLIES_LAST, types.IS_TERMINAL),
    ]
    for field in (types.REWARD, types.DISCOUNT):
        checks += [_Check(Rule.FINITE, name) for name, _ in _numeric_leaves(step_spec, field)]
    checks += [
        _Check(Rule.DISCOUNT_IN_RANGE, name)
        for name, _ in _numeric_leaves(step_spec, types.DISCOUNT)
    ]
    return checks


def _any_per_step(mask: tf.Tensor) -> tf.Tensor:
    """Reduces a [T, ...] bool tensor to [T]."""
    return tf.reduce_any(tf.reshape(mask, [tf.shape(mask)[0], -1]), axis=1)


def compute_problem_masks(steps: types.Nest) -> tf.Tensor:
    """Returns a [num_checks, T] bool tensor: which step breaks which check.

    Graph-friendly (no Python branching on tensors); the row order is `list_checks`'.

    Args:
      steps: One episode's steps as whole `[T, ...]` tensors.
    """
    is_first, is_last = steps[types.IS_FIRST], steps[types.IS_LAST]
    length = tf.shape(is_first)[0]
    index = tf.range(length)
    rows = [
        (index == 0) & ~is_first,
        (index > 0) & is_first,
        (index == length - 1) & ~is_last,
        (index < length - 1) & is_last,
        steps[types.IS_TERMINAL] & ~is_last,
    ]

    def _non_finite(x):
        return _any_per_step(~tf.math.is_finite(x)) if x.dtype.is_floating else index < 0

    rows += [_non_finite(x) for x in tree.flatten(steps[types.REWARD])]
    rows += [_non_finite(x) for x in tree.flatten(steps[types.DISCOUNT])]
    # NaN compares false both ways, so a NaN discount is reported once, as not finite.
    rows += [_any_per_step((x < 0) | (x > 1)) for x in tree.flatten(steps[types.DISCOUNT])]
    return tf.stack(rows)


def _step_shapes(steps: types.Nest) -> list[tf.Tensor]:
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
        shapes=tuple(_step_shapes(steps)),
    )


def find_episode_problems(
    episode_index: int, length: int, masks: np.ndarray, checks: list[_Check]
) -> list[Problem]:
    """Turns one episode's problem masks into `Problem` records (one per rule and field)."""
    if length == 0:
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
    episode_index: int, shapes: list[np.ndarray], reference: list[np.ndarray], names: list[str]
) -> list[Problem]:
    problems = []
    for name, shape, ref in zip(names, shapes, reference, strict=True):
        if not np.array_equal(shape, ref):
            hint = (
                f'{Rule.CONSISTENT_SHAPE.hint} (expected per-step shape {ref.tolist()}, '
                f'found {shape.tolist()})'
            )
            problems.append(Problem(episode_index, 0, name, Rule.CONSISTENT_SHAPE, hint, (0,)))
    return problems


def _leaf_names(step_spec: dict) -> list[str]:
    return ['.'.join(map(str, path)) for path, _ in tree.flatten_with_path(step_spec)]


def read_episodes(per_episode: tf.data.Dataset) -> Iterator[tuple[int, Any]]:
    """Yields (episode index, element), or the decoding error of an unreadable episode.

    A record that fails to decode (`InvalidArgumentError` from the parser or from slicing
    steps of uneven lengths) is one episode's problem and reading goes on; other read
    errors (corrupt files) end the walk.

    Args:
      per_episode: A dataset with one element per episode (for example summaries).
    """
    iterator = per_episode.as_numpy_iterator()
    for index in itertools.count():
        try:
            yield index, next(iterator)
        except StopIteration:
            return
        except tf.errors.InvalidArgumentError as e:
            yield index, e


def _unreadable_problem(episode_index: int, error: tf.errors.OpError) -> Problem:
    """Returns the problem of an episode that could not be decoded, naming TF's reason."""
    message = error.message.strip().splitlines()[0].split('}}')[-1].strip()
    key = _PARSER_KEY.search(message)
    field = key.group(1).replace('/', '.') if key else types.STEPS
    hint = f'{Rule.READABLE.hint} (TF: {message})'
    return Problem(episode_index, 0, field, Rule.READABLE, hint, (0,))


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
        self._names = _leaf_names(step_spec)
        self._reference = None

    def find_problems(
        self, episode_index: int, summary: EpisodeSummary | Exception
    ) -> list[Problem]:
        """Returns the episode's problems (empty when it is valid).

        Args:
          episode_index: The episode's index in the dataset.
          summary: The numpy `summarize_episode` of the episode, or the error raised while
            reading it (see `read_episodes`).
        """
        if isinstance(summary, Exception):
            return [_unreadable_problem(episode_index, summary)]
        length = int(summary.length)
        problems = find_episode_problems(episode_index, length, summary.masks, self.checks)
        if length and self._reference is None:
            self._reference = summary.shapes
        elif length:
            problems += _find_shape_problems(
                episode_index, summary.shapes, self._reference, self._names
            )
        return problems


def validate(
    episodes: tf.data.Dataset,
    *,
    on_invalid: types.ValidationMode | str = types.ValidationMode.RAISE,
    mode: types.ValidationMode | str | None = None,
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
      mode: The deprecated name of `on_invalid` (0.1); works until 0.3.

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
    mode = types.parse_on_invalid(on_invalid, mode=mode, function='validate')
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
        if problems:
            if mode is types.ValidationMode.RAISE:
                raise InvalidEpisodeError(index, problems)
            report.problems += problems
            report.invalid += 1
            report.invalid_episodes.append(index)
            continue
        report.valid += 1
        report.steps += int(summary.length)
        report.terminated += int(summary.terminal)
        report.truncated += int(not summary.terminal)
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


def _format_problems_in_graph(
    episode_index: tf.Tensor,
    masks: tf.Tensor,
    checks: list[_Check],
    episode_checks: list[tuple[tf.Tensor, str]],
) -> tf.Tensor:
    """Builds the problem text of `Problem.describe` in graph (first bad step per rule).

    Args:
      episode_index: The episode's index.
      masks: The `[num_checks, T]` masks of `compute_problem_masks`.
      checks: The checks, in mask row order.
      episode_checks: `(broken, text)` pairs for episode-level rules (empty, shape).
    """
    index_text = tf.strings.as_string(episode_index)
    parts = []
    for row, check in enumerate(checks):
        # The padding 0 keeps argmax defined for an empty episode (its rows are empty).
        padded = tf.concat([tf.cast(masks[row], tf.int32), [0]], axis=0)
        first_bad = tf.strings.as_string(tf.argmax(padded))
        text = tf.strings.join(
            [
                'episode ',
                index_text,
                ', step ',
                first_bad,
                f', field {check.field}, rule {check.rule.rule_id}: {check.rule.hint}',
            ]
        )
        parts.append(tf.where(tf.reduce_any(masks[row]), text, ''))
    for broken, text in episode_checks:
        parts.append(
            tf.where(broken, tf.strings.join(['episode ', index_text, ', step 0, ', text]), '')
        )
    parts = tf.stack(parts)
    joined = tf.strings.reduce_join(
        tf.boolean_mask(parts, tf.strings.length(parts) > 0), separator='; '
    )
    return tf.strings.join(
        [
            'Episode ',
            index_text,
            ' is invalid: ',
            joined,
            ". Fix the data, or pass on_invalid='skip' to drop invalid episodes whole.",
        ]
    )


def _shape_differs(shape: tf.Tensor, reference: np.ndarray) -> tf.Tensor:
    """Returns whether a per-step shape differs from the reference, ranks included."""
    same_rank = tf.equal(tf.size(shape), reference.size)
    return tf.cond(
        same_rank,
        lambda: tf.reduce_any(tf.not_equal(shape, reference)),
        lambda: tf.constant(True),
    )


def _compute_episode_ok(
    steps: types.Nest, checks: list[_Check], reference: tuple[list, list[str]] | None
) -> tuple[tf.Tensor, tf.Tensor, list[tuple[tf.Tensor, str]]]:
    """Returns (ok, masks, episode-level checks) for one episode."""
    masks = compute_problem_masks(steps)
    episode_checks = [
        (
            tf.equal(episodes_lib.episode_length(steps), 0),
            f'field {types.STEPS}, rule {Rule.NON_EMPTY.rule_id}: {Rule.NON_EMPTY.hint}',
        )
    ]
    if reference is not None:
        shapes, names = reference
        for shape, ref, name in zip(_step_shapes(steps), shapes, names, strict=True):
            episode_checks.append(
                (
                    _shape_differs(shape, ref),
                    f'field {name}, rule {Rule.CONSISTENT_SHAPE.rule_id}: '
                    f'{Rule.CONSISTENT_SHAPE.hint} (expected per-step shape {list(ref)})',
                )
            )
    ok = ~tf.reduce_any(masks)
    for broken, _ in episode_checks:
        ok &= ~broken
    return ok, masks, episode_checks


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
        return [s.numpy() for s in _step_shapes(steps)], _leaf_names(step_spec)
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

    def assert_valid(self, episode_index: tf.Tensor, steps: types.Nest) -> types.Nest:
        """Returns `steps`, failing with an `InvalidArgumentError` naming every problem first."""
        ok, masks, episode_checks = _compute_episode_ok(steps, self._checks, self._reference)
        message = tf.cond(
            ok,
            lambda: tf.constant(''),
            lambda: _format_problems_in_graph(episode_index, masks, self._checks, episode_checks),
        )
        with tf.control_dependencies([tf.debugging.Assert(ok, [message], summarize=1)]):
            return tf.nest.map_structure(tf.identity, steps)
