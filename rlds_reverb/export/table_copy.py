"""A read-once copy of one Reverb table: restore a checkpoint into a FIFO queue and drain it.

Reverb can only sample a table, and a table's sampler decides the order (uniform and
prioritized samplers repeat and skip items). To read every item exactly once, in insertion
order, without touching the user's table, `open_table_copy`:

1. takes a checkpoint (from a live server with `client.checkpoint()`, or one on disk),
2. writes a copy of its records for the one table, configured as a queue: FIFO sampler and
   remover, `max_times_sampled=1`, every item's sample count set to 0, a rate limiter that
   never blocks (the chunks file is linked, not copied),
3. restores that copy into a temporary in-process server, whose samples then return each
   item once, oldest first, and delete it.

The temporary server holds the table's data once while it is read; it empties as the
items are read, and is stopped and its files removed at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import reverb
import tensorflow as tf
from reverb.cc import schema_pb2
from reverb.cc.checkpointing import checkpoint_pb2
from reverb.platform import checkpointers_lib
from tensorflow.python.saved_model import nested_structure_coder

from rlds_reverb.core.errors import ExportError
from rlds_reverb.serve import checkpoints

_COMPRESSION = 'ZLIB'
_TABLES_FILE = 'tables.tfrecord'
_ITEMS_FILE = 'items.tfrecord'
_CHUNKS_FILE = 'chunks.tfrecord'
_NEVER_BLOCKS = 1.7e308  # A rate limiter diff no count reaches.


@dataclasses.dataclass(frozen=True)
class TableCopy:
    """A drained-on-read copy of one table on a temporary server.

    Fields:
      address: The temporary server's 'host:port'.
      table: The table name.
      signature: The table's signature (a nest of `tf.TensorSpec`).
      num_items: The items the copy holds (each is read once).
      checkpoint: The checkpoint directory it was restored from.
    """

    address: str
    table: str
    signature: object
    num_items: int
    checkpoint: pathlib.Path


def resolve_checkpoint(path: os.PathLike | str) -> pathlib.Path:
    """Returns the checkpoint directory `path` names: itself, or the latest one under it.

    Raises:
      ExportError: If `path` holds no complete Reverb checkpoint.
    """
    path = pathlib.Path(path).expanduser()
    if (path / 'DONE').is_file() and (path / _TABLES_FILE).is_file():
        return path
    latest = checkpoints.find_latest_checkpoint(path)
    if latest is None:
        raise ExportError(
            f'{path} holds no complete Reverb checkpoint (a directory with {_TABLES_FILE} and '
            'DONE); pass the --checkpoint-dir of the server, or one checkpoint in it.'
        )
    return latest


def _read_records(path: pathlib.Path) -> Iterator[bytes]:
    yield from tf.data.TFRecordDataset(
        os.fspath(path), compression_type=_COMPRESSION
    ).as_numpy_iterator()


def _as_queue(
    table: checkpoint_pb2.PriorityTableCheckpoint, num_items: int
) -> checkpoint_pb2.PriorityTableCheckpoint:
    """Returns the table record configured to hand out each item once, oldest first."""
    queue = checkpoint_pb2.PriorityTableCheckpoint()
    queue.CopyFrom(table)
    queue.max_times_sampled = 1
    for options in (queue.sampler, queue.remover):
        options.Clear()
        options.fifo = True
        options.is_deterministic = True
    limiter = queue.rate_limiter
    limiter.samples_per_insert = 1.0
    limiter.min_diff = -_NEVER_BLOCKS
    limiter.max_diff = _NEVER_BLOCKS
    limiter.min_size_to_sample = 1
    limiter.insert_count = num_items
    limiter.sample_count = 0
    limiter.delete_count = 0
    return queue


def _write_queue_checkpoint(source: pathlib.Path, table_name: str, target: pathlib.Path):
    """Writes the queue copy of `table_name` under `target`; returns (record, item count)."""
    tables = [
        checkpoint_pb2.PriorityTableCheckpoint.FromString(r)
        for r in _read_records(source / _TABLES_FILE)
    ]
    found = {t.table_name: t for t in tables}
    if table_name not in found:
        raise ExportError(
            f'The checkpoint {source} holds no table {table_name!r}; it holds {sorted(found)}.'
        )
    target.mkdir(parents=True)
    os.symlink((source / _CHUNKS_FILE).absolute(), target / _CHUNKS_FILE)
    count = 0
    with tf.io.TFRecordWriter(os.fspath(target / _ITEMS_FILE), _COMPRESSION) as writer:
        for record in _read_records(source / _ITEMS_FILE):
            item = schema_pb2.PrioritizedItem.FromString(record)
            if item.table != table_name:
                continue
            item.times_sampled = 0
            writer.write(item.SerializeToString())
            count += 1
    queue = _as_queue(found[table_name], count)
    with tf.io.TFRecordWriter(os.fspath(target / _TABLES_FILE), _COMPRESSION) as writer:
        writer.write(queue.SerializeToString())
    (target / 'DONE').touch()
    return queue, count


@contextlib.contextmanager
def open_table_copy(
    table: str,
    *,
    server: str | reverb.Client | None = None,
    checkpoint: os.PathLike | str | None = None,
) -> Iterator[TableCopy]:
    """Yields a read-once copy of `table`, from a live server or a checkpoint on disk.

    Args:
      table: The table name.
      server: A live server ('host:port' or a client): it is checkpointed first, and its
        checkpoint directory must be readable from this process (same machine or a
        shared file system).
      checkpoint: A checkpoint directory (the server's `checkpoint_dir`, whose latest
        checkpoint is used, or one checkpoint in it). Exactly one of the two.

    Yields:
      The `TableCopy`; the temporary server stops when the context exits.

    Raises:
      ValueError: If not exactly one of `server` and `checkpoint` is given.
      ExportError: If there is no checkpoint, or it holds no such table.
      CheckpointError: If the live server cannot be checkpointed.

    Example:
      >>> with open_table_copy('replay', checkpoint='/ckpt') as copy:
      ...     print(copy.num_items)
    """
    if (server is None) == (checkpoint is None):
        raise ValueError(
            'Pass exactly one of server= (a live server) and checkpoint= (a directory).'
        )
    if server is not None:
        client = server if isinstance(server, reverb.Client) else reverb.Client(server)
        checkpoint = checkpoints.checkpoint_server(client)
    source = resolve_checkpoint(checkpoint)
    root = pathlib.Path(tempfile.mkdtemp(prefix='rlds_reverb_export_'))
    copy_server = None
    try:
        record, count = _write_queue_checkpoint(source, table, root / 'copy')
        signature = (
            nested_structure_coder.decode_proto(record.signature)
            if record.HasField('signature')
            else None
        )
        if signature is None:
            raise ExportError(
                f'Table {table!r} has no signature; export needs it to know the item kind. '
                'Create the table with rlds_reverb.tables.signature_for(item, episodes).'
            )
        queue_table = reverb.Table(
            name=table,
            sampler=reverb.selectors.Fifo(),
            remover=reverb.selectors.Fifo(),
            max_size=max(record.max_size, 1),
            rate_limiter=reverb.rate_limiters.MinSize(1),
            max_times_sampled=1,
            signature=signature,
        )
        copy_server = reverb.Server(
            [queue_table],
            port=None,
            checkpointer=checkpointers_lib.DefaultCheckpointer(os.fspath(root)),
        )
        yield TableCopy(f'localhost:{copy_server.port}', table, signature, count, source)
    finally:
        if copy_server is not None:
            copy_server.stop()
        shutil.rmtree(root, ignore_errors=True)
