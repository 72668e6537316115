"""How fast the command line answers: `--help`, every `COMMAND --help`, and `info`.

Each figure is the median wall time of `--runs` fresh processes (the program as users
start it, `rlds-reverb` next to this Python, or `python -m rlds_reverb.cli`), with the
lowest and highest. `info` reads the embedded CartPole dataset
(`rlds_reverb.examples.cartpole.generate` defaults: 250 episodes, 68,782 steps), written once
to `--data-dir`. For scale, the import of TensorFlow alone is timed the same way, and the
protobuf implementation is printed (`upb` is the compiled one).

Run: `.venv/bin/python -m benchmarks.cli [--runs N] [--data-dir DIR]`.
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

# The targets of issue 22.
_HELP_TARGET_S = 0.3
_INFO_TARGET_S = 2.5


def _program() -> list[str]:
    """The `rlds-reverb` program of this Python's environment."""
    script = pathlib.Path(sys.executable).with_name('rlds-reverb')
    return [os.fspath(script)] if script.is_file() else [sys.executable, '-m', 'rlds_reverb.cli']


def _time_runs(command: list[str], runs: int) -> list[float]:
    """Returns the wall time of each of `runs` fresh runs of `command` (which must succeed)."""
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds.append(time.perf_counter() - started)
    return seconds


def _report(name: str, seconds: list[float], target_s: float | None = None) -> None:
    median = statistics.median(seconds)
    verdict = ''
    if target_s is not None:
        verdict = f'  target < {target_s} s: {"met" if median < target_s else "MISSED"}'
    print(
        f'{name:<40} median {median:6.2f} s  (min {min(seconds):.2f}, max {max(seconds):.2f}, '
        f'{len(seconds)} runs){verdict}'
    )


def _write_cartpole(data_dir: pathlib.Path) -> pathlib.Path:
    """Writes (unless present) the embedded CartPole dataset; returns its directory."""
    target = data_dir / 'cartpole_v1' / '1.0.0'
    if not (target / 'dataset_info.json').is_file():
        code = (
            'import sys; from rlds_reverb.examples import cartpole; cartpole.generate(sys.argv[1])'
        )
        subprocess.run([sys.executable, '-c', code, os.fspath(data_dir)], check=True)
    return target


def _commands() -> list[str]:
    """The subcommands, as the parser lists them (cheap: the parser loads no heavy library)."""
    code = 'from rlds_reverb.cli import app; print(*app.build_parser()._subparsers._group_actions[0].choices)'
    out = subprocess.run([sys.executable, '-c', code], check=True, capture_output=True, text=True)
    return out.stdout.split()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--runs', type=int, default=5, help='fresh processes per figure')
    parser.add_argument('--data-dir', type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    data_dir = args.data_dir or pathlib.Path(tempfile.gettempdir()) / 'rlds_reverb_bench_cli'
    program = _program()
    protobuf = subprocess.run(
        [
            sys.executable,
            '-c',
            'from google.protobuf.internal import api_implementation as a; print(a.Type())',
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f'program: {" ".join(program)}; protobuf implementation: {protobuf}')
    dataset = _write_cartpole(data_dir)
    _report('rlds-reverb --help', _time_runs([*program, '--help'], args.runs), _HELP_TARGET_S)
    for command in _commands():
        _report(
            f'rlds-reverb {command} --help',
            _time_runs([*program, command, '--help'], args.runs),
            _HELP_TARGET_S,
        )
    _report(
        'rlds-reverb info (68,782 steps)',
        _time_runs([*program, 'info', os.fspath(dataset)], args.runs),
        _INFO_TARGET_S,
    )
    _report(
        'python -c "import tensorflow"',
        _time_runs([sys.executable, '-c', 'import tensorflow'], args.runs),
    )
    return 0


if __name__ == '__main__':
    sys.exit(main())
