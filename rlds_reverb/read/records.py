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

What it reads is a value, `RecordSource` (a kind of `core.sources.EpisodeSource`): a split
slice is other file instructions, and `take`, `skip` and `shard` of the loaded dataset add
selections, applied to the serialized records before the one map (a skipped episode is
never parsed). Bulk readers (`read_serialized_batches`) read the same records, through the
record codec (`rlds_reverb.storage.codec`), their checksums verified.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Iterator

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.core import compat, sources, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.storage import codec

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

# TFDS' default interleave of shards (`tfds.ReadConfig`): 16 shards at a time, 16 records
# from each in turn; 1 shard at a time when the dataset's order is fixed.
_CYCLE_LENGTH = 16
_BLOCK_LENGTH = 16
# Record positions gathered at a time when a bulk read lists a selection's records.
_POSITIONS_PER_BATCH = 65_536


@dataclasses.dataclass(frozen=True, eq=False)
class RecordSource(sources.EpisodeSource):
    """Episodes in a TFDS split's TFRecord shards: the source of what `load` reads from them.

    Its episodes are the shards' records interleaved as TFDS interleaves them, then
    `selections` (`take`, `skip`, `shard`) applied to the serialized records in order, each
    kept record parsed and decoded. Bulk readers (`read_serialized_batches`) read the same
    records straight from the shards.

    Fields:
      file_instructions: (shard path, records to skip, records to take) of the split, in
        TFDS' order of shards.
      serialized_steps: The serialized info of the selected step fields.
      episode_features: The TFDS features of the episode-level fields (decoded by TFDS).
      decode_steps: Called in graph with an episode's parsed (still encoded) steps; returns
        its `steps` as whole `[T, ...]` tensors.
      cycle_length: Shards read at a time (TFDS': 1 when the dataset's order is fixed).
      selections: What is kept of the interleaved records, applied in order.
    """

    file_instructions: tuple[tuple[str, int, int], ...]
    serialized_steps: dict
    episode_features: dict = dataclasses.field(default_factory=dict, repr=False)
    decode_steps: Callable[[dict], dict] | None = dataclasses.field(default=None, repr=False)
    cycle_length: int = _CYCLE_LENGTH
    selections: tuple[sources.Selection, ...] = ()

    def read(self) -> tf.data.Dataset:
        """Returns the selected episodes: episode-level features decoded, steps whole."""
        return self._decode_records()

    def read_mapped(self, fn: Callable[[dict], dict]) -> tf.data.Dataset:
        """Returns `read()`'s episodes, `fn` applied in the decoding map (one stage)."""
        return self._decode_records(fn)

    def _decode_records(self, *fns: Callable[[dict], dict]) -> tf.data.Dataset:
        """Returns the selected records in TFDS' order, each decoded, then given to `fns`."""
        if len(self.file_instructions) == 1:  # The same order, without tracing an interleave.
            ((path, skip, take),) = self.file_instructions
            records = _read_shard(path, skip, take)
        else:
            records = _interleave(self._list_files(), _read_shard, cycle_length=self.cycle_length)
        # The selections on the serialized records: nothing skipped is decoded.
        return sources.apply_selections(records, self.selections).map(
            sources.compose_episode_fns(self.make_decoder(), *fns),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )

    def make_decoder(self) -> Callable[[tf.Tensor], dict]:
        """Returns the function (in graph) that makes one serialized record a whole episode:
        episode-level features decoded, steps by `decode_steps`."""
        parse = _make_record_parser(
            {
                **{k: f.get_serialized_info() for k, f in self.episode_features.items()},
                types.STEPS: self.serialized_steps,
            }
        )

        def _read(record: tf.Tensor) -> dict:
            parsed = parse(record)
            episode = {k: f.decode_example(parsed[k]) for k, f in self.episode_features.items()}
            steps = parsed[types.STEPS]
            decoded = steps if self.decode_steps is None else self.decode_steps(steps)
            return {**episode, types.STEPS: decoded}

        return _read

    def select(self, selection: sources.Selection) -> RecordSource:
        return dataclasses.replace(self, selections=(*self.selections, selection))

    def list_records(self) -> list[tuple[str, np.ndarray]]:
        """Returns each shard's selected records: (path, ascending record indices).

        The selections pick positions in the interleaved order of `read`
        (`core.sources.IndexSelection`), mapped back to each shard's record numbers, so
        `take`, `skip` and `shard` pick the same records here.
        """
        paths = [path for path, _, _ in self.file_instructions]
        skips = np.array([skip for _, skip, _ in self.file_instructions], np.int64)
        takes = np.array([take for _, _, take in self.file_instructions], np.int64)
        if not self.selections:
            return [(p, np.arange(s, s + t)) for p, s, t in zip(paths, skips, takes, strict=True)]
        starts = np.cumsum(takes) - takes  # Each shard's first position, shards end to end.
        chosen = np.sort(self.list_read_order())
        firsts = np.searchsorted(chosen, starts)
        ends = np.searchsorted(chosen, starts + takes)
        return [
            (path, chosen[first:end] - start + skip)
            for path, start, skip, first, end in zip(
                paths, starts, skips, firsts, ends, strict=True
            )
        ]

    def list_read_order(self) -> np.ndarray:
        """Returns the selected records in the order `read` gives them, each numbered over
        the file instructions' records end to end (a shard's first record after its skip
        is numbered after every record of the shards before it)."""
        takes = np.array([take for _, _, take in self.file_instructions], np.int64)
        starts = np.cumsum(takes) - takes
        positions = sources.IndexSelection(int(takes.sum()), self.selections).positions()
        return self._list_interleaved(starts, takes)[positions]

    def _list_interleaved(self, starts: np.ndarray, takes: np.ndarray) -> np.ndarray:
        """Returns the record numbers (shards end to end) in the order `read` interleaves."""
        if len(takes) == 1 or self.cycle_length == 1:
            return np.arange(int(takes.sum()), dtype=np.int64)  # One shard after the other.
        numbers = _interleave(
            tf.data.Dataset.from_tensor_slices((starts, takes)),
            lambda start, take: tf.data.Dataset.range(start, start + take),
            cycle_length=self.cycle_length,
        )
        batches = numbers.batch(_POSITIONS_PER_BATCH).as_numpy_iterator()
        return np.concatenate([np.zeros([0], np.int64), *batches])

    def _list_files(self) -> tf.data.Dataset:
        """Returns the file instructions as a dataset of (path, skip, take)."""
        return tf.data.Dataset.from_tensor_slices(
            (
                [path for path, _, _ in self.file_instructions],
                np.array([skip for _, skip, _ in self.file_instructions], np.int64),
                np.array([take for _, _, take in self.file_instructions], np.int64),
            )
        )


def _read_shard(path: tf.Tensor | str, skip: tf.Tensor | int, take: tf.Tensor | int):
    """Returns the `take` records of one shard after its first `skip`.

    One file's reader, without `tf.data.TFRecordDataset`'s `flat_map` (`compat`).
    """
    records = compat.read_tfrecord_file(path)
    if not isinstance(skip, int) or skip:
        records = records.skip(skip)
    return records.take(take)


def read_record_ranges(ranges: tf.data.Dataset, *, cycle_length: int) -> tf.data.Dataset:
    """Returns the serialized records of record ranges, `cycle_length` ranges read at once.

    Args:
      ranges: (shard path, records to skip, records to take, a number) per range; the
        number of a range's first record is passed on, counting up along the range.
      cycle_length: Ranges read at a time, one record from each in turn.

    Returns:
      (serialized record, its number) pairs.
    """

    def _read_range(path, skip, take, first):
        numbers = tf.data.Dataset.range(first, first + take)
        return tf.data.Dataset.zip((_read_shard(path, skip, take), numbers))

    return ranges.interleave(
        episodes_lib.without_autograph(_read_range),
        cycle_length=cycle_length,
        block_length=1,
    )


def _make_record_parser(example_specs: dict) -> Callable[[tf.Tensor], dict]:
    """Returns TFDS' `ExampleParser.parse_example`, without its reshapes that change nothing.

    TFDS reshapes every parsed feature to its shape, also when the parser already gave it
    that shape (every fixed-shape step field): two traced ops per field, each costing
    set-up time. Features TFDS stores as ragged rows are parsed by TFDS itself.

    Args:
      example_specs: The serialized info (`get_serialized_info()`) of the fields to parse.
    """
    parser = compat.make_example_parser(example_specs)
    infos = tfds.core.utils.flatten_nest_dict(example_specs)
    if set(infos) != set(parser.flat_feature_specs) or any(
        info.sequence_rank > 1 for info in infos.values()
    ):
        return parser.parse_example

    def _restore(value: tf.Tensor, info: tfds.features.TensorInfo) -> tf.Tensor:
        # Examples store values flat, as int64, float32 or bytes: restore shape and dtype.
        if value.shape.as_list() != list(info.shape) and info.shape.count(None) < 2:
            value = tf.reshape(value, [-1 if d is None else d for d in info.shape])
        return value if value.dtype == info.tf_dtype else tf.cast(value, info.tf_dtype)

    def _parse(record: tf.Tensor) -> dict:
        flat = tf.io.parse_single_example(record, parser.flat_feature_specs)
        restored = {k: _restore(flat[k], info) for k, info in infos.items()}
        return tfds.core.utils.pack_as_nest_dict(restored, example_specs)

    return _parse


def _interleave(files: tf.data.Dataset, open_file: Callable, *, cycle_length: int):
    """Returns the elements of `open_file(*file)` for every file, in TFDS' interleaved order.

    The one interleave of a record source: its records and their positions come from it.
    """
    return files.interleave(
        episodes_lib.without_autograph(open_file),
        cycle_length=cycle_length,
        block_length=_BLOCK_LENGTH,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def find_record_source(episodes: tf.data.Dataset) -> RecordSource | None:
    """Returns the shards `episodes` reads, if it is (a selection of) what `load` read from
    TFRecord shards, or None."""
    source = episodes_lib.find_source(episodes)
    return source if isinstance(source, RecordSource) else None


def read_serialized_batches(source: RecordSource, *, batch_records: int) -> Iterator[list[bytes]]:
    """Yields the source's serialized episodes, at most `batch_records` at a time.

    Shard by shard, without `tf.data` (nothing to trace): the episodes come in the order of
    the shards, not in the interleaved order of the dataset. Each record's checksum is
    verified as it is read.

    Args:
      source: The records to read (its selections applied).
      batch_records: The most records per batch (bounds memory).

    Raises:
      tf.errors.DataLossError: If a shard is truncated or corrupt.
      tf.errors.NotFoundError: If a shard is missing.
    """
    batch = []
    for path, indices in source.list_records():
        if not len(indices):
            continue
        wanted = np.zeros(indices[-1] + 1, bool)
        wanted[indices] = True
        records = codec.iter_records(path, verify=True)
        for index, record in enumerate(itertools.islice(records, indices[0], len(wanted))):
            if not wanted[indices[0] + index]:
                continue
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


def make_record_source(
    builder: tfds.core.DatasetBuilder,
    *,
    split: str,
    serialized_steps: dict,
    decode_steps: Callable[[dict], dict],
) -> RecordSource:
    """Returns the source of the split's episodes, read as `builder.as_dataset` orders them.

    Args:
      builder: A prepared TFDS builder of an RLDS dataset (TFRecord shards).
      split: The split, with TFDS' slicing syntax.
      serialized_steps: The serialized info (`get_serialized_info()`) of the step fields to
        parse, pruned to the selected fields.
      decode_steps: Called in graph with the parsed (still encoded) steps; returns the
        episode's `steps` as whole `[T, ...]` tensors.

    Returns:
      The split's `RecordSource` (episode-level features decoded by their TFDS features,
      steps by `decode_steps`).

    Raises:
      ValueError, KeyError, AssertionError: From TFDS, if the split cannot be resolved.
    """
    info = builder.info
    features = info.features
    return RecordSource(
        file_instructions=tuple(
            (os.fspath(i.filename), int(i.skip), int(i.take))
            for i in info.splits[split].file_instructions
        ),
        serialized_steps=serialized_steps,
        episode_features={k: f for k, f in features.items() if k != types.STEPS},
        decode_steps=decode_steps,
        cycle_length=1 if info.disable_shuffling else _CYCLE_LENGTH,
    )
