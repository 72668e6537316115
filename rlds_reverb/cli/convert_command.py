"""`rlds-reverb convert`: any source `load` reads, written as an RLDS dataset in TFDS format.

    rlds-reverb convert ~/tensorflow_datasets/d4rl_mujoco_halfcheetah/v2-medium/1.2.0 OUT_DIR
    rlds-reverb convert SRC /data/copy/1.0.0 --episodes-per-shard 50 --overwrite

Reads SRC with `rlds_reverb.load` and writes its episodes with `rlds_reverb.save_as_rlds`
(`rlds_reverb.export.rlds_copy`), showing a progress bar of steps and episodes on stderr
and printing a summary line.
"""

from __future__ import annotations

import argparse
import sys

from rlds_reverb.cli import common

__all__ = [
    'add_convert_parser',
]


def _convert(args: argparse.Namespace) -> int:
    from rlds_reverb.core import checks
    from rlds_reverb.export import rlds_copy

    checks.check_int_at_least(args.episodes_per_shard, 1, argument='--episodes-per-shard')
    bar = common.ProgressBar(disable=args.no_progress)
    try:
        stats = rlds_copy.save_as_rlds(
            args.source,
            args.out_dir,
            split=args.split,
            data_dir=args.data_dir,
            name=args.name,
            episodes_per_shard=args.episodes_per_shard,
            keep_order=not args.unordered,
            overwrite=args.overwrite,
            progress=bar.update,
        )
    except BaseException as error:
        bar.close()
        # The one-line error report shows the message only: say what landed here.
        if not args.debug:
            for note in getattr(error, '__notes__', ()):
                print(f'rlds-reverb convert: {note}', file=sys.stderr)
        raise
    bar.close()
    print(
        f'Converted {stats.episodes} episodes ({stats.steps} steps) from {args.source} to '
        f'{stats.directory} in {stats.seconds:.2f} s ({stats.steps_per_second:,.0f} steps/s).'
    )
    return common.EXIT_OK


def add_convert_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `convert`: write any source `load` reads as an RLDS TFDS dataset."""
    parser = subparsers.add_parser(
        'convert', help='write any dataset load reads as an RLDS TFDS dataset'
    )
    common.add_source_arguments(parser)
    parser.add_argument('out_dir', help='the dataset directory to write (TFDS version dir)')
    parser.add_argument(
        '--name', default=None, help="the TFDS name (default: from OUT_DIR, 'name/1.0.0')"
    )
    parser.add_argument(
        '--episodes-per-shard', type=int, default=100, help='episodes per TFRecord shard'
    )
    parser.add_argument(
        '--overwrite', action='store_true', help='replace a TFDS dataset already in OUT_DIR'
    )
    parser.add_argument(
        '--unordered',
        action='store_true',
        help="let TFDS shuffle the copy's shards (default: it reads back in SRC's order)",
    )
    parser.add_argument('--no-progress', action='store_true', help='hide the progress bar')
    parser.set_defaults(handler=_convert)
    return parser
