"""`rlds-reverb demo`: offline CQL-DQN on the embedded CartPole data, fed only from Reverb."""

from __future__ import annotations

import argparse

from rlds_reverb.cli import common

__all__ = [
    'add_demo_parser',
]


def _run_demo(args: argparse.Namespace) -> int:
    from rlds_reverb.examples import demo

    output_dir = args.output_dir or demo.DEFAULT_OUTPUT_DIR
    summary = demo.run_demo(
        quick=args.quick,
        data_dir=args.data_dir,
        output_dir=output_dir,
        seed=args.seed,
        num_servers=args.servers,
    )
    print(demo.format_curve(summary))
    print(
        f'learned policy {summary["eval_return"]:.1f} vs behaviour policy '
        f'{summary["behaviour_return"]:.1f}; done in {summary["total_seconds"]:.0f} s; '
        f'plot: {summary["plot"]}; summary: {output_dir}/{demo.SUMMARY_NAME}'
    )
    return common.EXIT_OK


def add_demo_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `demo` subcommand to an `argparse` subparsers object.

    Example:
      >>> add_demo_parser(parser.add_subparsers())
    """
    parser = subparsers.add_parser(
        'demo', help='offline CQL-DQN on the embedded CartPole dataset, fed from Reverb'
    )
    parser.add_argument('--quick', action='store_true', help='a short run for smoke tests')
    parser.add_argument('--data-dir', default=None, help='where the CartPole dataset lives')
    parser.add_argument(
        '--output-dir', default=None, help='where the plot and summary go (./rlds_reverb_demo)'
    )
    parser.add_argument('--seed', type=int, default=0, help='network and evaluation seed')
    parser.add_argument(
        '--servers',
        type=int,
        default=1,
        help='local Reverb servers to start; the episodes are split between them and the '
        'learner samples all of them as one table (default 1)',
    )
    parser.set_defaults(handler=_run_demo)
    return parser
