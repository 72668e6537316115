"""Reverb checkpoints on disk: find the latest, read its table records, unblock its limiters.

Reverb's default checkpointer writes one directory per checkpoint under the server's
checkpoint directory, marked complete by a `DONE` file, holding the tables' configs and
counters in `tables.tfrecord` (ZLIB-compressed `PriorityTableCheckpoint` protos), their
items in `items.tfrecord` and the data in `chunks.tfrecord`. This module owns that layout:
its constants and functions are the only code that names these files or their compression
(`export.table_copy` reads and writes checkpoints through them).

A restored rate limiter keeps the counters of the checkpoint, whatever the server was built
with (reverb issues 64 and 118): a `SampleToInsertRatio` table whose samples had caught up
with its inserts blocks every sample of the restarted server, although nothing new needs to
be inserted. `reset_rate_limiters` rewrites those counters, and `server.start_server` calls
it by default before restoring.

Reverb 0.14's checkpoint call keeps one entry of the server's checkpoint directory: after
writing the new checkpoint it deletes every other file and directory there but the last by
name (the new one, unless something sorts after it). `take_private_checkpoint` checkpoints
a live server for the toolkit's own use and leaves that directory as it found it.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np
import reverb
import tensorflow as tf

from rlds_reverb.core import compat, files
from rlds_reverb.core.errors import CheckpointError
from rlds_reverb.serve import table_info

__all__ = [
    'checkpoint_server',
    'find_latest_checkpoint',
    'read_table_checkpoints',
    'reset_rate_limiters',
]

# Reverb's checkpoint file format (private modules: `compat`).
_CHECKPOINT_PB2, _SCHEMA_PB2 = compat.reverb_checkpoint_protos()

# Reverb marks a complete checkpoint with this file in the checkpoint's directory.
DONE_FILE = 'DONE'
# The files of one checkpoint: table records, item records, chunk records.
TABLES_FILE = 'tables.tfrecord'
ITEMS_FILE = 'items.tfrecord'
CHUNKS_FILE = 'chunks.tfrecord'
# Reverb's TFRecord checkpointer compresses its files.
COMPRESSION = 'ZLIB'


def checkpoint_server(client: reverb.Client) -> str:
    """Writes a checkpoint of every table on the server; returns its path.

    When the checkpoint is on this machine, its files lose the world-write bit that a
    permissive umask of the server gives them.

    Raises:
      ReverbConnectionError: If nothing answers at the server's address (it is probed
        first: `table_info.probe_server`).
      CheckpointError: If the server did not write it (it failed, or has no checkpointer).

    Example:
      >>> path = checkpoint_server(reverb.Client('localhost:8000'))
    """
    table_info.probe_server(client.server_address)
    try:
        path = client.checkpoint()
    except (RuntimeError, reverb.errors.ReverbError) as e:
        raise CheckpointError(
            f'Checkpoint of the Reverb server at {client.server_address} failed ({e}).'
        ) from e
    if os.path.isdir(path):  # Reverb's files follow the server's umask: never world-writable.
        files.remove_world_write(path)
    return path


def find_latest_checkpoint(checkpoint_dir: os.PathLike | str) -> pathlib.Path | None:
    """Returns the newest complete Reverb checkpoint under `checkpoint_dir`, or None.

    Example:
      >>> find_latest_checkpoint('/ckpt')
    """
    root = pathlib.Path(checkpoint_dir)
    if not root.is_dir():
        return None
    done = sorted(p.parent for p in root.glob(f'*/{DONE_FILE}'))
    return done[-1] if done else None


def read_table_checkpoints(
    checkpoint_path: os.PathLike | str,
) -> list[Any]:
    """Returns the table records of one checkpoint (as `client.checkpoint()` returns its path).

    Each holds the table's config and its rate limiter's counters: `insert_count`,
    `sample_count` and `delete_count`.

    Example:
      >>> (table,) = read_table_checkpoints(client.checkpoint())
    """
    path = pathlib.Path(checkpoint_path) / TABLES_FILE
    return [
        _CHECKPOINT_PB2.PriorityTableCheckpoint.FromString(record)
        for record in read_checkpoint_records(path)
    ]


def is_complete_checkpoint(path: os.PathLike | str) -> bool:
    """Returns whether `path` is one complete checkpoint (its table records and `DONE`).

    Example:
      >>> is_complete_checkpoint(client.checkpoint())
      True
    """
    path = pathlib.Path(path)
    return (path / DONE_FILE).is_file() and (path / TABLES_FILE).is_file()


def mark_complete(checkpoint_path: os.PathLike | str) -> None:
    """Marks a checkpoint directory complete, as Reverb does once its files are written.

    Example:
      >>> mark_complete('/tmp/copy/0')
    """
    (pathlib.Path(checkpoint_path) / DONE_FILE).touch()


def read_checkpoint_records(path: os.PathLike | str, *, batch: int = 1) -> Iterator[bytes]:
    """Yields the records of one checkpoint file, read `batch` at a time.

    Args:
      path: A file of a checkpoint (`TABLES_FILE`, `ITEMS_FILE` or `CHUNKS_FILE` in it).
      batch: Records per read: small records (items) read faster in batches.

    Example:
      >>> n = sum(1 for _ in read_checkpoint_records(path / ITEMS_FILE, batch=1024))
    """
    # One iterator step per record cost about 0.5 ms: most of a two-step export's time.
    records = tf.data.TFRecordDataset(os.fspath(path), compression_type=COMPRESSION)
    for records_read in records.batch(batch).as_numpy_iterator():
        yield from records_read


def open_checkpoint_writer(path: os.PathLike | str) -> tf.io.TFRecordWriter:
    """Returns a writer of one checkpoint file, compressed as Reverb reads it.

    Example:
      >>> with open_checkpoint_writer(path / CHUNKS_FILE) as writer: ...
    """
    return tf.io.TFRecordWriter(os.fspath(path), options=COMPRESSION)


def write_table_checkpoints(
    checkpoint_path: os.PathLike | str,
    tables: list[Any],
) -> None:
    """Writes (or replaces at once) the table records of one checkpoint directory.

    Example:
      >>> write_table_checkpoints(path, read_table_checkpoints(path))
    """
    path = pathlib.Path(checkpoint_path) / TABLES_FILE
    staging = files.create_shared_file(path.with_suffix('.rewrite'))  # Never world-writable.
    with open_checkpoint_writer(staging) as writer:
        for table in tables:
            writer.write(table.SerializeToString())
    os.replace(staging, path)


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
    tables, changed = read_table_checkpoints(latest), []
    for table in tables:
        limiter = table.rate_limiter
        lowest = limiter.insert_count * limiter.samples_per_insert - limiter.max_diff
        fresh = max(0, int(np.ceil(lowest)))
        if limiter.sample_count > fresh:
            limiter.sample_count = fresh
            changed.append(table.table_name)
    if changed:
        write_table_checkpoints(latest, tables)
    return changed


def _link_or_copy(source: str | os.PathLike, target: str | os.PathLike) -> None:
    try:
        os.link(source, target)  # Same bytes, no copy, and it outlives Reverb's delete.
    except OSError:
        shutil.copy2(source, target)


def _set_aside(root: pathlib.Path, kept: pathlib.Path) -> list[str]:
    """Links (else copies) every entry of `root` into `kept`; returns their names."""
    names = sorted(p.name for p in root.iterdir())
    for name in names:
        source, target = root / name, kept / name
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        elif source.is_dir():
            shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(source, target)
    return names


def _put_back(root: pathlib.Path, kept: pathlib.Path, names: list[str]) -> None:
    """Moves back into `root` the entries set aside that are no longer there."""
    for name in names:
        if not os.path.lexists(root / name):
            shutil.move(kept / name, root / name)


def _check_checkpoint_dir(root: pathlib.Path) -> None:
    if not root.is_dir():
        raise CheckpointError(
            f'The server checkpoint directory {root} does not exist. Name the directory the '
            'server checkpoints to (its DefaultCheckpointer path, rlds-reverb serve '
            '--checkpoint-dir, or CHECKPOINT_DIR/server-i with --servers N); for a server that '
            'has never checkpointed, create it empty first.'
        )
    entries = list(root.iterdir())
    if entries and find_latest_checkpoint(root) is None:
        raise CheckpointError(
            f'{root} holds no Reverb checkpoint (a directory with {DONE_FILE}), so it is not '
            'the checkpoint directory of a server that has checkpointed, and a checkpoint '
            "would delete the server's own: name the directory the server checkpoints to "
            '(with rlds-reverb serve --servers N: CHECKPOINT_DIR/server-i). Nothing was '
            'checkpointed.'
        )


def _make_holding_dir(root: pathlib.Path) -> pathlib.Path:
    """A private directory next to `root` (links and renames stay on its file system)."""
    try:
        return pathlib.Path(
            tempfile.mkdtemp(prefix=f'.{root.name}.kept-by-rlds-reverb-export-', dir=root.parent)
        )
    except OSError:  # The parent is not writable: copies in the temp directory instead.
        return pathlib.Path(tempfile.mkdtemp(prefix='rlds_reverb_export_kept_'))


@contextlib.contextmanager
def take_private_checkpoint(
    client: reverb.Client, checkpoint_dir: os.PathLike | str
) -> Iterator[pathlib.Path]:
    """Checkpoints a live server into a private copy, leaving its checkpoint directory as it was.

    Reverb deletes every other entry of `checkpoint_dir` when it checkpoints, so its entries
    are first linked (else copied) aside; once the checkpoint is written it is moved out to a
    private directory and the entries Reverb deleted are moved back, before the body runs.
    The directory then holds what it held before, byte for byte (the same files); only
    during the checkpoint call itself are the old entries missing from it. The private copy
    is removed when the context exits.

    Args:
      client: A client of the live server.
      checkpoint_dir: The directory the server checkpoints to (its `DefaultCheckpointer`
        path, `rlds-reverb serve --checkpoint-dir`): existing, and empty or holding a
        complete Reverb checkpoint.

    Yields:
      The private checkpoint's path (a directory with `tables.tfrecord` and `DONE`).

    Raises:
      CheckpointError: If `checkpoint_dir` is missing or holds no Reverb checkpoint, the
        server did not write the checkpoint (unreachable, or no checkpointer), wrote it
        elsewhere, or Reverb deleted it (an entry of `checkpoint_dir` sorts after it).

    Example:
      >>> with take_private_checkpoint(reverb.Client('localhost:8000'), '/ckpt') as path:
      ...     tables = read_table_checkpoints(path)
    """
    root = pathlib.Path(checkpoint_dir).expanduser().absolute()
    _check_checkpoint_dir(root)
    holding = _make_holding_dir(root)
    kept = holding / 'kept'
    private = holding / 'checkpoint'
    remove_holding = True
    try:
        kept.mkdir()
        names = _set_aside(root, kept)
        try:
            made = pathlib.Path(checkpoint_server(client))
            if os.path.realpath(made.parent) != os.path.realpath(root):
                raise CheckpointError(
                    f'The server at {client.server_address} checkpoints to {made.parent}, not '
                    f'to {root}; Reverb kept only the new checkpoint there. Name the directory '
                    'the server checkpoints to.'
                )
            if not made.is_dir():
                raise CheckpointError(
                    f'Reverb deleted the checkpoint it had just written ({made.name}): {root} '
                    'holds an entry whose name sorts after it, and Reverb keeps only the last '
                    f'entry by name. {root} is as it was.'
                )
            shutil.move(made, private)
        finally:
            try:
                _put_back(root, kept, names)
            except OSError as e:
                remove_holding = False
                raise CheckpointError(
                    f'Could not put back the entries of {root} that Reverb deleted when it '
                    f'checkpointed ({e}); they are in {kept}: move them back into {root}.'
                ) from e
        yield private
    finally:
        if remove_holding:
            shutil.rmtree(holding, ignore_errors=True)
