"""Reverb checkpoints on disk: find the latest, read its table records, unblock its limiters.

Reverb's default checkpointer writes one directory per checkpoint under the server's
checkpoint directory, marked complete by a `DONE` file, holding the tables' configs and
counters in `tables.tfrecord` (ZLIB-compressed `PriorityTableCheckpoint` protos).

A restored rate limiter keeps the counters of the checkpoint, whatever the server was built
with (reverb issues 64 and 118): a `SampleToInsertRatio` table whose samples had caught up
with its inserts blocks every sample of the restarted server, although nothing new needs to
be inserted. `reset_rate_limiters` rewrites those counters, and `server.start_server` calls
it by default before restoring.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import reverb
import tensorflow as tf
from reverb.cc.checkpointing import checkpoint_pb2

from rlds_reverb.core.errors import CheckpointError
from rlds_reverb.serve import table_info

# Reverb marks a complete checkpoint with this file in the checkpoint's directory.
_DONE_FILE = 'DONE'
_TABLES_FILE = 'tables.tfrecord'
# Reverb's TFRecord checkpointer compresses its files.
_COMPRESSION = 'ZLIB'


def checkpoint_server(client: reverb.Client) -> str:
    """Writes a checkpoint of every table on the server; returns its path.

    Raises:
      ReverbConnectionError: If nothing answers at the server's address (it is probed
        first: `table_info.probe_server`).
      CheckpointError: If the server did not write it (it failed, or has no checkpointer).

    Example:
      >>> path = checkpoint_server(reverb.Client('localhost:8000'))
    """
    table_info.probe_server(client.server_address)
    try:
        return client.checkpoint()
    except (RuntimeError, reverb.errors.ReverbError) as e:
        raise CheckpointError(
            f'Checkpoint of the Reverb server at {client.server_address} failed ({e}).'
        ) from e


def find_latest_checkpoint(checkpoint_dir: os.PathLike | str) -> pathlib.Path | None:
    """Returns the newest complete Reverb checkpoint under `checkpoint_dir`, or None.

    Example:
      >>> find_latest_checkpoint('/ckpt')
    """
    root = pathlib.Path(checkpoint_dir)
    if not root.is_dir():
        return None
    done = sorted(p.parent for p in root.glob(f'*/{_DONE_FILE}'))
    return done[-1] if done else None


def read_table_checkpoints(
    checkpoint_path: os.PathLike | str,
) -> list[checkpoint_pb2.PriorityTableCheckpoint]:
    """Returns the table records of one checkpoint (as `client.checkpoint()` returns its path).

    Each holds the table's config and its rate limiter's counters: `insert_count`,
    `sample_count` and `delete_count`.

    Example:
      >>> (table,) = read_table_checkpoints(client.checkpoint())
    """
    path = pathlib.Path(checkpoint_path) / _TABLES_FILE
    records = tf.data.TFRecordDataset(os.fspath(path), compression_type=_COMPRESSION)
    return [
        checkpoint_pb2.PriorityTableCheckpoint.FromString(record)
        for record in records.as_numpy_iterator()
    ]


def reset_rate_limiters(checkpoint_dir: os.PathLike | str) -> list[str]:
    """Rewrites the latest checkpoint's rate limiters as if its items were never sampled.

    Each limiter keeps its config and insert count; its sample count is lowered to the
    largest value that lets sampling proceed (`insert_count * samples_per_insert - max_diff`,
    at least 0), so a restored server serves samples again.

    Args:
      checkpoint_dir: The server's checkpoint directory (holding one directory per
        checkpoint).

    Returns:
      The names of the tables whose sample count was lowered (empty if none, or no
      checkpoint).

    Example:
      >>> reset_rate_limiters('/ckpt')
      ['replay']
    """
    latest = find_latest_checkpoint(checkpoint_dir)
    if latest is None:
        return []
    path = latest / _TABLES_FILE
    tables, changed = read_table_checkpoints(latest), []
    for table in tables:
        limiter = table.rate_limiter
        lowest = limiter.insert_count * limiter.samples_per_insert - limiter.max_diff
        fresh = max(0, int(np.ceil(lowest)))
        if limiter.sample_count > fresh:
            limiter.sample_count = fresh
            changed.append(table.table_name)
    if changed:
        staging = path.with_suffix('.rewrite')
        with tf.io.TFRecordWriter(os.fspath(staging), options=_COMPRESSION) as writer:
            for table in tables:
                writer.write(table.SerializeToString())
        os.replace(staging, path)
    return changed
