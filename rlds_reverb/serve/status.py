"""What a running Reverb server holds, table by table: a typed snapshot and its text form.

`fetch_server_status` asks the server for its tables' info (Reverb's server-info call: it
reads counters and changes nothing) and returns a frozen `ServerStatus`. Every number in it
is one Reverb keeps (dm-reverb 0.14's `TableInfo`), or follows from them:

* `size`: items in the table now; `max_size`: how many it holds before its remover evicts.
* `inserts`, `samples`: the rate limiter's counters: items inserted and samples taken since
  the table was made or reset (restored with a checkpoint). A priority update of an item
  already in the table is not an insert.
* `removed`: `inserts - size`: items that left the table (evicted by the remover when it
  was full, deleted after `max_times_sampled` samples, or deleted by a client). Reverb
  keeps the count of removals this way (its limiter's delete counter), so it is exact.
* `frame_fields`: the item fields that hold encoded frames and their formats, as the
  table's signature records them (`rlds_reverb.core.frames`; none without a signature).
* `episodes`: episodes that items in the table refer to; `removed_episodes`: episodes no
  item refers to any more; `unique_samples`: items sampled at least once.
* the rate limiter's cursor, `inserts * samples_per_insert - samples`: a sample may
  proceed once `size >= min_size_to_sample` and the cursor stays >= `min_diff` after it;
  an insert may proceed while the table holds at most `min_size_to_sample` items, or while
  the cursor stays <= `max_diff` after it (Reverb's `RateLimiter::CanSample`/`CanInsert`).
  `sampling` and `inserting` say which gate is closed now, for the next call.
* `waited_for_inserts_ms`, `waited_for_samples_ms`: the table worker's cumulative time
  with sample (insert) requests blocked by the limiter and no insert (sample) request that
  could unblock them. Reverb 0.14 reports no count of calls blocked now.

Priorities are not in Reverb's table info, and Reverb 0.14 has no call that reads items
without sampling them. So they are read only when asked (`priority_samples=N`), by sampling
N items, and only from a table where that changes nothing but counters: its sampler draws
at random (uniform or prioritized: a FIFO, LIFO or heap sampler returns one item again and
again), `max_times_sampled` is 0 (a sample never deletes an item: queues are never
sampled), and its rate limiter does not bound the cursor (a `MinSize` limiter: a sample
takes nothing from a learner's sample-to-insert budget and unblocks no writer), with at
least `min_size_to_sample` items. Those N samples are real samples: the table's `samples`,
its items' times sampled and `unique_samples` count them, and `PrioritySummary` says so.

Example:
  >>> status = fetch_server_status('localhost:8000', priority_samples=100)
  >>> print(status.format())
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
import sys
import threading
from collections.abc import Mapping
from typing import Any

import reverb

from rlds_reverb.core import checks, frames, timeouts
from rlds_reverb.serve import table_info

__all__ = [
    'DEFAULT_TIMEOUT_MS',
    'LimiterGate',
    'PriorityReading',
    'PrioritySummary',
    'RateLimiterStatus',
    'Selector',
    'SelectorKind',
    'ServerStatus',
    'TableStatus',
    'fetch_server_status',
]

DEFAULT_TIMEOUT_MS = timeouts.STATUS_MS
# Reverb's `MinSize` limiter leaves the cursor unbounded with +-float max.
_UNBOUNDED = sys.float_info.max / 2


class SelectorKind(enum.Enum):
    """How a table picks the item it samples (its sampler) or evicts (its remover)."""

    FIFO = 'FIFO'
    LIFO = 'LIFO'
    UNIFORM = 'uniform'
    PRIORITIZED = 'prioritized'
    MIN_HEAP = 'min-heap'
    MAX_HEAP = 'max-heap'


@dataclasses.dataclass(frozen=True)
class Selector:
    """A sampler or remover: its kind, and the priority exponent of a prioritized one."""

    kind: SelectorKind
    priority_exponent: float | None = None

    @property
    def is_random(self) -> bool:
        """Whether repeated picks differ (uniform, prioritized), so a sample is a sample."""
        return self.kind in (SelectorKind.UNIFORM, SelectorKind.PRIORITIZED)

    def describe(self) -> str:
        """Returns e.g. 'prioritized (exponent 0.6)', 'FIFO', 'min-heap'."""
        if self.priority_exponent is None:
            return self.kind.value
        return f'{self.kind.value} (exponent {self.priority_exponent:g})'


class LimiterGate(enum.Enum):
    """Whether the rate limiter lets the next sample (or insert) through, and if not why."""

    OPEN = 'open'
    BELOW_MIN_SIZE = 'blocked: fewer items than min_size_to_sample'
    AT_MIN_DIFF = 'blocked: samples caught up with inserts (cursor would go below min_diff)'
    AT_MAX_DIFF = 'blocked: inserts ahead of samples (cursor would go above max_diff)'


@dataclasses.dataclass(frozen=True)
class RateLimiterStatus:
    """A table's rate limiter: its settings, its cursor and what it lets through now."""

    samples_per_insert: float
    min_size_to_sample: int
    min_diff: float
    max_diff: float
    cursor: float
    sampling: LimiterGate
    inserting: LimiterGate
    waited_for_inserts_ms: int
    waited_for_samples_ms: int

    @property
    def is_unbounded(self) -> bool:
        """Whether the cursor is free (a `MinSize` limiter): only `min_size_to_sample` acts."""
        return self.min_diff <= -_UNBOUNDED and self.max_diff >= _UNBOUNDED

    def describe(self) -> str:
        """Returns the limiter's settings in one line."""
        head = (
            f'samples per insert {self.samples_per_insert:g}, '
            f'min size to sample {self.min_size_to_sample:,}'
        )
        if self.is_unbounded:
            return f'{head}, cursor unbounded (MinSize)'
        low = '-inf' if self.min_diff <= -_UNBOUNDED else f'{self.min_diff:g}'
        high = '+inf' if self.max_diff >= _UNBOUNDED else f'{self.max_diff:g}'
        buffer = ''
        if low != '-inf' and high != '+inf':
            buffer = f' (error buffer {(self.max_diff - self.min_diff) / 2:g})'
        return f'{head}, cursor kept in [{low}, {high}]{buffer}'


class PriorityReading(enum.Enum):
    """Whether priorities were read from a table, and if not why (see the module docstring)."""

    READ = 'read from samples'
    NOT_ASKED = 'not read: no samples asked for (--priorities N samples N items)'
    EMPTY = 'not read: the table is empty'
    REMOVES_ITEMS = 'not read: sampling would delete items (max_times_sampled > 0)'
    MOVES_LIMITER = (
        'not read: sampling would move the rate limiter (it bounds the cursor), taking '
        "samples from the learners' budget"
    )
    FIXED_ORDER = 'not read: the sampler picks items in a fixed order, not at random'
    WOULD_BLOCK = 'not read: the rate limiter blocks sampling (fewer than min_size_to_sample)'
    TIMED_OUT = 'not read: the samples did not all arrive in time (those that did are counted)'


@dataclasses.dataclass(frozen=True)
class PrioritySummary:
    """The priorities of `samples` items that `fetch_server_status` sampled from a table.

    Attributes:
      samples: Items sampled (with replacement): counted in the table's `samples`.
      distinct_items: How many different items they were.
      minimum: The smallest priority among the sampled items (not the table's).
      maximum: The largest priority among the sampled items (not the table's).
      mean: The mean priority of the samples (a prioritized sampler favours high ones).
      estimated_table_mean: The table's mean priority estimated from the samples, each
        weighted by 1 / (table size * its sample probability): unbiased for any sampler;
        for a uniform one it equals `mean`. None if a probability was 0.
    """

    samples: int
    distinct_items: int
    minimum: float
    maximum: float
    mean: float
    estimated_table_mean: float | None

    def describe(self) -> str:
        """Returns the summary in one line."""
        estimate = (
            'n/a' if self.estimated_table_mean is None else f'{self.estimated_table_mean:.4g}'
        )
        return (
            f'{self.samples:,} samples ({self.distinct_items:,} items, counted as samples): '
            f'min {self.minimum:.4g}, mean {self.mean:.4g}, max {self.maximum:.4g}; '
            f'table mean about {estimate}'
        )


@dataclasses.dataclass(frozen=True)
class TableStatus:
    """One table's numbers (see the module docstring for what each one means)."""

    name: str
    size: int
    max_size: int
    inserts: int
    samples: int
    removed: int
    episodes: int
    removed_episodes: int
    unique_samples: int
    max_times_sampled: int
    sampler: Selector
    remover: Selector
    rate_limiter: RateLimiterStatus
    has_signature: bool
    priority_reading: PriorityReading
    priorities: PrioritySummary | None
    frame_fields: dict[str, str] = dataclasses.field(default_factory=dict)

    def format(self) -> str:
        """Returns the table's block of `ServerStatus.format`."""
        limiter = self.rate_limiter
        full = f' ({self.size / self.max_size:.0%})' if self.max_size else ''
        by_status = self.priorities.samples if self.priorities else 0
        times = f'{self.max_times_sampled:,}' if self.max_times_sampled > 0 else 'no limit'
        lines = [
            f'table {self.name!r}',
            f'  size          {self.size:,} / {self.max_size:,} items{full}; '
            f'{self.episodes:,} episodes referenced, {self.removed_episodes:,} no longer',
            f'  inserts       {self.inserts:,} ({self.removed:,} removed since)',
            f'  samples       {self.samples:,} ({self.unique_samples:,} distinct items'
            + (f'; {by_status:,} drawn by this status' if by_status else '')
            + ')',
            f'  sampler       {self.sampler.describe()}; remover {self.remover.describe()}; '
            f'max times sampled {times}',
            f'  rate limiter  {limiter.describe()}',
            f'                cursor {limiter.cursor:g}; sampling {limiter.sampling.value}; '
            f'inserts {limiter.inserting.value}',
            f'                waited {limiter.waited_for_inserts_ms:,} ms for inserts, '
            f'{limiter.waited_for_samples_ms:,} ms for samples (in total)',
        ]
        if self.priorities is None:
            lines.append(f'  priorities    {self.priority_reading.value}')
        else:
            lines.append(f'  priorities    {self.priorities.describe()}')
        if self.frame_fields:
            described = ', '.join(f'{p} ({f})' for p, f in sorted(self.frame_fields.items()))
            lines.append(f'  frames        encoded: {described}')
        return '\n'.join(lines)


@dataclasses.dataclass(frozen=True)
class ServerStatus:
    """A snapshot of every table of one server, taken at `taken_at` (UTC)."""

    address: str
    taken_at: datetime.datetime
    tables: tuple[TableStatus, ...]

    def table(self, name: str) -> TableStatus:
        """Returns the status of table `name`.

        Raises:
          KeyError: If the server has no such table; lists those it has.
        """
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(f'No table {name!r}; the server has: {[t.name for t in self.tables]}.')

    def format(self) -> str:
        """Returns the snapshot as text: a header line, then a block per table."""
        when = self.taken_at.strftime('%Y-%m-%d %H:%M:%S UTC')
        head = f'Reverb server {self.address} at {when}: {len(self.tables)} table(s)'
        return '\n\n'.join([head, *(table.format() for table in self.tables)])

    def to_json(self) -> dict[str, Any]:
        """Returns the snapshot as JSON-ready values (enums by value, time in ISO 8601)."""
        return _to_plain(dataclasses.asdict(self))


def _to_plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _to_plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_to_plain(item) for item in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def _read_selector(options) -> Selector:
    """Returns the `Selector` of a `KeyDistributionOptions` proto."""
    which = options.WhichOneof('distribution')
    if which == 'prioritized':
        return Selector(SelectorKind.PRIORITIZED, options.prioritized.priority_exponent)
    if which == 'heap':
        return Selector(SelectorKind.MIN_HEAP if options.heap.min_heap else SelectorKind.MAX_HEAP)
    return Selector(SelectorKind({'fifo': 'FIFO', 'lifo': 'LIFO', 'uniform': 'uniform'}[which]))


def _read_rate_limiter(info: table_info.TableInfo) -> RateLimiterStatus:
    """Returns the limiter's state, its gates computed as Reverb's limiter decides them."""
    limiter = info.rate_limiter_info
    inserts = limiter.insert_stats.completed
    samples = limiter.sample_stats.completed
    spi = limiter.samples_per_insert
    cursor = inserts * spi - samples
    if info.current_size < limiter.min_size_to_sample:
        sampling = LimiterGate.BELOW_MIN_SIZE
    elif cursor - 1 < limiter.min_diff:
        sampling = LimiterGate.AT_MIN_DIFF
    else:
        sampling = LimiterGate.OPEN
    free = info.current_size + 1 <= limiter.min_size_to_sample
    inserting = (
        LimiterGate.OPEN if free or cursor + spi <= limiter.max_diff else LimiterGate.AT_MAX_DIFF
    )
    worker = info.table_worker_time
    return RateLimiterStatus(
        samples_per_insert=spi,
        min_size_to_sample=limiter.min_size_to_sample,
        min_diff=limiter.min_diff,
        max_diff=limiter.max_diff,
        cursor=cursor,
        sampling=sampling,
        inserting=inserting,
        waited_for_inserts_ms=worker.waiting_for_inserts_ms,
        waited_for_samples_ms=worker.waiting_for_sampling_ms,
    )


def _check_sampling(info: table_info.TableInfo, count: int) -> PriorityReading | None:
    """Returns why `count` samples may not be taken from the table; None if they may."""
    limiter = _read_rate_limiter(info)
    if count == 0:
        return PriorityReading.NOT_ASKED
    if info.current_size == 0:
        return PriorityReading.EMPTY
    if info.max_times_sampled > 0:
        return PriorityReading.REMOVES_ITEMS
    if not limiter.is_unbounded:
        return PriorityReading.MOVES_LIMITER
    if not _read_selector(info.sampler_options).is_random:
        return PriorityReading.FIXED_ORDER
    if limiter.sampling is not LimiterGate.OPEN:
        return PriorityReading.WOULD_BLOCK
    return None


def _sample_infos(client: reverb.Client, table: str, count: int, *, timeout_ms: int) -> list:
    """Returns the `SampleInfo` of `count` samples, or fewer if they do not come in time.

    Reverb's Python sampler has no deadline, so it runs in a daemon thread: a table emptied
    by a client's delete between the check and the sample leaves that thread waiting, not
    this call.
    """
    infos: list = []

    def _sample() -> None:
        for sample in client.sample(table, num_samples=count, emit_timesteps=False):
            infos.append(sample.info)

    worker = threading.Thread(target=_sample, name=f'status-sample-{table}', daemon=True)
    worker.start()
    worker.join(timeout_ms / 1000)
    return list(infos)


def _summarize_priorities(infos: list) -> PrioritySummary:
    priorities = [float(info.priority) for info in infos]
    weights = [
        float(info.table_size) * float(info.probability)
        for info in infos  # N * P(i): 1 for a uniform sampler.
    ]
    estimate = None
    if all(weight > 0 for weight in weights):
        estimate = sum(p / w for p, w in zip(priorities, weights, strict=True)) / len(infos)
    return PrioritySummary(
        samples=len(infos),
        distinct_items=len({int(info.key) for info in infos}),
        minimum=min(priorities),
        maximum=max(priorities),
        mean=math.fsum(priorities) / len(priorities),
        estimated_table_mean=estimate,
    )


def _read_table(
    info: table_info.TableInfo,
    reading: PriorityReading,
    priorities: PrioritySummary | None,
) -> TableStatus:
    inserts = int(info.rate_limiter_info.insert_stats.completed)
    return TableStatus(
        name=info.name,
        size=int(info.current_size),
        max_size=int(info.max_size),
        inserts=inserts,
        samples=int(info.rate_limiter_info.sample_stats.completed),
        removed=inserts - int(info.current_size),
        episodes=int(info.num_episodes),
        removed_episodes=int(info.num_deleted_episodes),
        unique_samples=int(info.num_unique_samples),
        max_times_sampled=int(info.max_times_sampled),
        sampler=_read_selector(info.sampler_options),
        remover=_read_selector(info.remover_options),
        rate_limiter=_read_rate_limiter(info),
        has_signature=info.signature is not None,
        priority_reading=reading,
        priorities=priorities,
        frame_fields={
            path: fmt.describe() for path, fmt in frames.find_spec_formats(info.signature).items()
        },
    )


def fetch_server_status(
    server: str | reverb.Client,
    *,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    priority_samples: int = 0,
) -> ServerStatus:
    """Returns a snapshot of every table of a running Reverb server.

    With `priority_samples=0` (the default) it only reads counters: the tables are left
    exactly as they were. With N > 0 it samples N items from each table where that changes
    nothing but counters (see the module docstring), summarises their priorities, and then
    reads the counters, so the snapshot's `samples` include these N.

    Args:
      server: The server's 'host:port', or a client of it.
      timeout_ms: The most the server may take to answer (after it accepted a connection
        within `table_info.CONNECT_TIMEOUT_MS`), and the most the samples may take.
      priority_samples: Items to sample from each table that allows it (0: none).

    Returns:
      The tables' status, sorted by table name.

    Raises:
      ReverbConnectionError: If nothing answers at the address within
        `table_info.CONNECT_TIMEOUT_MS`, or the server does not answer within `timeout_ms`;
        names the address and what to check.
      ValueError: If `timeout_ms` is not an integer >= 1 or `priority_samples` not one >= 0.

    Example:
      >>> print(fetch_server_status('localhost:8000').format())
    """
    checks.check_int_at_least(timeout_ms, 1, argument='timeout_ms')
    checks.check_int_at_least(priority_samples, 0, argument='priority_samples')
    client = table_info.connect(server)
    before = table_info.fetch_server_info(client, timeout_ms=timeout_ms)
    readings: dict[str, tuple[PriorityReading, PrioritySummary | None]] = {}
    for name, info in before.items():
        refusal = _check_sampling(info, priority_samples)
        if refusal is not None:
            readings[name] = (refusal, None)
            continue
        infos = _sample_infos(client, name, priority_samples, timeout_ms=timeout_ms)
        if len(infos) < priority_samples:
            readings[name] = (PriorityReading.TIMED_OUT, None)
        else:
            readings[name] = (PriorityReading.READ, _summarize_priorities(infos))
    taken_at = datetime.datetime.now(datetime.UTC)
    after = before
    if any(reading is PriorityReading.READ for reading, _ in readings.values()):
        after = table_info.fetch_server_info(client, timeout_ms=timeout_ms)
    tables = tuple(
        _read_table(after[name], *readings.get(name, (PriorityReading.NOT_ASKED, None)))
        for name in sorted(after)
    )
    return ServerStatus(address=client.server_address, taken_at=taken_at, tables=tables)
