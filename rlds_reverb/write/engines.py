"""Writer engines: append one episode plan's rows to a Reverb writer and create its items.

Two engines implement the `WriterEngine` protocol:

* `StructuredEngine` appends rows to a `reverb.StructuredWriter`, whose configs
  (`rlds_reverb.write.configs`) create the items in C++. It serves item kinds with a
  `window_pattern` and a constant priority.
* `TrajectoryEngine` appends rows to a `reverb.TrajectoryWriter` and creates each item as a
  slice of them: padded or truncated windows, whole episodes, windows across episodes
  (CONTINUE) and per-item priorities.

Either way each row is appended once and overlapping items reference the same rows. Both
flush on the same schedule, so that at most `max_in_flight_items` items are pending.

Every wait on the server (a flush, the end of an episode) goes through `wait_on_server`,
which waits in slices and probes the server between them, so that a server that dies
mid-write is named within about a slice, whatever `timeout_ms` allows a live but slow one.

An engine is a context manager, and `close()` (on every path, success or failure) lets go
of its writer without risking a hang: Reverb's writers flush in their destructor without a
timeout, so a writer holding items that a dead or blocked server will never confirm would
otherwise hang whichever later call (or the interpreter's exit) happens to garbage-collect it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import reverb
import tensorflow as tf
import tree
from reverb import structured_writer as sw

from rlds_reverb.core import compat, timeouts, types
from rlds_reverb.serve import table_info
from rlds_reverb.transform import item_rows
from rlds_reverb.transform import items as items_lib
from rlds_reverb.transform.plans import EpisodePlan
from rlds_reverb.write import configs as configs_lib
from rlds_reverb.write.options import EngineKind

__all__ = [
    'EngineKind',
    'StructuredEngine',
    'TrajectoryEngine',
    'WriterEngine',
    'make_engine',
]


class WriterEngine(Protocol):
    """What `push` needs of a writer: write one episode's plan, then finish the stream."""

    def write_episode(self, plan: EpisodePlan) -> int:
        """Appends the episode's rows and creates its items; returns the items (per table)."""

    def finish(self) -> int:
        """Writes what the end of the stream completes; returns the items (per table)."""

    def close(self) -> None:
        """Lets go of the writer, within a bounded time; what is unconfirmed may be lost."""

    def __enter__(self) -> WriterEngine: ...

    def __exit__(self, *exc_info) -> None: ...


# How long `release_structured_writer` waits for the server to confirm pending items.
_RELEASE_TIMEOUT_MS = timeouts.WRITER_RELEASE_MS
# A wait on the server longer than this probes it before waiting on (`wait_on_server`).
WAIT_SLICE_MS = timeouts.WAIT_SLICE_MS


def wait_on_server(wait: Callable[[int], None], *, address: str, timeout_ms: int | None) -> None:
    """Runs a writer's wait (`wait(timeout_ms)`) in slices, probing the server between them.

    Reverb's writers cannot tell a dead server from a slow one: they retry a lost
    connection until the wait times out. Waiting in slices of `WAIT_SLICE_MS`, and probing
    the server after each slice that ends without the confirmations, names a dead server
    within about a slice, while a live one (a table whose rate limiter blocks inserts) gets
    the whole `timeout_ms`. A flush, and an `end_episode` whose confirmations timed out, can
    be repeated: Reverb resets nothing until they are confirmed.

    Args:
      wait: A flush or end of episode, called with the slice's timeout in ms.
      address: The server, for the probe.
      timeout_ms: The most the whole wait may take; None waits as long as the server
        lives (TF-Agents' observers wait without a timeout: a rate limiter paces them).

    Raises:
      ReverbConnectionError: If the server stopped answering (`table_info.probe_server`).
      reverb.errors.DeadlineExceededError: If `timeout_ms` passed without the confirmations.
    """
    deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
    while True:
        left_ms = (
            math.inf if deadline is None else max(1, round(1000 * (deadline - time.monotonic())))
        )
        try:
            wait(int(min(left_ms, WAIT_SLICE_MS)))
            return
        except reverb.errors.DeadlineExceededError:
            if left_ms <= WAIT_SLICE_MS:
                raise
            table_info.probe_server(address)


def release_structured_writer(writer: sw.StructuredWriter, *, address: str | None = None) -> bool:
    """Lets go of a `StructuredWriter` after a failure, without risking a hang.

    Reverb 0.14's `StructuredWriter` has no `close()`, and its C++ destructor waits, with
    no timeout, until the server confirms every pending item. With the server gone (or its
    table blocking inserts) that wait never ends, in whatever later code garbage-collects
    the writer, or at exit. So: if the pending items are confirmed within a short wait, the
    writer is left to be destroyed as usual; otherwise it is kept alive for the rest of the
    process (a small, bounded leak: its buffers and one idle reconnecting thread).

    Args:
      writer: The writer to let go of; the caller must not use it afterwards.
      address: Its server's address: when nothing answers there, the writer is kept alive
        at once, without the wait.

    Returns:
      Whether the writer could be released normally (nothing was left unconfirmed).
    """
    try:
        if address is not None:
            table_info.probe_server(address)
        writer.flush(timeout_ms=_RELEASE_TIMEOUT_MS)
    except Exception:  # noqa: BLE001 - any failure to confirm means the destructor may hang.
        compat.keep_alive_forever(writer)
        return False
    return True


@dataclasses.dataclass(frozen=True)
class FlushSchedule:
    """Every `every` rows, wait until at most `bound` items are pending.

    So at most `every + bound` items are ever pending. Short waits for a few confirmations
    keep more items in flight on average than waiting for half of them: with 48 in flight,
    every 8 rows down to 40 measured 15% faster than every 24 rows down to 24.
    """

    every: int
    bound: int

    @classmethod
    def for_max_in_flight(cls, max_in_flight_items: int) -> FlushSchedule:
        every = max(1, max_in_flight_items // 6)
        return cls(every, max_in_flight_items - every)

    def is_due(self, rows_appended: int) -> bool:
        return rows_appended % self.every == 0


def _split_rows(leaf: np.ndarray) -> list[Any]:
    """Returns a `[R, ...]` leaf's rows, each as an array (bytes kept exactly).

    A row of a `[R]` string leaf (encoded frames) would come out as Python `bytes`, which
    Reverb converts through NumPy's `S` dtype, dropping trailing NUL bytes: each is kept a
    0-d object array, which Reverb writes unchanged.
    """
    if leaf.dtype == object and leaf.ndim == 1:
        return [np.array(value, dtype=object) for value in leaf]
    return list(leaf)


def list_rows(rows: types.Nest) -> list[list[np.ndarray]]:
    """Returns one flat list of leaves per row of a `[R, ...]` nest."""
    return [list(row) for row in zip(*map(_split_rows, tree.flatten(rows)), strict=True)]


def _count_row_bytes(value: np.ndarray) -> int:
    """Returns the bytes one row of a column holds (a string's own length, not a pointer's)."""
    value = np.asarray(value)
    if value.dtype == object:
        return sum(len(item) for item in value.flat)
    return value.nbytes


def make_null_row(row: list[np.ndarray]) -> list[np.ndarray]:
    """Returns a row of zeros shaped like `row` (empty strings for string leaves)."""
    return [
        np.full_like(leaf, b'') if leaf.dtype == object else np.zeros_like(leaf) for leaf in row
    ]


class _Engine:
    """What both engines share: bounded waits on the server, and closing as a context."""

    _writer: sw.StructuredWriter | reverb.TrajectoryWriter  # Deleted by `close`.
    _address: str
    _timeout_ms: int

    def _wait(self, wait: Callable[[int], None]) -> None:
        wait_on_server(wait, address=self._address, timeout_ms=self._timeout_ms)

    def _flush(self, block_until_num_items: int = 0) -> None:
        writer = self._writer
        self._wait(lambda ms: writer.flush(block_until_num_items, timeout_ms=ms))

    def _end_episode(self, *, clear_buffers: bool = True) -> None:
        writer = self._writer
        self._wait(lambda ms: writer.end_episode(clear_buffers, timeout_ms=ms))

    def close(self) -> None:
        # Dropping the engine's reference lets the writer be destroyed (or kept, `_release`).
        writer = vars(self).pop('_writer', None)
        if writer is not None:
            self._release(writer)

    def _release(self, writer) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class StructuredEngine(_Engine):
    """Appends rows to a `StructuredWriter`; its configs create the items in C++."""

    def __init__(
        self, client: reverb.Client, configs: list, *, max_in_flight_items: int, timeout_ms: int
    ):
        self._writer = client.structured_writer(configs)
        self._schedule = FlushSchedule.for_max_in_flight(max_in_flight_items)
        self._address = client.server_address
        self._timeout_ms = timeout_ms

    def write_episode(self, plan: EpisodePlan) -> int:
        writer, schedule = self._writer, self._schedule
        for index, row in enumerate(list_rows(plan.rows), start=1):
            writer.append(row)
            if schedule.is_due(index):
                self._flush(schedule.bound)
        self._end_episode()
        return plan.num_items  # The configs create exactly the planned windows.

    def finish(self) -> int:
        return 0  # Nothing is pending after `end_episode`.

    def _release(self, writer: sw.StructuredWriter) -> None:
        release_structured_writer(writer, address=self._address)


class TrajectoryEngine(_Engine):
    """Appends rows to a `TrajectoryWriter` and creates each item as a slice of them."""

    _reference: Callable[[int, int], list]  # The item of rows [first, stop), flat.

    def __init__(
        self,
        client: reverb.Client,
        item: items_lib.ItemKind,
        table_names: list[str],
        *,
        priority: float | None,
        max_in_flight_items: int,
        timeout_ms: int,
    ):
        # Room for the auto-tuned chunker to grow chunks (configs_lib.CHUNK_ROOM_ROWS).
        self._keep_rows = max(item.max_span + 1, configs_lib.CHUNK_ROOM_ROWS)
        self._writer = client.trajectory_writer(self._keep_rows, validate_items=False)
        self._item = item
        self._tables = list(table_names)
        self._priority = priority
        self._schedule = FlushSchedule.for_max_in_flight(max_in_flight_items)
        self._address = client.server_address
        self._timeout_ms = timeout_ms
        self._stream = item.stream_window  # Windows across episodes (CONTINUE), if any.
        self._columns: list[Any] = []  # The writer's history columns, from the first row.
        self._structure: types.Nest = None  # The rows' nest (from the first plan).
        self._appended = 0  # Rows appended since the writer's buffers were last cleared.
        self._last_row: list[np.ndarray] | None = None
        self._created = 0  # Items created (per table) since the last count was taken.

    def _chunk_small_columns(self, row: list[np.ndarray]) -> None:
        """Chunks columns of small rows `CHUNK_ROOM_ROWS` rows at a time; others auto-tuned.

        Reverb's auto-tuned chunker keeps small columns in short chunks, and every sample
        unpacks one chunk per column per row range: constant 32-row chunks took a two-step
        sample from 25 to 18 µs of CPU (benchmarks/README.md). Large rows (images) stay
        auto-tuned, since a sample unpacks its whole chunk.
        """
        self._flush()  # Reverb configures flushed columns.
        for index, value in enumerate(row):
            if _count_row_bytes(value) <= configs_lib.SMALL_ROW_BYTES:
                self._writer.configure(
                    (index,),
                    num_keep_alive_refs=self._keep_rows,
                    max_chunk_length=configs_lib.CHUNK_ROOM_ROWS,
                )

    def _take_count(self) -> int:
        count, self._created = self._created, 0
        return count

    def _append(self, row: list[np.ndarray]) -> None:
        self._writer.append(row)
        if not self._columns:
            self._columns = tree.flatten(self._writer.history)
            history = tree.unflatten_as(self._structure, self._columns)  # The rows' nest.
            self._reference = self._item.make_flat_referencer(history)
            self._chunk_small_columns(row)
        self._appended += 1
        if self._schedule.is_due(self._appended):
            self._flush(self._schedule.bound)

    def _create_item(self, start: int, size: int, priority: float | None) -> None:
        # Relative (negative) indices: history slices ending at the newest row need them.
        first, stop = start - self._appended, start + size - self._appended
        trajectory = self._reference(first, stop)  # Flat: what `create_item` flattens to.
        for table in self._tables:
            self._writer.create_item(table, priority, trajectory)
        self._created += 1

    def write_episode(self, plan: EpisodePlan) -> int:
        offset = self._appended
        starts, sizes = plan.starts, plan.sizes
        per_item = len(plan.priorities) > 0
        order = np.argsort(starts + sizes, kind='stable')
        ends = (starts + sizes)[order]
        rows = list_rows(plan.rows)
        if self._structure is None:
            self._structure = plan.rows
        pointer = 0
        for index, row in enumerate(rows):
            self._append(row)
            while pointer < len(order) and ends[pointer] == index + 1:
                i = order[pointer]
                priority = float(plan.priorities[i]) if per_item else self._priority
                self._create_item(offset + int(starts[i]), int(sizes[i]), priority)
                pointer += 1
            if self._stream is not None:
                self._create_stream_item(self._stream)
        if rows:
            self._last_row = make_null_row(rows[0])
        keep = self._stream is not None
        self._end_episode(clear_buffers=not keep)
        if not keep:
            self._appended = 0
        return self._take_count()

    def _create_stream_item(self, stream: item_rows.WindowPattern) -> None:
        """Creates the stream window (CONTINUE) ending at the row just appended, if any."""
        start = self._appended - stream.length
        if start >= 0 and start % stream.period == 0:
            self._create_item(start, stream.length, self._priority)

    def finish(self) -> int:
        """Pads the stream's tail window (CONTINUE) and writes it; returns its items."""
        stream = self._stream
        if stream is None or self._last_row is None:
            return 0
        total = self._appended
        starts, _ = item_rows.compute_sequence_windows(
            tf.constant(total), stream.length, stream.period, types.EndBehavior.PAD
        )
        tail = [int(s) for s in starts.numpy() if int(s) + stream.length > total]
        if not tail:
            return 0
        for _ in range(stream.length - 1):
            self._writer.append(self._last_row)
            self._appended += 1
        for start in tail:
            self._create_item(start, stream.length, self._priority)
        self._end_episode()
        return self._take_count()

    def _release(self, writer: reverb.TrajectoryWriter) -> None:
        writer.close()  # Drops what is pending, without the destructor's wait.


def _picks_structured(kind: EngineKind, item: items_lib.ItemKind) -> bool:
    """Whether `kind` asks for the StructuredWriter's configs for `item`s, when they can.

    AUTO leaves n-step items to the TrajectoryWriter. Their configs reference one row of
    each column (squeezed), and Reverb's auto-tuned chunker, the only one a StructuredWriter
    has, then keeps the small columns in chunks of 1 to 5 rows: 3.2 chunks a step against
    0.3 with the TrajectoryEngine's 32-row chunks, at about 850 bytes of server memory a
    chunk whatever it holds (benchmarks/README.md, issue 31's memory section).
    """
    if kind is EngineKind.AUTO:
        return not isinstance(item, items_lib.NStep)
    return kind is EngineKind.STRUCTURED


def make_engine(
    client: reverb.Client,
    item: items_lib.ItemKind,
    table_names: list[str],
    *,
    row_structure: types.Nest,
    priority: float | None,
    kind: EngineKind | str = EngineKind.AUTO,
    max_in_flight_items: int,
    timeout_ms: int,
) -> WriterEngine:
    """Returns the engine for `item`s: see `EngineKind`.

    Args:
      client: The Reverb client.
      item: The item kind.
      table_names: The tables that get every item.
      row_structure: The nest of one episode's rows (a plan's `rows`, or their spec).
      priority: The constant priority, or None for per-item priorities in the plans.
      kind: Which engine (`EngineKind`, or its value); AUTO picks the StructuredWriter when
        it can create the items, except n-step items (`_picks_structured`).
      max_in_flight_items: The most items pending on the server.
      timeout_ms: The most any wait on the server may take.

    Raises:
      ValueError: If `kind` is STRUCTURED but configs cannot create the items.
    """
    engine_kind: EngineKind = types.as_enum(EngineKind, kind, argument='engine')
    configs = None
    if priority is not None and _picks_structured(engine_kind, item):
        configs = configs_lib.make_item_configs(item, row_structure, table_names, priority)
    if configs is not None:
        return StructuredEngine(
            client, configs, max_in_flight_items=max_in_flight_items, timeout_ms=timeout_ms
        )
    if engine_kind is EngineKind.STRUCTURED:
        raise ValueError(
            f"engine='structured' cannot write {item} items"
            + (' with per-item priorities' if priority is None else '')
            + "; use engine='auto' or 'trajectory'."
        )
    return TrajectoryEngine(
        client,
        item,
        table_names,
        priority=priority,
        max_in_flight_items=max_in_flight_items,
        timeout_ms=timeout_ms,
    )
