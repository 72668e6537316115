"""What a running Reverb server says about its tables, asked and checked in one place.

Pushes, resumes, the Beam pipeline, learner datasets, export and `serve` all connect, look
tables up, and check signatures through these functions, so that the same problem gives
the same message wherever it surfaces. A signature check always reads the table's
signature as the *expected* side and what the caller writes or reads as the *found* side.

`probe_server` is the one place that asks whether anything answers at an address, with a
deadline of its own (`CONNECT_TIMEOUT_MS`). Reverb's own calls cannot tell a dead server
from a slow one: its server-info call waits for its whole deadline (60 s for a push's
default), and its writers retry a lost connection until their flush times out. So every
entry point probes before it asks for anything, and the writers probe whenever a wait on
the server outlasts one slice (`rlds_reverb.write.engines.wait_on_server`).
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Sequence
from typing import TypeAlias

import reverb

from rlds_reverb.core import frames, specs, timeouts, types
from rlds_reverb.core.errors import ReverbConnectionError, SpecMismatchError, TableError

__all__ = [
    'CONNECT_TIMEOUT_MS',
    'TableInfo',
    'check_signature',
    'connect',
    'count_free_slots',
    'count_inserted',
    'fetch_server_info',
    'fetch_table_info',
    'fetch_tables_info',
    'probe_server',
]

TableInfo: TypeAlias = reverb.reverb_types.TableInfo

# How long a server may take to accept a connection before it is named unreachable: a
# refused connection (nothing listening) is named at once, a host that does not answer
# (down, or a firewall dropping packets) after this long.
CONNECT_TIMEOUT_MS = timeouts.CONNECT_MS
# gRPC routes through these proxies when they are set; a direct probe would then test a
# path Reverb does not use, so it is skipped and Reverb's own deadline applies.
_PROXY_VARIABLES = ('grpc_proxy', 'https_proxy', 'http_proxy')


def _split_address(address: str) -> tuple[str, int] | None:
    """Returns (host, port) of 'host:port' or '[v6]:port'; None for other gRPC targets."""
    host, _, port = address.rpartition(':')
    if not host or not port.isdigit():
        return None
    return host.strip('[]'), int(port)


def probe_server(address: str, *, timeout_ms: int = CONNECT_TIMEOUT_MS) -> None:
    """Raises `ReverbConnectionError` unless something at `address` accepts a connection.

    A connection refused (nothing listening, for example a killed server) fails at once;
    a host that does not answer fails after `timeout_ms`. It checks that the port is open,
    not that a Reverb server answers there: the server-info call that follows does that.

    Args:
      address: The server's 'host:port'. Other gRPC targets ('unix:...', 'dns:///...'),
        and any address while a gRPC proxy variable is set, are not probed.
      timeout_ms: The most to wait for the connection.

    Raises:
      ReverbConnectionError: If nothing accepted a connection within `timeout_ms`; names
        the address, the time waited and what to check.

    Example:
      >>> probe_server('localhost:8000')
    """
    where = _split_address(address)
    if where is None or any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return
    try:
        with socket.create_connection(where, timeout=timeout_ms / 1000):
            return
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ReverbConnectionError(
            f'No Reverb server answered at {address} within {timeout_ms / 1000:g} s '
            f'({reason}). Check the address, that the server is running, and that this '
            'machine can reach it (firewall, network).'
        ) from e


def connect(server: str | reverb.Client) -> reverb.Client:
    """Returns a client for an address 'host:port', or the given client, once it answers.

    Entry points connect before any other work, so a dead server is named at once
    (`probe_server`), before a dataset is read.

    Raises:
      ReverbConnectionError: If `server` is neither a client nor a 'host:port' string, or
        nothing answers at its address within `CONNECT_TIMEOUT_MS`.

    Example:
      >>> client = connect('localhost:8000')
    """
    if isinstance(server, reverb.Client):
        client = server
    elif isinstance(server, str) and _split_address(server) is not None:
        client = reverb.Client(server)
    else:
        raise ReverbConnectionError(
            f"server={server!r} is not valid; expected 'host:port' or a reverb.Client."
        )
    probe_server(client.server_address)
    return client


def fetch_server_info(client: reverb.Client, *, timeout_ms: int) -> dict[str, TableInfo]:
    """Returns the server's info on all its tables, once `probe_server` finds it there.

    Args:
      client: The server's client.
      timeout_ms: The most the server may take to answer, once it accepted a connection.

    Raises:
      ReverbConnectionError: If nothing answers at the address within `CONNECT_TIMEOUT_MS`,
        or the server does not answer within `timeout_ms`; names it.

    Example:
      >>> tables = fetch_server_info(client, timeout_ms=10_000)  # {name: TableInfo}
    """
    address = client.server_address
    probe_server(address, timeout_ms=min(timeout_ms, CONNECT_TIMEOUT_MS))
    timeout_s = max(1, math.ceil(timeout_ms / 1000))
    try:
        return client.server_info(timeout=timeout_s)
    except (reverb.errors.DeadlineExceededError, RuntimeError) as e:
        raise ReverbConnectionError(
            f'The Reverb server at {address} accepted a connection but did not answer within '
            f'{timeout_ms} ms ({e}). Check that a Reverb server (not another program) '
            'listens there and is not overloaded, or pass a longer timeout.'
        ) from e


def fetch_tables_info(
    client: reverb.Client, names: Sequence[str], *, timeout_ms: int
) -> dict[str, TableInfo]:
    """Returns the server's info on the tables `names`, in that order.

    Raises:
      ReverbConnectionError: If the server does not answer (see `fetch_server_info`).
      TableError: If a table does not exist; lists the tables that do.

    Example:
      >>> info = fetch_tables_info(client, ['replay'], timeout_ms=10_000)['replay']
    """
    info = fetch_server_info(client, timeout_ms=timeout_ms)
    missing = [name for name in names if name not in info]
    if missing:
        existing = ', '.join(sorted(info)) or '(none)'
        listed = ', '.join(repr(name) for name in missing)
        raise TableError(
            f'Could not find table {listed} on the Reverb server at {client.server_address}. '
            f'The following tables exist: {existing}.'
        )
    return {name: info[name] for name in names}


def fetch_table_info(client: reverb.Client, table: str, *, timeout_ms: int) -> TableInfo:
    """Returns the server's info on one table (see `fetch_tables_info`).

    Raises:
      ReverbConnectionError: If the server does not answer within `timeout_ms`.
      TableError: If there is no such table; lists the tables that exist.
    """
    return fetch_tables_info(client, [table], timeout_ms=timeout_ms)[table]


def check_signature(info: TableInfo, spec: types.SpecNest, *, found: str = 'the items') -> None:
    """Raises `SpecMismatchError` with a leaf-by-leaf diff if the table holds other items.

    The table's signature is the expected side; `spec` (what is written or read) is the
    found side. A table without a signature accepts anything and is not checked. Frame
    fields count too: a table that stores a field's frames encoded (its signature names
    their format, `core.frames`) and items holding them decoded, or the reverse, or
    frames of another format, are named with what to do.

    Args:
      info: The table's info.
      spec: The spec of the items written, or read.
      found: What `spec` is, for the message ('the items pushed', 'the learner's items').

    Raises:
      SpecMismatchError: If any leaf differs (a `ValueError`).
    """
    if info.signature is None:
        return
    what = f'Table {info.name!r} signature (expected) vs {found} (found)'
    frame_lines = frames.diff_frame_fields(info.signature, spec)
    if frame_lines:
        named = {line.split(':')[0] for line in frame_lines}
        others = [  # The other leaves' differences (`diff_specs` joins paths with dots).
            line
            for line in specs.diff_specs(info.signature, spec)
            if line.split(':')[0].replace('.', '/') not in named
        ]
        raise SpecMismatchError(
            f'{what}: frame fields differ. {_advise_on_frames(frame_lines)}',
            [*frame_lines, *others],
        )
    specs.check_specs_match(info.signature, spec, what=what)


def _advise_on_frames(lines: Sequence[str]) -> str:
    """Returns what to do about frame fields stored otherwise than the items hold them."""
    advice = []
    if any('expected encoded' in line for line in lines):
        advice.append(
            'The table stores frames encoded: read the episodes with '
            "rlds_reverb.load(..., encoded_frames='all') (or those fields' paths)."
        )
    if any('expected decoded' in line for line in lines):
        advice.append(
            'The table stores decoded frames: read the episodes without encoded_frames, or '
            'make a new table with signature=tables.signature_for(item, episodes) of the '
            'encoded episodes.'
        )
    if any(' frames, found ' in line and 'encoded' not in line for line in lines):
        advice.append(
            'The table stores frames of another format: make a new table with '
            'signature=tables.signature_for(item, episodes).'
        )
    return ' '.join(advice)


def count_free_slots(info: TableInfo) -> int:
    """Returns how many more items the table holds before it removes (evicts) any."""
    return max(0, info.max_size - info.current_size)


def count_inserted(info: TableInfo) -> int:
    """Returns how many items the table has ever had inserted (restored with a checkpoint)."""
    return int(info.rate_limiter_info.insert_stats.completed)
