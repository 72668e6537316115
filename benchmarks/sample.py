"""Prioritized sampling for learners: TF-Agents' ReverbReplayBuffer vs our LearnerDataset.

Both read the same prioritized table (priority exponent 0.6) of 20,000 two-step items of
the HalfCheetah-like spec (observation float32[17], action float32[6]), seeded
with `writers.push(item=items.TwoStep())` from synthetic RLDS episodes, in this process:

* TF-Agents: `ReverbReplayBuffer.as_dataset(sample_batch_size=256, num_steps=2)` (the anchor);
* ours: `sampling.LearnerDataset(batch_size=256, sequence_length=2, beta=0.4)` with its
  defaults, which also returns the sample info and the importance weights.

The two are alternated over `--rounds` rounds (the order flips every round, so that a
change in the machine's load hits both alike). An untimed pipeline of each side first pays
the one-time start; then every round builds each side's dataset anew and times its set-up
(dataset, iterator, first batch), warms it up for 20 batches and times the rest. Each round
prints both rates, the ratio, both set-ups,
and the CPU time per sample of each (process CPU time over the timed interval: on a shared
machine the rates follow the CPU each pipeline gets, the CPU time per sample much less).
Then one logical table over 1 and 2 in-process servers (the same 20,000 items split
10,000 + 10,000), alternated the same way: samples/s and the scaling.

Run: `.venv/bin/python -m benchmarks.sample [--rounds 5] [--batches 400] [--anchor-batches 100]`.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from collections.abc import Callable

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

from rlds_reverb.examples.synthetic import make_synthetic_episodes  # noqa: E402
from rlds_reverb.learn import sampling  # noqa: E402
from rlds_reverb.serve import tables  # noqa: E402
from rlds_reverb.transform import items  # noqa: E402
from rlds_reverb.write import push as writers  # noqa: E402

TABLE = 'prioritized'
NUM_ITEMS = 20_000
BATCH_SIZE = 256
_EPISODE_LENGTH = 1001  # 1,000 two-step items per episode.


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
    make_dataset: Callable[[], tf.data.Dataset], *, batches: int, warmup: int = 20
) -> tuple[float, float, float]:
    """Returns (samples/s, CPU µs per sample, set-up s) over `batches` batches.

    The set-up (building the dataset, its iterator and the first batch) is timed apart;
    the rate is taken after a warm-up of `warmup` batches, the same for both sides.
    """
    started = time.perf_counter()
    iterator = iter(make_dataset())
    next(iterator)
    setup = time.perf_counter() - started
    for _ in range(warmup - 1):
        next(iterator)
    cpu_started, started = os.times(), time.perf_counter()
    for _ in range(batches):
        next(iterator)
    seconds = time.perf_counter() - started
    cpu_ended = os.times()
    cpu = (cpu_ended.user - cpu_started.user) + (cpu_ended.system - cpu_started.system)
    samples = batches * BATCH_SIZE
    return samples / seconds, 1e6 * cpu / samples, setup


def make_tf_agents_dataset(server: reverb.Server, data_spec) -> tf.data.Dataset:
    buffer = reverb_replay_buffer.ReverbReplayBuffer(
        data_spec, TABLE, sequence_length=2, local_server=server
    )
    return buffer.as_dataset(sample_batch_size=BATCH_SIZE, num_steps=2)


def make_our_dataset(addresses, data_spec, **options) -> tf.data.Dataset:
    learner = sampling.LearnerDataset(
        addresses,
        TABLE,
        data_spec=data_spec,
        batch_size=BATCH_SIZE,
        sequence_length=2,
        beta=0.4,
        **options,
    )
    return learner.as_dataset()


def seed_split_servers(count: int) -> list[reverb.Server]:
    """Returns `count` servers holding the 20,000 items split evenly (same episodes)."""
    episodes = make_synthetic_episodes(
        num_episodes=NUM_ITEMS // (_EPISODE_LENGTH - 1), episode_length=_EPISODE_LENGTH
    )
    signature = tables.signature_for(items.TwoStep(), episodes)
    servers = []
    for shard in range(count):
        table = tables.prioritized(
            TABLE, priority_exponent=0.6, max_size=NUM_ITEMS // count, signature=signature
        )
        server = reverb.Server([table])
        writers.push(
            episodes.shard(count, shard),
            f'localhost:{server.port}',
            TABLE,
            item=items.TwoStep(),
            priority=lambda batch: tf.abs(batch.reward[:, 0]) + 0.1,
        )
        servers.append(server)
    return servers


def summarize(name: str, values: list[float]) -> str:
    """`name best / worst / median` of per-round values."""
    ordered = sorted(values)
    return (
        f'{name}: best {ordered[-1]:.2f}x, worst {ordered[0]:.2f}x, '
        f'median {ordered[len(ordered) // 2]:.2f}x'
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=5, help='alternated rounds')
    parser.add_argument('--batches', type=int, default=400, help='batches timed per round, ours')
    parser.add_argument(
        '--anchor-batches', type=int, default=100, help='batches timed per round, TF-Agents'
    )
    args = parser.parse_args(argv)
    server, data_spec = seed_table()
    address = f'localhost:{server.port}'
    print(f'table: prioritized, {NUM_ITEMS:,} two-step items, obs float32[17], act float32[6]')
    # An untimed first pipeline of each side pays TensorFlow's and Reverb's one-time start,
    # so that the first round's set-up compares like with like.
    for make in (make_tf_agents_dataset(server, data_spec), make_our_dataset(address, data_spec)):
        next(iter(make))
    ratios, cpu_ratios = [], []
    for round_ in range(1, args.rounds + 1):
        # Each side builds its dataset anew every round (set-up timed, then a warm-up).
        order = [
            ('anchor', lambda: make_tf_agents_dataset(server, data_spec), args.anchor_batches),
            ('ours', lambda: make_our_dataset(address, data_spec), args.batches),
        ]
        results = {}
        for name, make_dataset, batches in order if round_ % 2 else order[::-1]:
            results[name] = measure(make_dataset, batches=batches)
        (a_rate, a_cpu, a_setup), (o_rate, o_cpu, o_setup) = results['anchor'], results['ours']
        ratios.append(o_rate / a_rate)
        cpu_ratios.append(a_cpu / o_cpu)
        print(
            f'round {round_}: TF-Agents {a_rate:>8,.0f} samples/s ({a_cpu:5.1f} µs CPU/sample,'
            f' set-up {a_setup:.2f} s)   ours {o_rate:>8,.0f} ({o_cpu:5.1f} µs, set-up'
            f' {o_setup:.2f} s)   {ratios[-1]:.2f}x (CPU time {cpu_ratios[-1]:.2f}x)'
            f'   load average {os.getloadavg()[0]:.1f}',
            flush=True,
        )
    print(summarize('samples/s ratio', ratios))
    print(summarize('CPU time per sample ratio', cpu_ratios))

    split = seed_split_servers(2)
    split_addresses = [f'localhost:{s.port}' for s in split]
    scaling = []
    for round_ in range(1, args.rounds + 1):
        order = [
            ('1 server', lambda: make_our_dataset(address, data_spec)),
            ('2 servers', lambda: make_our_dataset(split_addresses, data_spec)),
        ]
        results = {}
        for name, dataset in order if round_ % 2 else order[::-1]:
            results[name] = measure(dataset, batches=args.batches)
        scaling.append(results['2 servers'][0] / results['1 server'][0])
        print(
            f'round {round_}: 1 server {results["1 server"][0]:>8,.0f} samples/s   '
            f'2 servers {results["2 servers"][0]:>8,.0f}   {scaling[-1]:.2f}x',
            flush=True,
        )
    print(summarize('2 servers / 1 server', scaling))
    for running in [server, *split]:
        running.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
