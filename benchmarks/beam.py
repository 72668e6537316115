"""The Beam pipeline (W workers, S servers) against `push` in one process, same TFDS data.

Data: synthetic HalfCheetah-like RLDS (observation float32[17], action float32[6],
1,000-step episodes) written as a TFDS directory in a temp dir, 5 episodes per shard.
Every run pushes two-step items into fresh in-process Reverb servers (uniform tables).

* anchor: `rlds_reverb.push(load(dir), server, 'replay')` in this process;
* Beam: `rlds_reverb.distribute.pipeline.push_with_beam` on the DirectRunner with
  W = 1 (in-process) and W = 2 (`--direct_running_mode=multi_processing`) workers into
  S = 1 and 2 servers.

It also measures the two stage rates the pipeline is made of, in this process: planning
(read + decode + validate + build plans, per worker) and writing (append plans to one
server, per server), and prints a model of the pipeline's throughput for W workers and S
servers from them: the plan stage runs on min(W, cores) workers, then (after the shuffle)
the write stage on min(W, S) writers, plus a fixed start-up cost.

Run: `.venv/bin/python -m benchmarks.beam [--episodes 60]`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import reverb
import tree

from benchmarks.common import print_row
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.data import tfds_writer
from rlds_reverb.data.loading import load
from rlds_reverb.data.synthetic import make_synthetic_episodes
from rlds_reverb.distribute import pipeline
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from rlds_reverb.transform.plans import make_episode_plans
from rlds_reverb.write import engines
from rlds_reverb.write import push as push_lib

_LENGTH = 1000


def _write_data(directory: str, num_episodes: int) -> str:
    import tensorflow_datasets as tfds

    episodes = episodes_lib.to_episode_tensors(
        make_synthetic_episodes(num_episodes=num_episodes, episode_length=_LENGTH)
    )
    features = tfds_writer.make_rlds_features(
        {
            types.OBSERVATION: tfds.features.Tensor(shape=(17,), dtype=np.float32),
            types.ACTION: tfds.features.Tensor(shape=(6,), dtype=np.float32),
            types.REWARD: tfds.features.Scalar(dtype=np.float32),
            types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
        }
    )
    path = tfds_writer.write_rlds_dataset(
        os.path.join(directory, 'synthetic', '1.0.0'),
        ({types.STEPS: steps} for steps in episodes.as_numpy_iterator()),
        features=features,
        name='synthetic',
        episodes_per_shard=5,
    )
    return str(path)


def _servers(path: str, count: int) -> list[reverb.Server]:
    signature = tables.signature_for(items.TwoStep(), load(path))
    return [
        reverb.Server([tables.uniform('replay', max_size=10**7, signature=signature)])
        for _ in range(count)
    ]


def _anchor(path: str) -> float:
    (server,) = _servers(path, 1)
    stats = push_lib.push(load(path), f'localhost:{server.port}', 'replay')
    server.stop()
    print_row('push, one process (anchor)', stats.steps_per_second, stats.steps, stats.seconds)
    return stats.steps_per_second


def _beam(path: str, workers: int, num_servers: int) -> float:
    running = _servers(path, num_servers)
    flags = ['--runner=DirectRunner', f'--direct_num_workers={workers}']
    if workers > 1:
        flags.append('--direct_running_mode=multi_processing')
    result = pipeline.push_with_beam(
        path, [f'localhost:{s.port}' for s in running], 'replay', pipeline_options=flags
    )
    for server in running:
        server.stop()
    name = f'Beam, {workers} worker(s), {num_servers} server(s)'
    print_row(name, result.steps_per_second, result.steps, result.seconds)
    print(f'    {"":<44} spread {100 * result.spread:.1f}%')
    return result.steps_per_second


def _stage_rates(path: str) -> tuple[float, float]:
    """Returns (plan steps/s per worker, write steps/s per server), measured in this process."""
    start = time.perf_counter()
    plans = list(make_episode_plans(load(path), items.TwoStep()).as_numpy_iterator())
    plan_seconds = time.perf_counter() - start
    steps = sum(p.length for p in plans)
    (server,) = _servers(path, 1)
    engine = engines.make_engine(
        reverb.Client(f'localhost:{server.port}'),
        items.TwoStep(),
        ['replay'],
        num_columns=len(tree.flatten(plans[0].rows)),
        priority=1.0,
        max_in_flight_items=push_lib.DEFAULT_MAX_IN_FLIGHT_ITEMS,
        timeout_ms=60_000,
    )
    start = time.perf_counter()
    for plan in plans:
        engine.write_episode(plan)
    write_seconds = time.perf_counter() - start
    server.stop()
    print_row(
        'stage: plan (read, decode, validate), 1 worker', steps / plan_seconds, steps, plan_seconds
    )
    print_row(
        'stage: write (plans into 1 server), 1 writer', steps / write_seconds, steps, write_seconds
    )
    return steps / plan_seconds, steps / write_seconds


def _model(
    steps: int,
    plan_rate: float,
    write_rate: float,
    startup_s: float,
    workers: int,
    num_servers: int,
    cores: int,
) -> float:
    """Steps/s the model expects for W workers and S servers."""
    seconds = (
        startup_s
        + steps / (min(workers, cores) * plan_rate)
        + steps / (min(workers, num_servers, cores) * write_rate)
    )
    return steps / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--episodes', type=int, default=60, help='1,000-step episodes')
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as directory:
        path = _write_data(directory, args.episodes)
        steps = args.episodes * _LENGTH
        print(f'{args.episodes} episodes, {steps:,} steps, {cores} cores')
        anchor = _anchor(path)
        plan_rate, write_rate = _stage_rates(path)
        rates = {(w, s): _beam(path, w, s) for w in (1, 2) for s in (1, 2)}
    one = rates[1, 1]
    print(f'Beam 1 worker vs push: {anchor / one:.2f}x slower (target <= 1.5x)')
    for (w, s), rate in rates.items():
        print(
            f'W={w} S={s}: {rate:,.0f} steps/s, {rate / w:,.0f} per worker, '
            f'scaling efficiency {rate / (w * one):.2f} (vs W x the 1-worker rate)'
        )
    # Start-up: what the 1-worker run lost beyond its two stages.
    startup_s = max(0.0, steps / one - steps / plan_rate - steps / write_rate)
    print(
        f'Model (start-up {startup_s:.1f} s, plan {plan_rate:,.0f}/worker, write '
        f'{write_rate:,.0f}/server, stages in sequence):'
    )
    for w in (1, 2, 4, 8):
        row = [
            f'S={s}: {_model(steps, plan_rate, write_rate, startup_s, w, s, cores):>9,.0f}'
            for s in (1, 2, 4, 8)
        ]
        row_big = _model(steps, plan_rate, write_rate, startup_s, w, w, 10**6)
        print(f'  W={w}: ' + '  '.join(row) + f'   (W cores, S=W: {row_big:,.0f})')


if __name__ == '__main__':
    main()
