"""What a running Reverb server says about its tables, asked and checked in one place.

Pushes, resumes and learner datasets all connect, look tables up, and check signatures
through these functions, so that the same problem gives the same message wherever it
surfaces. A signature check always reads the table's signature as the *expected* side
and what the caller writes or reads as the *found* side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import reverb

from rlds_reverb.core import specs, types
from rlds_reverb.core.errors import ReverbConnectionError, TableError

TableInfo = reverb.reverb_types.TableInfo


def connect(server: str | reverb.Client) -> reverb.Client:
    """Returns a client for an address 'host:port', or the given client.

    Raises:
      ReverbConnectionError: If `server` is neither a client nor a 'host:port' string.

    Example:
      >>> client = connect('localhost:8000')
    """
    if isinstance(server, reverb.Client):
        return server
    if not isinstance(server, str) or ':' not in server or not server.rsplit(':', 1)[1].isdigit():
        raise ReverbConnectionError(
            f"server={server!r} is not valid; expected 'host:port' or a reverb.Client."
        )
    return reverb.Client(server)


def fetch_tables_info(
    client: reverb.Client, names: Sequence[str], *, timeout_ms: int
) -> dict[str, TableInfo]:
    """Returns the server's info on the tables `names`, in that order.

    Raises:
      ReverbConnectionError: If the server does not answer within `timeout_ms`; names it.
      TableError: If a table does not exist; lists the tables that do.

    Example:
      >>> info = fetch_tables_info(client, ['replay'], timeout_ms=10_000)['replay']
    """
    timeout_s = max(1, math.ceil(timeout_ms / 1000))
    try:
        info = client.server_info(timeout=timeout_s)
    except (reverb.errors.DeadlineExceededError, RuntimeError) as e:
        raise ReverbConnectionError(
            f'Could not reach the Reverb server at {client.server_address} within '
            f'{timeout_ms} ms ({e}). Check the address and that the server is running.'
        ) from e
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
    found side. A table without a signature accepts anything and is not checked.

    Args:
      info: The table's info.
      spec: The spec of the items written, or read.
      found: What `spec` is, for the message ('the items pushed', 'the learner's items').

    Raises:
      SpecMismatchError: If any leaf differs (a `ValueError`).
    """
    if info.signature is None:
        return
    specs.check_specs_match(
        info.signature,
        spec,
        what=f'Table {info.name!r} signature (expected) vs {found} (found)',
    )


def count_free_slots(info: TableInfo) -> int:
    """Returns how many more items the table holds before it removes (evicts) any."""
    return max(0, info.max_size - info.current_size)


def count_inserted(info: TableInfo) -> int:
    """Returns how many items the table has ever had inserted (restored with a checkpoint)."""
    return int(info.rate_limiter_info.insert_stats.completed)
