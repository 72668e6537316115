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
(dataset, iterator, first batch) and warms it up for 20 batches; the two then take turns,
4 slices each, timing their batches (a change of the host's load during a round falls on
both). Each round prints both rates, the ratio, both set-ups,
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
# Turns each side takes in a round (its timed batches cut into as many slices).
_SLICES = 4


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


class _Timed:
    """One side's iterator in a round: its set-up, then time and CPU summed over slices."""

    def __init__(self, make_dataset: Callable[[], tf.data.Dataset], *, warmup: int):
        started = time.perf_counter()
        self._iterator = iter(make_dataset())
        next(self._iterator)
        self.setup_s = time.perf_counter() - started
        for _ in range(warmup - 1):
            next(self._iterator)
        self.seconds = self.cpu_s = 0.0
        self.samples = 0

    def run(self, batches: int) -> None:
        """Times `batches` more batches (wall and process CPU time)."""
        cpu_started, started = os.times(), time.perf_counter()
        for _ in range(batches):
            next(self._iterator)
        self.seconds += time.perf_counter() - started
        cpu_ended = os.times()
        self.cpu_s += (cpu_ended.user - cpu_started.user) + (cpu_ended.system - cpu_started.system)
        self.samples += batches * BATCH_SIZE

    @property
    def rate(self) -> float:
        return self.samples / self.seconds

    @property
    def cpu_us(self) -> float:
        return 1e6 * self.cpu_s / self.samples


def measure_pair(
    sides: dict[str, tuple[Callable[[], tf.data.Dataset], int]],
    *,
    reverse: bool,
    slices: int = _SLICES,
    warmup: int = 20,
) -> dict[str, _Timed]:
    """Measures the sides of one round, their timed batches cut into alternating slices.

    Each side builds its dataset (set-up timed: dataset, iterator, first batch) and warms up
    for `warmup` batches; then the sides take turns, `slices` times, each timing its
    `batches / slices` next batches. A change in the machine's load during the round so
    falls on both sides alike (on a shared host it otherwise lands on whichever side runs
    then).
    """
    names = list(sides)[::-1] if reverse else list(sides)
    timed = {name: _Timed(sides[name][0], warmup=warmup) for name in names}
    for _ in range(slices):
        for name in names:
            timed[name].run(sides[name][1] // slices)
    return timed


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
        results = measure_pair(
            {
                'anchor': (lambda: make_tf_agents_dataset(server, data_spec), args.anchor_batches),
                'ours': (lambda: make_our_dataset(address, data_spec), args.batches),
            },
            reverse=not round_ % 2,
        )
        anchor, ours = results['anchor'], results['ours']
        ratios.append(ours.rate / anchor.rate)
        cpu_ratios.append(anchor.cpu_us / ours.cpu_us)
        print(
            f'round {round_}: TF-Agents {anchor.rate:>8,.0f} samples/s ({anchor.cpu_us:5.1f} µs'
            f' CPU/sample, set-up {anchor.setup_s:.2f} s)   ours {ours.rate:>8,.0f}'
            f' ({ours.cpu_us:5.1f} µs, set-up {ours.setup_s:.2f} s)   {ratios[-1]:.2f}x'
            f' (CPU time {cpu_ratios[-1]:.2f}x)   load average {os.getloadavg()[0]:.1f}',
            flush=True,
        )
    print(summarize('samples/s ratio', ratios))
    print(summarize('CPU time per sample ratio', cpu_ratios))

    split = seed_split_servers(2)
    split_addresses = [f'localhost:{s.port}' for s in split]
    scaling = []
    for round_ in range(1, args.rounds + 1):
        results = measure_pair(
            {
                '1 server': (lambda: make_our_dataset(address, data_spec), args.batches),
                '2 servers': (lambda: make_our_dataset(split_addresses, data_spec), args.batches),
            },
            reverse=not round_ % 2,
        )
        one, two = results['1 server'].rate, results['2 servers'].rate
        scaling.append(two / one)
        print(
            f'round {round_}: 1 server {one:>8,.0f} samples/s   2 servers {two:>8,.0f}'
            f'   {scaling[-1]:.2f}x',
            flush=True,
        )
    print(summarize('2 servers / 1 server', scaling))
    for running in [server, *split]:
        running.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
