"""`rlds-reverb serve` and `rlds-reverb push`: seed, checkpoint, restore and push.

    rlds-reverb serve SOURCE --port 8000 --table-preset prioritized --item n-step --n 3 \\
        --checkpoint-dir /ckpt
    rlds-reverb push SOURCE --server localhost:8000 --table replay --item two-step --workers 2

`serve` restores the tables from `--checkpoint-dir` when it holds a checkpoint, else pushes
SOURCE and writes one; it says which, then serves until SIGINT/SIGTERM. It first says on
stderr that the port is open to the network (README, Security). `push` writes into
a running server with a progress bar; `--workers N` shards the dataset across N processes
writing to the same server (TFDS split slicing, `Dataset.shard` for other sources).
`push --checkpoint-every N` checkpoints the server after every N episodes, and
`push --resume` starts at the first episode the table lacks (`rlds_reverb.write.resume`),
so a push cut off by a server crash continues, after a restart from the latest checkpoint,
without duplicating or losing an item.

Beyond one machine (`rlds_reverb.distribute`, the `beam` extra):

    rlds-reverb serve SOURCE --port 8000 --count 2      # two empty servers, 8000 and 8001
    rlds-reverb push SOURCE --servers localhost:8000,localhost:8001 --runner DirectRunner \
        --direct-num-workers 2 [any other Beam pipeline option, e.g. --temp_location=...]

`push --servers` runs the Apache Beam pipeline: shards read in parallel, every episode on one
server (balanced), exactly once even when re-run. Options `push` does not know are passed to
Beam. `serve --count N` starts N servers with the empty table (ports PORT..PORT+N-1, or free
ones with `--port 0`), for tests and demos.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from rlds_reverb.cli import common

__all__ = [
    'add_push_parser',
    'add_serve_parser',
]

# The library modules (and TensorFlow) are imported inside the functions, so that importing
# the command line stays cheap and `rlds-reverb` can quiet TensorFlow before it loads.


def _make_item(args: argparse.Namespace):
    from rlds_reverb.transform import items

    return items.parse_item(
        args.item,
        n=args.n,
        gamma=args.gamma,
        length=args.length,
        period=args.period,
        end=args.end,
        max_length=args.max_length,
        overflow=args.overflow,
    )


def _install_stop_handlers() -> threading.Event:
    """Returns an event that SIGINT or SIGTERM sets from now on."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


# Reverb 0.14 has no bind address and no credentials (README, Security).
OPEN_PORT_NOTICE = (
    'rlds-reverb serve: note: Reverb listens on {where} on every interface (IPv4 and IPv6) '
    'without authentication or TLS, so anyone who can reach it can read, change and delete '
    'the tables; keep it private with a firewall rule or an SSH tunnel (README.md#security).'
)


def _say_port_is_open(args: argparse.Namespace) -> None:
    """Prints, once, on stderr (stdout holds the addresses), that the port is open."""
    if not args.port:
        where = 'free ports'
    elif args.count and args.count > 1:
        where = f'ports {args.port}-{args.port + args.count - 1}'
    else:
        where = f'port {args.port}'
    print(OPEN_PORT_NOTICE.format(where=where), file=sys.stderr, flush=True)


def _serve_many(args: argparse.Namespace) -> int:
    """Starts `--count` servers with the empty table; prints their addresses; serves."""
    import os

    from rlds_reverb.core import checks
    from rlds_reverb.serve import server, tables
    from rlds_reverb.transform import plans

    checks.check_int_at_least(args.count, 1, argument='--count')
    episodes, options = common.load_source(args), make_push_options(args)
    signature = tables.signature_for(
        options.item, episodes, episode_fields=options.episode_fields, add_ids=options.add_ids
    )
    max_size = args.max_size or max(1, plans.count_items(episodes, options.item))
    running = []
    try:
        for index in range(args.count):
            table = tables.make_table(
                args.table_preset,
                args.table,
                signature=signature,
                max_size=max_size,
                priority_exponent=args.priority_exponent,
            )
            where = args.checkpoint_dir and os.path.join(args.checkpoint_dir, f'server-{index}')
            port = args.port + index if args.port else None
            running.append(server.start_server([table], port=port, checkpoint_dir=where))
        stop = _install_stop_handlers()
        addresses = ','.join(f'localhost:{s.port}' for s in running)
        print(
            f'Serving table {args.table!r} (max_size {max_size}) on {addresses}; stop with '
            'Ctrl-C or SIGTERM.',
            flush=True,
        )
        while not stop.wait(timeout=1.0):
            pass
    finally:
        for running_server in running:
            running_server.stop()
    print('Stopped.', flush=True)
    return common.EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    from rlds_reverb.write import seed

    _say_port_is_open(args)
    if args.count is not None:
        return _serve_many(args)

    result = seed.seed_server(
        common.load_source(args),
        table=args.table,
        preset=args.table_preset,
        port=args.port,
        checkpoint_dir=args.checkpoint_dir,
        max_size=args.max_size,
        priority_exponent=args.priority_exponent,
        options=make_push_options(args),
    )
    try:  # The server stops on any way out: an error, Ctrl-C, SIGTERM.
        stats = result.stats  # None when restored: nothing was pushed.
        if result.outcome is seed.SeedOutcome.RESTORED or stats is None:
            print(
                f'Restored table {result.table!r} ({result.items} items) from checkpoint '
                f'{result.checkpoint_path} in {result.seconds:.2f} s.'
            )
        else:
            where = (
                f'; checkpoint written to {result.checkpoint_path}'
                if result.checkpoint_path
                else ''
            )
            print(
                f'Pushed {result.items} items ({stats.episodes} episodes, {stats.steps} steps, '
                f'{stats.skipped_episodes} skipped) into table {result.table!r} in '
                f'{result.seconds:.2f} s{where}.'
            )
        stop = _install_stop_handlers()  # Before saying so: a stop request may follow at once.
        print(f'Serving on {result.address}; stop with Ctrl-C or SIGTERM.', flush=True)
        while not stop.wait(timeout=1.0):
            pass
    finally:
        result.server.stop()
    print('Stopped.', flush=True)
    return common.EXIT_OK


def make_push_options(args: argparse.Namespace):
    """Returns the command's one `PushOptions`, from the flags `PushOptions` declares.

    Raises:
      ValueError: Naming the first invalid option by its flag (`--timeout-ms=0 ...`).
    """
    import dataclasses

    from rlds_reverb.write.options import PushOptions

    given = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(PushOptions)
        if hasattr(args, field.name) and PushOptions.flag_of(field) is not None
    }
    try:
        return PushOptions(item=_make_item(args), **given)
    except ValueError as e:
        raise ValueError(_spell_as_flags(str(e))) from e


def _spell_as_flags(message: str) -> str:
    """Returns an option's error with the option named as its flag (`--checkpoint-every=0`)."""
    import dataclasses

    from rlds_reverb.write.options import PushOptions

    for field in dataclasses.fields(PushOptions):
        if message.startswith(f'{field.name}='):
            return PushOptions.flag_name(field.name) + message[len(field.name) :]
    return message


def _find_resume_point(args: argparse.Namespace, episodes, options):
    """Returns where `--resume` starts, after saying so (the table's insert count decides)."""
    from rlds_reverb.serve import table_info
    from rlds_reverb.write import resume

    client = table_info.connect(args.server)  # A dead server is named before counting.
    counts = resume.count_items_per_episode(episodes, options.item)
    inserted = resume.count_inserted(client, args.table, timeout_ms=options.timeout_ms)
    start = resume.find_resume_point(inserted, counts)
    held = f'episodes 0..{start.episode - 1} of the dataset' if start.episode else 'no episode'
    part = f' and the first {start.items} items of episode {start.episode}' if start.items else ''
    print(
        f'Table {args.table!r} holds {inserted} items: {held}{part}; resuming at episode '
        f'{start.episode} of {len(counts)}.',
        flush=True,
    )
    return start


def _push_to_one_server(args: argparse.Namespace, options, progress):
    """Pushes SOURCE into `--server` (from `--workers` processes); returns stats, failures."""
    from rlds_reverb.write import parallel, resume

    if options.resume or options.checkpoint_every is not None:
        episodes = common.load_source(args)
        start = _find_resume_point(args, episodes, options) if options.resume else 0
        stats = resume.push_resumable(
            episodes,
            args.server,
            args.table,
            start_episode=start,
            progress=progress,
            options=options,
        )
        return stats, []
    source = parallel.ParallelSource(
        args.source,
        args.split,
        getattr(args, 'data_dir', None),
        encoded_frames=common.read_encoded_frames(args),
    )
    result = parallel.push_in_parallel(
        source, args.server, args.table, options, workers=args.workers, progress=progress
    )
    return result.stats, result.failures


def _check_workers(args: argparse.Namespace, options) -> None:
    """Raises ValueError for `--workers` not an integer >= 1, or with options that need one
    writer (`options.check_writers`)."""
    from rlds_reverb.core import checks
    from rlds_reverb.write.options import Writers, check_writers

    if checks.check_int_at_least(args.workers, 1, argument='--workers') > 1:
        check_writers(options, Writers.PROCESSES, as_flags=True)


def _beam_flags(args: argparse.Namespace) -> list[str]:
    """Returns the Beam pipeline options of `push --servers`."""
    flags = [f'--runner={args.runner or "DirectRunner"}']
    if args.direct_num_workers is not None:
        from rlds_reverb.core import checks

        checks.check_int_at_least(args.direct_num_workers, 1, argument='--direct-num-workers')
        flags.append(f'--direct_num_workers={args.direct_num_workers}')
        if args.direct_num_workers > 1 and not any(
            f.startswith('--direct_running_mode') for f in args.beam_args
        ):
            flags.append('--direct_running_mode=multi_processing')
    return flags + list(args.beam_args)


def _push_beam(args: argparse.Namespace) -> int:
    """`push --servers`: the Beam pipeline into several servers, with a progress bar of items."""
    if args.server or args.workers != 1:
        raise ValueError(
            '--servers runs the Beam pipeline, which always resumes exactly; use it without '
            '--server and --workers (use --direct-num-workers).'
        )
    from rlds_reverb.write.options import Writers, check_writers

    if common.read_encoded_frames(args) is not None:
        raise ValueError(
            '--servers runs the Apache Beam pipeline, which pushes decoded frames; push '
            'encoded frames into one server with --server (and --workers N).'
        )
    options = make_push_options(args)
    check_writers(options, Writers.BEAM, as_flags=True)
    try:
        from rlds_reverb.distribute import pipeline
    except ImportError as e:
        raise ValueError(
            f'push --servers needs Apache Beam ({e}); install rlds-reverb[beam].'
        ) from e
    import tqdm

    bar = tqdm.tqdm(unit=' items', disable=args.no_progress, file=sys.stderr)

    def _progress(items: int) -> None:
        bar.update(items - bar.n)

    try:
        result = pipeline.push_with_beam(
            args.source,
            args.servers,
            args.table,
            split=args.split,
            data_dir=args.data_dir,
            pipeline_options=_beam_flags(args),
            progress=_progress,
            options=options,
        )
    finally:
        bar.close()
    print(result.format())
    return common.EXIT_OK


def _push(args: argparse.Namespace) -> int:
    if args.servers:
        return _push_beam(args)
    if args.beam_args:
        raise ValueError(f'unrecognized arguments: {" ".join(args.beam_args)}')
    if not args.server:
        raise ValueError('push needs --server HOST:PORT (or --servers for the Beam pipeline).')
    options = make_push_options(args)
    _check_workers(args, options)
    bar = common.ProgressBar(disable=args.no_progress)
    try:
        total, failures = _push_to_one_server(args, options, bar.update)
    finally:
        bar.close()
    print(
        f'Pushed {total.items.get(args.table, 0)} items ({total.episodes} episodes, '
        f'{total.steps} steps, {total.skipped_episodes} skipped) into {args.table!r} at '
        f'{args.server} with {args.workers} worker(s) in {total.seconds:.2f} s.'
    )
    for failure in failures:
        print(f'rlds-reverb push: error: {failure}', file=sys.stderr)
    return common.EXIT_ERROR if failures else common.EXIT_OK


def _values(enum_type) -> list[str]:
    return [member.value for member in enum_type]


def _add_item_arguments(parser: argparse.ArgumentParser) -> None:
    from rlds_reverb.core import types  # The enums, without TensorFlow (help stays quick).

    common.add_source_arguments(parser)
    parser.add_argument('--table', default='replay', help="table name (default 'replay')")
    parser.add_argument(
        '--item', default=types.ItemName.TWO_STEP.value, choices=_values(types.ItemName)
    )
    parser.add_argument('--n', type=int, default=3, help='n-step: steps (default 3)')
    parser.add_argument('--gamma', type=float, default=0.99, help='n-step: discount')
    parser.add_argument('--length', type=int, default=2, help='sequence: steps per window')
    parser.add_argument('--period', type=int, default=None, help='sequence: steps between')
    parser.add_argument(
        '--end',
        default=types.EndBehavior.TRUNCATE.value,
        choices=_values(types.EndBehavior),
        help='sequence: end-of-episode behaviour',
    )
    parser.add_argument('--max-length', type=int, default=1000, help='episode: max steps')
    parser.add_argument(
        '--overflow',
        default=types.EpisodeOverflow.ERROR.value,
        choices=_values(types.EpisodeOverflow),
        help='episode: what to do with longer episodes',
    )


def _add_write_option_arguments(parser: argparse.ArgumentParser, *, push: bool) -> None:
    """Adds a flag per option of `LoadOptions` and `PushOptions` that declares one (`Flag`),
    with its default.

    `common.load_source` and `make_push_options` turn them back into the options values: a
    new option reaches `push` and `serve` from its definition alone.
    """
    import dataclasses

    from rlds_reverb.core import flags
    from rlds_reverb.read.options import LoadOptions  # Both load without TensorFlow.
    from rlds_reverb.write.options import PushOptions

    for field in [*dataclasses.fields(LoadOptions), *dataclasses.fields(PushOptions)]:
        flag = flags.find_flag(field)
        if flag is None or (flag.push_only and not push):
            continue
        common.add_option_argument(parser, field)


def add_serve_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `serve`: seed (or restore) a Reverb server, checkpoint it, serve until stopped."""
    from rlds_reverb.core import types  # Not `serve.tables`: that imports TensorFlow.

    parser = subparsers.add_parser('serve', help='seed or restore a Reverb server and serve it')
    _add_item_arguments(parser)
    _add_write_option_arguments(parser, push=False)
    parser.add_argument('--port', type=int, required=True, help='port to serve on')
    parser.add_argument(
        '--table-preset',
        default=types.TablePreset.UNIFORM.value,
        choices=_values(types.TablePreset),
    )
    parser.add_argument('--priority-exponent', type=float, default=0.6)
    parser.add_argument('--max-size', type=int, default=None, help='default: the item count')
    parser.add_argument('--checkpoint-dir', default=None, help='restore from / checkpoint to')
    parser.add_argument(
        '--count',
        type=int,
        default=None,
        help='start N servers with the empty table (for push --servers); ports PORT.. '
        'PORT+N-1, free ones with --port 0; checkpoints in CHECKPOINT_DIR/server-i',
    )
    parser.set_defaults(handler=_serve)
    return parser


def add_push_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `push`: write SOURCE into a table of a running Reverb server."""
    parser = subparsers.add_parser('push', help='push a dataset into a running Reverb server')
    _add_item_arguments(parser)
    parser.add_argument('--server', default=None, help="address 'host:port'")
    parser.add_argument(
        '--servers',
        default=None,
        help="'host:port,host:port': run the Apache Beam pipeline into these servers; "
        'other options push does not know are Beam pipeline options',
    )
    parser.add_argument('--runner', default=None, help='Beam runner (default DirectRunner)')
    parser.add_argument(
        '--direct-num-workers', type=int, default=None, help='DirectRunner worker processes'
    )
    parser.add_argument('--workers', type=int, default=1, help='processes (dataset shards)')
    parser.add_argument('--no-progress', action='store_true', help='hide the progress bar')
    _add_write_option_arguments(parser, push=True)
    parser.set_defaults(handler=_push, beam_args=[], accepts_unknown_arguments=True)
    return parser
