"""`rlds-reverb stats`: per-field, per-dimension statistics of a dataset, printed and saved.

DATA is any source `rlds_reverb.load` reads (a TFDS directory or name in --data-dir, a
Minari directory, a D4RL file). The statistics (`rlds_reverb.check.statistics`) are printed
as a table per field and written as JSON beside the dataset (`statistics_files`: next to
`dataset_info.json` for TFDS), or to --out; a file whose fingerprint matches the data and
the options is read instead of the data (--refresh reads the data anyway). See
docs/statistics.md.
"""

from __future__ import annotations

import argparse
import json

from rlds_reverb.check.quantile_sketch import DEFAULT_CAPACITY  # NumPy only.
from rlds_reverb.cli import common

__all__ = ['add_stats_parser']


def _parse_quantiles(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(',') if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'{text!r} is not a comma-separated list of numbers such as 0.01,0.99'
        ) from None


def _parse_fields(text: str) -> list[str]:
    return [part.strip() for part in text.split(',') if part.strip()]


def _run_stats(args: argparse.Namespace) -> int:
    from rlds_reverb.check import statistics_files, statistics_json
    from rlds_reverb.check.statistics import StatisticsOptions

    options = StatisticsOptions(
        fields=args.fields, quantiles=args.quantiles, sketch_capacity=args.sketch_capacity
    )
    located = statistics_files.locate_statistics(
        args.source, split=args.split, data_dir=args.data_dir, path=args.out, options=options
    )
    bar = common.ProgressBar(disable=args.no_progress)
    try:
        found = statistics_files.ensure_statistics(
            args.source,
            split=args.split,
            data_dir=args.data_dir,
            path=located.path,
            refresh=args.refresh,
            fields=options.fields,
            quantiles=options.quantiles,
            sketch_capacity=options.sketch_capacity,
            progress=bar.update,
        )
    finally:
        bar.close()
    if args.json:
        document = statistics_json.statistics_to_json(found, data=located.data)
        print(json.dumps(document, indent=1, allow_nan=False))
    else:
        print(found.format())
        verb = 'Reused' if found.reused else 'Wrote'
        why = ' (its fingerprint matches the data)' if found.reused else ''
        print(f'\n{verb} {located.path}{why}.')
    return common.EXIT_OK


def add_stats_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `stats`: per-field statistics (mean, std, min, max, quantiles), saved as JSON."""
    parser = subparsers.add_parser(
        'stats',
        help='per-field, per-dimension statistics (mean, std, min, max, quantiles), saved '
        'beside the dataset',
    )
    common.add_source_arguments(parser)
    parser.add_argument(
        '--fields',
        type=_parse_fields,
        default=None,
        help='comma-separated step fields as /-paths (default: every numeric field; images '
        'only when named)',
    )
    parser.add_argument(
        '--quantiles',
        type=_parse_quantiles,
        default=[0.01, 0.99],
        help='comma-separated quantile levels in [0, 1] (default 0.01,0.99)',
    )
    parser.add_argument(
        '--sketch-capacity',
        type=int,
        default=DEFAULT_CAPACITY,
        help='values per dimension kept exactly before the quantile sketch compacts (default '
        f'{DEFAULT_CAPACITY}; the printed bound says how far from exact the quantiles may be)',
    )
    parser.add_argument(
        '--out',
        default=None,
        help='the JSON file to write (default: beside the dataset, e.g. next to '
        'dataset_info.json)',
    )
    parser.add_argument(
        '--refresh', action='store_true', help='read the data even if the saved file matches'
    )
    parser.add_argument('--json', action='store_true', help='print the JSON instead of tables')
    parser.add_argument('--no-progress', action='store_true', help='hide the progress bar')
    parser.set_defaults(handler=_run_stats)
    return parser
