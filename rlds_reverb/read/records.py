"""Reads a TFDS split's TFRecord shards straight into whole-episode tensors, in one map.

`tfds.core.DatasetBuilder.as_dataset` builds a general pipeline: its own interleave, a
parse-and-decode map, an optional in-memory cache, a cardinality assertion and a prefetch.
`load` then adds its own map that decodes each episode's steps as a batch. With pure-Python
protobuf (pinned by tensorflow-metadata), every traced graph node costs set-up time, and on
200,000 steps the two maps' set-up cost more than reading the data.

This reader builds the same episodes with one interleave and one map: the same shards, in
the same order (TFDS' file instructions, interleave cycle and block lengths), parsed with
TFDS' own `ExampleParser` restricted to the selected step fields (fields left out are never
parsed), episode-level features decoded by their TFDS features, steps decoded as a batch.
It serves the default read (no `read_config`, no file shuffling) of TFRecord datasets;
`load` falls back to `as_dataset` otherwise.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import weakref
from collections.abc import Callable, Iterator

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow.python.lib.io import tf_record
from tensorflow.python.util import deprecation
from tensorflow_datasets.core import example_parser

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

# TFDS' default interleave of shards (`tfds.ReadConfig`): 16 shards at a time, 16 records
# from each in turn; 1 shard at a time when the dataset's order is fixed.
_CYCLE_LENGTH = 16
_BLOCK_LENGTH = 16


@dataclasses.dataclass(frozen=True)
class RecordSource:
    """Where the episodes `read_episode_records` returned come from, for bulk readers.

    Fields:
      file_instructions: (shard path, records to skip, records to take) of the split, in
        TFDS' order of shards.
      serialized_steps: The serialized info of the selected step fields.
    """

    file_instructions: tuple[tuple[str, int, int], ...]
    serialized_steps: dict


# Weak keys: a source is remembered as long as the dataset read from it lives.
_SOURCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def find_record_source(episodes: tf.data.Dataset) -> RecordSource | None:
    """Returns the records `episodes` reads, if `read_episode_records` returned it, or None."""
    return _SOURCES.get(episodes)


def read_serialized_batches(source: RecordSource, *, batch_records: int) -> Iterator[list[bytes]]:
    """Yields the source's serialized episodes, at most `batch_records` at a time.

    Shard by shard, without `tf.data` (nothing to trace): the episodes come in the order of
    the shards, not in the interleaved order of the dataset. Each record's checksum is
    verified as it is read.

    Args:
      source: The records to read.
      batch_records: The most records per batch (bounds memory).

    Raises:
      tf.errors.DataLossError: If a shard is truncated or corrupt.
      tf.errors.NotFoundError: If a shard is missing.
    """
    batch = []
    for path, skip, take in source.file_instructions:
        with deprecation.silence():  # tf_record_iterator is TF1's, and warns once.
            records = tf_record.tf_record_iterator(path)
        stop = None if take < 0 else skip + take  # A negative take reads to the end.
        for record in itertools.islice(records, skip, stop):
            batch.append(record)
            if len(batch) == batch_records:
                yield batch
                batch = []
    if batch:
        yield batch


def can_read_records(
    builder: tfds.core.DatasetBuilder,
    *,
    shuffle_files: bool,
    read_config: tfds.ReadConfig | None,
) -> bool:
    """Returns whether `read_episode_records` reads this dataset as `as_dataset` would.

    Args:
      builder: The dataset's builder.
      shuffle_files: Whether the caller asked for shuffled shards (not served here).
      read_config: The caller's TFDS read options (not served here: any read config).
    """
    file_format = builder.info.file_format
    return (
        read_config is None
        and not shuffle_files
        and (file_format is None or file_format == tfds.core.FileFormat.TFRECORD)
    )


def read_episode_records(
    builder: tfds.core.DatasetBuilder,
    *,
    split: str,
    serialized_steps: dict,
    decode_steps: Callable[[dict], dict],
) -> tf.data.Dataset:
    """Returns the split's episodes: episode-level features decoded, steps by `decode_steps`.

    Args:
      builder: A prepared TFDS builder of an RLDS dataset (TFRecord shards).
      split: The split, with TFDS' slicing syntax.
      serialized_steps: The serialized info (`get_serialized_info()`) of the step fields to
        parse, pruned to the selected fields.
      decode_steps: Called in graph with the parsed (still encoded) steps; returns the
        episode's `steps` as whole `[T, ...]` tensors.

    Returns:
      A dataset of episode dicts, in the order `builder.as_dataset(split=split)` gives.

    Raises:
      ValueError, KeyError, AssertionError: From TFDS, if the split cannot be resolved.
    """
    info = builder.info
    instructions = info.splits[split].file_instructions
    features = info.features
    episode_features = {k: f for k, f in features.items() if k != types.STEPS}
    serialized = {k: features[k].get_serialized_info() for k in episode_features}
    parser = example_parser.ExampleParser({**serialized, types.STEPS: serialized_steps})
    files = tf.data.Dataset.from_tensor_slices(
        (
            [os.fspath(i.filename) for i in instructions],
            np.array([i.skip for i in instructions], dtype=np.int64),
            np.array([i.take for i in instructions], dtype=np.int64),
        )
    )
    records = files.interleave(
        episodes_lib.without_autograph(
            lambda path, skip, take: tf.data.TFRecordDataset(path).skip(skip).take(take)
        ),
        cycle_length=1 if info.disable_shuffling else _CYCLE_LENGTH,
        block_length=_BLOCK_LENGTH,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )

    def _read(record: tf.Tensor) -> dict:
        parsed = parser.parse_example(record)
        episode = {k: f.decode_example(parsed[k]) for k, f in episode_features.items()}
        return {**episode, types.STEPS: decode_steps(parsed[types.STEPS])}

    episodes = records.map(
        episodes_lib.without_autograph(_read),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    _SOURCES[episodes] = RecordSource(
        tuple((os.fspath(i.filename), int(i.skip), int(i.take)) for i in instructions),
        serialized_steps,
    )
    return episodes
