"""RLDS -> batched TF-Agents trajectories: TF-Agents' converter vs ours, same data, one process.

Both converters read the same synthetic HalfCheetah-like RLDS (observation float32[17],
action float32[6], 1,000-step episodes; DESIGN §5) and are consumed in batches of 256.
Run: `.venv/bin/python benchmarks/convert.py [--episodes N] [--image]`.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import tensorflow as tf
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds

from benchmarks.common import measure_steps_per_second, print_row
from rlds_reverb import convert
from rlds_reverb.datasets.synthetic import make_synthetic_episodes

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


def _run(converter, data: tf.data.Dataset) -> tuple[float, int, float]:
    return measure_steps_per_second(
        lambda: converter(data).batch(_BATCH).prefetch(2), steps_per_batch=_batch_size
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--episodes', type=int, default=200, help='episodes for ours')
    parser.add_argument('--anchor-episodes', type=int, default=10, help='episodes for TF-Agents')
    parser.add_argument('--image', action='store_true', help='uint8[84, 84, 3] observations')
    args = parser.parse_args(argv)

    kind = 'image uint8[84,84,3]' if args.image else 'HalfCheetah-like float32[17]'
    print(f'convert RLDS -> trajectories, batch {_BATCH}, {kind}, 1,000-step episodes')
    anchor_data = _make_data(args.anchor_episodes, image=args.image)
    ours_data = _make_data(args.episodes, image=args.image)
    for data in (anchor_data, ours_data):  # Fill the caches outside the timings.
        for _ in data:
            pass
    # Warm up tracing on a single episode.
    list(convert.convert_rlds_to_trajectories(ours_data.take(1)).batch(_BATCH))
    anchor = _run(tfa_rlds.convert_rlds_to_trajectories, anchor_data)
    print_row('TF-Agents convert_rlds_to_trajectories', *anchor)
    ours = _run(convert.convert_rlds_to_trajectories, ours_data)
    print_row('rlds_reverb convert_rlds_to_trajectories', *ours)
    print(f'ratio ours / TF-Agents: {ours[0] / anchor[0]:.1f}x (target >= 20x)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
