"""Resuming by episode index: pushes that continue exactly, and restores that serve again.

A push writes episodes in order, and each valid episode gives a known number of items. The
number of items a table has ever had inserted (its rate limiter's insert count, which a
Reverb checkpoint saves and restores) therefore says how many whole episodes it holds:

* `find_resume_point` matches that count against the dataset's per-episode item counts
  and returns the first episode the table does not hold whole, with how many of its items
  it holds; `write_remaining_items` writes the rest of that episode (items are inserted in a
  fixed order, by the row they end at), so a writer killed in the middle of an episode
  resumes exactly too.
* `push_resumable` pushes from that point on, in chunks of `checkpoint_every` episodes,
  and checkpoints the server after each chunk. A server restarted from its latest
  checkpoint then holds whole episodes only, and the next `push_resumable` continues
  without duplicating or losing one. It must be the table's only writer.

From the command line: `rlds-reverb push SOURCE --server H:P --checkpoint-every 100`, and
after a crash and a restart from the latest checkpoint, the same with `--resume`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import reverb
import tensorflow as tf

from rlds_reverb.core import errors, timeouts
from rlds_reverb.serve import table_info
from rlds_reverb.transform.plans import count_items_per_episode
from rlds_reverb.write import loop
from rlds_reverb.write import options as options_lib
from rlds_reverb.write.options import PushOptions
from rlds_reverb.write.resume_points import (
    ResumePoint,
    drop_first_items,
    find_resume_point,
    order_items,
    write_remaining_items,
)

__all__ = [
    'ResumeError',
    'ResumePoint',
    'count_inserted',
    'count_items_per_episode',
    'drop_first_items',
    'find_resume_point',
    'order_items',
    'push_resumable',
    'write_remaining_items',
]


# Defined in `rlds_reverb.core.errors` (importable from here too).
ResumeError = errors.ResumeError


def count_inserted(
    client: reverb.Client, table: str, *, timeout_ms: int = timeouts.RESUME_COUNT_MS
) -> int:
    """Returns how many items `table` has ever had inserted (restored with a checkpoint).

    Args:
      client: The Reverb client.
      table: The table.
      timeout_ms: The most the server may take to answer.

    Raises:
      ReverbConnectionError: If the server does not answer within `timeout_ms`.
      TableError: If there is no such table.
    """
    return table_info.count_inserted(
        table_info.fetch_table_info(client, table, timeout_ms=timeout_ms)
    )


def push_resumable(
    episodes: tf.data.Dataset,
    server: str | reverb.Client,
    table: str,
    *,
    start_episode: int | ResumePoint | None = None,
    progress: loop.ProgressFn | None = None,
    options: PushOptions | None = None,
    **overrides: Any,
) -> loop.PushStats:
    """Pushes `episodes` from the first one the table lacks, checkpointing at boundaries.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).
      server: A 'host:port' address or a `reverb.Client`.
      table: The table name; this push must be its only writer.
      start_episode: The first episode to push, or a `ResumePoint` (the rest of a partly
        written episode first); None finds the point from the table's insert count, so a
        table holding part of an episode resumes exactly at its next item.
      progress: Optional `fn(episodes, steps)` called after each episode is written.
      options: The write options (`PushOptions`: the item kind, `checkpoint_every` to
        checkpoint the server after every that many episodes, ...).
      **overrides: Options of `PushOptions` by name, without `options`
        (`item=items.NStep(3, 0.99), checkpoint_every=100`).

    Returns:
      The stats of what this call wrote (episodes counted from `start_episode`).

    Raises:
      TypeError: If a keyword is not an option of `PushOptions`.
      ValueError: If an option is invalid.
      ResumeError: If the table holds more items than the dataset gives.
      ReverbConnectionError: If nothing answers at the server's address at the start.
      PushError: If writing fails, also when the server dies part way; `episodes_written`
        counts from episode 0 of the dataset.

    Example:
      >>> push_resumable(load(path), 'localhost:8000', 'replay', checkpoint_every=100)
    """
    options = options_lib.merge_options(options, **overrides)
    if isinstance(start_episode, int):
        start_episode = ResumePoint(start_episode)
    if start_episode is None and not options.resume:
        options = dataclasses.replace(options, resume=True)  # A copy: the caller's is kept.
    return loop.push_episodes(
        episodes, server, [table], options, progress=progress, start=start_episode
    )
