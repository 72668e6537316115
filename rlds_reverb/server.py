"""Reverb servers seeded from RLDS datasets, checkpointed, and restored on restart.

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

import reverb
import tensorflow as tf

from rlds_reverb import checkpoints, tables, types, writers
from rlds_reverb import items as items_lib
from rlds_reverb.errors import TableError


class TablePreset(enum.Enum):
    """The table presets a server can be seeded into (see `rlds_reverb.tables`)."""

    UNIFORM = 'uniform'
    PRIORITIZED = 'prioritized'
    FIFO = 'fifo'


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
    stats: writers.PushStats | None = None

    @property
    def address(self) -> str:
        """The loopback address of the server."""
        return f'localhost:{self.server.port}'


def make_table(
    preset: TablePreset | str,
    name: str,
    *,
    signature,
    max_size: int,
    priority_exponent: float = 0.6,
    min_size_to_sample: int = 1,
    samples_per_insert: float | None = None,
    max_times_sampled: int = 0,
) -> reverb.Table:
    """Returns the table of a preset (`uniform`, `prioritized`, `fifo`).

    Raises:
      ValueError: If the preset is unknown; `TableError` if an argument is out of range.
    """
    preset = types.as_enum(TablePreset, preset, argument='table_preset')
    if preset is TablePreset.FIFO:
        return tables.fifo_queue(name, max_size=max_size, signature=signature)
    common = dict(
        max_size=max_size,
        signature=signature,
        min_size_to_sample=min_size_to_sample,
        samples_per_insert=samples_per_insert,
        max_times_sampled=max_times_sampled,
    )
    if preset is TablePreset.PRIORITIZED:
        return tables.prioritized(name, priority_exponent=priority_exponent, **common)
    return tables.uniform(name, **common)


def start_server(
    server_tables: list[reverb.Table],
    *,
    port: int | None = None,
    checkpoint_dir: os.PathLike | str | None = None,
    reset_rate_limiters: bool = True,
) -> reverb.Server:
    """Starts a Reverb server; with `checkpoint_dir`, it restores the latest checkpoint there.

    Args:
      server_tables: The tables (a restored table takes its config from the checkpoint).
      port: The port; None picks a free one.
      checkpoint_dir: Where checkpoints live; the latest complete one is restored.
      reset_rate_limiters: Rewrite the checkpoint's rate-limiter counters first
        (`checkpoints.reset_rate_limiters`), so that restored tables serve samples even if
        their limiters had blocked sampling when the checkpoint was written.

    Returns:
      The running server.

    Example:
      >>> server = start_server([tables.uniform('replay', max_size=1000)], port=8000)
    """
    checkpointer = None
    if checkpoint_dir is not None:
        os.makedirs(checkpoint_dir, exist_ok=True)
        if reset_rate_limiters:
            checkpoints.reset_rate_limiters(checkpoint_dir)
        checkpointer = reverb.checkpointers.DefaultCheckpointer(path=os.fspath(checkpoint_dir))
    return reverb.Server(server_tables, port=port, checkpointer=checkpointer)


def checkpoint(client: reverb.Client) -> str:
    """Writes a checkpoint of every table on the server; returns its path."""
    return client.checkpoint()


def seed_server(
    episodes: tf.data.Dataset,
    *,
    table: str = 'replay',
    preset: TablePreset | str = TablePreset.UNIFORM,
    item: items_lib.ItemKind | None = None,
    port: int | None = None,
    checkpoint_dir: os.PathLike | str | None = None,
    max_size: int | None = None,
    priority_exponent: float = 0.6,
    priority: float | writers.PriorityFn = 1.0,
    on_invalid: str = 'raise',
    progress: writers.ProgressFn | None = None,
) -> SeedResult:
    """Starts a server with one preset table, seeded from `episodes` or restored.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.types`).
      table: The table name.
      preset: `'uniform'`, `'prioritized'` or `'fifo'`.
      item: The item kind; default `items.TwoStep()`.
      port: The port; None picks a free one.
      checkpoint_dir: Where checkpoints live. If it holds one, the server restores it and
        nothing is pushed; else the push is followed by a checkpoint there.
      max_size: The table size; default exactly the number of items of the dataset.
      priority_exponent: For the prioritized preset.
      priority: Item priorities, as for `push`.
      on_invalid: `'raise'` or `'skip'`, as for `push`.
      progress: Optional `fn(episodes, steps)`, as for `push`.

    Returns:
      A `SeedResult` with the running server and whether it was pushed or restored.

    Raises:
      TableError: If a restored checkpoint lacks `table`, or an argument is out of range.
      Anything `push` raises.

    Example:
      >>> result = seed_server(load(path), preset='prioritized', checkpoint_dir='/ckpt')
      >>> print(result.outcome.value, result.items)
    """
    started = time.perf_counter()
    item = items_lib.TwoStep() if item is None else item
    restoring = checkpoint_dir is not None and checkpoints.find_latest_checkpoint(checkpoint_dir)
    # A restored table takes its size and signature from the checkpoint.
    signature = None if restoring else tables.signature_for(item, episodes)
    if max_size is None:
        max_size = 1 if restoring else max(1, writers.count_items(episodes, item))
    reverb_table = make_table(
        preset, table, signature=signature, max_size=max_size, priority_exponent=priority_exponent
    )
    try:
        server = start_server([reverb_table], port=port, checkpoint_dir=checkpoint_dir)
    except (RuntimeError, ValueError) as e:  # Reverb refuses a checkpoint of other tables.
        raise TableError(
            f'Could not restore the checkpoint {restoring} with table {table!r}: {e}. Pass the '
            'table name it was seeded with, or another checkpoint directory.'
        ) from e
    client = reverb.Client(f'localhost:{server.port}')
    if restoring:
        info = client.server_info()
        return SeedResult(
            server,
            SeedOutcome.RESTORED,
            table,
            info[table].current_size,
            time.perf_counter() - started,
            str(restoring),
        )
    stats = writers.push(
        episodes,
        client,
        table,
        item=item,
        priority=priority,
        on_invalid=on_invalid,
        progress=progress,
    )
    path = checkpoint(client) if checkpoint_dir is not None else None
    return SeedResult(
        server,
        SeedOutcome.PUSHED,
        table,
        stats.items[table],
        time.perf_counter() - started,
        path,
        stats,
    )
