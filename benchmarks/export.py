"""Back to RLDS: export a Reverb table, and record a TF-Agents driver, with their anchors.

* export: HalfCheetah-like episodes (observation float32[17], action float32[6], 1,000-step
  episodes) pushed into a uniform table, then written back as RLDS by `export_table`, for
  whole-episode items and for two-step items with ids. The anchor: TF-Agents'
  `ReverbReplayBuffer.as_dataset` sampling as many two-step items from the same table
  (what a TF-Agents user has for reading a table; random, with repeats, no episodes).
* record: a TF-Agents `PyDriver` on CartPole-v1 (random policy) with our `RldsRecorder`,
  against the same driver with TF-Agents' `ReverbAddTrajectoryObserver` (the anchor) and
  with no observer.
* peak memory: `export_table(checkpoint=...)` run in a fresh process at two table sizes;
  its peak RSS (ru_maxrss) is printed for each.

Run: `.venv/bin/python -m benchmarks.export [--episodes 40] [--record-episodes 200]`.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import reverb
import tensorflow as tf
from reverb.platform import checkpointers_lib
from tf_agents.drivers import py_driver
from tf_agents.environments import suite_gym
from tf_agents.policies import random_py_policy
from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils

from benchmarks.common import print_row
from rlds_reverb.examples.synthetic import make_synthetic_episodes
from rlds_reverb.export import recorder, reverb_export
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from rlds_reverb.write import push as push_lib

_LENGTH = 1000


def _data(num_episodes: int) -> tf.data.Dataset:
    return make_synthetic_episodes(num_episodes=num_episodes, episode_length=_LENGTH).cache()


def _serve(data, item, directory: str, *, add_ids: bool = False) -> reverb.Server:
    signature = tables.signature_for(item, data, add_ids=add_ids)
    table = tables.uniform('replay', max_size=10**7, signature=signature)
    checkpointer = checkpointers_lib.DefaultCheckpointer(directory)
    return reverb.Server([table], port=None, checkpointer=checkpointer)


def _time_export(data, item, *, add_ids: bool, steps: int) -> tuple[float, reverb.Server, str]:
    directory = tempfile.mkdtemp()
    os.mkdir(os.path.join(directory, 'ckpt'))
    server = _serve(data, item, os.path.join(directory, 'ckpt'), add_ids=add_ids)
    address = f'localhost:{server.port}'
    push_lib.push(data, address, 'replay', item=item, add_ids=add_ids)
    stats = reverb_export.export_table(
        os.path.join(directory, 'out'),
        'replay',
        server=address,
        server_checkpoint_dir=os.path.join(directory, 'ckpt'),
    )
    if stats.steps != steps:
        raise RuntimeError(f'export wrote {stats.steps} steps, expected {steps}')
    return stats.steps / stats.seconds, server, address


def _time_tf_agents_read(server: reverb.Server, address: str, num_items: int) -> float:
    client = reverb.Client(address)
    spec = client.server_info()['replay'].signature
    data_spec = tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), spec)
    buffer = reverb_replay_buffer.ReverbReplayBuffer(
        data_spec, 'replay', sequence_length=2, local_server=server
    )
    dataset = buffer.as_dataset(sample_batch_size=64, num_steps=2)
    started = time.perf_counter()
    read = 0
    for experience, _ in dataset:
        read += int(tf.shape(experience.step_type)[0])
        if read >= num_items:
            break
    return read / (time.perf_counter() - started)


def _driver_rate(observers_for, num_episodes: int) -> tuple[float, int]:
    env = suite_gym.load('CartPole-v1')
    env.seed(0)
    policy = random_py_policy.RandomPyPolicy(env.time_step_spec(), env.action_spec(), seed=0)
    steps = [0]
    observers, close = observers_for(policy)

    def _count(trajectory):
        steps[0] += int(not trajectory.is_boundary())

    driver = py_driver.PyDriver(env, policy, [*observers, _count], max_episodes=num_episodes)
    started = time.perf_counter()
    driver.run(env.reset())
    close()
    return steps[0] / (time.perf_counter() - started), steps[0]


def _bench_record(num_episodes: int) -> None:
    directory = tempfile.mkdtemp()

    def _none(policy):
        return [], lambda: None

    def _ours(policy):
        rec = recorder.RldsRecorder(os.path.join(directory, 'rec'), policy.trajectory_spec)
        return [rec], rec.close

    server_box = []

    def _tf_agents(policy):
        spec = tf.nest.map_structure(tf.TensorSpec.from_spec, policy.trajectory_spec)
        signature = tf.nest.map_structure(lambda s: tf.TensorSpec([2, *s.shape], s.dtype), spec)
        table = tables.uniform('replay', max_size=10**7, signature=signature)
        server_box.append(reverb.Server([table], port=None))
        client = reverb.Client(f'localhost:{server_box[-1].port}')
        observer = reverb_utils.ReverbAddTrajectoryObserver(client, 'replay', sequence_length=2)
        return [observer], observer.close

    for name, make in (
        ('driver alone', _none),
        ('driver + TF-Agents ReverbAddTrajectoryObserver', _tf_agents),
        ('driver + RldsRecorder (ours)', _ours),
    ):
        rate, steps = _driver_rate(make, num_episodes)
        print_row(f'record: {name}', rate, steps, steps / rate)
        if name.startswith('driver alone'):
            alone = rate
        elif 'TF-Agents' in name:
            anchor = rate
    print(
        f'record: ours / TF-Agents observer {rate / anchor:.2f}x; ours / driver alone {rate / alone:.0%}'
    )
    for server in server_box:
        server.stop()


def _write_checkpoint(num_episodes: int, directory: str) -> None:
    data = _data(num_episodes)
    server = _serve(data, items.Episode(_LENGTH), directory)
    push_lib.push(data, f'localhost:{server.port}', 'replay', item=items.Episode(_LENGTH))
    reverb.Client(f'localhost:{server.port}').checkpoint()
    server.stop()


def _read_status_kb(field: str) -> int:
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child_export(checkpoint: str, out: str, part_rows: int) -> None:
    with open('/proc/self/clear_refs', 'w') as refs:  # Resets the peak (VmHWM) to now.
        refs.write('5')
    before = _read_status_kb('VmRSS:')
    stats = reverb_export.export_table(
        out, 'replay', checkpoint=checkpoint, part_rows=part_rows, max_copy_bytes=0
    )
    peak = _read_status_kb('VmHWM:')
    print(f'{stats.steps} {before} {peak}')


def _bench_memory(sizes: list[int], part_rows: int) -> None:
    for num_episodes in sizes:
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = os.path.join(directory, 'ckpt')
            _write_checkpoint(num_episodes, checkpoint)
            result = subprocess.run(
                [
                    sys.executable,
                    '-m',
                    'benchmarks.export',
                    '--child',
                    checkpoint,
                    os.path.join(directory, 'out'),
                    str(part_rows),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            steps, before, peak = map(int, result.stdout.split()[-3:])
            print(
                f'peak RSS of export: {steps:,} steps ({num_episodes} x {_LENGTH}), '
                f'part_rows={part_rows:,}: peak {peak / 1024:,.0f} MB (before export '
                f'{before / 1024:,.0f} MB: export adds {(peak - before) / 1024:,.0f} MB)'
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--episodes', type=int, default=40, help='episodes exported')
    parser.add_argument('--record-episodes', type=int, default=200)
    parser.add_argument('--memory-sizes', type=int, nargs=2, default=[50, 200])
    parser.add_argument('--part-rows', type=int, default=20_000)
    parser.add_argument('--child', nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child_export(args.child[0], args.child[1], int(args.child[2]))
        return 0

    steps = args.episodes * _LENGTH
    data = _data(args.episodes)
    print(f'export Reverb -> RLDS, HalfCheetah-like, {args.episodes} x {_LENGTH} steps')
    rate, server, _ = _time_export(data, items.Episode(_LENGTH), add_ids=False, steps=steps)
    server.stop()
    print_row('export Episode(1000) items (ours)', rate, steps, steps / rate)
    rate, server, _ = _time_export(data, items.TwoStep(), add_ids=False, steps=steps)
    server.stop()
    print_row('export two-step items in insertion order (ours)', rate, steps, steps / rate)
    rate, server, address = _time_export(data, items.TwoStep(), add_ids=True, steps=steps)
    print_row('export two-step items with ids (ours)', rate, steps, steps / rate)
    items_rate = rate * (_LENGTH - 1) / _LENGTH
    anchor = _time_tf_agents_read(server, address, args.episodes * (_LENGTH - 1))
    server.stop()
    print_row('TF-Agents ReverbReplayBuffer samples (anchor)', anchor, 0, 0, unit='items/s')
    print(
        f'two-step items read and written as RLDS / TF-Agents samples read: {items_rate / anchor:.2f}x'
    )
    _bench_record(args.record_episodes)
    _bench_memory(args.memory_sizes, args.part_rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
