"""Resuming by episode index: pushes that continue exactly, and restores that serve again.

A push writes episodes in order, and each valid episode gives a known number of items. The
number of items a table has ever had inserted (its rate limiter's insert count, which a
Reverb checkpoint saves and restores) therefore says how many whole episodes it holds:

* `find_resume_episode` matches that count against the dataset's per-episode item counts
  and returns the index of the first episode the table does not hold. A count that falls
  inside an episode means that episode was partly written; `ResumeError` names it.
* `find_resume_point` does the same at item level: it also says how many items of a
  partly written episode the table already holds, and `write_remaining_items` writes the
  rest of that episode (items are inserted in a fixed order, by the row they end at), so a
  writer killed in the middle of an episode resumes exactly too.
* `push_resumable` pushes from that point on, in chunks of `checkpoint_every` episodes,
  and checkpoints the server after each chunk. A server restarted from its latest
  checkpoint then holds whole episodes only, and the next `push_resumable` continues
  without duplicating or losing one. It must be the table's only writer.

From the command line: `rlds-reverb push SOURCE --server H:P --checkpoint-every 100`, and
after a crash and a restart from the latest checkpoint, the same with `--resume`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import reverb
import tensorflow as tf

from rlds_reverb.core import deprecation, errors
from rlds_reverb.serve import checkpoints, table_info
from rlds_reverb.transform import carry, items
from rlds_reverb.transform.plans import EpisodePlan, count_items_per_episode, make_episode_plans
from rlds_reverb.write import engines
from rlds_reverb.write import push as push_lib

__all__ = [
    'ResumeError',
    'ResumePoint',
    'count_inserted',
    'count_items_per_episode',
    'find_resume_episode',
    'find_resume_point',
    'push_resumable',
    'write_remaining_items',
]


# Defined with the package's other errors; the name stays importable from here.
ResumeError = errors.ResumeError


def count_inserted(
    client: reverb.Client, table: str, *, timeout_ms: int = 10_000, timeout_s: int | None = None
) -> int:
    """Returns how many items `table` has ever had inserted (restored with a checkpoint).

    Args:
      client: The Reverb client.
      table: The table.
      timeout_ms: The most the server may take to answer.
      timeout_s: The deprecated 0.1 form of `timeout_ms` (works until 0.3).

    Raises:
      ReverbConnectionError: If the server does not answer within `timeout_ms`.
      TableError: If there is no such table.
    """
    if timeout_s is not None:
        deprecation.warn_renamed_argument('timeout_s', 'timeout_ms', function='count_inserted')
        timeout_ms = 1000 * timeout_s
    return table_info.count_inserted(
        table_info.fetch_table_info(client, table, timeout_ms=timeout_ms)
    )


def find_resume_episode(inserted: int, counts: np.ndarray) -> int:
    """Returns the first episode index a table with `inserted` items does not hold.

    Episodes that give no items (invalid, or too short) are skipped over: pushing them
    again writes nothing.

    Raises:
      ResumeError: If `inserted` falls inside an episode, or exceeds the dataset's items.
    """
    ends = np.cumsum(counts)
    whole = int(np.searchsorted(ends, inserted, side='right'))
    held = int(ends[whole - 1]) if whole else 0
    if held == inserted:
        return whole
    if whole == len(counts):
        raise ResumeError(
            f'The table holds {inserted} items, more than the {held} items of the whole '
            'dataset: it holds other data; push into an empty table instead.',
            episodes_written=whole,
            items_written=inserted,
        )
    raise ResumeError(
        f'The table holds {inserted} items: episodes 0..{whole - 1} whole ({held} items) and '
        f'{inserted - held} of the {int(counts[whole])} items of episode {whole}, which was '
        'partly written. No episode index resumes it exactly; restart the server from a '
        'checkpoint written by push_resumable, or push into an empty table.',
        episodes_written=whole,
        items_written=inserted,
    )


class ResumePoint(NamedTuple):
    """Where a resumed write starts: `episode`, of which `items` are already in the table."""

    episode: int
    items: int = 0


def find_resume_point(inserted: int, counts: np.ndarray) -> ResumePoint:
    """Returns where a table with `inserted` items resumes, at item level.

    Like `find_resume_episode`, but a count that falls inside an episode is no error: the
    result names that episode and how many of its items the table already holds (its
    first items in insertion order, see `write_remaining_items`).

    Args:
      inserted: The table's insert count (`count_inserted`).
      counts: The items of each episode in the order they are written (0 for skipped ones).

    Returns:
      The first episode not wholly in the table, and how many of its items are.

    Raises:
      ResumeError: If `inserted` exceeds the items of all the episodes (other data).

    Example:
      >>> find_resume_point(8, np.array([3, 3, 3, 3]))  # ResumePoint(episode=2, items=2)
    """
    counts = np.asarray(counts, dtype=np.int64)
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    if inserted > total:
        raise ResumeError(
            f'The table holds {inserted} items, more than the {total} items of the whole '
            'dataset: it holds other data; push into an empty table instead.',
            episodes_written=len(counts),
            items_written=inserted,
        )
    whole = int(np.searchsorted(ends, inserted, side='right'))
    held = int(ends[whole - 1]) if whole else 0
    return ResumePoint(whole, inserted - held)


def order_items(plan: EpisodePlan) -> np.ndarray:
    """Returns the plan's item indices in the order a writer inserts them (by end row).

    Both engines create an episode's items (for one table) in this order: the
    StructuredWriter's window configs end at most one item per row, and the
    TrajectoryEngine creates items sorted by their end row (stable).
    """
    starts, sizes = np.asarray(plan.starts), np.asarray(plan.sizes)
    return np.argsort(starts + sizes, kind='stable')


def drop_first_items(plan: EpisodePlan, count: int) -> EpisodePlan:
    """Returns the plan without its first `count` items in insertion order (same rows)."""
    keep = np.sort(order_items(plan)[count:])
    priorities = plan.priorities
    if len(priorities):
        priorities = np.asarray(priorities)[keep]
    return plan._replace(
        starts=np.asarray(plan.starts)[keep],
        sizes=np.asarray(plan.sizes)[keep],
        priorities=priorities,
    )


def write_remaining_items(
    client: reverb.Client,
    table: str,
    plan: EpisodePlan,
    held: int,
    *,
    item: items.ItemKind,
    priority: float | None,
    timeout_ms: int = push_lib.DEFAULT_TIMEOUT_MS,
    max_in_flight_items: int = push_lib.DEFAULT_MAX_IN_FLIGHT_ITEMS,
) -> int:
    """Writes the items of a partly written episode that the table does not hold yet.

    The table holds the first `held` items of the episode (in insertion order, see
    `order_items`); this appends the episode's rows again and creates the others with a
    `TrajectoryWriter`, so the table ends up holding every item of the episode once.

    Args:
      client: The Reverb client.
      table: The table (its only writer).
      plan: The episode's plan.
      held: How many of its items the table holds (`find_resume_point(...).items`).
      item: The item kind (not crossing episodes).
      priority: The constant priority, or None for the plan's per-item priorities.
      timeout_ms: The most any wait on the server may take.
      max_in_flight_items: The most items pending on the server.

    Returns:
      The number of items written.

    Raises:
      ValueError: If `held` is not between 0 and the plan's items.

    Example:
      >>> write_remaining_items(client, 'replay', plan, 2, item=items.TwoStep(), priority=1.0)
    """
    if not 0 <= held <= plan.num_items:
        raise ValueError(f'held={held} is not valid; the episode has {plan.num_items} items.')
    rest = drop_first_items(plan, held)
    if rest.num_items == 0:
        return 0
    engine = engines.TrajectoryEngine(
        client,
        item,
        [table],
        priority=priority,
        max_in_flight_items=max_in_flight_items,
        timeout_ms=timeout_ms,
    )
    with engine:  # Closed on every path: no writer is left to its destructor.
        return engine.write_episode(rest)


def push_resumable(
    episodes: tf.data.Dataset,
    server: str | reverb.Client,
    table: str,
    *,
    item: items.ItemKind | None = None,
    checkpoint_every: int | None = None,
    start_episode: int | ResumePoint | None = None,
    **push_options,
) -> push_lib.PushStats:
    """Pushes `episodes` from the first one the table lacks, checkpointing at boundaries.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).
      server: A 'host:port' address or a `reverb.Client`.
      table: The table name; this push must be its only writer.
      item: The item kind; default `items.TwoStep()`.
      checkpoint_every: Checkpoint the server after every this many episodes (None: never).
      start_episode: The first episode to push, or a `ResumePoint` (the rest of a partly
        written episode first); None finds the point from the table's insert count, so a
        table holding part of an episode resumes exactly at its next item.
      **push_options: Passed to `rlds_reverb.push` (`on_invalid`, `timeout_ms`...).

    Returns:
      The stats of what this call wrote (episodes counted from `start_episode`).

    Raises:
      ResumeError: If the table holds more items than the dataset gives.
      ReverbConnectionError: If nothing answers at the server's address at the start.
      PushError: If writing fails, also when the server dies part way; `episodes_written`
        counts from episode 0 of the dataset.
    """
    item = item or items.TwoStep()
    # Ids count from episode 0 of the whole dataset, also when the push starts later.
    episodes = carry.carry_episode_fields(
        episodes, push_options.pop('episode_fields', ()), add_ids=push_options.pop('add_ids', False)
    )
    client = table_info.connect(server)
    stats = push_lib.PushStats(items={table: 0})
    if start_episode is None or isinstance(start_episode, ResumePoint):
        point = start_episode
        if point is None:
            counts = count_items_per_episode(episodes, item)
            point = find_resume_point(count_inserted(client, table), counts)
        start_episode = point.episode
        if point.items:  # A partly written episode: write the rest of it first.
            stats = stats.merge(
                _finish_episode(episodes, client, table, point, item=item, **push_options)
            )
            start_episode += 1
    total = int(episodes.cardinality()) if episodes.cardinality() >= 0 else None
    chunk = checkpoint_every or total or 2**62
    first = start_episode
    while total is None or first < total:
        part = episodes.skip(first).take(chunk)
        try:
            done = push_lib.push(part, client, table, item=item, **push_options)
        except (errors.PushError, errors.ReverbConnectionError) as e:  # A server that died.
            raise _from_dataset_start(e, first, stats) from e
        stats = stats.merge(done)
        if checkpoint_every:
            _checkpoint(client, written=first + done.episodes + done.skipped_episodes, stats=stats)
        if done.episodes + done.skipped_episodes < chunk:
            break
        first += chunk
    return stats


def _finish_episode(
    episodes: tf.data.Dataset,
    client: reverb.Client,
    table: str,
    point: ResumePoint,
    *,
    item: items.ItemKind,
    priority=1.0,
    policy_info_fn=None,
    timeout_ms: int = push_lib.DEFAULT_TIMEOUT_MS,
    max_in_flight_items: int = push_lib.DEFAULT_MAX_IN_FLIGHT_ITEMS,
    progress=None,
    **_,
) -> push_lib.PushStats:
    """Writes the items of the partly written episode `point.episode` the table lacks."""
    part = episodes.skip(point.episode).take(1)
    plans = make_episode_plans(part, item, priority=priority, policy_info_fn=policy_info_fn)
    plan = next(plans.as_numpy_iterator())
    written = write_remaining_items(
        client,
        table,
        plan,
        point.items,
        item=item,
        priority=None if callable(priority) else float(priority),
        timeout_ms=timeout_ms,
        max_in_flight_items=max_in_flight_items,
    )
    if progress is not None:
        progress(1, plan.length)
    return push_lib.PushStats(episodes=1, steps=plan.length, items={table: written})


def _checkpoint(client: reverb.Client, *, written: int, stats: push_lib.PushStats) -> None:
    """Checkpoints the server; a failure is a `PushError` saying what is fully written."""
    try:
        checkpoints.checkpoint_server(client)
    except (errors.CheckpointError, errors.ReverbConnectionError) as e:
        raise errors.PushError(
            f'{e} [episodes 0..{written - 1} of the dataset are fully written; those after the '
            'latest checkpoint are lost if the server restarts from it; run the resumable push '
            'again to continue.]',
            episodes_written=written,
            items_written=sum(stats.items.values()),
        ) from e


def _from_dataset_start(
    error: errors.PushError | errors.ReverbConnectionError, first: int, before: push_lib.PushStats
) -> errors.PushError:
    """Returns `error` restated with counts from episode 0 of the dataset.

    A `ReverbConnectionError` (the server died between two chunks) wrote nothing of its chunk.
    """
    written = first + getattr(error, 'episodes_written', 0)
    return errors.PushError(
        f'{error} [This push started at episode {first} of the dataset and counts from '
        f'there: episodes 0..{written - 1} of the dataset are fully written; run the '
        f'resumable push again to continue from episode {written}.]',
        episodes_written=written,
        items_written=sum(before.items.values()) + getattr(error, 'items_written', 0),
    )
