"""The Beam pipeline (W workers, S servers) against `push` in one process, same TFDS data.

Data: synthetic HalfCheetah-like RLDS (observation float32[17], action float32[6],
1,000-step episodes) written as a TFDS directory in a temp dir, 5 episodes per shard.
Every run pushes two-step items into fresh in-process Reverb servers (uniform tables).

* anchor: `rlds_reverb.push(load(dir), server, 'replay')` in this process;
* Beam: `rlds_reverb.distribute.pipeline.push_with_beam` on the DirectRunner with
  W = 1 (in-process) and W = 2 (`--direct_running_mode=multi_processing`) workers into
  S = 1, 2 and 4 servers; each run prints what the workers read (the pipeline's Beam
  counters, `BeamPushResult.reads`): records the count stage scanned from their bytes,
  episodes it decoded, episodes the writers decoded.

It also measures the rates of the pipeline's two stages in this process: counting (the
count stage's own code on the whole split, per worker) and writing (each writer reads,
plans and writes its own episodes as `push` does, so its rate is the anchor's), and prints a model of
the pipeline's throughput for W workers and S servers from them: the count stage runs on
min(W, cores) workers, then (after the shuffle of metadata) the write stage on
min(W, S, cores) writers, plus a fixed start-up cost.

Run: `.venv/bin/python -m benchmarks.beam [--episodes 60]`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import reverb

from benchmarks.common import print_row
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import specs, types
from rlds_reverb.distribute import counting, pipeline, routing
from rlds_reverb.distribute import job as job_lib
from rlds_reverb.examples.synthetic import make_synthetic_episodes
from rlds_reverb.read.loading import load, open_builder
from rlds_reverb.serve import tables
from rlds_reverb.storage import tfds_writer
from rlds_reverb.transform import items
from rlds_reverb.write import push as push_lib
from rlds_reverb.write.options import PushOptions

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


def _anchor(path: str) -> tuple[float, float]:
    """Returns push's (steps/s, CPU-seconds per step: reader, writer and server together)."""
    (server,) = _servers(path, 1)
    cpu = time.process_time()
    stats = push_lib.push(load(path), f'localhost:{server.port}', 'replay')
    cpu = time.process_time() - cpu
    server.stop()
    print_row('push, one process (anchor)', stats.steps_per_second, stats.steps, stats.seconds)
    print(
        f'    {"":<44} busy cores {cpu / stats.seconds:.2f} ({1e6 * cpu / stats.steps:.0f} µs CPU/step)'
    )
    return stats.steps_per_second, cpu / stats.steps


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
    reads = result.reads
    print(
        f'    {"":<44} spread {100 * result.spread:.1f}%; read: {reads.records_scanned} '
        f'records scanned, {reads.decoded_to_count} episodes decoded to count, '
        f'{reads.decoded_to_write} to write ({reads.decoded} decoded of {result.episodes})'
    )
    return result.steps_per_second


def _count_rate(path: str) -> float:
    """Returns the count stage's steps/s per worker: its own code on the whole split."""
    builder = open_builder(path)
    job = job_lib.BeamJob(
        dataset_dir=path,
        split='train',
        servers=('unused:0',),
        table='replay',
        options=PushOptions(item=items.TwoStep()),
        result_dir='',
        step_spec=specs.get_step_spec(load(path)),
    )
    total = builder.info.splits['train'].num_examples
    start = time.perf_counter()
    counted = list(counting.CountShard(job).process(routing.ShardRange('all', 0, total)))
    seconds = time.perf_counter() - start
    steps = sum(e.length for e in counted)
    print_row('stage: count (its own code), 1 worker', steps / seconds, steps, seconds)
    return steps / seconds


def _model(
    steps: int,
    count_rate: float,
    write_rate: float,
    startup_s: float,
    workers: int,
    num_servers: int,
    cores: int,
) -> float:
    """Steps/s the model expects for W workers and S servers."""
    seconds = (
        startup_s
        + steps / (min(workers, cores) * count_rate)
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
        anchor, cpu_per_step = _anchor(path)
        count_rate, write_rate = _count_rate(path), anchor
        rates = {(w, s): _beam(path, w, s) for w in (1, 2) for s in (1, 2, 4)}
    one = rates[1, 1]
    ceiling = cores / cpu_per_step
    print(
        f'CPU ceiling on {cores} cores: {ceiling:,.0f} steps/s (push uses '
        f'{1e6 * cpu_per_step:.0f} µs CPU per step, server included); best Beam run '
        f'{max(rates.values()) / ceiling:.0%} of it'
    )
    print(f'Beam 1 worker vs push: {anchor / one:.2f}x slower (target <= 1.5x)')
    for (w, s), rate in rates.items():
        print(
            f'W={w} S={s}: {rate:,.0f} steps/s, {rate / w:,.0f} per worker, '
            f'scaling efficiency {rate / (w * one):.2f} (vs W x the 1-worker rate)'
        )
    # Start-up: what the 1-worker run lost beyond its two stages.
    startup_s = max(0.0, steps / one - steps / count_rate - steps / write_rate)
    print(
        f'Model (start-up {startup_s:.1f} s, count {count_rate:,.0f}/worker, write '
        f'{write_rate:,.0f}/server, stages in sequence):'
    )
    for w in (1, 2, 4, 8):
        row = [
            f'S={s}: {_model(steps, count_rate, write_rate, startup_s, w, s, cores):>9,.0f}'
            for s in (1, 2, 4, 8)
        ]
        row_big = _model(steps, count_rate, write_rate, startup_s, w, w, 10**6)
        print(f'  W={w}: ' + '  '.join(row) + f'   (W cores, S=W: {row_big:,.0f})')


if __name__ == '__main__':
    main()
