"""Where a dataset's episodes come from: one typed value every fast reader consumes.

An `EpisodeSource` reads its episodes as whole-episode tensors (`read`) and answers a
selection of them (`take`, `skip`, `shard`: `select`) with another source, not with a
transformation of what it read. `rlds_reverb.core.episodes.EpisodeDataset` (what `load`
returns) carries one, so the toolkit's functions read its episodes whole, and
`.take`/`.skip`/`.shard` give another `EpisodeDataset` on the selected source.

Kinds:

* `DatasetSource` (here): a `tf.data` dataset of episodes, each turned into whole-episode
  tensors by an optional `decode` map that runs after the selection (an adder's output,
  TFDS' `as_dataset` with the steps left encoded);
* `rlds_reverb.read.records.RecordSource`: a TFDS split's TFRecord shards (file
  instructions, interleave, the selection applied to the serialized records, so skipped
  episodes are never parsed or decoded); bulk readers read its shards directly.

A new reader (an HDF5 or Arrow file of episodes, say) is another subclass: `read` builds
the episodes, `select` narrows its own description of them (an index range, a list of
files) so that selected episodes are still read on its fast path.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, TypeAlias

import tensorflow as tf

__all__ = [
    'Count',
    'DatasetSource',
    'EpisodeSource',
    'Selection',
    'Shard',
    'Skip',
    'Take',
]

# A count or index as tf.data takes it: a Python int or a scalar int64 tensor.
Count: TypeAlias = int | tf.Tensor


def _to_static(value: Count) -> Count:
    """Returns a tensor known now (an eager or constant one) as a Python int, else `value`."""
    if not isinstance(value, tf.Tensor):
        return value  # tf.data checks it, and raises as it always does.
    static = tf.get_static_value(value)
    return value if static is None or static.ndim else int(static)


@dataclasses.dataclass(frozen=True)
class Take:
    """The first `count` episodes (all of them for -1), as `tf.data.Dataset.take`."""

    count: Count
    name: str | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, 'count', _to_static(self.count))

    def apply(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Returns `dataset` with this selection applied."""
        return tf.data.Dataset.take(dataset, self.count, name=self.name)


@dataclasses.dataclass(frozen=True)
class Skip:
    """All but the first `count` episodes (none for -1), as `tf.data.Dataset.skip`."""

    count: Count
    name: str | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, 'count', _to_static(self.count))

    def apply(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Returns `dataset` with this selection applied."""
        return tf.data.Dataset.skip(dataset, self.count, name=self.name)


@dataclasses.dataclass(frozen=True)
class Shard:
    """Every `num_shards`-th episode from `index` on, as `tf.data.Dataset.shard`."""

    num_shards: Count
    index: Count
    name: str | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, 'num_shards', _to_static(self.num_shards))
        object.__setattr__(self, 'index', _to_static(self.index))

    def apply(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Returns `dataset` with this selection applied."""
        return tf.data.Dataset.shard(dataset, self.num_shards, self.index, name=self.name)


Selection = Take | Skip | Shard


class EpisodeSource(abc.ABC):
    """What episodes come from; reads them as whole-episode tensors.

    Subclasses are immutable values: `select` returns a new source.
    """

    @abc.abstractmethod
    def read(self) -> tf.data.Dataset:
        """Returns the episodes in order: dicts of episode-level fields and `steps`, a nest
        of whole-episode `[T, ...]` tensors."""

    @abc.abstractmethod
    def select(self, selection: Selection) -> EpisodeSource:
        """Returns the source of the episodes `selection` keeps of this source's (in order)."""


@dataclasses.dataclass(frozen=True, eq=False)
class DatasetSource(EpisodeSource):
    """Episodes in a `tf.data` dataset, made whole-episode tensors by `decode` (if given).

    Fields:
      episodes: One element per episode, in order.
      decode: None when `episodes` are whole-episode tensors already; else called in graph
        on each element (after any selection, so unselected episodes are not decoded) and
        returns the whole-episode dict.
    """

    episodes: tf.data.Dataset
    decode: Callable[[Any], dict] | None = None

    def read(self) -> tf.data.Dataset:
        if self.decode is None:
            return self.episodes
        return self.episodes.map(
            self.decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )

    def select(self, selection: Selection) -> DatasetSource:
        return dataclasses.replace(self, episodes=selection.apply(self.episodes))
