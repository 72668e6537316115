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
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from typing import NamedTuple

# This script is named like the package it measures: put the repository root in place of
# its own directory on the path, so that `import adders` finds the package, not this file,
# and `benchmarks.common` imports when run as `python benchmarks/adders.py`.
_HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [
    p for p in sys.path if pathlib.Path(p or '.').resolve() not in (_HERE, _HERE.parent)
]

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
    rlds = episodes_lib.to_rlds_episodes(data)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--episodes', type=int, default=300, help='episodes for ours and NumPy')
    parser.add_argument('--python-episodes', type=int, default=10, help='for the Python adder')
    parser.add_argument('--rlds-episodes', type=int, default=30, help='for the RLDS-form row')
    args = parser.parse_args(argv)

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
