"""A dataset report (`rlds-reverb report`): every figure gathered in one pass over the episodes.

`compute_report` walks an RLDS dataset once, one whole episode at a time. A single `tf.data`
map reduces each episode to small tensors: the summary `rlds-reverb info` uses
(`stats.summarize_episode`), the one validation uses (`validation.summarize_episode`), per
step field its minimum, maximum, sum and NaN count, the actions, the first and last frame of
image fields and the distinct values of string fields. Python then folds those into running
totals, exact histograms of fixed size (`StreamingHistogram`) and a few kept samples, so
memory does not grow with the number of steps (per episode, only its length and return
are kept, as `info` keeps them).

So the key figures are `info`'s (`DatasetStats`, from `summary.summarize_episodes`), the
validation table is `validate(..., on_invalid='report')`'s and the per-dimension statistics
`compute_statistics`', without reading the data twice.
`report_html.write_report` renders the figures as one self-contained HTML page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from rlds_reverb.check import statistics as statistics_lib
from rlds_reverb.check import summary, validation
from rlds_reverb.check.histogram import StreamingHistogram
from rlds_reverb.check.report_fields import EpisodeFields, flatten_fields
from rlds_reverb.check.summary import DatasetStats
from rlds_reverb.check.validation import ValidationReport
from rlds_reverb.core import checks, specs, types
from rlds_reverb.core import episodes as episodes_lib

__all__ = [
    'ActionDistribution',
    'DatasetReport',
    'FieldSummary',
    'FrameSample',
    'compute_report',
]

# A discrete action dimension with more distinct values than this is shown as a histogram.
MAX_CATEGORIES = 32
# How many distinct values of a string field are counted before counting stops.
MAX_DISTINCT_COUNTED = 10_000
# The statistics a report shows: every numeric step field, q01 and q99.
_STATISTICS = statistics_lib.StatisticsOptions()


@dataclasses.dataclass
class FieldSummary:
    """One step field (or episode metadata field), over every step (or episode).

    Attributes:
      name: The field's path, `.`-separated (`observation.image`).
      dtype: The dtype's name.
      shape: The shape of one step's (one episode's) value; None for a dimension (or a
        rank) the spec leaves open.
      count: How many values (elements) were seen, NaN included.
      nan_count: How many of them are NaN.
      minimum: The smallest value, NaN left out (None for strings, or no value).
      maximum: The largest value, NaN left out.
      mean: The mean of the values, NaN left out (booleans count as 0 and 1).
      samples: String fields: a few distinct values, decoded as UTF-8 (bad bytes replaced).
      distinct: String fields: how many distinct values (counting stops at
        `MAX_DISTINCT_COUNTED`; then `distinct_capped`).
      distinct_capped: Whether counting distinct values stopped.
    """

    name: str
    dtype: str
    shape: tuple | None
    count: int = 0
    nan_count: int = 0
    minimum: float | None = None
    maximum: float | None = None
    mean: float | None = None
    samples: list[str] = dataclasses.field(default_factory=list)
    distinct: int | None = None
    distinct_capped: bool = False

    @property
    def is_string(self) -> bool:
        """Whether the field holds strings."""
        return self.dtype == 'string'


@dataclasses.dataclass
class ActionDistribution:
    """The distribution of one action field, per dimension (the field's elements, flattened).

    Attributes:
      name: The action field's path (`action`, or `action.arm` in a nested action).
      dims: A label per dimension (`action`, or `action[0]`, `action[1]`, ...).
      categories: Per dimension, value -> count, when the actions are integers or booleans
        with at most `MAX_CATEGORIES` distinct values in every dimension; else None.
      histograms: Per dimension, (edges, counts) of a `StreamingHistogram` (empty for a
        dimension with no finite value).
    """

    name: str
    dims: list[str]
    categories: list[dict[Any, int]] | None
    histograms: list[tuple[np.ndarray, np.ndarray]]

    @property
    def discrete(self) -> bool:
        """Whether the distribution is shown as bars of values (else as histograms)."""
        return self.categories is not None


@dataclasses.dataclass
class FrameSample:
    """The first and last frame of one episode's image field (uint8 `[H, W, C]`)."""

    field: str
    episode: int
    first: np.ndarray
    last: np.ndarray


@dataclasses.dataclass
class DatasetReport:
    """What `compute_report` found.

    Attributes:
      title: The page's title (the source, for the command line).
      stats: Episodes, steps, endings, lengths and returns: `rlds-reverb info`'s figures.
      validation: The validation report, as `validate(..., on_invalid='report')` gives it.
      step_fields: A summary per step field, in the spec's order.
      metadata_fields: A summary per episode-level field (episode metadata).
      actions: The distribution of each action field.
      frames: The first and last frames of the first few episodes, per image field.
      unreadable: The indices of episodes that did not decode (in `validation`, and left
        out of every figure).
      statistics: Per numeric field and dimension, as `compute_statistics` gives them.
    """

    title: str
    stats: DatasetStats
    validation: ValidationReport
    step_fields: list[FieldSummary]
    metadata_fields: list[FieldSummary]
    actions: list[ActionDistribution]
    frames: list[FrameSample]
    unreadable: list[int] = dataclasses.field(default_factory=list)
    statistics: statistics_lib.DatasetStatistics | None = None


class _FieldTotals:
    """Running totals of one field: numeric reductions, or distinct strings and samples."""

    def __init__(self, name: str, dtype: str, shape: tuple | None, samples: int):
        self.summary = FieldSummary(name, dtype, shape)
        self._samples = samples
        self._sum = 0.0
        self._seen: set[bytes] = set()

    def add_reduced(self, reduced: Mapping[str, np.ndarray | float]) -> None:
        """Adds one episode's `report_fields.reduce_numeric` output."""
        found = self.summary
        found.count += int(reduced['size'])
        found.nan_count += int(reduced['nan'])
        if int(reduced['size']) > int(reduced['nan']):
            low, high = float(reduced['min']), float(reduced['max'])
            found.minimum = low if found.minimum is None else min(found.minimum, low)
            found.maximum = high if found.maximum is None else max(found.maximum, high)
            self._sum += float(reduced['sum'])

    def add_values(self, values: np.ndarray) -> None:
        """Adds values (metadata of one episode), numeric or strings."""
        if self.summary.is_string:
            self.add_strings(np.asarray(values, object).reshape(-1))
            return
        values = np.asarray(values, np.float64).reshape(-1)
        nan = np.isnan(values)
        kept = values[~nan]
        self.add_reduced(
            {
                'size': values.size,
                'nan': int(nan.sum()),
                'min': kept.min() if kept.size else np.inf,
                'max': kept.max() if kept.size else -np.inf,
                'sum': kept.sum(),
            }
        )

    def add_strings(self, distinct: np.ndarray) -> None:
        """Adds the distinct string values of one episode."""
        found = self.summary
        found.count += len(distinct)
        for value in distinct:
            value = bytes(value)
            if value in self._seen:
                continue
            if len(self._seen) >= MAX_DISTINCT_COUNTED:
                found.distinct_capped = True
                break
            self._seen.add(value)
            if len(found.samples) < self._samples:
                found.samples.append(value.decode('utf-8', errors='replace'))

    def finish(self) -> FieldSummary:
        found = self.summary
        if found.is_string:
            found.distinct = len(self._seen)
            # Strings' count is of distinct values per episode; it is not shown.
            found.count = 0
        elif found.minimum is not None:
            found.mean = self._sum / (found.count - found.nan_count)
        return found


class _ActionTotals:
    """Running counts (discrete actions) and streaming histograms of one action field."""

    def __init__(self, name: str, spec: tf.TensorSpec):
        size = int(np.prod(spec.shape.as_list(), dtype=np.int64))
        self.name = name
        self.dims = (
            [name] if spec.shape.rank == 0 else [f'{name}[{i}]' for i in range(max(size, 1))]
        )
        self._discrete = spec.dtype.is_integer or spec.dtype == tf.bool
        self._categories: list[dict] | None = [{} for _ in self.dims] if self._discrete else None
        self._histogram = StreamingHistogram(max(size, 1))
        self._size = size

    def add(self, actions: np.ndarray) -> None:
        """Adds one episode's actions, `[T, D]`."""
        if not self._size or not len(actions):
            return
        self._histogram.add(actions)
        if self._categories is None:
            return
        for dim, counts in enumerate(self._categories):
            values, found = np.unique(actions[:, dim], return_counts=True)
            for value, count in zip(values.tolist(), found.tolist(), strict=True):
                counts[value] = counts.get(value, 0) + count
            if len(counts) > MAX_CATEGORIES:
                self._categories = None
                return

    def finish(self) -> ActionDistribution:
        categories = self._categories
        if categories is not None:
            categories = [dict(sorted(c.items())) for c in categories]
        histograms = [self._histogram.bins(d) for d in range(len(self.dims))] if self._size else []
        return ActionDistribution(self.name, self.dims, categories, histograms)


def _iterate_summaries(
    episodes: tf.data.Dataset, fields: EpisodeFields
) -> Iterator[tuple[int, dict[str, Any] | validation.UnreadableEpisode]]:
    per_episode = episodes_lib.to_whole_episodes(episodes).map(
        episodes_lib.without_autograph(fields.summarize),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return validation.read_episodes(per_episode)


def _shape_of(spec: tf.TensorSpec) -> tuple | None:
    """The per-step shape (None for a dimension the spec leaves open; None for any rank)."""
    return None if spec.shape.rank is None else tuple(spec.shape.as_list())


def _make_field_totals(specs_by_name: dict[str, Any], samples: int) -> dict[str, _FieldTotals]:
    return {
        name: _FieldTotals(name, spec.dtype.name, _shape_of(spec), samples)
        for name, spec in specs_by_name.items()
    }


class _ReportTotals:
    """Every figure of a report so far, each episode's summary folded in as it is read."""

    def __init__(
        self, episodes: tf.data.Dataset, step_spec: dict, *, frame_episodes: int, samples: int
    ):
        self.checker = validation.EpisodeChecker(step_spec)
        self.fields = EpisodeFields(step_spec, episodes_lib.find_frame_formats(episodes))
        self.step_spec = step_spec
        self.frame_episodes = frame_episodes
        # An encoded frame field is summarized as the frames it decodes to (no figures).
        decoded = {n: tf.TensorSpec(f.shape, tf.uint8) for n, f in self.fields.encoded.items()}
        self.step_totals = _make_field_totals({**self.fields.specs, **decoded}, samples)
        metadata = {k: v for k, v in episodes.element_spec.items() if k != types.STEPS}
        self.metadata_totals = _make_field_totals(flatten_fields(metadata), samples)
        self.actions = {n: _ActionTotals(n, self.fields.specs[n]) for n in self.fields.actions}
        self.statistics = statistics_lib.start_totals(step_spec, _STATISTICS)
        self.validation = ValidationReport()
        self.lengths: list[int] = []
        self.terminal: list[bool] = []
        self.finished: list[bool] = []
        self.returns: list[float] = []
        self.frames: list[FrameSample] = []
        self.unreadable: list[int] = []

    def add_validation(self, index: int, found: dict | validation.UnreadableEpisode) -> None:
        """Counts the episode as `validate`'s walk in 'report' mode counts it."""
        checked = found if isinstance(found, validation.UnreadableEpisode) else found['validation']
        problems = self.checker.find_problems(index, checked)
        validation.count_episode(self.validation, index, problems, checked)

    def add_figures(self, index: int, found: dict[str, Any]) -> None:
        """Folds a readable episode's summary into every other figure."""
        info = found['info']
        self.lengths.append(int(info['length']))
        self.terminal.append(bool(info['terminal']))
        self.finished.append(bool(info['finished']))
        self.returns.append(float(info['return']))
        for name, reduced in found['numeric'].items():
            self.step_totals[name].add_reduced(reduced)
        for name, distinct in found['strings'].items():
            self.step_totals[name].add_strings(distinct)
        for name, values in flatten_fields(found['metadata']).items():
            self.metadata_totals[name].add_values(values)
        for name, values in found['actions'].items():
            self.actions[name].add(values)
        self.statistics.add_reduction(found['statistics'])
        if index < self.frame_episodes:
            self.frames += [
                FrameSample(name, index, pair[0], pair[-1])
                for name, pair in found['frames'].items()
                if len(pair)
            ]

    def finish(self, title: str) -> DatasetReport:
        """Returns the report of every episode folded in."""
        return DatasetReport(
            title=title,
            stats=summary.summarize_episodes(
                self.lengths, self.terminal, self.finished, self.returns, step_spec=self.step_spec
            ),
            validation=self.validation,
            step_fields=[totals.finish() for totals in self.step_totals.values()],
            metadata_fields=[totals.finish() for totals in self.metadata_totals.values()],
            actions=[totals.finish() for totals in self.actions.values()],
            frames=sorted(self.frames, key=lambda f: (f.field, f.episode)),
            unreadable=self.unreadable,
            statistics=statistics_lib.finish_statistics(self.statistics, _STATISTICS),
        )


def compute_report(
    episodes: tf.data.Dataset,
    *,
    title: str = 'RLDS dataset',
    frame_episodes: int = 4,
    string_samples: int = 8,
    progress: types.EpisodeProgressFn | None = None,
) -> DatasetReport:
    """Walks an RLDS dataset once and gathers every figure of its report.

    The key figures are `rlds-reverb info`'s (`DatasetStats`); the validation report is
    what `validate(episodes, on_invalid='report')` returns. An episode that does not decode
    is a validation problem (rule `readable`) and is left out of the other figures.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`), as `rlds_reverb.load` gives.
      title: The report's title.
      frame_episodes: Of how many episodes (the first ones) to keep the first and last frame
        of each image field (uint8 `[H, W, C]` step fields, C in 1, 3, 4).
      string_samples: How many distinct values of each string field to keep.
      progress: Optional `fn(episodes, steps)`, called after each episode (1, its steps).

    Returns:
      A `DatasetReport`.

    Raises:
      SourceError: If the dataset holds no RLDS steps.
      SpecMismatchError: If required step fields are missing, flags are not bool, or
        rewards and discounts are not numeric.
      ValueError: If `frame_episodes` or `string_samples` is not an integer >= 0.

    Example:
      >>> found = compute_report(rlds_reverb.load(path))
      >>> found.stats.episodes, found.validation.ok
    """
    frame_episodes = checks.check_int_at_least(frame_episodes, 0, argument='frame_episodes')
    string_samples = checks.check_int_at_least(string_samples, 0, argument='string_samples')
    totals = _ReportTotals(
        episodes,
        specs.get_step_spec(episodes),
        frame_episodes=frame_episodes,
        samples=string_samples,
    )
    for index, found in _iterate_summaries(episodes, totals.fields):
        totals.add_validation(index, found)
        if isinstance(found, validation.UnreadableEpisode):
            totals.unreadable.append(index)
            continue
        totals.add_figures(index, found)
        if progress is not None:
            progress(1, totals.lengths[-1])
    return totals.finish(title)
