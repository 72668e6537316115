"""Dataset statistics and normalization beside the raw `load` rate, on 200,000 steps on disk.

Datasets (written once into `--data-dir` by TFDS' own writer, `benchmarks.disk.write_dataset`:
shuffled keys, TFDS' sharding): HalfCheetah-like (observation float32[17], action
float32[6], 1,000-step episodes, 200,000 steps) and CartPole-like (observation float32[4],
action float32[1], 50-step episodes, 200,000 steps).

Timed, in alternating rounds (medians reported, with the lowest and highest), each from
opening the dataset to its last episode:

* `load`: `rlds_reverb.load(dir)` read to the end as whole-episode tensors, in TF
  (`Dataset.reduce`: no Python per episode; the limit);
* `statistics`: `compute_statistics(load(dir))`: every numeric field (observation, action,
  reward, discount), q01 and q99, the default sketch capacity;
* `normalize`: `load(dir).apply(normalize(statistics, ...))` read to the end, as `load`
  (observation mean/std, action q01/q99 clipped, reward min/max);
* `reuse`: `ensure_statistics(dir, path=...)` when the saved file is current (the
  fingerprint and the JSON read, no data);
* `beam` (with `--beam`): `compute_statistics_with_beam` on the DirectRunner, in process.

The load average is printed before and after: the machine is shared.

Run: `.venv/bin/python -m benchmarks.statistics [--data-dir DIR] [--rounds N] [--beam]`.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import tempfile
import time
from collections.abc import Callable

import tensorflow as tf

import rlds_reverb
from benchmarks import disk
from benchmarks.common import print_row
from rlds_reverb.check.statistics import compute_statistics
from rlds_reverb.check.statistics_files import ensure_statistics
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.transform.normalize import FieldNormalization, normalize

_LAYOUTS = ('halfcheetah_like', 'cartpole_like')
_FIELDS = {
    types.OBSERVATION: 'mean_std',
    types.ACTION: FieldNormalization(mode='quantiles'),
    types.REWARD: 'min_max',
}


def _read_all(episodes) -> int:
    """Reads every episode whole, in TF (`Dataset.reduce`: no Python per episode)."""
    counted = episodes_lib.to_episode_tensors(episodes).reduce(
        tf.constant(0, tf.int64),
        lambda total, steps: total + tf.shape(steps[types.IS_FIRST], out_type=tf.int64)[0],
    )
    return int(counted)


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _load_average() -> str:
    return ' '.join(f'{value:.2f}' for value in os.getloadavg())


def _run_layout(directory: pathlib.Path, rounds: int, beam: bool, scratch: pathlib.Path) -> None:
    steps = _read_all(rlds_reverb.load(directory))  # Untimed warm-up, and the step count.
    found = compute_statistics(rlds_reverb.load(directory))
    saved = scratch / f'{directory.parent.name}.json'
    ensure_statistics(directory, path=saved, refresh=True)
    runs: dict[str, Callable[[], object]] = {
        'load': lambda: _read_all(rlds_reverb.load(directory)),
        'statistics': lambda: compute_statistics(rlds_reverb.load(directory)),
        'normalize': lambda: _read_all(
            rlds_reverb.load(directory).apply(normalize(found, _FIELDS))
        ),
        'reuse': lambda: ensure_statistics(directory, path=saved),
    }
    if beam:
        from rlds_reverb.distribute.statistics import compute_statistics_with_beam

        runs['beam'] = lambda: compute_statistics_with_beam(
            directory,
            path=scratch / 'beam.json',
            refresh=True,
            # In process: worker processes would each import TensorFlow (seconds) to
            # read 200,000 steps, on 2 cores; this measures the stage's own overhead.
            pipeline_options=['--runner=DirectRunner', '--direct_num_workers=1'],
        )
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(rounds):
        names = list(runs) if round_ % 2 == 0 else list(reversed(runs))
        for name in names:
            seconds[name].append(_timed(runs[name]))
    for name, values in seconds.items():
        median = statistics.median(values)
        label = f'{directory.parent.name}: {name}'
        if name == 'reuse':
            print(f'{label:<48} {median * 1000:>12,.1f} ms (no data read)')
            continue
        print_row(label, steps / median, steps, median)
        print(f'{"":<48} lowest {min(values):.2f} s, highest {max(values):.2f} s')
    ratio = statistics.median(seconds['load']) / statistics.median(seconds['statistics'])
    print(f'{"":<48} statistics at {ratio:.2f}x the load rate')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--data-dir', type=pathlib.Path, default=None)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--layouts', nargs='+', default=list(_LAYOUTS), choices=_LAYOUTS)
    parser.add_argument('--beam', action='store_true', help='also time the Beam stage')
    args = parser.parse_args(argv)
    data_dir = args.data_dir or pathlib.Path(tempfile.gettempdir()) / 'rlds_reverb_bench_stats'
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f'load average before: {_load_average()} ({os.cpu_count()} cores)')
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.layouts:
            directory = disk.write_dataset(data_dir, name)
            _run_layout(directory, args.rounds, args.beam, pathlib.Path(scratch))
    print(f'load average after: {_load_average()}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
