"""The `rlds-reverb` command line: info, validate, push, serve, demo.

Errors this toolkit raises on purpose are printed as one clear line and exit non-zero;
`--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import tensorflow as tf

from rlds_reverb import errors, types

# Exit codes.
EXIT_OK = 0
EXIT_INVALID_DATA = 1
EXIT_ERROR = 2


def _load(source: str, split: str, *, check_files: bool | str = True) -> tf.data.Dataset:
    from rlds_reverb import loading  # Imported late: TFDS is slow to import.

    return loading.load(source, split=split, check_files=check_files)


def _run_info(args: argparse.Namespace) -> int:
    from rlds_reverb import stats

    print(f'source: {args.source} (split {args.split})')
    print(stats.describe_dataset(_load(args.source, args.split)).format())
    return EXIT_OK


def _run_validate(args: argparse.Namespace) -> int:
    from rlds_reverb import validation

    # A full file check names the shard, record and field of an episode that does not decode.
    episodes = _load(args.source, args.split, check_files='full')
    report = validation.validate(episodes, mode=args.mode)
    print(report.format())
    return EXIT_OK if report.ok else EXIT_INVALID_DATA


def _add_source_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('source', help='a TFDS dataset directory, or a TFDS name with --data-dir')
    parser.add_argument('--split', default='train', help="TFDS split (default 'train')")


def _add_info_parser(subparsers) -> None:
    parser = subparsers.add_parser('info', help='episodes, steps, spec, endings, returns')
    _add_source_arguments(parser)
    parser.set_defaults(handler=_run_info)


def _add_validate_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        'validate', help='check every episode; exit 1 when any is invalid'
    )
    _add_source_arguments(parser)
    parser.add_argument(
        '--mode',
        choices=[m.value for m in types.ValidationMode],
        default=types.ValidationMode.REPORT.value,
        help="'report' (default) lists every problem; 'raise' stops at the first bad episode",
    )
    parser.set_defaults(handler=_run_validate)


def _optional_parsers() -> list[Callable]:
    """The subcommands of modules that may be absent from a trimmed install."""
    adders = []
    for module_name, function_names in (
        ('rlds_reverb.cli_reverb', ('add_push_parser', 'add_serve_parser')),
        ('rlds_reverb.demo', ('add_demo_parser',)),
    ):
        try:
            module = __import__(module_name, fromlist=list(function_names))
        except ModuleNotFoundError:
            continue
        adders += [getattr(module, name) for name in function_names]
    return adders


def build_parser() -> argparse.ArgumentParser:
    """Returns the `rlds-reverb` argument parser."""
    parser = argparse.ArgumentParser(
        prog='rlds-reverb',
        description='RLDS datasets to TF-Agents trajectories in Reverb tables.',
    )
    parser.add_argument('--debug', action='store_true', help='show tracebacks on errors')
    subparsers = parser.add_subparsers(dest='command', required=True)
    _add_info_parser(subparsers)
    _add_validate_parser(subparsers)
    for add_parser in _optional_parsers():
        add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (errors.RldsReverbError, tf.errors.OpError, OSError, ValueError) as error:
        if args.debug:
            raise
        print(f'rlds-reverb {args.command}: error: {error}', file=sys.stderr)
        if isinstance(error, errors.InvalidEpisodeError | tf.errors.InvalidArgumentError):
            return EXIT_INVALID_DATA
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f'rlds-reverb {args.command}: interrupted', file=sys.stderr)
        return 130


if __name__ == '__main__':
    sys.exit(main())
