"""A read-once copy of one Reverb table: restore a checkpoint into a FIFO queue and drain it.

Reverb can only sample a table, and a table's sampler decides the order (uniform and
prioritized samplers repeat and skip items). To read every item exactly once, in insertion
order, without touching the user's table, `open_table_reader`:

1. takes a checkpoint (from a live server with `client.checkpoint()`, or one on disk),
2. writes a copy of its records for the one table, configured as a queue: FIFO sampler and
   remover, `max_times_sampled=1`, every item's sample count set to 0, a rate limiter that
   never blocks (the chunks file is linked, not copied),
3. restores that copy into a temporary in-process server, whose samples then return each
   item once, oldest first, and delete it.

To keep memory flat in the table's size, a checkpoint whose (compressed) chunks file is
larger than `max_copy_bytes` (256 MiB) is cut into parts of about `part_rows` rows (items
in insertion order, each part with the chunks its items reference), restored and drained
one after the other; a smaller one is restored whole, linking its chunks file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import reverb

from rlds_reverb.core import checks, compat, files, timeouts
from rlds_reverb.core.errors import ExportError
from rlds_reverb.export.options import DEFAULT_MAX_COPY_BYTES
from rlds_reverb.serve import checkpoints, table_info

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

# Reverb's checkpoint file format (private modules: `compat`).
_CHECKPOINT_PB2, _SCHEMA_PB2 = compat.reverb_checkpoint_protos()

# The checkpoint's files (their layout is `serve.checkpoints`').
_TABLES_FILE = checkpoints.TABLES_FILE
_ITEMS_FILE = checkpoints.ITEMS_FILE
_CHUNKS_FILE = checkpoints.CHUNKS_FILE
_ITEMS_PER_READ = 1024  # Item records are about 100 bytes.
_NEVER_BLOCKS = 1.7e308  # A rate limiter diff no count reaches.


@dataclasses.dataclass(frozen=True)
class TableCopy:
    """A drained-on-read copy of (a part of) one table on a temporary server.

    Fields:
      address: The temporary server's 'host:port'.
      table: The table name.
      signature: The table's signature (a nest of `tf.TensorSpec`).
      num_items: The items this copy holds (each is read once).
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
    if checkpoints.is_complete_checkpoint(path):
        return path
    latest = checkpoints.find_latest_checkpoint(path)
    if latest is None:
        raise ExportError(
            f'{path} holds no complete Reverb checkpoint (a directory with {_TABLES_FILE} and '
            f'{checkpoints.DONE_FILE}); pass the --checkpoint-dir of the server, or one '
            'checkpoint in it.'
        )
    return latest


def _as_queue(table: Any, num_items: int) -> Any:
    """Returns the table record configured to hand out each item once, oldest first."""
    queue = _CHECKPOINT_PB2.PriorityTableCheckpoint()
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


def _make_light_item_class():
    """Returns a message class reading only `table` and `times_sampled` of a PrioritizedItem.

    The other fields stay raw bytes (unknown fields, written back as they were), so a pass
    over the items costs no per-chunk-slice parsing in the pure-Python protobuf runtime
    (for whole-episode items, a full parse took about 90% of an export).
    """
    # protobuf ships no type stubs here (types-protobuf is not a dependency).
    from google.protobuf import (  # type: ignore[import-untyped, unused-ignore]
        descriptor_pb2,
        descriptor_pool,
        message_factory,
    )

    fields = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name='rlds_reverb_light_item.proto', package='rlds_reverb_light', syntax='proto3'
    )
    message = file.message_type.add(name='LightItem')
    for name, number, kind in (
        ('table', 2, fields.TYPE_STRING),
        ('times_sampled', 6, fields.TYPE_INT32),
    ):
        message.field.add(name=name, number=number, type=kind, label=fields.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.MessageFactory(pool).GetPrototype(
        pool.FindMessageTypeByName('rlds_reverb_light.LightItem')
    )


_LightItem = _make_light_item_class()


def _write_single_part(source: pathlib.Path, table_name: str, directory: pathlib.Path) -> int:
    """Writes the table's items (sample counts reset) next to a link to the chunks file."""
    directory.mkdir(parents=True)
    os.symlink((source / _CHUNKS_FILE).absolute(), directory / _CHUNKS_FILE)
    count = 0
    with checkpoints.open_checkpoint_writer(directory / _ITEMS_FILE) as writer:
        for record in checkpoints.read_checkpoint_records(
            source / _ITEMS_FILE, batch=_ITEMS_PER_READ
        ):
            item = _LightItem.FromString(record)
            if item.table != table_name:
                continue
            item.times_sampled = 0
            writer.write(item.SerializeToString())
            count += 1
    return count


def _item_rows(item: Any) -> int:
    """Returns the rows (steps) one item spans: the length of its first column."""
    if not item.flat_trajectory.columns:
        return 1
    return max(1, sum(s.length for s in item.flat_trajectory.columns[0].chunk_slices))


def _write_parts(
    source: pathlib.Path, table_name: str, root: pathlib.Path, part_rows: int, max_copy_bytes: int
) -> tuple[Any, list[tuple[pathlib.Path, int]]]:
    """Splits the table's items into parts of about `part_rows` rows, each a queue checkpoint.

    Returns (table record, [(part directory, item count)]). One pass over the items writes
    each part's items; one pass over the chunks writes each chunk to the parts whose items
    reference it. A single part links the chunks file instead of copying it.
    """
    found = {t.table_name: t for t in checkpoints.read_table_checkpoints(source)}
    if table_name not in found:
        raise ExportError(
            f'The checkpoint {source} holds no table {table_name!r}; it holds {sorted(found)}.'
        )
    record = found[table_name]
    if (source / _CHUNKS_FILE).stat().st_size <= max_copy_bytes:
        directory = root / '0'
        parts = [(directory, _write_single_part(source, table_name, directory))]
    else:
        counts, chunk_parts = _split_items(source, table_name, root, part_rows)
        directories = [root / str(i) for i in range(len(counts))]
        if len(directories) == 1:
            os.symlink((source / _CHUNKS_FILE).absolute(), directories[0] / _CHUNKS_FILE)
        elif directories:
            _split_chunks(source, directories, chunk_parts)
        parts = list(zip(directories, counts, strict=True))
    for directory, count in parts:
        checkpoints.write_table_checkpoints(directory, [_as_queue(record, count)])
        checkpoints.mark_complete(directory)
    return record, parts


def _split_items(
    source: pathlib.Path, table_name: str, root: pathlib.Path, part_rows: int
) -> tuple[list[int], dict[int, list[int]]]:
    """Writes the table's items (sample counts reset) into parts of about `part_rows` rows.

    Returns each part's item count, and for each chunk key the parts whose items use it.
    """
    counts: list[int] = []
    chunk_parts: dict[int, list[int]] = {}
    rows, writer = part_rows, None
    try:
        for raw in checkpoints.read_checkpoint_records(source / _ITEMS_FILE, batch=_ITEMS_PER_READ):
            item = _SCHEMA_PB2.PrioritizedItem.FromString(raw)
            if item.table != table_name:
                continue
            if writer is None or rows >= part_rows:  # Start the next part.
                if writer is not None:
                    writer.close()
                (root / str(len(counts))).mkdir(parents=True)
                writer = checkpoints.open_checkpoint_writer(root / str(len(counts)) / _ITEMS_FILE)
                counts.append(0)
                rows = 0
            part = len(counts) - 1
            item.times_sampled = 0
            writer.write(item.SerializeToString())
            counts[part] += 1
            rows += _item_rows(item)
            for column in item.flat_trajectory.columns:
                for piece in column.chunk_slices:
                    parts = chunk_parts.setdefault(piece.chunk_key, [])
                    if not parts or parts[-1] != part:
                        parts.append(part)
    finally:
        if writer is not None:
            writer.close()
    return counts, chunk_parts


def _split_chunks(
    source: pathlib.Path, directories: list[pathlib.Path], chunk_parts: dict[int, list[int]]
) -> None:
    """Writes each chunk of the checkpoint to the parts whose items reference it."""
    writers = [checkpoints.open_checkpoint_writer(d / _CHUNKS_FILE) for d in directories]
    try:
        for raw in checkpoints.read_checkpoint_records(source / _CHUNKS_FILE):
            key = _SCHEMA_PB2.ChunkData.FromString(raw).chunk_key
            for part in chunk_parts.get(key, ()):
                writers[part].write(raw)
    finally:
        for writer in writers:
            writer.close()


class TableReader:
    """The items of one table of a checkpoint, as read-once queue copies of about
    `part_rows` rows each, served one after the other (see the module docstring).

    Fields:
      table: The table name.
      signature: The table's signature.
      num_items: The items of the table.
      checkpoint: The checkpoint directory read.
    """

    def __init__(
        self,
        table: str,
        checkpoint: pathlib.Path,
        root: pathlib.Path,
        *,
        part_rows: int,
        max_copy_bytes: int,
    ):
        self.table = table
        self.checkpoint = checkpoint
        self._server: reverb.Server | None = None
        record, self._parts = _write_parts(checkpoint, table, root, part_rows, max_copy_bytes)
        self.num_items = sum(count for _, count in self._parts)
        self._max_size = max(record.max_size, 1)
        if not record.HasField('signature'):
            raise ExportError(
                f'Table {table!r} has no signature; export needs it to know the item kind. '
                'Create the table with rlds_reverb.tables.signature_for(item, episodes).'
            )
        self.signature = compat.decode_structure_proto(record.signature)

    def iterate_parts(self) -> Iterator[TableCopy]:
        """Yields each part as a `TableCopy` on a temporary server, stopped after its turn."""
        for directory, count in self._parts:
            table = reverb.Table(
                name=self.table,
                sampler=reverb.selectors.Fifo(),
                remover=reverb.selectors.Fifo(),
                max_size=self._max_size,
                rate_limiter=reverb.rate_limiters.MinSize(1),
                max_times_sampled=1,
                signature=self.signature,
            )
            parent = directory.parent / f'serve-{directory.name}'
            parent.mkdir()
            directory.rename(parent / directory.name)
            self._server = server = reverb.Server(
                [table],
                port=None,
                checkpointer=reverb.checkpointers.DefaultCheckpointer(os.fspath(parent)),
            )
            try:
                yield TableCopy(
                    f'localhost:{server.port}', self.table, self.signature, count, self.checkpoint
                )
            finally:
                self.stop()
                shutil.rmtree(parent, ignore_errors=True)

    def stop(self) -> None:
        """Stops the temporary server of the current part, if one runs.

        A loop over `iterate_parts` left by an exception keeps the generator (and its
        server) alive as long as the traceback; `open_table_reader` calls this on exit.
        """
        if self._server is not None:
            self._server.stop()
            self._server = None


# The most a live server may take to list its tables, once it accepted a connection.


def _check_server_table(client: reverb.Client, table: str) -> None:
    """Raises `ExportError` unless the server holds `table`, before anything is checkpointed.

    Raises:
      ReverbConnectionError: If nothing answers at the server's address (named at once).
      ExportError: If the server holds no such table.
    """
    held = sorted(
        table_info.fetch_server_info(client, timeout_ms=timeouts.TABLE_COPY_SERVER_INFO_MS)
    )
    if table not in held:
        raise ExportError(
            f'The server at {client.server_address} holds no table {table!r}; it holds '
            f'{held}. Nothing was checkpointed.'
        )


@contextlib.contextmanager
def open_table_reader(
    table: str,
    *,
    server: str | reverb.Client | None = None,
    server_checkpoint_dir: os.PathLike | str | None = None,
    checkpoint: os.PathLike | str | None = None,
    part_rows: int = 200_000,
    max_copy_bytes: int = DEFAULT_MAX_COPY_BYTES,
) -> Iterator[TableReader]:
    """Yields a `TableReader` of `table`, from a live server or a checkpoint on disk.

    Args:
      table: The table name.
      server: A live server ('host:port' or a client). It is checkpointed into a private
        copy (`checkpoints.take_private_checkpoint`), and its checkpoint directory is left
        as it was; that directory must be readable and writable from this process (same
        machine or a shared file system).
      server_checkpoint_dir: With `server`, required: the directory the server checkpoints
        to (Reverb deletes its other entries when it checkpoints; the export keeps them).
      checkpoint: A checkpoint directory (the server's `checkpoint_dir`, whose latest
        checkpoint is used, or one checkpoint in it). Exactly one of `server` and this.
      max_copy_bytes: A checkpoint whose chunks file is at most this large is restored
        whole, in one temporary server; a larger one in parts of `part_rows`.
      part_rows: About how many rows (steps) one part holds: with `max_copy_bytes`, the
        bound on the memory the copies take.

    Yields:
      The reader; its temporary files (in a 0700 directory) are removed when the context
      exits, and each temporary server stops after its part, on error and Ctrl-C too.

    Raises:
      ValueError: If not exactly one of `server` and `checkpoint` is given, or `server`
        without `server_checkpoint_dir` (or that with `checkpoint`).
      ExportError: If the server holds no such table (checked before it is checkpointed),
        there is no checkpoint, it holds no such table, or the table has no signature.
      CheckpointError: If the live server cannot be checkpointed, or
        `server_checkpoint_dir` is not where it checkpoints (`take_private_checkpoint`).

    Example:
      >>> with open_table_reader('replay', checkpoint='/ckpt') as reader:
      ...     for copy in reader.iterate_parts(): ...
    """
    if (server is None) == (checkpoint is None):
        raise ValueError(
            'Pass exactly one of server= (a live server) and checkpoint= (a directory).'
        )
    if (server is None) != (server_checkpoint_dir is None):
        raise ValueError(
            'A live server is checkpointed for export, and Reverb then deletes the other '
            "entries of the server's checkpoint directory (it keeps the newest only). Pass "
            'server_checkpoint_dir= with server= (the directory the server checkpoints to: '
            'its DefaultCheckpointer path, rlds-reverb serve --checkpoint-dir) so the export '
            'keeps them, or export a checkpoint you took (client.checkpoint()) with '
            'checkpoint=. server_checkpoint_dir= goes with server= only.'
        )
    checks.check_int_at_least(part_rows, 1, argument='part_rows')
    with contextlib.ExitStack() as stack:
        # The checks above leave a server with its directory, or a checkpoint.
        if server is not None and server_checkpoint_dir is not None:
            client = server if isinstance(server, reverb.Client) else reverb.Client(server)
            _check_server_table(client, table)
            private = checkpoints.take_private_checkpoint(client, server_checkpoint_dir)
            source = resolve_checkpoint(stack.enter_context(private))
        elif checkpoint is not None:
            source = resolve_checkpoint(checkpoint)
        root = pathlib.Path(tempfile.mkdtemp(prefix='rlds_reverb_export_'))
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        reader = TableReader(
            table, source, root, part_rows=part_rows, max_copy_bytes=max_copy_bytes
        )
        files.remove_world_write(root)
        stack.callback(reader.stop)
        yield reader
