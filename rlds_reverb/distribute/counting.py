"""Stage 1 of the Beam push: count each shard group's episodes, decoding as few as it can.

Each worker scans its group's records (`builder.info.splits[split].file_instructions`)
from their bytes in bulk, decoding no step (`record_checks.summarize_records`: step counts
and the validation rules), and counts their items from their lengths. Only episodes the
scan finds invalid or cannot decide are decoded here, so a valid episode is decoded once
in the whole pipeline, by its writer. Invalid episodes raise (`on_invalid='raise'`:
before anything is written, as the writers wait for every count) or are counted and
dropped (`'skip'`).
"""

from __future__ import annotations

import os

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.check import record_checks, validation
from rlds_reverb.core import errors, specs, types
from rlds_reverb.distribute import job as job_lib
from rlds_reverb.distribute import routing
from rlds_reverb.read import loading, records
from rlds_reverb.transform import items as items_lib
from rlds_reverb.transform.plans import summarize_episodes

# Helpers of `rlds_reverb.distribute` only.
__all__: list[str] = []

# Records the count stage scans at a time: the parser's per-call cost vanishes, memory stays
# flat in the dataset's size.
_SCAN_RECORDS = 64


class CountShard(beam.DoFn):
    """Counts one shard group's episodes: steps, items, valid or not (`_count_range`)."""

    def __init__(self, job: job_lib.BeamJob):
        self._job = job

    def process(self, element: routing.ShardRange):
        """Yields a `job.CountedEpisode` per episode of the shard group, in order."""
        shard = element
        try:
            yield from _count_range(self._job, shard)
        except Exception as e:
            last = shard.first + shard.count - 1
            raise RuntimeError(
                f'{job_lib.WORKER_ERROR}Reading shard {shard.filename} (episodes {shard.first}..'
                f'{last}) failed: {job_lib.describe_in_one_line(e)} Nothing was written '
                '(writers start after every episode is counted).'
            ) from e


def _count_range(job: job_lib.BeamJob, shard: routing.ShardRange):
    """Yields a `job.CountedEpisode` per episode of `shard`, in order, decoding as few as it can.

    The records are scanned from their bytes in bulk (`record_checks.summarize_records`:
    step counts and the rules on flags, rewards and discounts, no step decoded); the item
    counts follow from the step counts. Only the episodes the scan finds invalid, or cannot
    decide, are decoded here, by runs of neighbours, to decide and name their problems
    exactly as `validate` does; so a valid episode is decoded once in the whole pipeline,
    by its writer. A dataset the scan cannot read (encoded step fields such as images,
    per-step shapes that vary, item kinds of one's own, unreadable shards) is decoded here
    whole, as `_count_decoded` does.
    """
    episodes = job_lib.read_range(job, shard.first, shard.count)  # Not read: the step spec.
    step_spec = specs.get_step_spec(episodes)
    checker = validation.EpisodeChecker(step_spec)
    scanned = _scan_range(job, shard, step_spec)
    items = None if scanned is None else count_items_by_length(job.item, scanned[0], step_spec)
    if scanned is None or items is None:
        yield from _count_decoded(job, episodes, shard.first, checker)
        return
    lengths, clean = scanned
    local = 0
    while local < shard.count:
        if not clean[local]:  # A run of undecided neighbours, decoded together.
            end = local + int(np.argmax(np.append(clean[local:], True)))
            first = shard.first + local
            undecided = job_lib.read_range(job, first, end - local)
            yield from _count_decoded(job, undecided, first, validation.EpisodeChecker(step_spec))
            local = end
            continue
        index, length = shard.first + local, int(lengths[local])
        _check_length(job, index, length)
        yield job_lib.CountedEpisode(index, length, int(items[local]), valid=True)
        local += 1


def _check_length(job: job_lib.BeamJob, index: int, length: int) -> None:
    reason = job.item.describe_length_problem(length)
    if reason:
        raise errors.EpisodeTooLongError(
            f'Episode {index}: {reason}.', episodes_written=0, items_written=0
        )


def _count_decoded(job: job_lib.BeamJob, episodes: tf.data.Dataset, first: int, checker):
    """Yields a `job.CountedEpisode` per episode of `episodes` (from index `first`), decoded.

    Invalid episodes raise (`on_invalid='raise'`) or are counted as skipped.
    """
    counted = summarize_episodes(episodes, job.item)
    for local, element in validation.read_episodes(counted):
        job_lib.count_read(job_lib.DECODED_TO_COUNT, 1)
        index = first + local
        summary, count = (
            (element, 0) if isinstance(element, validation.UnreadableEpisode) else element
        )
        problems = checker.find_problems(index, summary)
        if problems or isinstance(summary, validation.UnreadableEpisode):
            if job.options.on_invalid is types.ValidationMode.RAISE:
                raise errors.InvalidEpisodeError(index, problems)
            length = 0 if isinstance(summary, validation.UnreadableEpisode) else summary.length
            yield job_lib.CountedEpisode(index, int(length), 0, valid=False)
            continue
        _check_length(job, index, int(summary.length))
        yield job_lib.CountedEpisode(index, int(summary.length), int(count), valid=True)


def _scan_range(
    job: job_lib.BeamJob, shard: routing.ShardRange, step_spec: dict
) -> tuple[np.ndarray, np.ndarray] | None:
    """Returns (steps, certainly valid) per episode of `shard`, from the records' bytes.

    None when the records cannot be scanned (see `_count_range`): the caller decodes them.
    """
    builder = loading.open_builder(job.dataset_dir)
    serialized_steps = builder.info.features[types.STEPS].get_serialized_info()
    plan = record_checks.plan_record_checks(serialized_steps, step_spec)
    if plan is None:
        return None
    split = f'{job.split}[{shard.first}:{shard.first + shard.count}]'
    instructions = builder.info.splits[split].file_instructions
    source = records.RecordSource(
        tuple((os.fspath(i.filename), int(i.skip), int(i.take)) for i in instructions),
        serialized_steps,
    )
    lengths, clean = [], []
    try:
        for batch in records.read_serialized_batches(source, batch_records=_SCAN_RECORDS):
            job_lib.count_read(job_lib.RECORDS_SCANNED, len(batch))
            summary = record_checks.summarize_records(batch, plan)
            lengths.append(summary.lengths)
            clean.append(summary.clean)
    except (tf.errors.OpError, ValueError):
        return None  # Decoding names the shard, record and field.
    if sum(len(c) for c in clean) != shard.count:
        return None
    return np.concatenate(lengths), np.concatenate(clean)


def count_items_by_length(
    item: items_lib.ItemKind, lengths: np.ndarray, step_spec: dict
) -> np.ndarray | None:
    """Returns each episode's item count from its step count, or None if that cannot say.

    The item kinds of `rlds_reverb.items` place their windows by the episode's length
    alone (`compute_windows`), so one traced call per distinct length counts them; an
    item kind of one's own may look at the data, and is counted from decoded episodes.
    """
    kind = type(item)
    if kind.__module__ != items_lib.__name__ or (
        kind.prepare_episodes is not items_lib.ItemKind.prepare_episodes
    ):
        return None
    signature = tree.map_structure(lambda s: tf.TensorSpec([None, *s.shape], s.dtype), step_spec)
    count = tf.function(
        lambda steps: tf.size(item.compute_windows(steps)[0]),
        input_signature=[signature],
        autograph=False,
    )

    def _count_for(length: int) -> int:
        steps = tree.map_structure(lambda s: tf.zeros([length, *s.shape], s.dtype), step_spec)
        return int(count(steps))

    distinct, where = np.unique(lengths, return_inverse=True)
    per_length = np.array([_count_for(n) for n in distinct.tolist()], dtype=np.int64)
    return per_length[where].reshape(-1)
