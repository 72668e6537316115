"""Histories and action chunks (`adders.chunks`) from disk: windowed vs unwindowed throughput.

Reads RLDS datasets that TFDS' own writer wrote (`benchmarks.disk.write_dataset`, cached in
`--data-dir`): HalfCheetah-like (observation float32[17], action float32[6], 1,000-step
episodes, 200,000 steps), CartPole-like (float32[4], 50-step episodes, 200,000 steps) and
images (a PNG `tfds.features.Image` uint8[64,64,3], 100-step episodes, 20,000 steps, read
10 times: 200,000 steps). For each, in one process, alternating, `--rounds` times (medians
reported, the load average beside each figure; process CPU seconds, all threads, are what
a shared machine distorts least):

- `load -> consume`: `rlds_reverb.load(dir)`, every episode's step tensors summed in a
  `tf.data` map (`--consume sum`: every value read), or only taken (`--consume touch`:
  each field made whole, as tf.data makes every output of a map, but not read), iterated
  to the end;
- `load -> chunks -> consume`: the same with `.apply(adders.chunks(W, H))` between (the
  histories, chunks and masks are all made; `sum` reads them all, about 3.5 times the
  values of the plain steps for HalfCheetah-like W = 2, H = 8);
- the floor, `load -> zeros of chunks' sizes -> consume`: in the same stage as `chunks`,
  its output fields, shapes and dtypes made by one fill each (`make_window_sized_zeros`:
  no index, no gather, no value read). What any windowing costs before it places a value:
  a windowed rate above the floor's is out of reach;

and, on the same episodes held in memory (no read timed), two references:

- Python per step: for each step, a history and a chunk gathered by a Python loop over
  positions, as a map-style loader's `__getitem__` does (clamped indices, pad flags);
- NumPy: Octo-style index arithmetic per episode (one `[T, W]` and one `[T, H]` gather).

The issue's target: windowed throughput at least 0.8x the unwindowed rate on the same data.
Each timing includes the pipeline's set-up (tracing, the iterator's graph rewrites): on
vector data it is a large part of one read; `--passes N` reads the data N times per timing
(one set-up), which weighs the per-step rate more.

Run: `.venv/bin/python -m benchmarks.chunks [--layouts ...] [--history 2] [--horizon 8]
[--rounds 5] [--passes N] [--data-dir DIR]`.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import time
from typing import NamedTuple

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import adders  # noqa: E402
import rlds_reverb  # noqa: E402
from adders import _episode  # noqa: E402
from benchmarks import disk  # noqa: E402
from rlds_reverb.core import episodes as episodes_lib  # noqa: E402
from rlds_reverb.core import types  # noqa: E402

# Layout -> passes over it per timing (image_like holds 20,000 steps: 10 passes, 200,000).
_PASSES = {'halfcheetah_like': 1, 'cartpole_like': 1, 'image_like': 10}


def _sum_leaves(steps: types.Step) -> tf.Tensor:
    # Reads every value of every field: a consumer that uses all it is given.
    return tf.add_n([tf.reduce_sum(tf.cast(x, tf.float32)) for x in tf.nest.flatten(steps)])


def _touch_leaves(steps: types.Step) -> tf.Tensor:
    # Takes every field (tf.data makes each whole: nothing is pruned) but reads none.
    return tf.add_n([tf.cast(tf.size(x), tf.float32) for x in tf.nest.flatten(steps)])


_CONSUMERS = {'sum': _sum_leaves, 'touch': _touch_leaves}


def make_window_sized_zeros(history: int, horizon: int):
    """Returns a transform making `chunks`' output tensors as zeros: the floor of any windows.

    The same stage as `adders.chunks` (the source's decoding map), the same output fields,
    shapes and dtypes (observation `[T, W, ...]`, action `[T, H, ...]`, the four masks), each
    made by one fill: no index, no gather, no value read. What making tensors the windows'
    size costs, before a value is placed in them.
    """

    def _zeros(steps: types.Step, bounds: _episode.Bounds) -> types.Step:
        size = tf.size(bounds.t)

        def _windows(nest: types.Nest, positions: int) -> types.Nest:
            return tf.nest.map_structure(
                lambda x: tf.zeros([size, positions, *x.shape[1:]], x.dtype), nest
            )

        return {
            **steps,
            types.OBSERVATION: _windows(steps[types.OBSERVATION], history),
            types.ACTION: _windows(steps[types.ACTION], horizon),
            types.HISTORY_IS_PAD: tf.zeros([size, history], tf.bool),
            types.CHUNK_IS_PAD: tf.zeros([size, horizon], tf.bool),
            types.CHUNK_IS_TRUNCATED: tf.zeros([size, horizon], tf.bool),
            types.CHUNK_IS_TERMINATED: tf.zeros([size, horizon], tf.bool),
        }

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        return _episode.map_episodes(dataset, _zeros, stage=_episode.Stage.SOURCE_MAP)

    return _transform


class Timing(NamedTuple):
    seconds: float  # wall clock
    cpu_seconds: float  # this process, all threads
    episodes: int
    load_average: tuple[float, float]


def time_pipeline(directory: str, transform, passes: int, consume: str = 'sum') -> Timing:
    """From `load` to the last episode consumed, `passes` times over the dataset."""
    load_average = os.getloadavg()[0]
    started, started_cpu = time.perf_counter(), time.process_time()
    data = rlds_reverb.load(directory)
    if transform is not None:
        data = data.apply(transform)
    sums = episodes_lib.to_episode_tensors(data).map(_CONSUMERS[consume]).repeat(passes)
    total, count = 0.0, 0
    for value in sums:
        total += float(value)
        count += 1
    return Timing(
        time.perf_counter() - started,
        time.process_time() - started_cpu,
        count,
        (load_average, os.getloadavg()[0]),
    )


def python_chunks(episodes: list[dict], history: int, horizon: int) -> int:
    """Per-step Python windows: a loop over steps and positions, clamped, with pad flags."""
    made = 0
    for steps in episodes:
        observation, action = steps[types.OBSERVATION], steps[types.ACTION]
        last = len(action) - 1
        for t in range(last + 1):
            past = [max(t - history + 1 + i, 0) for i in range(history)]
            future = [min(t + j, last) for j in range(horizon)]
            sample = {
                types.OBSERVATION: np.stack([observation[s] for s in past]),
                types.ACTION: np.stack([action[s] for s in future]),
                types.HISTORY_IS_PAD: np.array([t - history + 1 + i < 0 for i in range(history)]),
                types.CHUNK_IS_PAD: np.array([t + j > last for j in range(horizon)]),
            }
            made += len(sample)
    return made


def numpy_chunks(episodes: list[dict], history: int, horizon: int) -> int:
    """Octo-style index arithmetic per episode: one `[T, W]` and one `[T, H]` gather."""
    made = 0
    for steps in episodes:
        size = len(steps[types.ACTION])
        t = np.arange(size)[:, None]
        past = t + np.arange(1 - history, 1)[None, :]
        future = t + np.arange(horizon)[None, :]
        out = {
            types.OBSERVATION: steps[types.OBSERVATION][np.maximum(past, 0)],
            types.ACTION: steps[types.ACTION][np.minimum(future, size - 1)],
            types.HISTORY_IS_PAD: past < 0,
            types.CHUNK_IS_PAD: future > size - 1,
        }
        made += len(out)
    return made


def _rate(steps: int, seconds: float) -> str:
    return f'{steps / seconds:>12,.0f} steps/s'


def _describe(steps: int, timing: Timing) -> str:
    return (
        f'{_rate(steps, timing.seconds)} {steps / timing.cpu_seconds:>12,.0f} steps/CPU-s  '
        f'load average {timing.load_average[0]:.1f} -> {timing.load_average[1]:.1f}'
    )


def run_layout(name: str, args: argparse.Namespace, data_dir: pathlib.Path) -> None:
    """Times `load -> consume` against `load -> chunks -> consume` on one layout."""
    directory = os.fspath(disk.write_dataset(data_dir, name))
    layout, passes = disk._LAYOUTS[name], args.passes or _PASSES[name]
    steps = layout.steps * passes
    print(
        f'{name}: {layout.steps:,} steps ({layout.episode_length}-step episodes) written by '
        f'TFDS, read {passes} time(s): {steps:,} steps per timing; consume: {args.consume}; '
        f'{os.cpu_count()} CPUs',
        flush=True,
    )
    for _ in episodes_lib.to_episode_tensors(rlds_reverb.load(directory)).take(1):
        pass  # TensorFlow's one-time start, untimed.
    chunked = f'load -> chunks({args.history}, {args.horizon}) -> consume'
    floor = "load -> zeros of chunks' sizes -> consume"
    runs = {
        'load -> consume': lambda: None,
        chunked: lambda: adders.chunks(args.history, args.horizon),
        floor: lambda: make_window_sized_zeros(args.history, args.horizon),
    }
    results: dict[str, list[Timing]] = {run: [] for run in runs}
    for index in range(args.rounds):
        order = list(runs) if index % 2 == 0 else list(runs)[::-1]
        for run in order:
            timing = time_pipeline(directory, runs[run](), passes, args.consume)
            results[run].append(timing)
            print(f' round {index + 1} {run:<40} {_describe(steps, timing)}', flush=True)
    print(f' medians of {args.rounds} rounds:')
    medians = {}
    for run, timings in results.items():
        medians[run] = Timing(
            statistics.median(t.seconds for t in timings),
            statistics.median(t.cpu_seconds for t in timings),
            timings[0].episodes,
            (
                statistics.median(t.load_average[0] for t in timings),
                statistics.median(t.load_average[1] for t in timings),
            ),
        )
        print(f'  {run:<40} {_describe(steps, medians[run])}')
    plain = medians['load -> consume']
    for label, run in (('windowed', chunked), ('the floor (zeros)', floor)):
        wall = plain.seconds / medians[run].seconds
        cpu = plain.cpu_seconds / medians[run].cpu_seconds
        print(
            f'  {label} / unwindowed: {wall:.2f}x wall, {cpu:.2f}x CPU  (target >= 0.8x: '
            f'{"met" if min(wall, cpu) >= 0.8 else "NOT met"})'
        )
    _run_references(directory, args)


def run(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or disk._make_default_data_dir()
    for name in args.layouts:
        run_layout(name, args, data_dir)
    return 0


def _run_references(directory: str, args: argparse.Namespace) -> None:
    """The Python and NumPy references on the episodes in memory (no read timed)."""
    episodes = list(
        episodes_lib.to_episode_tensors(rlds_reverb.load(directory)).as_numpy_iterator()
    )
    python_part = episodes[: max(1, len(episodes) * args.python_share // 100)]
    python_steps = sum(len(e[types.ACTION]) for e in python_part)
    all_steps = sum(len(e[types.ACTION]) for e in episodes)
    started = time.perf_counter()
    python_chunks(python_part, args.history, args.horizon)
    python_seconds = time.perf_counter() - started
    best = float('inf')
    for _ in range(3):
        started = time.perf_counter()
        numpy_chunks(episodes, args.history, args.horizon)
        best = min(best, time.perf_counter() - started)
    print(
        f'  Python per step (in memory, {python_steps:,} steps) '
        f'{_rate(python_steps, python_seconds)}  load average {os.getloadavg()[0]:.1f}'
    )
    print(
        f'  NumPy per episode (in memory, best of 3)       {_rate(all_steps, best)}  '
        f'load average {os.getloadavg()[0]:.1f}'
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--layouts', nargs='+', choices=list(_PASSES), default=list(_PASSES))
    parser.add_argument('--history', type=int, default=2, help='W, steps of each history')
    parser.add_argument('--horizon', type=int, default=8, help='H, steps of each chunk')
    parser.add_argument('--rounds', type=int, default=5, help='alternated rounds')
    parser.add_argument(
        '--consume', choices=list(_CONSUMERS), default='sum', help='read every value, or none'
    )
    parser.add_argument(
        '--passes', type=int, help='reads of the dataset per timing (default: 1, images 10)'
    )
    parser.add_argument('--python-share', type=int, default=10, help='%% of episodes, Python')
    parser.add_argument('--data-dir', type=pathlib.Path, help='the dataset cache')
    return run(parser.parse_args(argv))


if __name__ == '__main__':
    raise SystemExit(main())
