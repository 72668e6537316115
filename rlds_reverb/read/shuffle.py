"""Shuffle episodes or steps within a memory budget in bytes: `shuffle_within_budget`.

`tf.data.Dataset.shuffle(buffer_size)` counts elements, and the only randomness it gives
is its buffer: an element leaves at most `buffer_size` places before it entered, so on a
dataset much larger than the buffer the order stays almost the order on disk (Spearman's
rho near 1). With camera frames an element's size varies by orders of magnitude (an
episode of 20 or 1,000 steps, frames encoded or decoded), so a buffer counted in elements
says nothing about memory either. This shuffle has two levels:

1. **Ranges** (no memory). The records `load` would read (a TFDS split's TFRecord shards,
   with the split slice and any `take`/`skip`/`shard` applied: `records.RecordSource`)
   are cut into ranges of at most `range_episodes` consecutive records of one shard, and
   the ranges are read in a seeded random order (a uniform permutation), `streams` ranges
   at a time, one record from each in turn. Reading a range opens its shard at the
   range's first record, so the order of the ranges costs no memory.
2. **A buffer counted in bytes.** Elements (whole episodes, or steps) enter a buffer whose
   size is measured from the arrays themselves (each array object and its data, each
   string object: an encoded frame costs its JPEG, a decoded one its pixels); while the
   next element would not fit, a seeded random element of the buffer is given out. The buffer's budget is
   `memory_budget_bytes` less a reserve for the episodes being read and decoded
   (`_EPISODES_IN_FLIGHT` times the largest episode read so far).

Guarantees, for N episodes in R = ceil(N / range_episodes) ranges (per shard):

* Every selected element is given exactly once; the order depends only on `seed` and the
  data (every pass gives the same order: pass `seed + epoch` for another).
* The bytes held by the buffer plus the reserve never exceed `memory_budget_bytes`
  (`ShuffleStats.peak_held_bytes`); an element that cannot fit raises.
* Decorrelation: the ranges' order is a uniform random permutation, so the rank
  correlation between the place an element is given and its place in `load`'s order has
  mean about 1/R**2 and a standard deviation about 1/sqrt(R - 1), whatever the budget
  (`tests/read/test_shuffle.py` checks |rho| < 0.25 for three seeds at R = 200, steps of
  400 episodes with a budget of 2% of the data, where `tf.data`'s shuffle of the same
  bytes gives rho > 0.9; benchmarks/shuffle.py measures 20,000 steps).
* What the budget buys is local mixing: without the buffer, elements of one range come
  out in order, `streams` ranges apart; with it, an element leaves within about
  `budget / element bytes` places of where its range put it.

What it cannot give: a uniform permutation of the elements. Elements of one range
(`range_episodes` episodes; for steps, all steps of an episode) enter the buffer close
together, so neighbours in the output come from the same range more often than under a
uniform shuffle, and the less so the larger the budget is against an episode. The source
must be what `load` reads from TFRecord shards (its default read); steps are given without
episode-level fields. The buffer runs in Python (`tf.data.Dataset.from_generator`): the
pipeline cannot be serialized or distributed by `tf.data` service.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.core import checks, sources, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core.errors import SourceError
from rlds_reverb.read import records

__all__ = ['ShuffleStats', 'ShuffleUnit', 'measure_rank_correlation', 'shuffle_within_budget']

# Decoded episodes held while read: the parallel decodes, and the one being buffered.
_DECODES_IN_FLIGHT = 2
_EPISODES_IN_FLIGHT = _DECODES_IN_FLIGHT + 1
# A step's key in the source order: its episode's position, then its index (< 2**32).
_STEP_BITS = 32
# A NumPy array object without its data (CPython 3.11, NumPy 1.26: 112 bytes).
_ARRAY_HEADER_BYTES = sys.getsizeof(np.empty(0))
# Steps handed to tf.data at a time (stacked): from_generator costs ~0.1 ms per element.
_STEPS_PER_YIELD = 64
_STEPS_ADVICE = ', shuffle steps (unit=ShuffleUnit.STEPS)'


class ShuffleUnit(enum.Enum):
    """What is shuffled: whole episodes, or the steps of every episode (flattened)."""

    EPISODES = 'episodes'
    STEPS = 'steps'


@dataclasses.dataclass
class ShuffleStats:
    """What a shuffle held and gave, filled in while its dataset is iterated (last pass).

    Fields:
      peak_buffer_bytes: The most bytes the buffer held at once.
      peak_held_bytes: The most the buffer and the reserve for episodes in flight held at
        once: at most the budget.
      elements: The elements given out.
      ranges: The record ranges read.
      source_keys: Each element's place in `load`'s order, in the order given: an
        episode's position, or for a step `position << 32 | index in its episode` (keys
        sort as the source orders the elements).
    """

    peak_buffer_bytes: int = 0
    peak_held_bytes: int = 0
    elements: int = 0
    ranges: int = 0
    source_keys: list[int] = dataclasses.field(default_factory=list)

    def rank_correlation(self) -> float:
        """Returns Spearman's rho between the order given and the source's order."""
        return measure_rank_correlation(self.source_keys)


def measure_rank_correlation(source_keys: Sequence[int] | np.ndarray) -> float:
    """Returns Spearman's rho between elements' places given and their keys' order.

    Args:
      source_keys: Distinct keys of the elements, in the order they were given; keys sort
        as the source orders the elements.

    Returns:
      Rho in [-1, 1]: 1 for the source's order, about 0 for a random one (0 for fewer
      than two elements).

    Example:
      >>> measure_rank_correlation([0, 1, 2, 3])
      1.0
    """
    keys = np.asarray(source_keys)
    count = len(keys)
    if count < 2:
        return 0.0
    ranks = np.empty(count, np.float64)
    ranks[np.argsort(keys, kind='stable')] = np.arange(count, dtype=np.float64)
    squares = np.sum((ranks - np.arange(count, dtype=np.float64)) ** 2)
    return float(1.0 - 6.0 * squares / (count * (count * float(count) - 1.0)))


@dataclasses.dataclass(frozen=True)
class _Ranges:
    """The record ranges in the order read, and every record's place in `load`'s order."""

    paths: np.ndarray
    skips: np.ndarray
    takes: np.ndarray
    firsts: np.ndarray  # Each range's first record number (shards end to end).
    load_positions: np.ndarray  # By record number; -1 for a record not selected.


def _plan_ranges(source: records.RecordSource, *, range_episodes: int, seed: int) -> _Ranges:
    """Returns the source's selected records cut into ranges, in a seeded random order."""
    paths = np.array([path for path, _, _ in source.file_instructions], dtype=object)
    skips = np.array([skip for _, skip, _ in source.file_instructions], np.int64)
    takes = np.array([take for _, _, take in source.file_instructions], np.int64)
    starts = np.cumsum(takes) - takes
    order = source.list_read_order()
    load_positions = np.full(int(takes.sum()), -1, np.int64)
    load_positions[order] = np.arange(len(order), dtype=np.int64)
    chosen = np.sort(order)
    shard = np.searchsorted(starts, chosen, side='right') - 1
    # A range starts where records stop being consecutive in one shard, and every
    # `range_episodes` records within such a run.
    new_run = np.ones(len(chosen), bool)
    new_run[1:] = (np.diff(chosen) != 1) | (np.diff(shard) != 0)
    run_starts = np.flatnonzero(new_run)
    run_of = np.cumsum(new_run) - 1
    offset = np.arange(len(chosen)) - run_starts[run_of] if len(chosen) else chosen
    firsts = np.flatnonzero(offset % range_episodes == 0)
    lengths = np.diff(np.append(firsts, len(chosen)))
    permutation = np.random.default_rng([seed, 0]).permutation(len(firsts))
    first_numbers = chosen[firsts][permutation]
    shards = shard[firsts][permutation]
    return _Ranges(
        paths=paths[shards].astype(str),
        skips=first_numbers - starts[shards] + skips[shards],
        takes=lengths[permutation].astype(np.int64),
        firsts=first_numbers.astype(np.int64),
        load_positions=load_positions,
    )


def _unwrap(source: sources.EpisodeSource | None) -> tuple[records.RecordSource | None, list]:
    """Returns the record source under any `MappedSource`s, and their maps (inner first)."""
    maps: list[Callable[[dict], dict]] = []
    while isinstance(source, sources.MappedSource):
        maps.insert(0, source.fn)
        source = source.inner
    return (source if isinstance(source, records.RecordSource) else None), maps


def _read_ranges(
    source: records.RecordSource, ranges: _Ranges, maps: list, *, streams: int
) -> tf.data.Dataset:
    """Returns (whole episode, record number) pairs, read range by range in plan order."""
    planned = tf.data.Dataset.from_tensor_slices(
        (ranges.paths, ranges.skips, ranges.takes, ranges.firsts)
    )
    serialized = records.read_record_ranges(planned, cycle_length=streams)
    decode = source.make_decoder()

    def _decode(record: tf.Tensor, number: tf.Tensor) -> tuple[dict, tf.Tensor]:
        episode = decode(record)
        for fn in maps:
            episode = fn(episode)
        return episode, number

    episodes = serialized.map(
        episodes_lib.without_autograph(_decode),
        num_parallel_calls=_DECODES_IN_FLIGHT,
        deterministic=True,
    )
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False  # Held bytes stay counted.
    return episodes.with_options(options)


def _measure_bytes(leaf: Any) -> int:
    """Returns the bytes a NumPy leaf holds: its array object and data, and each string's
    own object (a step's small arrays cost their headers too)."""
    if isinstance(leaf, bytes):
        return sys.getsizeof(leaf)
    if leaf.dtype == object:
        return _ARRAY_HEADER_BYTES + int(leaf.nbytes) + sum(sys.getsizeof(x) for x in leaf.flat)
    return _ARRAY_HEADER_BYTES + int(leaf.nbytes)


def _split_steps(steps: Any) -> Iterator[tuple[int, list, int]]:
    """Yields each step of whole-episode steps: (index, its leaves copied, their bytes)."""
    leaves = tree.flatten(steps)
    for index in range(len(leaves[0])):
        step = [np.array(leaf[index]) if leaf.dtype != object else leaf[index] for leaf in leaves]
        yield index, step, sys.getsizeof(step) + sum(_measure_bytes(leaf) for leaf in step)


class _ByteBuffer:
    """A shuffle buffer that counts bytes: elements wait, a seeded random one is taken, and
    taken elements are counted until they are handed on (`flush`)."""

    def __init__(self, rng: np.random.Generator):
        self._rng = rng
        self._waiting: list[tuple[Any, int, int]] = []
        self._taken: list[Any] = []
        self._taken_bytes = 0
        self.held_bytes = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def taken(self) -> int:
        return len(self._taken)

    def add(self, element: Any, key: int, size: int) -> None:
        self._waiting.append((element, key, size))
        self.held_bytes += size

    def take(self) -> int:
        """Moves a random waiting element to the taken ones; returns its key."""
        index = int(self._rng.integers(len(self._waiting)))
        self._waiting[index], self._waiting[-1] = self._waiting[-1], self._waiting[index]
        element, key, size = self._waiting.pop()
        self._taken.append(element)
        self._taken_bytes += size
        return key

    def flush(self) -> list[Any]:
        """Returns the taken elements, in the order taken, and stops counting them."""
        taken, self._taken = self._taken, []
        self.held_bytes -= self._taken_bytes
        self._taken_bytes = 0
        return taken


def _stack(elements: list[list[Any]]) -> list[np.ndarray]:
    """Returns steps' flat leaves stacked leaf by leaf (`[k, ...]`)."""
    return [
        np.array(leaves, dtype=object) if isinstance(leaves[0], bytes) else np.stack(leaves)
        for leaves in zip(*elements, strict=True)
    ]


@dataclasses.dataclass
class _Shuffler:
    """The generator of the shuffled elements: one pass per call, the same order each.

    Steps are handed to `tf.data` `batch_elements` at a time (stacked; unbatched after),
    which saves `from_generator`'s cost per element; they count against the budget until
    handed on.
    """

    episodes: tf.data.Dataset
    ranges: _Ranges
    budget_bytes: int
    unit: ShuffleUnit
    seed: int
    stats: ShuffleStats
    step_structure: Any
    batch_elements: int = 1

    def __call__(self) -> Iterator[Any]:
        buffer = _ByteBuffer(np.random.default_rng([self.seed, 1]))
        self.stats.source_keys.clear()
        self.stats.elements = 0
        largest = 0
        for episode, number in self.episodes.as_numpy_iterator():
            episode_bytes = sum(_measure_bytes(leaf) for leaf in tree.flatten(episode))
            largest = max(largest, episode_bytes)
            reserve = _EPISODES_IN_FLIGHT * largest
            position = int(self.ranges.load_positions[number])
            for element, key, size in self._list_elements(episode, position, episode_bytes):
                self._check_fits(size, reserve, number)
                while buffer.held_bytes + size + reserve > self.budget_bytes:
                    if buffer.taken >= self.batch_elements or not buffer.waiting:
                        yield self._give(buffer.flush())
                    else:
                        self.stats.source_keys.append(buffer.take())
                buffer.add(element, key, size)
                self.stats.peak_buffer_bytes = max(self.stats.peak_buffer_bytes, buffer.held_bytes)
                held = buffer.held_bytes + reserve
                self.stats.peak_held_bytes = max(self.stats.peak_held_bytes, held)
        while buffer.waiting:
            self.stats.source_keys.append(buffer.take())
            if buffer.taken >= self.batch_elements:
                yield self._give(buffer.flush())
        if buffer.taken:
            yield self._give(buffer.flush())

    def _list_elements(self, episode: dict, position: int, episode_bytes: int) -> Iterator:
        """Yields the episode's elements: (element, key, bytes)."""
        if self.unit is ShuffleUnit.EPISODES:
            yield episode, position, episode_bytes
            return
        for index, step, size in _split_steps(episode[types.STEPS]):
            yield step, (position << _STEP_BITS) | index, size

    def _give(self, elements: list[Any]) -> Any:
        """Returns what the generator yields for these elements (given in order)."""
        self.stats.elements += len(elements)
        if self.unit is ShuffleUnit.STEPS:
            return tree.unflatten_as(self.step_structure, _stack(elements))
        (episode,) = elements
        return episode

    def _check_fits(self, size: int, reserve: int, number: int) -> None:
        """Raises `ValueError` (surfacing as `tf.errors.InvalidArgumentError`) if an
        element cannot fit in the budget beside the episodes in flight."""
        if size + reserve <= self.budget_bytes:
            return
        position = int(self.ranges.load_positions[number])
        raise ValueError(
            f'memory_budget_bytes={self.budget_bytes:,} is too small: episode {position} (in '
            f"load's order) gives a {self.unit.value[:-1]} of {size:,} bytes, and "
            f'{reserve:,} bytes are reserved for the {_EPISODES_IN_FLIGHT} largest episodes '
            f'in flight. Raise the budget to at least {size + reserve:,} bytes'
            f'{_STEPS_ADVICE if self.unit is ShuffleUnit.EPISODES else ""}, or keep frames '
            "encoded (load(..., encoded_frames='all'))."
        )


def _check_arguments(memory_budget_bytes: Any, unit: Any, streams: Any, range_episodes: Any):
    checks.check_int_at_least(memory_budget_bytes, 1, argument='memory_budget_bytes')
    checks.check_int_at_least(streams, 1, argument='streams')
    checks.check_int_at_least(range_episodes, 1, argument='range_episodes')
    if not isinstance(unit, ShuffleUnit):
        raise TypeError(
            f'unit={unit!r} is not valid; expected ShuffleUnit.EPISODES or ShuffleUnit.STEPS.'
        )


def shuffle_within_budget(
    episodes: tf.data.Dataset,
    *,
    memory_budget_bytes: int,
    seed: int,
    unit: ShuffleUnit = ShuffleUnit.EPISODES,
    streams: int = 8,
    range_episodes: int = 4,
    stats: ShuffleStats | None = None,
) -> tf.data.Dataset:
    """Returns the episodes (or their steps) shuffled, holding at most a budget of bytes.

    Two levels (the module docstring gives the guarantees): the source's records in
    ranges of `range_episodes`, read in a seeded random order `streams` at a time; then a
    seeded shuffle buffer counted in bytes measured from the arrays.

    Args:
      episodes: What `rlds_reverb.load` returns for a TFDS directory or name (its default
        read of TFRecord shards), a `take`, `skip` or `shard` of it, or what a map over
        its source returns (`normalize`, and adders made in the read's own map, such as
        `adders.chunks`: the records are shuffled, the map applied as they are read);
        frames decoded or kept encoded (`encoded_frames=`).
      memory_budget_bytes: The most bytes the buffer and the episodes being read hold.
      seed: Seeds the order of the ranges and the buffer's choices.
      unit: `ShuffleUnit.EPISODES` (whole episodes) or `ShuffleUnit.STEPS` (every
        episode's steps, without episode-level fields).
      streams: Ranges read at a time.
      range_episodes: The most consecutive records (episodes) in one range.
      stats: Filled in while the dataset is iterated (`ShuffleStats`), if given.

    Returns:
      For episodes, an RLDS dataset (whole episodes, `frame_formats` kept); for steps, a
      `tf.data.Dataset` of step dicts.

    Raises:
      SourceError: If `episodes` is not read from a TFDS split's TFRecord shards.
      TypeError: If `unit` is not a `ShuffleUnit`.
      ValueError: If `memory_budget_bytes`, `streams` or `range_episodes` is not an
        integer >= 1.
      tf.errors.InvalidArgumentError: While iterated, if an element and the reserve for
        the episodes in flight do not fit in the budget (the message names the episode).

    Example:
      >>> episodes = rlds_reverb.load('/data/fractal/0.1.0', encoded_frames='all')
      >>> steps = shuffle_within_budget(
      ...     episodes, memory_budget_bytes=2 * 2**30, seed=0, unit=ShuffleUnit.STEPS)
    """
    _check_arguments(memory_budget_bytes, unit, streams, range_episodes)
    source, maps = _unwrap(episodes_lib.find_source(episodes))
    if source is None:
        raise SourceError(
            'shuffle_within_budget reads record ranges from random places in TFRecord shards, '
            'so it needs what rlds_reverb.load read from a TFDS directory (its default read: '
            'no read_config, no shuffle_files), or a take/skip/shard of it; got a '
            f'{type(episodes).__name__} that is not. Shuffle it with tf.data instead.'
        )
    ranges = _plan_ranges(source, range_episodes=range_episodes, seed=seed)
    read = _read_ranges(source, ranges, maps, streams=streams)
    stats = ShuffleStats() if stats is None else stats
    stats.ranges = len(ranges.takes)
    episode_spec = read.element_spec[0]
    steps_spec = episode_spec[types.STEPS]
    if unit is ShuffleUnit.STEPS:
        # Steps are handed on stacked, `[k, ...]` leaves: one at a time if shapes vary.
        shapes = [spec.shape[1:] for spec in tf.nest.flatten(steps_spec)]
        per_yield = _STEPS_PER_YIELD if all(s.is_fully_defined() for s in shapes) else 1
        batch_spec = tf.nest.map_structure(
            lambda s: tf.TensorSpec([None, *s.shape[1:]], s.dtype), steps_spec
        )
        shuffler = _Shuffler(
            read, ranges, memory_budget_bytes, unit, seed, stats, steps_spec, per_yield
        )
        batches = tf.data.Dataset.from_generator(shuffler, output_signature=batch_spec)
        return batches.unbatch()
    shuffler = _Shuffler(read, ranges, memory_budget_bytes, unit, seed, stats, steps_spec)
    whole = tf.data.Dataset.from_generator(shuffler, output_signature=episode_spec)
    return episodes_lib.from_whole_episodes(
        whole, frame_formats=episodes_lib.find_frame_formats(episodes)
    )
