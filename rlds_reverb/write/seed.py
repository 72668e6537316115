"""Seeding Reverb servers from RLDS datasets: push once, checkpoint, restore on restart.

`seed_server` starts a real `reverb.Server` whose checkpointer writes to a directory. If
that directory already holds a complete checkpoint, the server restores its tables from it
(Reverb loads the latest checkpoint when it starts) and nothing is pushed; otherwise the
dataset is pushed and a checkpoint is written. The result says which happened.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import time
from typing import Any

import reverb
import tensorflow as tf

from rlds_reverb.core import types
from rlds_reverb.core.errors import TableError
from rlds_reverb.serve import checkpoints, server, table_info, tables
from rlds_reverb.transform import plans
from rlds_reverb.write import options as options_lib
from rlds_reverb.write import push as push_lib
from rlds_reverb.write.options import PushOptions

__all__ = [
    'SeedOutcome',
    'SeedResult',
    'seed_server',
]


class SeedOutcome(enum.Enum):
    """Whether a seeded server's tables were pushed from the dataset or restored."""

    PUSHED = 'pushed'
    RESTORED = 'restored'


@dataclasses.dataclass
class SeedResult:
    """A running seeded server and how it got its items."""

    server: reverb.Server
    outcome: SeedOutcome
    table: str
    items: int
    seconds: float
    checkpoint_path: str | None = None
    stats: push_lib.PushStats | None = None

    @property
    def address(self) -> str:
        """The loopback address of the server."""
        return f'localhost:{self.server.port}'


def seed_server(
    episodes: tf.data.Dataset,
    *,
    table: str = 'replay',
    preset: tables.TablePreset | str = tables.TablePreset.UNIFORM,
    port: int | None = None,
    checkpoint_dir: os.PathLike | str | None = None,
    max_size: int | None = None,
    priority_exponent: float = 0.6,
    progress: push_lib.ProgressFn | None = None,
    options: PushOptions | None = None,
    **overrides: Any,
) -> SeedResult:
    """Starts a server with one preset table, seeded from `episodes` or restored.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).
      table: The table name.
      preset: `'uniform'`, `'prioritized'` or `'fifo'` (`tables.TablePreset`).
      port: The port; None picks a free one.
      checkpoint_dir: Where checkpoints live. If it holds one, the server restores it and
        nothing is pushed; else the push is followed by a checkpoint there.
      max_size: The table size; default exactly the number of items of the dataset.
      priority_exponent: For the prioritized preset.
      progress: Optional `fn(episodes, steps)`, as for `push`.
      options: The write options of the push (`PushOptions`: item kind, priority,
        `on_invalid`...); the table's signature follows them. Not `resume` or
        `checkpoint_every`: the server is new, and checkpointed once, after the push.
      **overrides: Options of `PushOptions` by name, without `options`
        (`item=items.NStep(3, 0.99)`).

    Returns:
      A `SeedResult` with the running server and whether it was pushed or restored. If
      seeding fails (or is interrupted), the server is stopped before the error propagates.

    Raises:
      TableError: If a restored checkpoint lacks `table`, or an argument is out of range.
      TypeError: If a keyword is not an option of `PushOptions`.
      ValueError: If an option is invalid, or `resume` or `checkpoint_every` is given.
      Exception: Anything `push` raises, unchanged.

    Example:
      >>> result = seed_server(load(path), preset='prioritized', checkpoint_dir='/ckpt')
      >>> print(result.outcome.value, result.items)
    """
    started = time.perf_counter()
    options = options_lib.merge_options(options, **overrides)
    if options.resume or options.checkpoint_every is not None:
        raise ValueError(
            'seed_server pushes into a new server and checkpoints it once, after the push '
            '(a restart restores that checkpoint): resume and checkpoint_every are for '
            'push_resumable into a running server.'
        )
    restoring = checkpoint_dir is not None and checkpoints.find_latest_checkpoint(checkpoint_dir)
    # A restored table takes its size and signature from the checkpoint.
    signature = None if restoring else _make_signature(episodes, options)
    if max_size is None:
        max_size = 1 if restoring else max(1, plans.count_items(episodes, options.item))
    reverb_table = tables.make_table(
        preset, table, signature=signature, max_size=max_size, priority_exponent=priority_exponent
    )
    try:
        running = server.start_server([reverb_table], port=port, checkpoint_dir=checkpoint_dir)
    except (RuntimeError, ValueError) as e:  # Reverb refuses a checkpoint of other tables.
        raise TableError(
            f'Could not restore the checkpoint {restoring} with table {table!r}: {e}. Pass the '
            'table name it was seeded with, or another checkpoint directory.'
        ) from e
    try:  # Until the result is handed over, an error stops the server.
        client = reverb.Client(f'localhost:{running.port}')
        if restoring:
            info = table_info.fetch_server_info(client, timeout_ms=options.timeout_ms)
            restored: Any = info[table]  # A `reverb.TableInfo`.
            return SeedResult(
                running,
                SeedOutcome.RESTORED,
                table,
                restored.current_size,
                time.perf_counter() - started,
                str(restoring),
            )
        stats = push_lib.push(episodes, client, table, options=options, progress=progress)
        path = checkpoints.checkpoint_server(client) if checkpoint_dir is not None else None
    except BaseException:  # An invalid episode, Ctrl-C: the server must not stay behind.
        running.stop()
        raise
    return SeedResult(
        running,
        SeedOutcome.PUSHED,
        table,
        stats.items[table],
        time.perf_counter() - started,
        path,
        stats,
    )


def _make_signature(episodes: tf.data.Dataset, options: PushOptions) -> types.SpecNest:
    """Returns the table signature of the items `options` push from `episodes`."""
    return tables.signature_for(
        options.item,
        episodes,
        policy_info_fn=options.policy_info_fn,
        episode_fields=options.episode_fields,
        add_ids=options.add_ids,
    )
