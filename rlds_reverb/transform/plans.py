"""Episode plans: everything a writer needs to write one episode, computed in `tf.data`.

A plan is built per episode in a parallel, prefetched `tf.data` map on whole-episode
tensors (validation summary, the item kind's rows and windows, the priorities of a priority
function), so that Python only appends rows to a Reverb writer. Plans, item counts and
resume counts all come from here, so a push and the counts that check it agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from rlds_reverb.check import validation
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import specs, types
from rlds_reverb.transform import item_rows
from rlds_reverb.transform import items as items_lib

__all__ = [
    'EpisodePlan',
    'PriorityFn',
    'count_items',
    'count_items_per_episode',
    'make_episode_plans',
]

PriorityFn = Callable[[types.Nest], tf.Tensor]


class EpisodePlan(NamedTuple):
    """How to write one episode: what validation found, the rows and the items.

    Fields:
      summary: The episode's `validation.EpisodeSummary`.
      rows: The rows to append (`[R, ...]` leaves, `ItemKind.compute_rows`).
      starts: int32 `[N]`: the first row of each item.
      sizes: int32 `[N]`: the rows of each item.
      priorities: float64 `[N]` from a priority function, or `()` for a constant priority.
    """

    summary: validation.EpisodeSummary
    rows: types.Nest
    starts: Any
    sizes: Any
    priorities: Any = ()

    @property
    def length(self) -> int:
        """The episode's number of steps."""
        return int(self.summary.length)

    @property
    def num_items(self) -> int:
        """The number of items the plan creates (per table)."""
        return len(self.starts)


def make_episode_plans(
    episodes: tf.data.Dataset,
    item: items_lib.ItemKind,
    *,
    priority: float | PriorityFn = 1.0,
    policy_info_fn: specs.PolicyInfoFn = None,
) -> tf.data.Dataset:
    """Returns a dataset of one `EpisodePlan` per episode, computed ahead in parallel.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).
      item: The item kind.
      priority: A constant, or `fn(item_batch) -> [N]` priorities.
      policy_info_fn: Optional policy info function (two-step items).

    Returns:
      A prefetched dataset of `EpisodePlan`s, in episode order.

    Example:
      >>> for plan in make_episode_plans(episodes, items.TwoStep()).as_numpy_iterator(): ...
    """

    def _plan(steps: types.Nest) -> EpisodePlan:
        rows = item.compute_rows(steps, policy_info_fn=policy_info_fn)
        starts, sizes = (tf.cast(x, tf.int32) for x in item.compute_windows(steps))
        priorities = ()
        if callable(priority):
            batch = item.gather_items(rows, starts, sizes)
            priorities = tf.reshape(tf.cast(priority(batch), tf.float64), [-1])
        return EpisodePlan(validation.summarize_episode(steps), rows, starts, sizes, priorities)

    tensors = episodes_lib.to_episode_tensors(item.prepare_episodes(episodes))
    plans = tensors.map(
        episodes_lib.without_autograph(_plan),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    # Reverb's writer paces a push (tens of ms per episode); the plans are ready long before.
    # With tf.data's autotuning, dropping the iterator at the end of a push waited 9 to 10 s
    # in 1 push of 3 (200,000 steps), in the iterator's destructor, for a background thread
    # (benchmarks/README.md). Without it the map still runs as many calls as there are cores.
    options = tf.data.Options()
    options.autotune.enabled = False
    return plans.prefetch(tf.data.AUTOTUNE).with_options(options)


def summarize_episodes(
    episodes: tf.data.Dataset, item: items_lib.ItemKind, count_fn=None
) -> tf.data.Dataset:
    """Returns `(summary, items)` per episode: what validation needs and the item count.

    Cheaper than `make_episode_plans` (no rows are built): the Beam pipeline routes
    episodes by these counts before any is written.

    Args:
      episodes: An RLDS dataset.
      item: The item kind (not crossing episodes).
      count_fn: `fn(steps) -> count`; default: the number of the item kind's windows.

    Returns:
      A dataset of `(validation.EpisodeSummary, int count)`, in episode order.

    Example:
      >>> for summary, count in summarize_episodes(episodes, items.TwoStep()): ...
    """
    count_fn = count_fn or (lambda steps: tf.size(item.compute_windows(steps)[0]))

    def _count(steps: types.Nest) -> tuple[validation.EpisodeSummary, tf.Tensor]:
        return validation.summarize_episode(steps), count_fn(steps)

    tensors = episodes_lib.to_episode_tensors(item.prepare_episodes(episodes))
    return tensors.map(
        episodes_lib.without_autograph(_count),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def _count_per_valid_episode(
    episodes: tf.data.Dataset, item: items_lib.ItemKind, count_fn
) -> np.ndarray:
    """Returns `count_fn(steps)` per episode, 0 for an episode a push would skip.

    An episode is skipped exactly when it breaks a rule of `validation.EpisodeChecker`, or
    cannot be decoded.
    """

    counted = summarize_episodes(episodes, item, count_fn)
    checker = validation.EpisodeChecker(specs.get_step_spec(episodes))
    counts = []
    for index, element in validation.read_episodes(counted):
        if isinstance(element, validation.UnreadableEpisode):
            counts.append(0)  # An unreadable episode is invalid: it gives no item.
            continue
        summary, count = element
        counts.append(0 if checker.find_problems(index, summary) else int(count))
    return np.asarray(counts, dtype=np.int64)


def count_items_per_episode(episodes: tf.data.Dataset, item: items_lib.ItemKind) -> np.ndarray:
    """Returns how many items a push writes for each episode (0 for an invalid one).

    An episode is invalid here exactly when a push skips it: it breaks a rule of
    `validation.EpisodeChecker`, or it cannot be decoded.

    Raises:
      ValueError: For items that cross episodes (they have no per-episode count).

    Example:
      >>> count_items_per_episode(episodes, items.TwoStep())  # array([499, 0, 212, ...])
    """
    if item.crosses_episodes:
        raise ValueError(f'{item} items cross episodes; they have no per-episode count.')
    return _count_per_valid_episode(
        episodes, item, lambda steps: tf.size(item.compute_windows(steps)[0])
    )


def count_items(episodes: tf.data.Dataset, item: items_lib.ItemKind) -> int:
    """Returns how many items a push of `episodes` writes (invalid episodes give none).

    Example:
      >>> table = tables.uniform('replay', max_size=count_items(episodes, items.TwoStep()))
    """
    stream = item.stream_window
    if not item.crosses_episodes or stream is None:
        return int(count_items_per_episode(episodes, item).sum())
    # Windows across episodes cover the stream of the valid episodes' steps.
    total = _count_per_valid_episode(episodes, item, episodes_lib.episode_length).sum()
    starts, _ = item_rows.compute_sequence_windows(
        tf.constant(int(total)), stream.length, stream.period, types.EndBehavior.PAD
    )
    return int(tf.size(starts))
