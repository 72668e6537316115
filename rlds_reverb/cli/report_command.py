"""`rlds-reverb report`: one self-contained HTML page that shows what a dataset holds.

DATA is anything `rlds-reverb info` reads (a TFDS directory, or a TFDS name in --data-dir);
without it, the embedded CartPole dataset (generated on first use, as `demo` does). The
page is written to --out (default `report.html`), with a progress bar of steps on stderr
and a summary line on stdout. See docs/report.md.
"""

from __future__ import annotations

import argparse

from rlds_reverb.cli import common

__all__ = ['add_report_parser']

DEFAULT_OUT = 'report.html'


def _run_report(args: argparse.Namespace) -> int:
    from rlds_reverb.check import report, report_html

    out = report_html.check_output_path(args.out)  # Before reading: a wrong --out fails fast.
    if args.source is None:
        from rlds_reverb.examples import cartpole

        embedded = str(cartpole.ensure_default_dataset())
        args = argparse.Namespace(**{**vars(args), 'source': embedded})
        title = f'{cartpole.NAME} (the embedded CartPole dataset)'
    else:
        title = f'{args.source} (split {args.split})'
    episodes = common.load_source(args)
    bar = common.ProgressBar(disable=args.no_progress)
    try:
        found = report.compute_report(episodes, title=title, progress=bar.update)
    finally:
        bar.close()  # The walk's rate, without the drawing.
    report_html.save_report(found, out)
    verdict = 'all valid' if found.validation.ok else f'{found.validation.invalid} invalid'
    print(f'Wrote {out}: {found.stats.episodes} episodes, {found.stats.steps} steps ({verdict}).')
    return common.EXIT_OK


def add_report_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `report`: an HTML page of figures, plots, frames and the validation report."""
    parser = subparsers.add_parser(
        'report', help='write an HTML page of a dataset: figures, plots, frames, validation'
    )
    parser.add_argument(
        'source',
        nargs='?',
        default=None,
        help='a TFDS dataset directory, or a TFDS dataset name found in --data-dir '
        '(default: the embedded CartPole dataset)',
    )
    parser.add_argument('--split', default='train', help="TFDS split (default 'train')")
    parser.add_argument(
        '--data-dir', default=None, help="where to look up a TFDS name (default: TFDS' own)"
    )
    parser.add_argument(
        '--out', default=DEFAULT_OUT, help=f'the HTML file to write (default {DEFAULT_OUT})'
    )
    parser.add_argument(
        '--encoded-frames',
        dest='encoded_frames',
        action='append',
        default=[],
        metavar='PATH',
        help='a frame field read as its encoded bytes (repeat, or all): the report decodes '
        'only the first and last frames it shows, not every frame',
    )
    parser.add_argument('--no-progress', action='store_true', help='hide the progress bar')
    parser.set_defaults(handler=_run_report)
    return parser
