"""RLDS -> Reverb two-step items: TF-Agents vs a raw StructuredWriter loop vs ours.

All three push the same synthetic HalfCheetah-like RLDS (observation float32[17], action
float32[6], 1,000-step episodes) into a uniform table of a local Reverb server in
this process:

* TF-Agents: `rlds_to_reverb.push_rlds_to_reverb` with
  `ReverbAddTrajectoryObserver(sequence_length=2)` (the anchor);
* raw: the ceiling, a hand-written `StructuredWriter` loop over whole-episode trajectories
  from the (vectorized) converter, flattened once per episode: `writer.append` per step with
  ours' flush schedule, `end_episode` per episode;
* ours: `rlds_reverb.write.push.push(item=items.TwoStep())`.

Then: `--workers 2` (two processes pushing dataset shards into one server) vs one, and
restoring a seeded server from its checkpoint vs pushing again.
Run: `.venv/bin/python benchmarks/push.py [--episodes N] [--anchor-episodes N]`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time

import numpy as np
import reverb
import tensorflow as tf
import tree
from reverb import structured_writer as sw
from tf_agents.replay_buffers import reverb_utils
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds

from benchmarks.common import print_row
from rlds_reverb.examples.synthetic import make_synthetic_episodes
from rlds_reverb.serve import tables
from rlds_reverb.transform import convert, items
from rlds_reverb.write import push as writers
from rlds_reverb.write import seed

_LENGTH = 1000
_EVERY = 8  # Ours' flush schedule for its default 48 items in flight.
_BOUND = writers.DEFAULT_MAX_IN_FLIGHT_ITEMS - _EVERY


def _make_data(num_episodes: int, *, seed: int = 0) -> tf.data.Dataset:
    data = make_synthetic_episodes(num_episodes=num_episodes, episode_length=_LENGTH, seed=seed)
    return data.cache()


def _fill_cache(data: tf.data.Dataset) -> tf.data.Dataset:
    for _ in data:
        pass
    return data


def _start(
    data: tf.data.Dataset, *, max_size: int = 10**7, add_ids: bool = False
) -> tuple[reverb.Server, reverb.Client]:
    signature = tables.signature_for(items.TwoStep(), data, add_ids=add_ids)
    srv = reverb.Server([tables.uniform('replay', max_size=max_size, signature=signature)])
    return srv, reverb.Client(f'localhost:{srv.port}')


def _time_tf_agents(data, client) -> float:
    observer = reverb_utils.ReverbAddTrajectoryObserver(client, 'replay', sequence_length=2)
    tfa_rlds.push_rlds_to_reverb(data.take(1), observer)  # Warm-up: tracing, not timed.
    observer.reset(write_cached_steps=False)
    client.reset('replay')
    started = time.perf_counter()
    tfa_rlds.push_rlds_to_reverb(data, observer)
    observer.close()
    return time.perf_counter() - started


def _time_raw_loop(data, client) -> float:
    """A hand-written loop with the public API: flat rows, `append`, ours' flush schedule."""
    started = time.perf_counter()
    trajectories = convert.convert_episodes_to_trajectories(data).prefetch(2)
    writer = None
    for trajectory in trajectories.as_numpy_iterator():
        columns = tree.flatten(trajectory)
        if writer is None:
            pattern = sw.pattern_from_transform(
                [None] * len(columns), lambda ref: [x[-2:] for x in ref]
            )
            config = sw.create_config(pattern, 'replay', [sw.Condition.step_index() >= 1])
            writer = client.structured_writer([config])
        for t, row in enumerate([list(r) for r in zip(*columns, strict=False)], start=1):
            writer.append(row)
            if t % _EVERY == 0:
                writer.flush(block_until_num_items=_BOUND)
        writer.end_episode()
    return time.perf_counter() - started


def _time_ours(data, client) -> float:
    return writers.push(data, client, 'replay').seconds


def _time_ids_cost(data, steps: int, repeats: int) -> None:
    """Prints the best steps/s of the default push and of `add_ids=True`, alternated."""
    best = {False: 0.0, True: 0.0}
    for _ in range(repeats):
        for add_ids in (False, True):
            srv, client = _start(data, add_ids=add_ids)
            try:
                seconds = writers.push(data, client, 'replay', add_ids=add_ids).seconds
            finally:
                srv.stop()
            best[add_ids] = max(best[add_ids], steps / seconds)
    cost = 1 - best[True] / best[False]
    print(
        f'push add_ids=True: {best[True]:,.0f} steps/s vs {best[False]:,.0f} without '
        f'(best of {repeats}): costs {cost:.1%} (budget <= 5%)'
    )


def _time_extra_columns(data, client, extra: int) -> float:
    """The raw loop's rows plus `extra` int64 scalar columns (what `add_ids` adds per step)."""
    episodes = list(convert.convert_episodes_to_trajectories(data).as_numpy_iterator())
    started = time.perf_counter()
    writer = None
    for trajectory in episodes:
        columns = tree.flatten(trajectory)
        columns += [np.arange(len(columns[0]), dtype=np.int64) for _ in range(extra)]
        if writer is None:
            pattern = sw.pattern_from_transform(
                [None] * len(columns), lambda ref: [x[-2:] for x in ref]
            )
            config = sw.create_config(pattern, 'replay', [sw.Condition.step_index() >= 1])
            writer = client.structured_writer([config])
        for t, row in enumerate([list(r) for r in zip(*columns, strict=True)], start=1):
            writer.append(row)
            if t % _EVERY == 0:
                writer.flush(block_until_num_items=_BOUND)
        writer.end_episode()
    return time.perf_counter() - started


def _time_column_cost(data, steps: int, repeats: int) -> None:
    """Prints what one and two extra scalar columns cost a raw StructuredWriter loop."""
    best = [0.0, 0.0, 0.0]
    for _ in range(repeats):
        for extra in range(3):
            table = reverb.Table(
                'replay',
                sampler=reverb.selectors.Uniform(),
                remover=reverb.selectors.Fifo(),
                max_size=10**7,
                rate_limiter=reverb.rate_limiters.MinSize(1),
            )
            srv = reverb.Server([table])
            try:
                client = reverb.Client(f'localhost:{srv.port}')
                best[extra] = max(best[extra], steps / _time_extra_columns(data, client, extra))
            finally:
                srv.stop()
    print(
        f'raw StructuredWriter loop, 7 columns: {best[0]:,.0f} steps/s; one more int64 column '
        f'{best[1]:,.0f} (costs {1 - best[1] / best[0]:.1%}); two more {best[2]:,.0f} '
        f'(costs {1 - best[2] / best[0]:.1%})'
    )


def _run_best(name, timer, data, steps, *, repeats: int) -> float:
    """Runs `timer` `repeats` times on fresh servers; prints and returns the best steps/s."""
    best = 0.0
    for _ in range(repeats):
        srv, client = _start(data)
        try:
            seconds = timer(data, client)
            size = client.server_info()['replay'].current_size
        finally:
            srv.stop()
        best = max(best, steps / seconds)
    print_row(f'{name} ({size:,} items)', best, steps, steps / best)
    return best


def _push_shard(address: str, num_episodes: int, index: int, count: int) -> tuple[float, float]:
    """Pushes one shard; returns the wall-clock (start, end) of its push phase."""
    data = _fill_cache(_make_data(num_episodes).shard(count, index))
    started = time.time()
    writers.push(data, address, 'replay')
    return started, time.time()


def _time_workers(num_episodes: int, workers: int) -> tuple[float, float]:
    """Returns (seconds from first push start to last push end, wall seconds with start-up)."""
    srv, client = _start(_make_data(1))
    context = multiprocessing.get_context('spawn')
    try:
        started = time.perf_counter()
        with context.Pool(workers) as pool:
            spans = pool.starmap(
                _push_shard,
                [(f'localhost:{srv.port}', num_episodes, i, workers) for i in range(workers)],
            )
        wall = time.perf_counter() - started
        expected = num_episodes * (_LENGTH - 1)
        if client.server_info()['replay'].current_size != expected:
            raise RuntimeError('workers wrote the wrong number of items')
    finally:
        srv.stop()
    return max(end for _, end in spans) - min(start for start, _ in spans), wall


def _time_restore(data) -> tuple[float, float, float]:
    """Returns (push seconds, seed seconds: count + push + checkpoint, restore seconds)."""
    with tempfile.TemporaryDirectory() as directory:
        seeded = seed.seed_server(data, checkpoint_dir=directory)
        seeded.server.stop()
        restored = seed.seed_server(data, checkpoint_dir=directory)
        restored.server.stop()
        if restored.outcome is not seed.SeedOutcome.RESTORED or restored.items != seeded.items:
            raise RuntimeError('restore did not bring back the seeded items')
    return seeded.stats.seconds, seeded.seconds, restored.seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--episodes', type=int, default=30, help='episodes for raw and ours')
    parser.add_argument('--anchor-episodes', type=int, default=5, help='episodes for TF-Agents')
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=3, help='best of N for raw and ours')
    parser.add_argument(
        '--ids-only', action='store_true', help='only measure the cost of add_ids=True'
    )
    args = parser.parse_args(argv)
    if args.ids_only:
        data = _fill_cache(_make_data(args.episodes))
        warm = _fill_cache(_make_data(1))
        _time_ids_cost(warm, _LENGTH, 1)  # Warm up tracing.
        _time_ids_cost(data, args.episodes * _LENGTH, args.repeats)
        _time_column_cost(data, args.episodes * _LENGTH, args.repeats)
        return 0

    print('push RLDS -> Reverb, two-step items, HalfCheetah-like float32[17], 1,000-step episodes')
    anchor = _fill_cache(_make_data(args.anchor_episodes))
    data = _fill_cache(_make_data(args.episodes))
    warm = _fill_cache(_make_data(1))
    for timer in (_time_raw_loop, _time_ours):  # Warm up tracing.
        srv, client = _start(warm)
        timer(warm, client)
        srv.stop()
    tf_agents = _run_best(
        'TF-Agents push_rlds_to_reverb',
        _time_tf_agents,
        anchor,
        args.anchor_episodes * _LENGTH,
        repeats=1,
    )
    steps = args.episodes * _LENGTH
    raw = ours = 0.0
    for _ in range(args.repeats):  # Alternate, so that load changes hit both alike.
        raw = max(
            raw,
            _run_best(
                'raw StructuredWriter loop (ceiling)', _time_raw_loop, data, steps, repeats=1
            ),
        )
        ours = max(ours, _run_best('rlds_reverb.push (ours)', _time_ours, data, steps, repeats=1))
    print(f'best of {args.repeats}: raw {raw:,.0f} steps/s, ours {ours:,.0f} steps/s')
    print(f'ours / TF-Agents: {ours / tf_agents:.1f}x (target >= 12x)')
    print(f'ours / raw loop:  {ours / raw:.0%} (target >= 90%)')

    one, one_wall = _time_workers(args.episodes, 1)
    many, many_wall = _time_workers(args.episodes, args.workers)
    print(
        f'--workers {args.workers}: push phase {one / many:.2f}x the speed of 1 worker '
        f'({one:.2f} s vs {many:.2f} s); with process start-up {one_wall / many_wall:.2f}x '
        f'({one_wall:.2f} s vs {many_wall:.2f} s)'
    )
    push_s, seed_s, restore_s = _time_restore(data)
    print(
        f'push {push_s:.2f} s (seed with count + checkpoint {seed_s:.2f} s), restore '
        f'{restore_s:.2f} s: restore takes {restore_s / push_s:.1%} of a push (target <= 10%)'
    )
    _time_ids_cost(data, steps, args.repeats)
    _time_column_cost(data, steps, args.repeats)
    return 0


if __name__ == '__main__':
    sys.exit(main())
