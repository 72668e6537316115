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

* `MappedSource` (here): another source's episodes, each changed by a map (the step fields
  a reader's own source cannot prune, a filled discount); selections go to the inner source.
* `StageMappedSource` (here): a `MappedSource` whose map runs inside the inner source's
  own per-episode map (`read_mapped`: one `tf.data` stage fewer; an adder's output).

Selecting. A selection is a value (`Take`, `Skip`, `Shard`), and what an index-based
reader keeps of its episodes is one too: an `IndexSelection` (how many episodes, and the
selections in order). A split slice (`'train[:10%]'`, TFDS' syntax and rounding) is such a
value (`IndexSelection.from_split`), and `take`, `skip` and `shard` of what `load` returns
add selections to it. Every reader applies it one way: `positions()` (the kept episodes'
indices, in NumPy, for readers that read by index: D4RL, Minari, the bulk record readers)
or `apply(dataset)` (`tf.data`'s own `take`/`skip`/`shard` on a dataset of the episodes in
order: a TFRecord split's serialized records); the two agree (tests/core/test_sources.py).

A new reader (an HDF5 or Arrow file of episodes, say) is another subclass: `read` builds
the episodes, `select` narrows its own description of them (an `IndexSelection`, a list of
files) so that selected episodes are still read on its fast path.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

import numpy as np
import tensorflow as tf

__all__ = [
    'Count',
    'DatasetSource',
    'EpisodeSource',
    'IndexSelection',
    'MappedSource',
    'Selection',
    'Shard',
    'Skip',
    'StageMappedSource',
    'Take',
    'apply_selections',
    'compose_episode_fns',
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
# Episode positions gathered at a time when a selection with tensor counts is listed.
_POSITIONS_PER_BATCH = 65_536


def apply_selections(dataset: tf.data.Dataset, selections: Iterable[Selection]) -> tf.data.Dataset:
    """Returns `dataset` with `selections` applied in order (`tf.data`'s take, skip, shard)."""
    for selection in selections:
        dataset = selection.apply(dataset)
    return dataset


def _is_static(selection: Selection) -> bool:
    """Returns whether a selection's counts are known in Python (not tensors)."""
    counts = [getattr(selection, f.name) for f in dataclasses.fields(selection) if f.compare]
    return all(isinstance(count, int) for count in counts)


def _select_positions(positions: np.ndarray, selection: Selection) -> np.ndarray | None:
    """Returns the positions `selection` keeps, as `tf.data` would; None if its counts are
    tensors (or invalid: `tf.data` then raises its own error)."""
    if isinstance(selection, Take) and isinstance(selection.count, int):
        return positions if selection.count < 0 else positions[: selection.count]
    if isinstance(selection, Skip) and isinstance(selection.count, int):
        return positions[:0] if selection.count < 0 else positions[selection.count :]
    if (
        isinstance(selection, Shard)
        and isinstance(selection.num_shards, int)
        and isinstance(selection.index, int)
        and 0 <= selection.index < selection.num_shards
    ):
        return positions[selection.index :: selection.num_shards]
    return None


@dataclasses.dataclass(frozen=True)
class IndexSelection:
    """Which of `count` episodes (indices 0 .. count - 1, in order) a source reads.

    Fields:
      count: The episodes of the whole collection (a file's, a dataset's, a split's).
      selections: What is kept of them, applied in order: a split slice first, then the
        `take`, `skip` and `shard` of the loaded dataset.
    """

    count: int
    selections: tuple[Selection, ...] = ()

    @classmethod
    def from_split(cls, split: str, count: int, *, split_name: str = 'train') -> IndexSelection:
        """Returns the episodes of one split slice, in TFDS' syntax and rounding.

        Args:
          split: `split_name` or one slice of it (`'train[:10%]'`, `'train[10:20]'`,
            `'train[-5:]'`), counted in episodes.
          count: The episodes of the split.
          split_name: The one split's name.

        Raises:
          ValueError: If `split` names another split, is not valid, is out of range, or
            joins several slices (the message says which).

        Example:
          >>> IndexSelection.from_split('train[:50%]', 7).positions().tolist()
          [0, 1, 2, 3]
        """
        import tensorflow_datasets as tfds  # Already imported by every reader that slices.

        info = tfds.core.SplitInfo(name=split_name, shard_lengths=[count], num_bytes=0)
        try:
            slices = tfds.core.ReadInstruction.from_spec(split).to_absolute({split_name: info})
        except (ValueError, AssertionError, TypeError, KeyError) as e:
            raise ValueError(str(e).strip() or type(e).__name__) from e
        if len(slices) != 1:
            raise ValueError(
                f'it joins {len(slices)} slices, and one slice of the split is read at a time; '
                'load each slice and concatenate the datasets instead'
            )
        first = slices[0].from_ or 0
        last = count if slices[0].to is None else slices[0].to
        if (first, last) == (0, count):
            return cls(count)
        return cls(count, (Skip(first), Take(max(last - first, 0))))

    @property
    def is_static(self) -> bool:
        """Whether every selection's counts are known in Python (none is a tensor)."""
        return all(_is_static(selection) for selection in self.selections)

    def select(self, selection: Selection) -> IndexSelection:
        """Returns the episodes `selection` keeps of these (in order)."""
        return dataclasses.replace(self, selections=(*self.selections, selection))

    def apply(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """Returns the selected elements of `dataset`, which holds the `count` episodes in order."""
        return apply_selections(dataset, self.selections)

    def positions(self) -> np.ndarray:
        """Returns the selected episodes' indices (int64, in order).

        In NumPy when every count is known in Python; else (a count held in a tensor) read
        from `tf.data`, eagerly.
        """
        static = self._find_static_positions()
        if static is not None:
            return static
        batches = self.as_dataset().batch(_POSITIONS_PER_BATCH).as_numpy_iterator()
        return np.concatenate([np.zeros([0], np.int64), *batches])

    def as_dataset(self) -> tf.data.Dataset:
        """Returns the selected episodes' indices as a `tf.data` dataset of int64 scalars.

        Built in graph too: selections with tensor counts are applied by `tf.data`.
        """
        static = self._find_static_positions()
        if static is not None:
            return tf.data.Dataset.from_tensor_slices(static)
        return self.apply(tf.data.Dataset.range(self.count))

    def _find_static_positions(self) -> np.ndarray | None:
        """Returns the positions computed in NumPy, or None when a count is a tensor."""
        positions: np.ndarray | None = np.arange(self.count, dtype=np.int64)
        for selection in self.selections:
            if positions is None:
                break
            positions = _select_positions(positions, selection)
        return positions


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

    def read_mapped(self, fn: Callable[[dict], dict]) -> tf.data.Dataset:
        """Returns `read()`'s episodes, each changed by `fn` (in graph, no autograph).

        A source that reads through a per-episode map of its own calls `fn` inside it: a
        `tf.data` stage costs about as much per episode as a short episode's own work.
        """
        return self.read().map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def compose_episode_fns(*fns: Callable[[dict], dict]) -> Callable[[dict], dict]:
    """Returns the function applying `fns` to an episode in turn, unconverted by autograph."""

    def _composed(episode: dict) -> dict:
        for fn in fns:
            episode = fn(episode)
        return episode

    return tf.autograph.experimental.do_not_convert(_composed)


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
        return dataclasses.replace(self, episodes=apply_selections(self.episodes, [selection]))

    def read_mapped(self, fn: Callable[[dict], dict]) -> tf.data.Dataset:
        if self.decode is None:
            return super().read_mapped(fn)
        return self.episodes.map(
            compose_episode_fns(self.decode, fn),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )


@dataclasses.dataclass(frozen=True, eq=False)
class MappedSource(EpisodeSource):
    """Another source's episodes, each changed by `fn` (in graph); selections go to `inner`.

    Fields:
      inner: The source of the episodes.
      fn: Called on each whole episode after it is read (and selected).
    """

    inner: EpisodeSource
    fn: Callable[[dict], dict]

    def read(self) -> tf.data.Dataset:
        return self.inner.read().map(
            self.fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )

    def select(self, selection: Selection) -> MappedSource:
        return dataclasses.replace(self, inner=self.inner.select(selection))

    def read_mapped(self, fn: Callable[[dict], dict]) -> tf.data.Dataset:
        return self.inner.read_mapped(compose_episode_fns(self.fn, fn))


@dataclasses.dataclass(frozen=True, eq=False)
class StageMappedSource(MappedSource):
    """A `MappedSource` whose `fn` runs inside the inner source's own per-episode map.

    What an adder returns for a source's episodes: the same episodes, one `tf.data` stage
    fewer (`inner.read_mapped`). A `MappedSource` still, so readers that look through maps
    for the source's records or metadata (the memory-bounded shuffle, LeRobot metadata)
    see through it and apply `fn` themselves.

    Fields:
      inner: The source of the episodes.
      fn: Called on each whole episode after it is read (and selected); traced without
        autograph.
    """

    def read(self) -> tf.data.Dataset:
        """Returns the inner source's episodes, `fn` applied in its own map (one stage)."""
        return self.inner.read_mapped(self.fn)
