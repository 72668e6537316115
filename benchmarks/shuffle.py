"""Shuffling within a memory budget (issue 31): `shuffle_within_budget` against `tf.data`'s
`shuffle` at the same memory, on an image layout written by TFDS' own writer.

On `benchmarks/image_data.py`'s fractal-like layout (one 256x320 JPEG camera, 20,000 steps
by default), frames kept encoded (`load(dir, encoded_frames='all')`; `--decoded`: decoded
by `load`), every step is read once by each side, each side in a fresh process of its own
(so that its peak resident memory is its own):

* `read`: the steps in `load`'s order, no shuffle (the floor of memory and time);
* `ours`: `shuffle_within_budget(..., memory_budget_bytes=B, unit=ShuffleUnit.STEPS)`;
* `tf_data`: `tf.data.Dataset.shuffle(n)` over the flattened steps, with `n` the steps that
  fit in `B` bytes (B over the mean bytes of a step, measured as the shuffle measures:
  arrays' objects and data, each string object's size).

Steps are consumed in batches of 256. Each side prints steps/s (from building the pipeline
to the last step; the median of `--rounds` processes), the process's peak
resident memory (`resource.getrusage(RUSAGE_SELF).ru_maxrss`, the kernel's high-water mark)
and its growth over the `read` side, and Spearman's rank correlation between the place a
step is given and its place in `load`'s order (1: the disk's order; about 0: shuffled).

Run: `.venv/bin/python -m benchmarks.shuffle [--data-dir DIR] [--steps N]
[--budget-mib M ...] [--sides read ours tf_data] [--rounds N] [--decoded]`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

import rlds_reverb
from benchmarks import image_data
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.read import shuffle

_LAYOUT = 'fractal_like'
_STEP_BITS = 32
_KEY = 'benchmark_key'
_BATCH = 256


def _keyed_steps(directory: pathlib.Path, encoded: str | None) -> tf.data.Dataset:
    """Returns the steps in `load`'s order, each with its key (episode << 32 | index)."""
    episodes = episodes_lib.to_whole_episodes(rlds_reverb.load(directory, encoded_frames=encoded))

    def _steps(position: tf.Tensor, episode: dict) -> tf.data.Dataset:
        steps = episode[types.STEPS]
        count = tf.shape(steps[types.IS_FIRST], out_type=tf.int64)[0]
        keys = tf.bitwise.left_shift(position, _STEP_BITS) + tf.range(count)
        return tf.data.Dataset.from_tensor_slices({**steps, _KEY: keys})

    return episodes.enumerate().flat_map(_steps)


def _measure_step_bytes(directory: pathlib.Path, encoded: str | None, count: int = 200) -> float:
    """Returns the mean bytes of a step, as the shuffle measures them, over `count` steps."""
    sizes = []
    for step in _keyed_steps(directory, encoded).take(count).as_numpy_iterator():
        step.pop(_KEY)
        leaves = tf.nest.flatten(step)
        header = sys.getsizeof(np.empty(0))
        sizes.append(
            sys.getsizeof(leaves)
            + sum(sys.getsizeof(x) if isinstance(x, bytes) else header + x.nbytes for x in leaves)
        )
    return float(np.mean(sizes))


def run_side(
    directory: pathlib.Path, side: str, budget_bytes: int, seed: int, encoded: str | None
) -> dict:
    """Reads every step once on one side; returns its figures."""
    started = time.perf_counter()
    stats = shuffle.ShuffleStats()
    if side == 'ours':
        episodes = rlds_reverb.load(directory, encoded_frames=encoded)
        steps = rlds_reverb.shuffle_within_budget(
            episodes,
            memory_budget_bytes=budget_bytes,
            seed=seed,
            unit=rlds_reverb.ShuffleUnit.STEPS,
            stats=stats,
        )
        count = sum(int(tf.shape(b[types.IS_FIRST])[0]) for b in steps.batch(_BATCH))
        keys = stats.source_keys
    else:
        steps = _keyed_steps(directory, encoded)
        buffer_steps = 0
        if side == 'tf_data':
            buffer_steps = max(int(budget_bytes // _measure_step_bytes(directory, encoded)), 1)
            steps = steps.shuffle(buffer_steps, seed=seed)
        keys = []
        for batch in steps.batch(_BATCH):
            keys.extend(batch[_KEY].numpy().tolist())
        count = len(keys)
        stats.ranges = buffer_steps  # For tf_data: its buffer, in steps.
    seconds = time.perf_counter() - started
    return {
        'side': side,
        'steps': count,
        'steps_per_s': count / seconds,
        'peak_rss_bytes': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        'rho': shuffle.measure_rank_correlation(keys),
        'peak_held_bytes': stats.peak_held_bytes,
        'ranges_or_buffer_steps': stats.ranges,
    }


def _run_child(directory: pathlib.Path, side: str, budget_bytes: int, args) -> dict:
    command = [
        sys.executable, '-m', 'benchmarks.shuffle', '--child', side, '--directory',
        str(directory), '--budget-bytes', str(budget_bytes), '--seed', str(args.seed),
        *(['--decoded'] if args.decoded else []),
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run_rounds(directory: pathlib.Path, side: str, budget_bytes: int, args) -> dict:
    """Returns one side's figures over `args.rounds` processes: the median steps/s, the
    highest peak RSS (the others are the same run to run)."""
    results = [_run_child(directory, side, budget_bytes, args) for _ in range(args.rounds)]
    median = statistics.median(r['steps_per_s'] for r in results)
    return {
        **results[0],
        'steps_per_s': median,
        'peak_rss_bytes': max(r['peak_rss_bytes'] for r in results),
    }


def _print(result: dict, floor: dict | None) -> None:
    growth = '' if floor is None else f' (+{(result["peak_rss_bytes"] - floor) / 2**20:,.0f} MiB)'
    extra = (
        f', held {result["peak_held_bytes"] / 2**20:.1f} MiB, {result["ranges_or_buffer_steps"]}'
        ' ranges'
        if result['side'] == 'ours'
        else f', buffer {result["ranges_or_buffer_steps"]:,} steps'
        if result['side'] == 'tf_data'
        else ''
    )
    print(
        f'  {result["side"]:8s} {result["steps_per_s"]:7,.0f} steps/s, peak RSS '
        f'{result["peak_rss_bytes"] / 2**20:,.0f} MiB{growth}, rho {result["rho"]:+.3f}{extra}',
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', default=os.path.join(tempfile.gettempdir(), 'rr-frames'))
    parser.add_argument('--steps', type=int, default=20_000)
    parser.add_argument('--budget-mib', type=int, nargs='+', default=[32, 128])
    parser.add_argument('--sides', nargs='+', default=['read', 'ours', 'tf_data'])
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--decoded', action='store_true', help='frames decoded by load')
    parser.add_argument('--child', help=argparse.SUPPRESS)
    parser.add_argument('--directory', help=argparse.SUPPRESS)
    parser.add_argument('--budget-bytes', type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        encoded = None if args.decoded else 'all'
        result = run_side(
            pathlib.Path(args.directory), args.child, args.budget_bytes, args.seed, encoded
        )
        print(json.dumps(result), flush=True)
        return
    layout = image_data.LAYOUTS[_LAYOUT]._replace(steps=args.steps)
    directory = image_data.write_dataset(
        pathlib.Path(args.data_dir), f'{_LAYOUT}_{args.steps}', layout
    )
    frames = 'decoded' if args.decoded else 'encoded'
    print(f'{_LAYOUT}: {args.steps:,} steps, frames {frames}, load {os.getloadavg()}', flush=True)
    floor = None
    if 'read' in args.sides:
        read = _run_rounds(directory, 'read', 0, args)
        floor = read['peak_rss_bytes']
        _print(read, None)
    for budget_mib in args.budget_mib:
        print(f' budget {budget_mib} MiB', flush=True)
        for side in [s for s in args.sides if s != 'read']:
            _print(_run_rounds(directory, side, budget_mib * 2**20, args), floor)
    print(f'load {os.getloadavg()}', flush=True)


if __name__ == '__main__':
    main()
