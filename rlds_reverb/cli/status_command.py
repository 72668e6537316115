"""`rlds-reverb status`: what a running Reverb server holds, table by table (docs/status.md).

    rlds-reverb status --server localhost:8000
    rlds-reverb status --server localhost:8000 --watch 2          # refresh every 2 s
    rlds-reverb status --server localhost:8000 --json --priorities 100

It only reads the server's counters (`rlds_reverb.serve.status`); `--priorities N` samples N
items from the tables where sampling deletes nothing and moves no rate limiter, and says
that those samples were counted. `--watch SECONDS` prints a new snapshot every SECONDS
(clearing the screen on a terminal; else one block after the other, each with its time;
with `--json`, one JSON object per line) until Ctrl-C, which ends it with exit code 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rlds_reverb.cli import common
from rlds_reverb.core import timeouts

__all__ = [
    'add_status_parser',
]

# Moves the cursor home and clears a terminal (ANSI), so that a watched status stays put.
_CLEAR_SCREEN = '\033[H\033[2J'


def _check_options(args: argparse.Namespace) -> None:
    """Raises ValueError for options `status` cannot honour."""
    from rlds_reverb.core import checks

    checks.check_int_at_least(args.timeout_ms, 1, argument='--timeout-ms')
    checks.check_int_at_least(args.priorities, 0, argument='--priorities')
    if args.watch is not None:
        checks.check_number_above(args.watch, 0.0, argument='--watch')
    if args.count is not None:
        checks.check_int_at_least(args.count, 1, argument='--count')
        if args.watch is None:
            raise ValueError('--count N counts the refreshes of --watch; pass --watch SECONDS.')


def _print_snapshot(args: argparse.Namespace, *, clear: bool) -> None:
    from rlds_reverb.serve import status

    snapshot = status.fetch_server_status(
        args.server, timeout_ms=args.timeout_ms, priority_samples=args.priorities
    )
    text = json.dumps(snapshot.to_json(), allow_nan=False) if args.json else snapshot.format()
    if clear:
        text = _CLEAR_SCREEN + text
    elif args.watch is not None and not args.json:
        text += '\n'  # A blank line between the blocks of a watched status.
    print(text, flush=True)


def _status(args: argparse.Namespace) -> int:
    _check_options(args)
    if args.watch is None:
        _print_snapshot(args, clear=False)
        return common.EXIT_OK
    clear = sys.stdout.isatty() and not args.json
    shown = 0
    try:
        while True:
            _print_snapshot(args, clear=clear)
            shown += 1
            if args.count is not None and shown >= args.count:
                break
            time.sleep(args.watch)
    except KeyboardInterrupt:  # Ctrl-C is how a watch ends: not an error.
        pass
    return common.EXIT_OK


def add_status_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `status`: each table's size, counters, selectors, rate limiter and priorities."""
    parser = subparsers.add_parser(
        'status', help="show a running Reverb server's tables (sizes, counters, limiters)"
    )
    parser.add_argument('--server', required=True, help="address 'host:port'")
    parser.add_argument(
        '--watch',
        type=float,
        default=None,
        metavar='SECONDS',
        help='refresh every SECONDS until Ctrl-C (clears the screen on a terminal)',
    )
    parser.add_argument(
        '--count', type=int, default=None, help='with --watch: stop after N snapshots'
    )
    parser.add_argument(
        '--timeout-ms',
        type=int,
        default=timeouts.STATUS_MS,
        help='the most the server may take to answer (default 10000)',
    )
    parser.add_argument(
        '--priorities',
        type=int,
        default=0,
        metavar='N',
        help='sample N items to summarise priorities, from tables where sampling deletes '
        'nothing and moves no rate limiter (the samples are counted; default 0: none)',
    )
    parser.add_argument('--json', action='store_true', help='print JSON (one object a line)')
    parser.set_defaults(handler=_status)
    return parser
