"""Where a write resumes: the table's insert count as an episode and item, and the rest.

A push writes episodes in order, and each valid episode gives a known number of items, so
a table's insert count says how many whole episodes it holds and how many items of the
next (`find_resume_point`). Both writer engines insert an episode's items in one fixed
order, by the row they end at (`order_items`), so the items a table holds of a partly
written episode are known too, and `write_remaining_items` writes exactly the others.
`rlds_reverb.write.resume` (pushes that continue), the episode loop
(`rlds_reverb.write.loop`) and the Beam writer stage resume through here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import reverb
import tensorflow as tf

from rlds_reverb.core.errors import ResumeError
from rlds_reverb.transform import items as items_lib
from rlds_reverb.transform import plans as plans_lib
from rlds_reverb.transform.plans import EpisodePlan
from rlds_reverb.write import engines
from rlds_reverb.write import options as options_lib
from rlds_reverb.write.options import PushOptions

__all__ = [
    'ResumePoint',
    'count_resume_point',
    'drop_first_items',
    'find_resume_point',
    'order_items',
    'write_remaining_items',
]


class ResumePoint(NamedTuple):
    """Where a resumed write starts: `episode`, of which `items` are already in the table."""

    episode: int
    items: int = 0


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
    options: PushOptions | None = None,
    **overrides: Any,
) -> int:
    """Writes the items of a partly written episode that the table does not hold yet.

    The table holds the first `held` items of the episode (in insertion order, see
    `order_items`); this appends the episode's rows again and creates the others with a
    `TrajectoryWriter`, so the table ends up holding every item of the episode once.

    Args:
      client: The Reverb client.
      table: The table (its only writer).
      plan: The episode's plan (its priorities, with a priority function).
      held: How many of its items the table holds (`find_resume_point(...).items`).
      options: The write options (`PushOptions`; its item kind must not cross episodes).
      **overrides: Options of `PushOptions` by name, without `options`.

    Returns:
      The number of items written.

    Raises:
      ValueError: If `held` is not between 0 and the plan's items, or an option is invalid.

    Example:
      >>> write_remaining_items(client, 'replay', plan, 2, item=items.TwoStep(), priority=1.0)
    """
    options = options_lib.merge_options(options, **overrides)
    if not 0 <= held <= plan.num_items:
        raise ValueError(f'held={held} is not valid; the episode has {plan.num_items} items.')
    rest = drop_first_items(plan, held)
    if rest.num_items == 0:
        return 0
    engine = engines.TrajectoryEngine(
        client,
        options.item,
        [table],
        priority=options.constant_priority,
        max_in_flight_items=options.max_in_flight_items,
        timeout_ms=options.timeout_ms,
    )
    with engine:  # Closed on every path: no writer is left to its destructor.
        return engine.write_episode(rest)


def find_resume_point(inserted: int, counts: np.ndarray) -> ResumePoint:
    """Returns where a table with `inserted` items resumes, at item level.

    A count that falls inside an episode is no error: the result names that episode and
    how many of its items the table already holds (its first items in insertion order, see
    `write_remaining_items`).

    Args:
      inserted: The table's insert count (`table_info.count_inserted`).
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


def count_resume_point(
    episodes: tf.data.Dataset, inserted: int, item: items_lib.ItemKind
) -> tuple[ResumePoint, int]:
    """Returns where a table with `inserted` items of this push resumes, and the episodes.

    Reads the whole dataset once to count each episode's items (0 for an invalid one).

    Raises:
      ValueError: For items that cross episodes (they have no per-episode count).
      ResumeError: If the table holds more items than the dataset gives.
    """
    counts = plans_lib.count_items_per_episode(episodes, item)
    return find_resume_point(inserted, counts), len(counts)
