"""`rlds-reverb info` and `rlds-reverb validate`: what a dataset holds, and what is wrong."""

from __future__ import annotations

import argparse
import os
import sys

from rlds_reverb.cli import common

__all__ = [
    'add_info_parser',
    'add_validate_parser',
]


def _run_info(args: argparse.Namespace) -> int:
    from rlds_reverb.check import summary

    print(f'source: {args.source} (split {args.split})')
    # A TFDS directory in the default layout is summarized from its files without importing
    # TensorFlow (seconds saved); anything else, or anything unexpected, goes through `load`.
    found = None
    if args.data_dir is None and os.path.isdir(args.source):
        found = summary.describe_dataset_files(args.source, split=args.split)
    if found is None:
        from rlds_reverb.check import stats
        from rlds_reverb.read import loading

        found = stats.describe_dataset(common.load_source(args))
        formats = loading.list_frame_fields(args.source, data_dir=args.data_dir)
        found.frame_fields = {path: fmt.describe() for path, fmt in formats.items()}
    print(found.format())
    return common.EXIT_OK


def _run_validate(args: argparse.Namespace) -> int:
    from rlds_reverb.check import validation

    if args.mode is not None:
        print(
            'rlds-reverb validate: --mode is deprecated; use --on-invalid (the same values).',
            file=sys.stderr,
        )
    on_invalid = args.mode or args.on_invalid
    # A full file check names the shard, record and field of an episode that does not decode.
    episodes = common.load_source(args, check_files='full')
    report = validation.validate(episodes, on_invalid=on_invalid)
    print(report.format())
    return common.EXIT_OK if report.ok else common.EXIT_INVALID_DATA


def add_info_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `info`: episodes, steps, spec, endings, returns and frame fields of a dataset."""
    parser = subparsers.add_parser(
        'info', help='episodes, steps, spec, endings, returns, frame fields'
    )
    common.add_source_arguments(parser)
    parser.set_defaults(handler=_run_info)
    return parser


def add_validate_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `validate`: check every episode; exit 1 when any is invalid."""
    parser = subparsers.add_parser(
        'validate', help='check every episode; exit 1 when any is invalid'
    )
    from rlds_reverb.core import types

    common.add_source_arguments(parser)
    modes = [m.value for m in types.ValidationMode]
    parser.add_argument(
        '--on-invalid',
        choices=modes,
        default=types.ValidationMode.REPORT.value,
        help="'report' (default) lists every problem; 'raise' stops at the first bad episode",
    )
    parser.add_argument('--mode', choices=modes, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(handler=_run_validate)
    return parser
