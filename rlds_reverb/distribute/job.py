"""What the stages of the Beam push share: the job every worker gets, and how each reads.

`BeamJob` holds everything a worker needs (pickled to every worker); `read_range` reads an
index range of the split the same way in every stage, so the count and the writers see the
same episode under the same index (`rlds_reverb.distribute.pipeline`); the Beam counters of
what the stages read (`results.ReadCounts`) and the writers' result files are named here.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf
import tensorflow_datasets as tfds
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import Metrics

from rlds_reverb.read import loading
from rlds_reverb.transform import items as items_lib
from rlds_reverb.write import options as options_lib

# Helpers of `rlds_reverb.distribute` only.
__all__: list[str] = []

# What a worker's error starts with, so that the driver finds it in the runner's traceback.
WORKER_ERROR = '[rlds-reverb worker] '
# The Beam counters of what the stages read (`results.ReadCounts`).
METRICS_NAMESPACE = 'rlds_reverb'
RECORDS_SCANNED = 'records_scanned'
DECODED_TO_COUNT = 'episodes_decoded_to_count'
DECODED_TO_WRITE = 'episodes_decoded_to_write'


@dataclasses.dataclass(frozen=True)
class BeamJob:
    """Everything a worker needs (pickled to every worker)."""

    dataset_dir: str
    split: str
    servers: tuple[str, ...]
    table: str
    options: options_lib.PushOptions
    result_dir: str
    step_spec: dict  # Of the episodes as written (with carried fields).

    @property
    def item(self) -> items_lib.ItemKind:
        """The item kind written."""
        return self.options.item


@dataclasses.dataclass
class CountedEpisode:
    """One counted episode on its way to its server (only metadata crosses the shuffle)."""

    index: int
    length: int
    num_items: int
    valid: bool


def count_read(name: str, value: int) -> None:
    """Adds `value` to the Beam counter `name` (`results.ReadCounts`)."""
    Metrics.counter(METRICS_NAMESPACE, name).inc(value)


def read_range(job: BeamJob, first: int, count: int) -> tf.data.Dataset:
    """Returns the split's episodes `first..first+count-1` (shard order), as every stage reads.

    A split slice reads the shards it spans one after the other (interleave cycle of 1),
    so the i-th episode read is episode `first + i` whatever the dataset's shuffling
    setting. No autocache: memory stays flat in the dataset's size.
    """
    return loading.load(
        job.dataset_dir,
        split=f'{job.split}[{first}:{first + count}]',
        check_files=False,
        read_config=tfds.ReadConfig(interleave_cycle_length=1, try_autocache=False),
    )


def describe_in_one_line(error: BaseException | str) -> str:
    """Returns the error's message on one line, ending with a full stop."""
    text = ' '.join(str(error).split())
    return text if text.endswith(('.', '?', '!')) else text + '.'


def result_path(result_dir: str, position: int) -> str:
    """Returns where the writer of the server at `position` leaves its counts."""
    return FileSystems.join(result_dir, f'server-{position:05d}.json')
