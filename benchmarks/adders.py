"""N-step and GAE transforms: ours (tf.data) vs a per-step Python adder vs vectorized NumPy.

All three read the same synthetic HalfCheetah-like episodes (observation float32[17],
action float32[6], float32 reward and discount, 1,000 steps) plus a float32
`value` per step, already in memory, and compute `n_step(3, 0.99)` and `gae(0.99, 0.95)`:

- ours: `adders.n_step` / `adders.gae` on whole-episode tensors
  (`episodes.to_episode_tensors(...).cache()`), episodes in parallel
  (`num_parallel_calls=AUTOTUNE`), prefetched, every output field summed by a `tf.data`
  reduce (so the timing holds no Python per element); best of 3 runs;
- DI-engine style: one Python dict per step, Python loops per step (the seed's `Adder`);
- NumPy: vectorized over a `[B, T]` block of equal-length episodes (n shifted adds for
  n-step; one reverse loop over time, vectorized over episodes, for GAE).

A last row runs ours on RLDS episodes end to end (nested `steps` datasets in and out, the
steps read back), which tf.data's per-step slicing bounds. Run:
`.venv/bin/python benchmarks/adders.py [--episodes N] [--python-episodes N]`.

`--from-disk` measures issue 22's target instead: 1,000,000 HalfCheetah-like steps written
once by TFDS' own writer (`benchmarks.disk.write_dataset`, cached in `--data-dir`), read
with `rlds_reverb.load(dir)` and transformed as a user writes it,
`episodes.to_episode_tensors(rlds_reverb.load(dir).apply(adders.n_step(3, 0.99)))`, every
output field of every episode summed (a map of sums, iterated); timed from before `load` to
the last element, the first element's time and the process' CPU time (all threads, what a
shared host distorts least) reported too. Each round runs in a fresh process (after an
untimed warm-up), and `--baseline DIR` (another checkout's root, e.g. `main`) alternates
with this one, in the same conditions; medians of `--rounds`, the load average beside every
figure. Run:
`.venv/bin/python benchmarks/adders.py --from-disk [--rounds 3] [--baseline DIR]`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import NamedTuple

# This script is named like the package it measures: put the repository root in place of
# its own directory on the path, so that `import adders` finds the package, not this file,
# and `benchmarks.common` imports when run as `python benchmarks/adders.py`. A `--from-disk`
# worker imports the code under test from the root it is given instead (a baseline).
_HERE = pathlib.Path(__file__).resolve().parent
_ROOT_VARIABLE = 'RLDS_REVERB_BENCH_ROOT'
_ROOT = pathlib.Path(os.environ.get(_ROOT_VARIABLE, _HERE.parent)).resolve()
sys.path[:] = [str(_ROOT)] + [
    p for p in sys.path if pathlib.Path(p or '.').resolve() not in (_HERE, _HERE.parent, _ROOT)
]
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import adders  # noqa: E402
from rlds_reverb.core import episodes as episodes_lib  # noqa: E402
from rlds_reverb.core import types  # noqa: E402
from rlds_reverb.examples.synthetic import make_synthetic_episodes  # noqa: E402

_LENGTH = 1000
_BATCH = 16
_N, _GAMMA, _LAMBDA = 3, 0.99, 0.95


def _with_values(steps: types.Step) -> types.Step:
    # A fixed linear critic, so that every implementation reads the same values.
    weights = tf.linspace(-1.0, 1.0, 17)
    return {**steps, types.VALUE: tf.linalg.matvec(steps[types.OBSERVATION], weights)}


def _make_tensors(num_episodes: int) -> tf.data.Dataset:
    rlds = make_synthetic_episodes(num_episodes=num_episodes, episode_length=_LENGTH, seed=0)
    data = episodes_lib.to_episode_tensors(rlds).map(_with_values).cache()
    for _ in data:  # Fill the cache outside the timings.
        pass
    return data


def _sum_outputs(total: tf.Tensor, batch: types.Step) -> tf.Tensor:
    # Reads every output field, so nothing is pruned, and keeps Python out of the loop.
    leaves = [tf.reduce_sum(tf.cast(x, tf.float32)) for x in tf.nest.flatten(batch)]
    return total + tf.add_n(leaves)


def _run_ours(data: tf.data.Dataset, transform, *, repeats: int = 3) -> _Timing:
    pipeline = data.apply(transform).prefetch(_BATCH)  # Traced once, outside the timings.
    pipeline.take(2).reduce(0.0, _sum_outputs)
    steps = int(data.cardinality()) * _LENGTH
    return _best_of(lambda: pipeline.reduce(0.0, _sum_outputs), steps, repeats)


def _run_rlds(data: tf.data.Dataset, transform) -> _Timing:
    rlds = episodes_lib.from_whole_episodes(data.map(lambda steps: {types.STEPS: steps}))
    read_back = episodes_lib.to_episode_tensors(rlds.apply(transform)).prefetch(2)
    read_back.take(2).reduce(0.0, _sum_outputs)  # Trace outside the timings.
    steps = int(data.cardinality()) * _LENGTH
    return _best_of(lambda: read_back.reduce(0.0, _sum_outputs), steps, repeats=1)


# --- References ----------------------------------------------------------------------------


def python_n_step(episodes: list[list[dict]], n: int, gamma: float) -> list[list[dict]]:
    """Per-step n-step fields, DI-engine style: a dict per step, Python loops."""
    out = []
    for steps in episodes:
        last = len(steps) - 1
        terminal = steps[-1][types.IS_TERMINAL]
        new_steps = []
        for t, step in enumerate(steps):
            new = dict(step)
            k = min(n, last - t) if t < last else 0
            total, product = 0.0, 1.0
            for i in range(k):
                total += gamma**i * product * steps[t + i][types.REWARD]
                cut = terminal and t + i == last - 1
                product *= 0.0 if cut else steps[t + i][types.DISCOUNT]
            new[types.N_STEP_RETURN] = total
            new[types.N_STEP_DISCOUNT] = gamma ** (k - 1) * product if k else 0.0
            new[types.N_STEP_LENGTH] = k
            new[types.NEXT_OBSERVATION] = steps[t + k][types.OBSERVATION] if k else None
            new_steps.append(new)
        out.append(new_steps)
    return out


def python_gae(episodes: list[list[dict]], gamma: float, lambda_: float) -> list[list[dict]]:
    """Per-step GAE, DI-engine style: a reverse Python loop over step dicts."""
    out = []
    for steps in episodes:
        last = len(steps) - 1
        bootstrap = 0.0 if steps[-1][types.IS_TERMINAL] else steps[-1][types.VALUE]
        new_steps = [dict(step) for step in steps]
        new_steps[last].update({types.ADVANTAGE: 0.0, types.RETURN: bootstrap})
        advantage, next_value = 0.0, bootstrap
        for t in range(last - 1, -1, -1):
            step = steps[t]
            delta = (
                step[types.REWARD] + gamma * step[types.DISCOUNT] * next_value - step[types.VALUE]
            )
            advantage = delta + gamma * lambda_ * step[types.DISCOUNT] * advantage
            new_steps[t][types.ADVANTAGE] = advantage
            new_steps[t][types.RETURN] = advantage + step[types.VALUE]
            next_value = step[types.VALUE]
        out.append(new_steps)
    return out


def numpy_n_step(block: dict, n: int, gamma: float) -> dict:
    """N-step fields of equal-length episodes, `[B, T]` arrays, vectorized."""
    reward, discount = block[types.REWARD], block[types.DISCOUNT].copy()
    size = reward.shape[1]
    last = size - 1
    t = np.arange(size)
    discount[:, last - 1] = np.where(block[types.IS_TERMINAL][:, last], 0.0, discount[:, last - 1])
    length = np.where(t < last, np.minimum(n, last - t), 0)
    total, weight, product = np.zeros_like(reward), np.ones_like(reward), np.ones_like(reward)
    for i in range(n):
        inside = i < length
        r_i = np.pad(reward[:, i:], ((0, 0), (0, i)))
        d_i = np.where(inside, np.pad(discount[:, i:], ((0, 0), (0, i)), constant_values=1.0), 1.0)
        total += np.where(inside, weight * r_i, 0.0)
        product *= d_i
        weight *= gamma * d_i
    n_discount = np.where(length > 0, gamma ** np.maximum(length - 1, 0) * product, 0.0)
    next_observation = block[types.OBSERVATION][:, np.where(length > 0, t + length, t)]
    return {
        types.N_STEP_RETURN: total,
        types.N_STEP_DISCOUNT: n_discount,
        types.N_STEP_LENGTH: length,
        types.NEXT_OBSERVATION: next_observation * (length > 0)[None, :, None],
    }


def numpy_gae(block: dict, gamma: float, lambda_: float) -> dict:
    """GAE of equal-length episodes: one reverse loop over time, vectorized over episodes."""
    reward, discount, value = block[types.REWARD], block[types.DISCOUNT], block[types.VALUE]
    last = reward.shape[1] - 1
    value = value.copy()
    value[:, last] = np.where(block[types.IS_TERMINAL][:, last], 0.0, value[:, last])
    advantage = np.zeros_like(reward)
    for t in range(last - 1, -1, -1):
        delta = reward[:, t] + gamma * discount[:, t] * value[:, t + 1] - value[:, t]
        advantage[:, t] = delta + gamma * lambda_ * discount[:, t] * advantage[:, t + 1]
    return {types.ADVANTAGE: advantage, types.RETURN: advantage + value, types.VALUE: value}


class _Timing(NamedTuple):
    steps_per_second: float  # wall clock
    steps_per_cpu_second: float  # CPU time of this process (all its threads)
    steps: int


def _best_of(fn, steps: int, repeats: int = 3) -> _Timing:
    """Runs `fn` `repeats` times; the best wall and CPU rates (the machine may be shared)."""
    wall, cpu = float('inf'), float('inf')
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return _Timing(steps / wall, steps / cpu, steps)


def _print(name: str, timing: _Timing) -> None:
    print(
        f'{name:<46} {timing.steps_per_second:>12,.0f} steps/s'
        f' {timing.steps_per_cpu_second:>12,.0f} steps/CPU-s   ({timing.steps:,} steps)'
    )


# --- From disk, end to end (issue 22's target) ---------------------------------------------

_DISK_STEPS = 1_000_000
_MARKER = 'ADDERS-DISK-RESULT '

# name -> (the dataset it reads: 'plain' or with a stored 'values' field, transform or None)
_DISK_RUNS = {
    'load only': ('plain', lambda: None),
    'n_step(3, 0.99)': ('plain', lambda: adders.n_step(_N, _GAMMA)),
    'gae(0.99, 0.95), values stored': ('values', lambda: adders.gae(_GAMMA, _LAMBDA)),
    'gae(0.99, 0.95, value_fn)': (
        'plain',
        lambda: adders.gae(_GAMMA, _LAMBDA, value_fn=_critic),
    ),
}


def _critic(observation: tf.Tensor) -> tf.Tensor:
    """A stand-in critic: the mean of the observation (as in `benchmarks/disk.py`)."""
    flat = tf.reshape(observation, [tf.shape(observation)[0], -1])
    return tf.reduce_mean(tf.cast(flat, tf.float32), axis=-1)


def _sum_leaves(steps: types.Step) -> tf.Tensor:
    # Reads every output field of the episode, so nothing is pruned or left unmade.
    return tf.add_n([tf.reduce_sum(tf.cast(x, tf.float32)) for x in tf.nest.flatten(steps)])


def _time_from_disk(directory: str, make_transform) -> dict:
    """One timed run: `load`, the transform, every episode's fields summed, iterated."""
    import rlds_reverb  # The code under test (this root's or the baseline's).

    load_average = os.getloadavg()[0]
    marks = {}
    started, started_cpu = time.perf_counter(), time.process_time()
    data = rlds_reverb.load(directory)
    marks['load'] = time.perf_counter() - started
    transform = make_transform()
    if transform is not None:
        data = data.apply(transform)
    marks['apply'] = time.perf_counter() - started
    sums = episodes_lib.to_episode_tensors(data).map(_sum_leaves)
    iterator = iter(sums)
    marks['iter'] = time.perf_counter() - started
    total, count = 0.0, 0
    for value in iterator:
        total += float(value)
        count += 1
        if count == 1:
            marks['first'] = time.perf_counter() - started
            marks['cpu_first'] = time.process_time() - started_cpu
    marks['end'] = time.perf_counter() - started
    # CPU seconds of this process (all threads): what a shared host distorts least.
    marks['cpu_end'] = time.process_time() - started_cpu
    return {
        'episodes': count,
        'total': total,
        'marks': marks,
        'load_average': [load_average, os.getloadavg()[0]],
    }


def _run_disk_worker(plain: str, values: str, order: list[str]) -> None:
    """Times every run of `_DISK_RUNS` once (in `order`) in this process; prints JSON."""
    import rlds_reverb

    for _ in episodes_lib.to_episode_tensors(rlds_reverb.load(plain)).take(1):
        pass  # TensorFlow's one-time start, untimed.
    for name in order:
        which, make_transform = _DISK_RUNS[name]
        result = _time_from_disk(plain if which == 'plain' else values, make_transform)
        print(_MARKER + json.dumps({'name': name, **result}), flush=True)


def _write_disk_datasets(data_dir: pathlib.Path | None, steps: int) -> tuple[str, str]:
    """Writes (once) the plain and the `value`-holding datasets; returns their directories."""
    from benchmarks import disk

    data_dir = data_dir or disk._make_default_data_dir()
    layout = disk.Layout(_LENGTH, steps, (17,), (6,))
    suffix = '' if steps == _DISK_STEPS else f'_{steps}'
    plain = disk.write_dataset(data_dir, f'halfcheetah_like_1m{suffix}', layout=layout)
    values = disk.write_dataset(
        data_dir, f'halfcheetah_like_1m_values{suffix}', layout=layout._replace(value=True)
    )
    return os.fspath(plain), os.fspath(values)


def _spawn_worker(root: pathlib.Path, plain: str, values: str, order: list[str]) -> list[dict]:
    environment = {**os.environ, _ROOT_VARIABLE: os.fspath(root)}
    environment.pop('PYTHONPATH', None)
    command = [sys.executable, __file__, '--disk-worker', plain, values, *order]
    out = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f'worker on {root} failed:\n{out.stderr[-4000:]}')
    lines = [line for line in out.stdout.splitlines() if line.startswith(_MARKER)]
    return [json.loads(line[len(_MARKER) :]) for line in lines]


def _describe(result: dict, steps: int) -> str:
    marks = result['marks']
    steady = steps / max(marks['end'] - marks['first'], 1e-9)
    return (
        f'{steps / marks["end"]:>10,.0f} steps/s  steady {steady:>10,.0f}  first '
        f'{marks["first"]:.2f} s (load {marks["load"]:.2f}, apply {marks["apply"]:.2f}, iter '
        f'{marks["iter"]:.2f})  end {marks["end"]:.2f} s  CPU {marks["cpu_first"]:.2f} s to '
        f'the first, {marks["cpu_end"]:.2f} s in all ({steps / marks["cpu_end"]:,.0f} '
        'steps/CPU-s)  load average '
        f'{result["load_average"][0]:.1f} -> {result["load_average"][1]:.1f}'
    )


def run_from_disk(args: argparse.Namespace) -> int:
    """Times the adders end to end from disk, alternating with `--baseline` if given."""
    plain, values = _write_disk_datasets(args.data_dir, args.steps)
    sides = {'this': _ROOT}
    if args.baseline is not None:
        sides = {'baseline': args.baseline.resolve(), 'this': _ROOT}
    names = list(_DISK_RUNS)
    results: dict[tuple[str, str], list[dict]] = {}
    print(
        f'adders from disk: {args.steps:,} HalfCheetah-like steps written by TFDS, '
        f'{os.cpu_count()} CPUs; sides: ' + ', '.join(f'{k} = {v}' for k, v in sides.items()),
        flush=True,
    )
    for index in range(args.rounds):
        order = list(sides) if index % 2 == 0 else list(sides)[::-1]
        runs = names if index % 2 == 0 else names[::-1]
        for side in order:
            for result in _spawn_worker(sides[side], plain, values, runs):
                results.setdefault((side, result['name']), []).append(result)
                print(
                    f' round {index + 1} {side:<8} {result["name"]:<32} '
                    + _describe(result, args.steps),
                    flush=True,
                )
    print(f' medians of {args.rounds} rounds (each column its own median):')
    for name in names:
        for side in sides:
            rounds = results[(side, name)]
            counts = {r['episodes'] for r in rounds}
            median = {
                'marks': {
                    k: statistics.median(r['marks'][k] for r in rounds) for k in rounds[0]['marks']
                },
                'load_average': [
                    statistics.median(r['load_average'][0] for r in rounds),
                    statistics.median(r['load_average'][1] for r in rounds),
                ],
            }
            met = args.steps / median['marks']['end'] >= 1e6
            print(
                f'  {side:<8} {name:<32} {_describe(median, args.steps)}  episodes {counts}'
                + ('' if name == 'load only' else f'  target: {"met" if met else "NOT met"}')
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--episodes', type=int, default=300, help='episodes for ours and NumPy')
    parser.add_argument('--python-episodes', type=int, default=10, help='for the Python adder')
    parser.add_argument('--rlds-episodes', type=int, default=30, help='for the RLDS-form row')
    parser.add_argument('--from-disk', action='store_true', help='issue 22: end to end, disk')
    parser.add_argument('--steps', type=int, default=_DISK_STEPS, help='--from-disk: steps')
    parser.add_argument('--rounds', type=int, default=3, help='--from-disk: alternated rounds')
    parser.add_argument('--baseline', type=pathlib.Path, help='--from-disk: a checkout to compare')
    parser.add_argument('--data-dir', type=pathlib.Path, help='--from-disk: the dataset cache')
    parser.add_argument('--disk-worker', nargs='+', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.disk_worker:
        plain, values, *order = args.disk_worker
        _run_disk_worker(plain, values, order)
        return 0
    if args.from_disk:
        return run_from_disk(args)

    print(
        f'adders: n_step({_N}, {_GAMMA}) and gae({_GAMMA}, {_LAMBDA}), HalfCheetah-like '
        f'float32[17], {_LENGTH:,}-step episodes; {os.cpu_count()} CPUs, load average '
        f'{os.getloadavg()[0]:.1f} (steps/CPU-s is what a shared machine does not distort)'
    )
    data = _make_tensors(args.episodes)
    block = {k: np.stack([e[k] for e in data.as_numpy_iterator()]) for k in data.element_spec}
    dicts = [
        [{k: v[t] for k, v in zip(block, values, strict=True)} for t in range(_LENGTH)]
        for values in zip(*(block[k][: args.python_episodes] for k in block), strict=True)
    ]
    python_steps = args.python_episodes * _LENGTH
    numpy_steps = args.episodes * _LENGTH
    transforms = {
        'n_step': (
            adders.n_step(_N, _GAMMA),
            lambda: python_n_step(dicts, _N, _GAMMA),
            lambda: numpy_n_step(block, _N, _GAMMA),
        ),
        'gae': (
            adders.gae(_GAMMA, _LAMBDA),
            lambda: python_gae(dicts, _GAMMA, _LAMBDA),
            lambda: numpy_gae(block, _GAMMA, _LAMBDA),
        ),
    }
    for name, (ours_transform, python_ref, numpy_ref) in transforms.items():
        python = _best_of(python_ref, python_steps, repeats=1)
        vectorized = _best_of(numpy_ref, numpy_steps)
        ours = _run_ours(data, ours_transform)
        _print(f'{name}: DI-engine-style per-step Python', python)
        _print(f'{name}: vectorized NumPy', vectorized)
        _print(f'{name}: adders (tf.data, episode tensors)', ours)
        rate = ours.steps_per_second
        print(
            f'  ours / Python {rate / python.steps_per_second:.0f}x, ours / NumPy'
            f' {rate / vectorized.steps_per_second:.2f}x; target >= 1,000,000 steps/s:'
            f' {"met" if rate >= 1e6 else "NOT met"}'
        )
    for name, (ours_transform, _, _) in transforms.items():
        rlds = _run_rlds(data.take(args.rlds_episodes), ours_transform)
        _print(f'{name}: adders on RLDS episodes, steps read back', rlds)
    return 0


if __name__ == '__main__':
    sys.exit(main())
