"""`rlds-reverb export` and `rlds-reverb record`: back from Reverb and TF-Agents to RLDS.

    rlds-reverb export --server localhost:8000 --server-checkpoint-dir /ckpt --table replay OUT_DIR
    rlds-reverb export --checkpoint /ckpt --table replay OUT_DIR
    rlds-reverb export --checkpoint /ckpt --table seq --item sequence --length 8 OUT_DIR
    rlds-reverb record --env CartPole-v1 --episodes 100 --policy scripted OUT_DIR

`export` writes the items of a Reverb table (a live server, or a checkpoint directory) as
an RLDS dataset in TFDS format (`rlds_reverb.export.reverb_export`); `record` runs a
TF-Agents driver and records its episodes (`rlds_reverb.export.recorder`). Both show a
progress bar of steps and episodes on stderr and print a summary line.
"""

from __future__ import annotations

import argparse

from rlds_reverb.cli import common

__all__ = [
    'add_export_parser',
    'add_record_parser',
]


def _export(args: argparse.Namespace) -> int:
    from rlds_reverb.export import reverb_export
    from rlds_reverb.transform import items

    item = None
    if args.item is not None:
        item = items.parse_item(
            args.item,
            length=args.length,
            period=args.period,
            end=args.end,
            max_length=args.max_length,
            overflow=items.EpisodeOverflow.SPLIT.value,
        )
    if args.server is not None and args.server_checkpoint_dir is None:
        raise ValueError(
            '--server needs --server-checkpoint-dir DIR, the directory the server checkpoints '
            "to: export checkpoints the server, and Reverb then deletes that directory's other "
            'entries, which export keeps. Or export a checkpoint on disk with --checkpoint.'
        )
    given = {'on_invalid': args.on_invalid, 'name': args.name, 'timeout_ms': args.timeout_ms}
    options = reverb_export.ExportOptions(
        episode_fields=args.episode_field,
        item=item,
        # A flag left out takes the default of `ExportOptions`, its one owner.
        **{name: value for name, value in given.items() if value is not None},
    )
    bar = common.ProgressBar(disable=args.no_progress)
    try:
        stats = reverb_export.export_table(
            args.out_dir,
            args.table,
            server=args.server,
            server_checkpoint_dir=args.server_checkpoint_dir,
            checkpoint=args.checkpoint,
            options=options,
            progress=bar.update,
        )
    finally:
        bar.close()
    kind = stats.kind.value if stats.kind is not None else 'no'
    print(
        f'Exported {stats.episodes} episodes ({stats.steps} steps, {stats.skipped_episodes} '
        f'partial skipped) from {stats.items} {kind} items of table '
        f'{args.table!r} to {stats.directory} in {stats.seconds:.2f} s.'
    )
    return common.EXIT_OK


def _record(args: argparse.Namespace) -> int:
    from rlds_reverb.core import checks
    from rlds_reverb.examples import collect

    checks.check_int_at_least(args.episodes, 1, argument='--episodes')
    if args.max_episode_steps is not None:
        checks.check_int_at_least(args.max_episode_steps, 1, argument='--max-episode-steps')
    bar = common.ProgressBar(disable=args.no_progress, total=args.episodes, unit=' episodes')
    seen = [0]

    def _progress(stats) -> None:
        if stats.episodes > seen[0]:
            bar.update(0, stats.episodes - seen[0])
            seen[0] = stats.episodes

    try:
        stats = collect.record_episodes(
            args.out_dir,
            env_name=args.env,
            num_episodes=args.episodes,
            policy=args.policy,
            seed=args.seed,
            max_episode_steps=args.max_episode_steps,
            progress=_progress,
        )
    finally:
        bar.close()
    print(
        f'Recorded {stats.episodes} episodes ({stats.steps} steps: {stats.terminated} '
        f'terminated, {stats.truncated} truncated) of {args.env} with the {args.policy} '
        f'policy to {stats.directory}.'
    )
    return common.EXIT_OK


def add_export_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `export`: write a Reverb table's items as an RLDS dataset."""
    from rlds_reverb.core import types
    from rlds_reverb.export.options import describe_default

    parser = subparsers.add_parser('export', help='write a Reverb table as an RLDS dataset')
    parser.add_argument('out_dir', help='the dataset directory to write (TFDS version dir)')
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument('--server', help="a live server 'host:port' (checkpointed first)")
    source.add_argument('--checkpoint', help='a Reverb checkpoint directory')
    parser.add_argument(
        '--server-checkpoint-dir',
        default=None,
        help='with --server: the directory it checkpoints to (kept as it was), required',
    )
    parser.add_argument('--table', required=True, help='the table name')
    parser.add_argument(
        '--episode-field',
        action='append',
        default=[],
        help='an item field that is episode metadata (repeatable)',
    )
    parser.add_argument(
        '--on-invalid',
        default=None,
        choices=[m.value for m in types.ValidationMode if m is not types.ValidationMode.REPORT],
        help='what to do with episodes the table holds only part of (default '
        f'{describe_default("on_invalid")})',
    )
    parser.add_argument(
        '--item',
        choices=['sequence', 'episode'],
        default=None,
        help='for step windows pushed without ids: the item kind they were pushed with',
    )
    parser.add_argument('--length', type=int, default=2, help='sequence: steps per window')
    parser.add_argument('--period', type=int, default=None, help='sequence: steps between')
    parser.add_argument(
        '--end',
        default=types.EndBehavior.TRUNCATE.value,
        choices=[e.value for e in types.EndBehavior],
        help='sequence: end-of-episode behaviour',
    )
    parser.add_argument('--max-length', type=int, default=1000, help='episode: steps per item')
    parser.add_argument(
        '--name',
        default=None,
        help=f'the TFDS dataset name (default {describe_default("name")})',
    )
    parser.add_argument(
        '--timeout-ms',
        type=int,
        default=None,
        help=f'the most a read of the table may wait (default {describe_default("timeout_ms")})',
    )
    parser.add_argument('--no-progress', action='store_true', help='hide the progress bar')
    parser.set_defaults(handler=_export)
    return parser


def add_record_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `record`: run a TF-Agents driver and record its episodes as RLDS."""
    parser = subparsers.add_parser('record', help='record TF-Agents episodes as RLDS')
    parser.add_argument('out_dir', help='the dataset directory to write (TFDS version dir)')
    parser.add_argument('--env', default='CartPole-v1', help='a Gym environment id')
    parser.add_argument('--episodes', type=int, required=True, help='episodes to record')
    parser.add_argument('--policy', default='random', choices=['random', 'scripted'])
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument(
        '--max-episode-steps', type=int, default=None, help="time limit (default: the env's own)"
    )
    parser.add_argument('--no-progress', action='store_true', help='hide the progress bar')
    parser.set_defaults(handler=_record)
    return parser
