"""Dataset statistics with Apache Beam: the single-process pass, split by shards and merged.

`compute_statistics_with_beam` computes what `rlds_reverb.check.statistics.compute_statistics`
computes, for a TFDS split too large for one process. Its stages:

1. **Read** (`ReadShardTotals`; parallel by groups of neighbouring shard files, two per
   worker, `routing.group_shard_ranges`): each worker reads its group as a split slice
   (the toolkit's fast record reader) and folds every episode into running totals, as the
   single-process pass does (`statistics.read_totals`): moments per field and dimension,
   and a quantile sketch.
2. **Merge** (`StatisticsCombineFn`, a `beam.CombineFn`): the totals of the groups merge
   with Chan et al.'s pairwise formulas and the sketch's level-by-level merge, in any order
   and grouping Beam chooses (combiner lifting included). Counts, minima and maxima equal
   the single pass's exactly, means and standard deviations to float64 rounding, quantiles
   exactly while below the sketch's capacity and within their stated rank bound beyond it
   (`rlds_reverb.check.quantile_sketch`).
3. **Write**: the statistics, with the data's fingerprint, to the statistics file
   (`statistics_files`: beside `dataset_info.json` unless `path` is given), which the
   driver reads back. A file that is current (its fingerprint matches) is returned without
   running the pipeline, as `ensure_statistics` does.

The dataset and the statistics file must be on a file system every worker and the driver
share (a local disk for the DirectRunner).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from rlds_reverb.check import statistics as statistics_lib
from rlds_reverb.check import statistics_files
from rlds_reverb.check.statistics import DatasetStatistics, StatisticsOptions
from rlds_reverb.check.statistics_fields import StatisticsTotals
from rlds_reverb.core import specs
from rlds_reverb.distribute import routing, runner
from rlds_reverb.read import loading

__all__ = [
    'StatisticsCombineFn',
    'compute_statistics_with_beam',
]

# Shard groups per worker, as the push's count stage (`pipeline._GROUPS_PER_WORKER`).
_GROUPS_PER_WORKER = 2


def _read_slice(dataset_dir: str, split: str, first: int, count: int):
    return loading.load(dataset_dir, split=f'{split}[{first}:{first + count}]', check_files=False)


class ReadShardTotals(beam.DoFn):
    """Reads one shard group and yields its `StatisticsTotals` (one element per group).

    Args:
      dataset_dir: The TFDS dataset directory.
      split: The split (a name, no slice).
      options: What to compute.
    """

    def __init__(self, dataset_dir: str, split: str, options: StatisticsOptions):
        self._dataset_dir = dataset_dir
        self._split = split
        self._options = options

    def process(self, element: routing.ShardRange) -> Iterable[StatisticsTotals]:
        """Yields the totals of the group's episodes."""
        episodes = _read_slice(self._dataset_dir, self._split, element.first, element.count)
        totals = statistics_lib.start_totals(specs.get_step_spec(episodes), self._options)
        statistics_lib.read_totals(episodes, totals)
        yield totals


class StatisticsCombineFn(beam.CombineFn):
    """Merges `StatisticsTotals` (of shard groups) into one dataset's `DatasetStatistics`.

    Inputs are totals (`check.statistics_fields.StatisticsTotals`) of the same fields and
    options; merging is exact for counts, extremes and sketches, and Chan et al.'s pairwise
    formulas for means and variances, so Beam may merge them in any order and grouping.

    Args:
      totals: Empty totals of the fields (what `create_accumulator` copies).
      options: What is computed (the quantile levels `extract_output` reads).

    Example:
      >>> merged = totals | beam.CombineGlobally(StatisticsCombineFn(empty, options))
    """

    def __init__(self, totals: StatisticsTotals, options: StatisticsOptions):
        self._empty = totals
        self._options = options

    def create_accumulator(self) -> StatisticsTotals:
        """Returns empty totals."""
        return StatisticsTotals(
            self._empty.plans, self._empty.skipped, capacity=self._options.sketch_capacity
        )

    def add_input(
        self, mutable_accumulator: StatisticsTotals, element: StatisticsTotals
    ) -> StatisticsTotals:
        """Merges one group's totals in."""
        mutable_accumulator.merge(element)
        return mutable_accumulator

    def merge_accumulators(self, accumulators: Iterable[StatisticsTotals]) -> StatisticsTotals:
        """Merges several partial totals into the first."""
        merged = None
        for accumulator in accumulators:
            if merged is None:
                merged = accumulator
            else:
                merged.merge(accumulator)
        return merged if merged is not None else self.create_accumulator()

    def extract_output(self, accumulator: StatisticsTotals) -> DatasetStatistics:
        """Returns the statistics of the merged totals."""
        return statistics_lib.finish_statistics(accumulator, self._options)


def _save(found: DatasetStatistics, located: statistics_files.StatisticsFile) -> str:
    located.save(found)
    return str(located.path)


def compute_statistics_with_beam(
    source: str | os.PathLike,
    *,
    split: str = 'train',
    data_dir: Any = None,
    path: str | os.PathLike | None = None,
    refresh: bool = False,
    fields: Sequence[str] | None = None,
    quantiles: Sequence[float] = statistics_lib.DEFAULT_QUANTILES,
    sketch_capacity: int = statistics_lib.DEFAULT_SKETCH_CAPACITY,
    pipeline_options: PipelineOptions | Sequence[str] | None = None,
) -> DatasetStatistics:
    """Computes a TFDS split's statistics with Apache Beam, saves and returns them.

    The same statistics as `ensure_statistics` (and `compute_statistics`) gives, computed by
    shard groups in parallel and merged (module docstring); saved statistics whose
    fingerprint matches are returned without running the pipeline.

    Args:
      source: A TFDS dataset directory (or the parent of its versions), or a TFDS name.
      split: A split name (no slice: the pipeline reads whole shards).
      data_dir: Where a TFDS name is looked up.
      path: The statistics file; by default beside `dataset_info.json`.
      refresh: Compute even when the saved statistics match.
      fields: As for `compute_statistics`.
      quantiles: As for `compute_statistics`.
      sketch_capacity: As for `compute_statistics`.
      pipeline_options: Beam's options (a `PipelineOptions` or command-line flags); the
        DirectRunner when None.

    Returns:
      The `DatasetStatistics`, with the data's `fingerprint` (`reused` when the saved ones
      matched).

    Raises:
      SourceNotFoundError: If the source does not exist.
      SourceError: If it is not a prepared TFDS dataset.
      SpecMismatchError: If `fields` names a missing or non-numeric field.
      ValueError: If `split` is sliced or not a split, or an option is not valid.
      OSError: If the statistics file cannot be written (checked before the pipeline runs).

    Example:
      >>> statistics = compute_statistics_with_beam(
      ...     '/data/fractal/0.1.0', pipeline_options=['--runner=DirectRunner',
      ...                                              '--direct_num_workers=4'])
    """
    options = StatisticsOptions(fields=fields, quantiles=quantiles, sketch_capacity=sketch_capacity)
    builder = loading.open_builder(source, data_dir=data_dir)
    ranges = routing.list_shard_ranges(builder, split)  # Refuses slices and unknown splits.
    dataset_dir = os.fspath(builder.data_dir)
    located = statistics_files.locate_statistics(
        dataset_dir, split=split, data_dir=None, path=path, options=options
    )
    saved = None if refresh else located.read_if_current()
    if saved is not None:
        return saved
    located.check_writable()
    empty = statistics_lib.start_totals(
        specs.get_step_spec(loading.load(dataset_dir, split=split)), options
    )
    beam_options = runner.make_pipeline_options(pipeline_options)
    groups = routing.group_shard_ranges(
        ranges, runner.count_workers(beam_options) * _GROUPS_PER_WORKER
    )
    pipeline = beam.Pipeline(runner=runner._make_runner(beam_options), options=beam_options)
    _ = (
        pipeline
        | 'Shard groups' >> beam.Create(groups)
        | 'Spread groups' >> beam.Reshuffle()
        | 'Read' >> beam.ParDo(ReadShardTotals(dataset_dir, split, options))
        | 'Merge' >> beam.CombineGlobally(StatisticsCombineFn(empty, options))
        | 'Write' >> beam.Map(_save, located)
    )
    pipeline.run().wait_until_finish()
    return statistics_files.read_statistics(located.path)
