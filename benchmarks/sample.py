"""Prioritized sampling for learners: TF-Agents' ReverbReplayBuffer vs our LearnerDataset.

Both read the same prioritized table (priority exponent 0.6) of 20,000 two-step items of
the HalfCheetah-like spec (observation float32[17], action float32[6]), seeded
with `writers.push(item=items.TwoStep())` from synthetic RLDS episodes, in this process:

* TF-Agents: `ReverbReplayBuffer.as_dataset(sample_batch_size=256, num_steps=2)` (the anchor);
* ours: `sampling.LearnerDataset(batch_size=256, sequence_length=2, beta=0.4)`, which also
  returns the sample info and the importance weights; with its defaults (8 workers per
  iterator, 512 samples in flight per worker) and a few other settings.

Run: `.venv/bin/python benchmarks/sample.py [--batches N]`.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

# Run as `python benchmarks/sample.py`: put the repository root in place of this directory
# on the path, so that `import adders` (used by rlds_reverb) finds the package, not
# benchmarks/adders.py.
_HERE = pathlib.Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [
    p for p in sys.path if pathlib.Path(p or '.').resolve() not in (_HERE, _HERE.parent)
]

import reverb  # noqa: E402
import tensorflow as tf  # noqa: E402
from tf_agents.replay_buffers import reverb_replay_buffer  # noqa: E402

from rlds_reverb.data.synthetic import make_synthetic_episodes  # noqa: E402
from rlds_reverb.learn import sampling  # noqa: E402
from rlds_reverb.serve import tables  # noqa: E402
from rlds_reverb.transform import items  # noqa: E402
from rlds_reverb.write import push as writers  # noqa: E402

TABLE = 'prioritized'
NUM_ITEMS = 20_000
BATCH_SIZE = 256
_EPISODE_LENGTH = 1001  # 1,000 two-step items per episode.


def print_row(name: str, rate: float, samples: int, seconds: float) -> None:
    """Prints one benchmark row."""
    print(f'{name:<44} {rate:>10,.0f} samples/s   ({samples:,} in {seconds:.2f} s)', flush=True)


def seed_table() -> tuple[reverb.Server, tf.TensorSpec]:
    """Returns a server whose prioritized table holds 20,000 two-step items, and its spec."""
    episodes = make_synthetic_episodes(
        num_episodes=NUM_ITEMS // (_EPISODE_LENGTH - 1), episode_length=_EPISODE_LENGTH
    )
    signature = tables.signature_for(items.TwoStep(), episodes)
    table = tables.prioritized(
        TABLE, priority_exponent=0.6, max_size=NUM_ITEMS, signature=signature
    )
    server = reverb.Server([table])
    # Varied priorities, so that the sampler does real prioritized work.
    stats = writers.push(
        episodes,
        f'localhost:{server.port}',
        TABLE,
        item=items.TwoStep(),
        priority=lambda batch: tf.abs(batch.reward[:, 0]) + 0.1,
    )
    if stats.items[TABLE] != NUM_ITEMS:
        raise RuntimeError(f'Expected {NUM_ITEMS} items, pushed {stats.items}.')
    data_spec = tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), signature)
    return server, data_spec


def measure(
    dataset: tf.data.Dataset, *, batches: int, warmup: int = 20
) -> tuple[float, int, float]:
    """Returns (samples/s, samples, seconds) over `batches` batches after a warm-up."""
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    seconds = time.perf_counter() - started
    samples = batches * BATCH_SIZE
    return samples / seconds, samples, seconds


def make_tf_agents_dataset(server: reverb.Server, data_spec) -> tf.data.Dataset:
    buffer = reverb_replay_buffer.ReverbReplayBuffer(
        data_spec, TABLE, sequence_length=2, local_server=server
    )
    return buffer.as_dataset(sample_batch_size=BATCH_SIZE, num_steps=2)


def make_our_dataset(server: reverb.Server, data_spec, **options) -> tf.data.Dataset:
    learner = sampling.LearnerDataset(
        f'localhost:{server.port}',
        TABLE,
        data_spec=data_spec,
        batch_size=BATCH_SIZE,
        sequence_length=2,
        beta=0.4,
        **options,
    )
    return learner.as_dataset()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batches', type=int, default=400, help='batches timed per pipeline')
    args = parser.parse_args(argv)
    server, data_spec = seed_table()
    print(f'table: prioritized, {NUM_ITEMS:,} two-step items, obs float32[17], act float32[6]')
    anchor, samples, seconds = measure(
        make_tf_agents_dataset(server, data_spec), batches=args.batches
    )
    print_row('TF-Agents ReverbReplayBuffer.as_dataset', anchor, samples, seconds)
    grid = [
        ('ours, defaults', {}),
        ('ours, 4 workers', dict(num_workers_per_iterator=4)),
        ('ours, 8 workers, 256 in flight', dict(max_in_flight_samples_per_worker=256)),
        ('ours, 2 workers', dict(num_workers_per_iterator=2)),
    ]
    for name, options in grid:
        rate, samples, seconds = measure(
            make_our_dataset(server, data_spec, **options), batches=args.batches
        )
        print_row(f'{name} ({rate / anchor:.1f}x)', rate, samples, seconds)
    server.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
