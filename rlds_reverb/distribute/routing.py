"""Where each episode goes: shard ranges of a TFDS split, and episodes balanced over servers.

Nothing here imports Apache Beam: the pipeline (`rlds_reverb.distribute.pipeline`) and its
tests use these plain functions.

* `list_shard_ranges` cuts a TFDS split into one range of episode indices per shard file
  (`builder.info.splits[split].file_instructions`), the unit a worker reads.
* `group_shard_ranges` joins neighbouring ranges into fewer, balanced ones: each read
  costs a fixed set-up (opening the dataset, tracing its functions), which small shards
  would pay many times over.
* `assign_servers` places each episode on a server: the episodes, in index order, are cut
  into one consecutive run per server with balanced item counts (each within one episode's
  items of the mean). It is a function of the dataset, the split, the item kind and the
  server list only, so a re-run places every episode where it went before; and each
  server's episodes are one index range, so its writer reads only the shards holding them.

Episode indices count in shard order: the episodes of the split's first shard file, then
the second's, as TFDS' split slices (`'train[a:b]'`) number them. A read of the whole split
may give another order (TFDS interleaves shards 16 episodes at a time unless the dataset
disables shuffling); the pipeline reads index ranges in shard order only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []


@dataclasses.dataclass(frozen=True)
class ShardRange:
    """Episodes `[first, first + count)` of a split, stored in one shard file."""

    filename: str
    first: int
    count: int


def list_shard_ranges(builder, split: str) -> list[ShardRange]:
    """Returns the split's episodes as one range of indices per shard file, in order.

    Args:
      builder: A TFDS builder (prepared).
      split: A split name without slicing (`'train'`).

    Returns:
      The ranges, covering `0..N-1` in order.

    Raises:
      ValueError: If `split` uses TFDS slicing (`'train[:10%]'`), or is not a split.

    Example:
      >>> list_shard_ranges(tfds.builder_from_directory(path), 'train')[0]
      ShardRange(filename='.../name-train.tfrecord-00000-of-00003', first=0, count=5)
    """
    if '[' in split or '+' in split:
        raise ValueError(
            f'split={split!r} is not valid here; the Beam pipeline reads whole splits by shard '
            "(a name such as 'train'); slice the dataset with TFDS before pushing instead."
        )
    if split not in builder.info.splits:
        raise ValueError(
            f'split={split!r} is not a split of {builder.info.full_name}; it has '
            f'{sorted(builder.info.splits.keys())}.'
        )
    ranges, first = [], 0
    for instruction in builder.info.splits[split].file_instructions:
        count = int(instruction.take if instruction.take >= 0 else instruction.examples_in_shard)
        count = min(count, int(instruction.examples_in_shard) - int(instruction.skip))
        if count > 0:
            ranges.append(ShardRange(str(instruction.filename), first, count))
        first += max(count, 0)
    return ranges


def group_shard_ranges(ranges: Sequence[ShardRange], num_groups: int) -> list[ShardRange]:
    """Joins neighbouring shard ranges into at most `num_groups` ranges of similar size.

    Args:
      ranges: Consecutive ranges (`list_shard_ranges`).
      num_groups: The most ranges to return (at least 1).

    Returns:
      Consecutive ranges covering the same episodes, whole shards each; a joined range's
      `filename` names its first and last shard files.

    Raises:
      ValueError: If `num_groups` < 1.

    Example:
      >>> group_shard_ranges(list_shard_ranges(builder, 'train'), 4)
    """
    if num_groups < 1:
        raise ValueError(f'num_groups={num_groups} must be at least 1.')
    if len(ranges) <= num_groups:
        return list(ranges)
    counts = np.array([r.count for r in ranges], dtype=np.int64)
    # Cut where the running episode count crosses each multiple of total / num_groups.
    ends = np.cumsum(counts)
    targets = ends[-1] * np.arange(1, num_groups) / num_groups
    cuts = np.unique(np.searchsorted(ends, targets, side='left') + 1)
    groups = np.split(np.arange(len(ranges)), cuts[(cuts > 0) & (cuts < len(ranges))])
    joined = []
    for group in groups:
        first, last = ranges[group[0]], ranges[group[-1]]
        name = first.filename if first is last else f'{first.filename} .. {last.filename}'
        joined.append(ShardRange(name, first.first, int(counts[group].sum())))
    return joined


def assign_servers(counts: Sequence[int], num_servers: int) -> np.ndarray:
    """Returns the server position of each episode: consecutive runs of balanced item counts.

    The episodes, in index order, are cut into `num_servers` consecutive runs, the first
    on server 0: each cut falls on the episode boundary nearest to the next multiple of
    total / `num_servers` items (ties: the earlier boundary). Each server's items are
    therefore within one episode's items of the mean, and a server's episodes are one
    index range, which its writer reads alone (a few neighbouring shards). Episodes that
    give no items (invalid, skipped) stay in the run they fall in; when no episode gives
    items, the runs balance episode counts instead.

    Args:
      counts: The items of each episode, by episode index.
      num_servers: How many servers.

    Returns:
      int64 `[len(counts)]`: the server position (0..num_servers-1) of each episode,
      non-decreasing.

    Raises:
      ValueError: If `num_servers` < 1.

    Example:
      >>> assign_servers([5, 1, 1, 3], 2)  # array([0, 1, 1, 1])
    """
    if num_servers < 1:
        raise ValueError(f'num_servers={num_servers} is not valid; expected >= 1.')
    weights = np.asarray(counts, dtype=np.int64).reshape(-1)
    if not weights.sum():
        weights = np.ones_like(weights)
    # before[i]: the items of episodes 0..i-1, so boundary i precedes episode i.
    before = np.concatenate([[0], np.cumsum(weights)])
    targets = before[-1] * np.arange(1, num_servers) / num_servers
    above = np.searchsorted(before, targets, side='left')  # First boundary >= target.
    below = np.maximum(above - 1, 0)
    nearer_below = (targets - before[below]) <= (
        before[np.minimum(above, len(before) - 1)] - targets
    )
    cuts = np.where(nearer_below, below, above)
    return np.searchsorted(cuts, np.arange(len(weights)), side='right').astype(np.int64)


def describe_spread(items_per_server: Sequence[int]) -> str:
    """Returns 'items per server: a, b (spread x%)': the largest over the mean, minus one."""
    values = [int(v) for v in items_per_server]
    mean = sum(values) / len(values) if values else 0.0
    spread = (max(values) / mean - 1.0) if mean > 0 else 0.0
    return f'items per server: {", ".join(map(str, values))} (spread {100 * spread:.1f}%)'


def compute_spread(items_per_server: Sequence[int]) -> float:
    """Returns the largest server's items over the mean, minus one (0.0: perfectly even)."""
    values = [int(v) for v in items_per_server]
    mean = sum(values) / len(values) if values else 0.0
    return (max(values) / mean - 1.0) if mean > 0 else 0.0
