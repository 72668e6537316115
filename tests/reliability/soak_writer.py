"""One writer process of the soak test: pushes episodes until its time is up.

    python tests/reliability/soak_writer.py --server localhost:P --writer 0 --until EPOCH_S

Each episode's observations are (writer, episode, step), so a sampler can check that an
item's two steps are adjacent steps of one episode. Prints `items N episodes M` at the end.
"""

import argparse
import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import numpy as np  # noqa: E402

from rlds_reverb.write import push as writers
from tests import builders  # noqa: E402

TABLE = 'soak'
BATCH = 20


def make_episode(writer: int, episode: int) -> dict:
    """An episode of 5 to 24 steps whose observations name writer, episode and step."""
    length = 5 + (writer * 7 + episode * 3) % 20
    observation = np.stack(
        [np.full(length, writer), np.full(length, episode), np.arange(length)], axis=1
    ).astype(np.float32)
    ending = builders.TERMINATED if episode % 3 != 0 else builders.TRUNCATED
    return builders.episode(length, observation=observation, ending=ending)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--server', required=True)
    parser.add_argument('--writer', type=int, required=True)
    parser.add_argument('--until', type=float, required=True, help='wall-clock end (epoch s)')
    args = parser.parse_args()
    items = episodes = 0
    while not episodes or time.time() < args.until:  # At least one batch.
        batch = [make_episode(args.writer, episodes + i) for i in range(BATCH)]
        stats = writers.push(
            builders.rlds(batch),
            args.server,
            TABLE,
            allow_eviction=True,
            timeout_ms=30_000,
        )
        items += stats.items[TABLE]
        episodes += stats.episodes
    print(f'items {items} episodes {episodes}', flush=True)


if __name__ == '__main__':
    main()
