"""Resuming by episode index: pushes that continue exactly, and restores that serve again.

A push writes episodes in order, and each valid episode gives a known number of items. The
number of items a table has ever had inserted (its rate limiter's insert count, which a
Reverb checkpoint saves and restores) therefore says how many whole episodes it holds:

* `find_resume_episode` matches that count against the dataset's per-episode item counts
  and returns the index of the first episode the table does not hold. A count that falls
  inside an episode means that episode was partly written; `ResumeError` names it.
* `push_resumable` pushes from that episode on, in chunks of `checkpoint_every` episodes,
  and checkpoints the server after each chunk. A server restarted from its latest
  checkpoint then holds whole episodes only, and the next `push_resumable` continues
  without duplicating or losing one. It must be the table's only writer.

From the command line: `rlds-reverb push SOURCE --server H:P --checkpoint-every 100`, and
after a crash and a restart from the latest checkpoint, the same with `--resume`.
"""

from __future__ import annotations

import numpy as np
import reverb
import tensorflow as tf

from rlds_reverb.core import deprecation, errors
from rlds_reverb.serve import checkpoints, table_info
from rlds_reverb.transform import carry, items
from rlds_reverb.transform.plans import count_items_per_episode
from rlds_reverb.write import push as push_lib

__all__ = [
    'ResumeError',
    'count_inserted',
    'count_items_per_episode',
    'find_resume_episode',
    'push_resumable',
]


class ResumeError(errors.PushError):
    """A table holds part of an episode, so no episode index resumes it exactly."""


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


def push_resumable(
    episodes: tf.data.Dataset,
    server: str | reverb.Client,
    table: str,
    *,
    item: items.ItemKind | None = None,
    checkpoint_every: int | None = None,
    start_episode: int | None = None,
    **push_options,
) -> push_lib.PushStats:
    """Pushes `episodes` from the first one the table lacks, checkpointing at boundaries.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).
      server: A 'host:port' address or a `reverb.Client`.
      table: The table name; this push must be its only writer.
      item: The item kind; default `items.TwoStep()`.
      checkpoint_every: Checkpoint the server after every this many episodes (None: never).
      start_episode: The first episode to push; None finds it from the table's insert count.
      **push_options: Passed to `rlds_reverb.push` (`on_invalid`, `timeout_ms`...).

    Returns:
      The stats of what this call wrote (episodes counted from `start_episode`).

    Raises:
      ResumeError: If the table holds part of an episode.
      PushError: If writing fails; `episodes_written` counts from episode 0 of the dataset.
    """
    item = item or items.TwoStep()
    # Ids count from episode 0 of the whole dataset, also when the push starts later.
    episodes = carry.carry_episode_fields(
        episodes, push_options.pop('episode_fields', ()), add_ids=push_options.pop('add_ids', False)
    )
    client = table_info.connect(server)
    if start_episode is None:
        counts = count_items_per_episode(episodes, item)
        start_episode = find_resume_episode(count_inserted(client, table), counts)
    total = int(episodes.cardinality()) if episodes.cardinality() >= 0 else None
    chunk = checkpoint_every or total or 2**62
    stats = push_lib.PushStats(items={table: 0})
    first = start_episode
    while total is None or first < total:
        part = episodes.skip(first).take(chunk)
        try:
            done = push_lib.push(part, client, table, item=item, **push_options)
        except errors.PushError as e:
            raise _from_dataset_start(e, first, stats) from e
        stats = stats.merge(done)
        if checkpoint_every:
            _checkpoint(client, written=first + done.episodes + done.skipped_episodes, stats=stats)
        if done.episodes + done.skipped_episodes < chunk:
            break
        first += chunk
    return stats


def _checkpoint(client: reverb.Client, *, written: int, stats: push_lib.PushStats) -> None:
    """Checkpoints the server; a failure is a `PushError` saying what is fully written."""
    try:
        checkpoints.checkpoint_server(client)
    except errors.CheckpointError as e:
        raise errors.PushError(
            f'{e} [episodes 0..{written - 1} of the dataset are fully written; those after the '
            'latest checkpoint are lost if the server restarts from it; run the resumable push '
            'again to continue.]',
            episodes_written=written,
            items_written=sum(stats.items.values()),
        ) from e


def _from_dataset_start(error: errors.PushError, first: int, before: push_lib.PushStats):
    """Returns `error` restated with counts from episode 0 of the dataset."""
    written = first + error.episodes_written
    return errors.PushError(
        f'{error} [This push started at episode {first} of the dataset and counts from '
        f'there: episodes 0..{written - 1} of the dataset are fully written; run the '
        f'resumable push again to continue from episode {written}.]',
        episodes_written=written,
        items_written=sum(before.items.values()) + error.items_written,
    )
