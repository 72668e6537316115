"""What `rlds-reverb report` costs over `rlds-reverb validate` on the embedded dataset.

Issue 24: the report "takes at most a few seconds more than `validate` on the embedded
dataset". Both commands are timed as users start them (fresh processes of `rlds-reverb`
next to this Python, or `python -m rlds_reverb.cli`), alternating `validate DIR` and
`report DIR --out FILE --no-progress`, `--rounds` times each; the medians (with the lowest
and highest), their difference and the load average before and after are printed. DIR is
the embedded CartPole dataset (`rlds_reverb.examples.cartpole.ensure_default_dataset`:
250 episodes, 68,782 steps), generated once into `--data-dir`.

Run: `.venv/bin/python -m benchmarks.report [--rounds N] [--data-dir DIR]`.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import cli as cli_bench


def _ensure_cartpole(data_dir: pathlib.Path) -> pathlib.Path:
    """Returns the embedded CartPole dataset in `data_dir`, generated on first use."""
    code = (
        'import sys; from rlds_reverb.examples import cartpole; '
        'print(cartpole.ensure_default_dataset(data_dir=sys.argv[1]))'
    )
    out = subprocess.run(
        [sys.executable, '-c', code, os.fspath(data_dir)],
        check=True,
        capture_output=True,
        text=True,
    )
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def _time_once(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _load() -> str:
    return ' '.join(f'{value:.2f}' for value in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--rounds', type=int, default=5, help='runs of each command')
    parser.add_argument('--data-dir', type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    data_dir = args.data_dir or pathlib.Path(tempfile.gettempdir()) / 'rlds_reverb_bench_report'
    data_dir.mkdir(parents=True, exist_ok=True)
    program = cli_bench._program()
    dataset = _ensure_cartpole(data_dir)
    out = data_dir / 'report.html'
    commands = {
        'validate': [*program, 'validate', os.fspath(dataset)],
        'report': [
            *program,
            'report',
            os.fspath(dataset),
            '--out',
            os.fspath(out),
            '--no-progress',
        ],
    }
    print(f'program: {" ".join(program)}; dataset: {dataset}')
    print(f'load average before: {_load()}')
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(args.rounds):
        for name, command in commands.items():
            seconds[name].append(_time_once(command))
        print(
            f'round {round_ + 1}: validate {seconds["validate"][-1]:.2f} s, '
            f'report {seconds["report"][-1]:.2f} s  (load average {_load()})'
        )
    for name, runs in seconds.items():
        cli_bench._report(f'rlds-reverb {name} (68,782 steps)', runs)
    difference = statistics.median(seconds['report']) - statistics.median(seconds['validate'])
    print(f'report - validate (medians): {difference:+.2f} s')
    print(f'load average after: {_load()}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
