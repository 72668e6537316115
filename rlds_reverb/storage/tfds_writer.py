"""Writes RLDS episodes held as NumPy arrays into a TFDS dataset directory, fast.

The directory is a real TFDS dataset: `dataset_info.json` and `features.json` are written by
`tfds.core.DatasetInfo`, the shards follow TFDS' file-name template, and the episodes are
`tf.train.Example`s laid out as TFDS' `ExampleSerializer` lays them out (a nested
`tfds.features.Dataset` of steps stores each step field as one flat list per episode), so
`tfds.builder_from_directory` reads them back with a `steps` `tf.data.Dataset` per episode.

Only the serialization is our own: TFDS encodes every step in Python through protobuf
messages (about 10,000 steps/s with the pure-Python runtime); this module lays out whole
episodes and the record codec (`storage.codec`) writes their protobuf wire format and the
TFRecord framing with NumPy (tests check that TFDS' own serializer gives the same Example,
of the same size; the order of the feature map's entries is the protobuf runtime's).

The dataset is written into a hidden sibling directory and renamed into place at the end, so
a directory that holds `dataset_info.json` is complete; an interrupted write leaves only a
hidden `.<version>.incomplete-*` directory, removed by the next write. The staging directory
is 0700 while it fills; the dataset and the parents this module creates follow the umask,
never world-writable (`core.files`).
"""

from __future__ import annotations

import functools
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from rlds_reverb.core import checks, files
from rlds_reverb.storage import codec
from rlds_reverb.storage import features as features_lib

__all__ = [
    'RldsDatasetWriter',
    'SPLIT',
    'make_rlds_features',
    'write_rlds_dataset',
]

SPLIT = 'train'
FILE_FORMAT = 'tfrecord'
# Bytes TFRecord adds around each record: length (8), length CRC (4), data CRC (4).
TFRECORD_OVERHEAD = codec.RECORD_OVERHEAD_BYTES
_INCOMPLETE_PREFIX = '.incomplete-'
# Made by `storage.features`, kept here where the writer's callers have found it.
make_rlds_features = features_lib.make_rlds_features


def flatten_example(example: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
    """Returns `{'steps/observation': ...}` for a nested example dict, as TFDS names fields."""
    flat = {}
    for key, value in example.items():
        if isinstance(value, Mapping):
            flat.update(flatten_example(value, f'{prefix}{key}/'))
        else:
            flat[f'{prefix}{key}'] = value
    return flat


def serialize_episode(episode: Mapping[str, Any], serialized_info: Mapping[str, Any]) -> bytes:
    """Returns one episode as serialized `tf.train.Example` bytes, as TFDS writes it.

    Args:
      episode: `{'steps': {field: [T, ...] array}, episode_field: value}`.
      serialized_info: `features.get_serialized_info()` of the dataset's features; it fixes
        the field order, dtypes and shapes.

    Returns:
      The serialized example.

    Raises:
      ValueError: If a field is missing or its shape does not match the features.

    Example:
      >>> record = serialize_episode(episode, features.get_serialized_info())
    """
    values = flatten_example(episode)
    entries = []
    for name, info in flatten_example(serialized_info).items():
        if name not in values:
            raise ValueError(f'Episode field {name!r} is missing; expected {sorted(values)}.')
        value = np.asarray(values[name], dtype=info.np_dtype)
        expected = tuple(info.shape)
        if len(value.shape) != len(expected) or any(
            e is not None and e != s for e, s in zip(expected, value.shape, strict=True)
        ):
            raise ValueError(
                f'Episode field {name!r} has shape {value.shape}; expected {expected}.'
            )
        entries.append((name, value))
    return codec.encode_example(entries)


def _make_dataset_info(
    *,
    name: str,
    version: str,
    directory: pathlib.Path,
    features: tfds.features.FeaturesDict,
    description: str,
    metadata: Mapping[str, Any] | None,
    disable_shuffling: bool = False,
) -> tfds.core.DatasetInfo:
    identity = tfds.core.dataset_info.DatasetIdentity(
        name=name, version=tfds.core.Version(version), data_dir=os.fspath(directory), module_name=''
    )
    info = tfds.core.DatasetInfo(
        builder=identity,
        description=description,
        features=features,
        metadata=tfds.core.MetadataDict(metadata) if metadata else None,
        disable_shuffling=disable_shuffling,
    )
    info.set_file_format(FILE_FORMAT)
    return info


def describe_interrupted_write(target: os.PathLike | str) -> str:
    """Returns a sentence on an interrupted write of `target` left next to it, or ''."""
    target = pathlib.Path(target).expanduser().absolute()
    if not target.parent.is_dir():
        return ''
    prefix = f'.{target.name}{_INCOMPLETE_PREFIX}'
    left = sorted(p.name for p in target.parent.iterdir() if p.name.startswith(prefix))
    if not left:
        return ''
    return (
        f' A write of this dataset was interrupted before it completed (it left {left[0]} in '
        f'{target.parent}, which is not a readable dataset); write it again.'
    )


def remove_incomplete(parent: pathlib.Path) -> None:
    """Removes hidden `.<version>.incomplete-*` directories left by interrupted writes."""
    if parent.is_dir():
        for entry in parent.iterdir():
            if entry.name.startswith('.') and _INCOMPLETE_PREFIX in entry.name:
                shutil.rmtree(entry, ignore_errors=True)


class RldsDatasetWriter:
    """Streams episodes into a TFDS RLDS dataset directory, one shard file at a time.

    Episodes are serialized and written as they come (memory stays flat in the dataset's
    size) into a hidden staging directory next to `directory`; `close()` names the shards
    as TFDS does, writes the dataset info and renames the staging directory into place, so
    a directory holding `dataset_info.json` is always complete. Used as a context manager,
    it closes on exit; on an error it either removes what it staged (the default: nothing
    lands) or, with `keep_on_error=True`, closes the dataset with the episodes added so far
    (each is whole) and notes that on the error.

    Example:
      >>> with RldsDatasetWriter(out_dir, features=f, name='toy') as writer:
      ...     for episode in episodes:
      ...         writer.add_episode(episode)
    """

    def __init__(
        self,
        directory: os.PathLike | str,
        *,
        features: tfds.features.FeaturesDict,
        name: str,
        version: str = '1.0.0',
        description: str = '',
        metadata: Mapping[str, Any] | None = None,
        episodes_per_shard: int = 100,
        keep_on_error: bool = False,
        disable_shuffling: bool = False,
    ):
        """Opens the staging directory.

        Args:
          directory: The dataset directory to create, e.g. `data_dir / name / version`.
          features: The dataset's features (see `make_rlds_features`).
          name: The TFDS dataset name (snake case).
          version: The dataset version, `major.minor.patch`.
          description: The dataset description, stored in `dataset_info.json`.
          metadata: JSON-serializable metadata, stored in `metadata.json`.
          episodes_per_shard: Episodes per TFRecord shard.
          keep_on_error: On an error inside `with`, keep the episodes added so far.
          disable_shuffling: Mark the dataset ordered (TFDS' `disable_shuffling`): readers
            take the shards one after the other, so episodes come back in the order added.

        Raises:
          ValueError: If `episodes_per_shard` < 1.
        """
        checks.check_int_at_least(episodes_per_shard, 1, argument='episodes_per_shard')
        self.target = pathlib.Path(directory).expanduser().absolute()
        files.make_shared_dirs(self.target.parent)
        remove_incomplete(self.target.parent)
        self._staging = pathlib.Path(
            tempfile.mkdtemp(
                prefix=f'.{self.target.name}{_INCOMPLETE_PREFIX}', dir=self.target.parent
            )
        )
        self._features = features
        self._serialized_info = features.get_serialized_info()
        self._make_info = functools.partial(
            _make_dataset_info,
            name=name,
            version=version,
            description=description,
            metadata=metadata,
            disable_shuffling=disable_shuffling,
        )
        self._name = name
        self._per_shard = episodes_per_shard
        self._keep_on_error = keep_on_error
        self._shard_lengths: list[int] = []
        self._num_bytes = 0
        self._file: codec.RecordWriter | None = None
        self._closed = False

    @property
    def episodes_written(self) -> int:
        """Episodes added so far."""
        return sum(self._shard_lengths)

    def _shard_path(self, index: int) -> pathlib.Path:
        return self._staging / f'shard-{index:05d}.tmp'

    def add_episode(self, episode: Mapping[str, Any]) -> None:
        """Serializes one episode and appends it to the current shard.

        Args:
          episode: `{'steps': {field: [T, ...] array}, episode_field: value}`.

        Raises:
          ValueError: If the episode does not match the features (nothing is written).
          RuntimeError: If the writer is closed.
        """
        if self._closed:
            raise RuntimeError(f'The dataset writer of {self.target} is closed.')
        record = serialize_episode(episode, self._serialized_info)
        file = self._file
        if file is None or self._shard_lengths[-1] == self._per_shard:
            if file is not None:
                file.close()
            file = self._file = codec.RecordWriter(self._shard_path(len(self._shard_lengths)))
            self._shard_lengths.append(0)
        file.write(record)
        self._shard_lengths[-1] += 1
        self._num_bytes += len(record)

    def close(self) -> pathlib.Path:
        """Completes the dataset and moves it into place; returns its directory.

        Raises:
          ValueError: If no episode was added (nothing is written then).
        """
        if self._closed:
            return self.target
        self._closed = True
        try:
            if self._file is not None:
                self._file.close()
            if not self.episodes_written:  # TFDS cannot read a dataset without records.
                raise ValueError(
                    f'No episode was added, and TFDS cannot read an empty dataset; nothing was '
                    f'written to {self.target}.'
                )
            template = tfds.core.ShardedFileTemplate(
                data_dir=self._staging,
                dataset_name=self._name,
                split=SPLIT,
                filetype_suffix=FILE_FORMAT,
            )
            count = len(self._shard_lengths)
            for index in range(count):
                final = template.sharded_filepath(shard_index=index, num_shards=count)
                os.replace(self._shard_path(index), os.fspath(final))
            info = self._make_info(directory=self._staging, features=self._features)
            split = tfds.core.SplitInfo(
                name=SPLIT,
                shard_lengths=list(self._shard_lengths),
                num_bytes=self._num_bytes,
                filename_template=template,
            )
            info.set_splits(tfds.core.SplitDict([split]))
            info.write_to_directory(self._staging)
            # The staging dir is 0700; the dataset follows the umask, never world-writable.
            files.remove_world_write(self._staging)
            os.chmod(self._staging, files.compute_shared_mode())
            if self.target.exists():
                shutil.rmtree(self.target)
            os.replace(self._staging, self.target)
        finally:
            shutil.rmtree(self._staging, ignore_errors=True)
        return self.target

    def abort(self) -> None:
        """Removes everything staged; the target directory is left as it was."""
        self._closed = True
        if self._file is not None:
            self._file.close()
        shutil.rmtree(self._staging, ignore_errors=True)

    def __enter__(self) -> RldsDatasetWriter:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        if error is None:
            self.close()
        elif (
            self._keep_on_error
            and self.episodes_written
            and isinstance(error, Exception | KeyboardInterrupt)
        ):
            count = self.episodes_written
            self.close()
            error.add_note(f'{self.target} holds the {count} whole episode(s) written before.')
        else:
            self.abort()


def write_rlds_dataset(
    directory: os.PathLike | str,
    episodes: Iterable[Mapping[str, Any]],
    *,
    features: tfds.features.FeaturesDict,
    name: str,
    version: str = '1.0.0',
    description: str = '',
    metadata: Mapping[str, Any] | None = None,
    episodes_per_shard: int = 100,
) -> pathlib.Path:
    """Writes episodes of NumPy arrays as a TFDS RLDS dataset into `directory`, atomically.

    `directory` is the version directory (TFDS lays datasets out as `name/version/`); an
    existing dataset there is replaced only once the new one is complete. Episodes are
    streamed to disk one at a time (`RldsDatasetWriter`).

    Args:
      directory: The dataset directory to create, e.g. `data_dir / name / version`.
      episodes: Episodes as `{'steps': {field: [T, ...] array}, episode_field: value}`.
      features: The dataset's features (see `make_rlds_features`).
      name: The TFDS dataset name (snake case).
      version: The dataset version, `major.minor.patch`.
      description: The dataset description, stored in `dataset_info.json`.
      metadata: JSON-serializable metadata, stored in `metadata.json`.
      episodes_per_shard: Episodes per TFRecord shard.

    Returns:
      `directory`, which `tfds.builder_from_directory` opens.

    Raises:
      ValueError: If an episode does not match `features`, or `episodes_per_shard` < 1.

    Example:
      >>> write_rlds_dataset(tmp / 'toy' / '1.0.0', episodes, features=f, name='toy')
    """
    with RldsDatasetWriter(
        directory,
        features=features,
        name=name,
        version=version,
        description=description,
        metadata=metadata,
        episodes_per_shard=episodes_per_shard,
    ) as writer:
        for episode in episodes:
            writer.add_episode(episode)
    return writer.target
