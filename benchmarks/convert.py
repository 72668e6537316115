"""RLDS -> batched TF-Agents trajectories: TF-Agents' converter vs ours, same data, one process.

Both converters read the same synthetic HalfCheetah-like RLDS (observation float32[17],
action float32[6], 1,000-step episodes) and are consumed in batches of 256.
Each pipeline is built (maps traced) before its timing starts, and the best of `--repeats`
iterations counts. Run: `.venv/bin/python -m benchmarks.convert [--episodes N] [--image]`.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import tensorflow as tf
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds

from benchmarks.common import measure_steps_per_second, print_row
from rlds_reverb.examples.synthetic import make_synthetic_episodes
from rlds_reverb.transform import convert

_BATCH = 256


def _make_data(num_episodes: int, *, image: bool) -> tf.data.Dataset:
    shape, dtype = ((84, 84, 3), np.uint8) if image else ((17,), np.float32)
    episodes = make_synthetic_episodes(
        num_episodes=num_episodes,
        episode_length=1000,
        observation_shape=shape,
        observation_dtype=dtype,
        seed=0,
    )
    return episodes.cache()  # Both converters then read from memory.


def _batch_size(batch) -> int:
    return int(batch.step_type.shape[0])


def _run(make_batches, *, repeats: int) -> tuple[float, int, float, float]:
    """Returns the best (steps/s, steps, seconds) of `repeats` iterations, and build seconds.

    Building a pipeline (tracing its maps) is timed apart from iterating it: both
    converters pay it once per call, whatever the data size.
    """
    best, build = (0.0, 0, 0.0), 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        batches = make_batches()
        build = time.perf_counter() - started
        result = measure_steps_per_second(lambda b=batches: b, steps_per_batch=_batch_size)
        best = max(best, result)
    return (*best, build)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--episodes', type=int, default=200, help='episodes for ours')
    parser.add_argument('--anchor-episodes', type=int, default=20, help='episodes for TF-Agents')
    parser.add_argument('--repeats', type=int, default=3, help='best of N iterations')
    parser.add_argument('--image', action='store_true', help='uint8[84, 84, 3] observations')
    args = parser.parse_args(argv)

    kind = 'image uint8[84,84,3]' if args.image else 'HalfCheetah-like float32[17]'
    print(f'convert RLDS -> trajectories, batch {_BATCH}, {kind}, 1,000-step episodes')
    anchor_data = _make_data(args.anchor_episodes, image=args.image)
    ours_data = _make_data(args.episodes, image=args.image)
    for data in (anchor_data, ours_data):  # Fill the caches outside the timings.
        for _ in data:
            pass
    rows = [
        (
            'TF-Agents convert_rlds_to_trajectories',
            lambda: tfa_rlds.convert_rlds_to_trajectories(anchor_data).batch(_BATCH).prefetch(2),
        ),
        (
            'ours convert_rlds_to_trajectories',
            lambda: convert.convert_rlds_to_trajectories(ours_data).batch(_BATCH).prefetch(2),
        ),
        (
            f'ours, batch_size={_BATCH}',
            lambda: convert.convert_rlds_to_trajectories(ours_data, batch_size=_BATCH).prefetch(2),
        ),
    ]
    rates = []
    for name, make_batches in rows:
        rate, steps, seconds, build = _run(make_batches, repeats=args.repeats)
        print_row(name, rate, steps, seconds)
        print(f'{"":<48} (pipeline built in {build:.2f} s, not timed)')
        rates.append(rate)
    anchor, drop_in, batched = rates
    print(f'ratio ours / TF-Agents, both .batch({_BATCH}): {drop_in / anchor:.1f}x (target >= 20x)')
    print(f'ratio ours with batch_size={_BATCH} / TF-Agents: {batched / anchor:.1f}x')
    return 0


if __name__ == '__main__':
    sys.exit(main())
