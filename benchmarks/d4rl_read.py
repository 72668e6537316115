"""D4RL HDF5 files: `rlds_reverb.load(path)` against the h5py loop a user would write.

The data: a D4RL-layout file on disk (`observations` float32[17], `actions` float32[6],
`rewards`, `terminals`, `timeouts` every 1,000 steps, `next_observations`: the keys of
`halfcheetah_medium-v2.hdf5`, without its `infos` and `metadata`), 200,000 steps by default.

* `ours`: `to_episode_tensors(rlds_reverb.load(path))`, every episode's whole-episode
  tensors (RLDS' fields, each episode with its final observation as one more step);
* `h5py_loop`: the obvious alternative: h5py opens the file, the episode ends come from
  `terminals | timeouts`, and a generator yields each episode's slices of the five keys
  into `tf.data.Dataset.from_generator`.

Both time from before opening the file to the last episode (set-up included), in the same
process, rounds alternating the order; each round prints steps/s and the ratio.
`--memory` also reads files of N and 4N episodes in fresh processes (ours only) and prints
the peak traced bytes and the resident set.

Run: `.venv/bin/python -m benchmarks.d4rl_read [--steps N] [--rounds N] [--memory]`.
"""

from __future__ import annotations

import argparse
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

import h5py
import numpy as np
import tensorflow as tf

from benchmarks import common  # noqa: F401  (sets TF's log level)
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.read.loading import load

_EPISODE_LENGTH = 1_000
_OBS_DIM, _ACTION_DIM = 17, 6


def write_file(path: pathlib.Path, steps: int, *, seed: int = 0) -> pathlib.Path:
    """Writes a HalfCheetah-like D4RL file of `steps` rows (episodes of 1,000 steps)."""
    rng = np.random.default_rng(seed)
    observations = rng.normal(size=(steps + 1, _OBS_DIM)).astype(np.float32)
    with h5py.File(path, 'w') as file:
        file['observations'] = observations[:-1]
        file['next_observations'] = observations[1:]
        file['actions'] = rng.uniform(-1, 1, size=(steps, _ACTION_DIM)).astype(np.float32)
        file['rewards'] = rng.normal(size=(steps,)).astype(np.float32)
        file['terminals'] = np.zeros([steps], bool)
        file['timeouts'] = np.arange(steps) % _EPISODE_LENGTH == _EPISODE_LENGTH - 1
    return path


def read_ours(path: pathlib.Path) -> int:
    """Returns the steps of every episode `load` reads (whole-episode tensors)."""
    steps = 0
    for episode in episodes_lib.to_episode_tensors(load(path)):
        steps += int(episode['is_first'].shape[0])
    return steps


def read_h5py_loop(path: pathlib.Path) -> int:
    """Returns the steps read by the h5py loop into `from_generator` a user would write."""
    keys = ('observations', 'actions', 'rewards', 'terminals', 'timeouts')

    def _generate():
        with h5py.File(path, 'r') as file:
            done = file['terminals'][:] | file['timeouts'][:]
            ends = np.flatnonzero(done) + 1
            starts = np.concatenate([[0], ends[:-1]])
            for start, end in zip(starts, ends, strict=True):
                yield {key: file[key][start:end] for key in keys}

    with h5py.File(path, 'r') as file:
        signature = {
            key: tf.TensorSpec([None, *file[key].shape[1:]], tf.as_dtype(file[key].dtype))
            for key in keys
        }
    steps = 0
    for episode in tf.data.Dataset.from_generator(_generate, output_signature=signature):
        steps += int(episode['rewards'].shape[0])
    return steps


_READERS = {'ours': read_ours, 'h5py_loop': read_h5py_loop}


def run_speed(path: pathlib.Path, *, rounds: int) -> None:
    """Times both readers on the file, alternating their order; prints each round."""
    rates: dict[str, list[float]] = {name: [] for name in _READERS}
    names = list(_READERS)
    for index in range(rounds):
        row = []
        for name in names if index % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            steps = _READERS[name](path)
            seconds = time.perf_counter() - started
            rates[name].append(steps / seconds)
            row.append(f'{name} {steps / seconds:>11,.0f} steps/s ({steps:,} in {seconds:.2f} s)')
        ratio = rates['ours'][-1] / rates['h5py_loop'][-1]
        print(f'  round {index + 1}: {"; ".join(row)}; ours/h5py_loop x{ratio:.2f}')
    medians = {name: statistics.median(values) for name, values in rates.items()}
    ratios = [o / h for o, h in zip(rates['ours'], rates['h5py_loop'], strict=True)]
    print(
        f'  median: ours {medians["ours"]:,.0f}, h5py_loop {medians["h5py_loop"]:,.0f} '
        f'steps/s; ratio per round {", ".join(f"{r:.2f}" for r in ratios)}, '
        f'median x{statistics.median(ratios):.2f}'
    )


def measure_memory(path: pathlib.Path, *, traced: bool) -> None:
    """Reads the file with `load` (in this fresh process); prints its steps and a peak.

    The peak is tracemalloc's (bytes) when `traced`, else the resident set (KB), measured
    apart (tracemalloc's own bookkeeping adds to the resident set).
    """
    if traced:
        tracemalloc.start()
    steps = read_ours(path)
    if traced:
        print(f'{steps} {tracemalloc.get_traced_memory()[1]}')
    else:
        print(f'{steps} {_read_peak_rss_kb()}')


def _read_peak_rss_kb() -> int:
    """Returns this process's peak resident set (KB) since its `exec`.

    `VmHWM`, not `getrusage`'s `ru_maxrss`, which on Linux keeps the parent's peak at the
    fork (the parent that wrote the files here).
    """
    for line in pathlib.Path('/proc/self/status').read_text().splitlines():
        if line.startswith('VmHWM:'):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Not Linux: the best known.


def _run_child(path: pathlib.Path, mode: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, '-m', 'benchmarks.d4rl_read', '--measure-memory', mode, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    steps, peak = map(int, out.stdout.split()[-2:])
    return steps, peak


def run_memory(directory: pathlib.Path, *, episodes: int) -> None:
    """Prints the peak memory of reading N and 4N episodes, each in fresh processes."""
    for count in (episodes, 4 * episodes):
        path = write_file(directory / f'memory_{count}.hdf5', count * _EPISODE_LENGTH)
        steps, max_rss_kb = _run_child(path, 'rss')
        _, peak = _run_child(path, 'traced')
        size_mb = path.stat().st_size / 1e6
        print(
            f'  {count:>5} episodes ({size_mb:.0f} MB file, {steps:,} steps): peak traced '
            f'{peak / 1e6:.1f} MB, max RSS {max_rss_kb / 1e3:.0f} MB'
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--steps', type=int, default=200_000, help='rows of the file')
    parser.add_argument('--rounds', type=int, default=3, help='alternated rounds')
    parser.add_argument('--memory', action='store_true', help='also measure N vs 4N episodes')
    parser.add_argument('--memory-episodes', type=int, default=200, help='N for --memory')
    parser.add_argument('--measure-memory', nargs=2, help=argparse.SUPPRESS)  # MODE PATH
    args = parser.parse_args(argv)
    if args.measure_memory:
        mode, path = args.measure_memory
        measure_memory(pathlib.Path(path), traced=mode == 'traced')
        return 0
    with tempfile.TemporaryDirectory() as directory:
        path = write_file(pathlib.Path(directory) / 'halfcheetah_like.hdf5', args.steps)
        size_mb = path.stat().st_size / 1e6
        print(f'D4RL file: {args.steps:,} steps, {size_mb:.0f} MB ({path.name})')
        run_speed(path, rounds=args.rounds)
        if args.memory:
            print('Memory (ours, fresh process each):')
            run_memory(pathlib.Path(directory), episodes=args.memory_episodes)
    return 0


if __name__ == '__main__':
    tf.get_logger().setLevel('ERROR')
    sys.exit(main())
