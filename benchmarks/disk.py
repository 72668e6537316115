"""From TFDS directories on disk: TF-Agents' util vs ours, set-up included, one process.

Writes (once, into `--data-dir`) three RLDS TFDS directories: a HalfCheetah-like one
(observation float32[17], action float32[6], 1,000-step episodes, 200,000 steps) and a
CartPole-like one (observation float32[4], 50-step episodes, 200,000 steps), both with our
generator; and an image one (observation a PNG-encoded `tfds.features.Image` uint8[64,64,3],
100-step episodes, 20,000 steps), written by TFDS itself. TF-Agents reads the same directory through `tfds.builder_from_directory(...)
.as_dataset()` (its nested steps), ours through `rlds_reverb.load` (whole episodes).

Every timing starts before the pipeline is built (tracing included, as users pay it) and
ends after the last element; the "steady" column leaves out the time to the first element.
TF-Agents runs on the first `--anchor-episodes` episodes (it is slow); ratios compare
steps/s. `--rss` measures peak memory of ours' convert in child processes at two sizes.

Run: `.venv/bin/python -m benchmarks.disk [--data-dir DIR] [--rss]`.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

import numpy as np
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
from tf_agents.replay_buffers import reverb_utils
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds

import adders
import rlds_reverb
from rlds_reverb import items
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import files, types
from rlds_reverb.data import synthetic, tfds_writer
from rlds_reverb.serve import tables

_BATCH = 256
_STEPS = 200_000


class Layout(NamedTuple):
    """One benchmark dataset: its shapes, its size and how many episodes TF-Agents reads."""

    episode_length: int
    steps: int
    observation_shape: tuple[int, ...]
    action_shape: tuple[int, ...]
    anchor_episodes: int
    image: bool = False


_LAYOUTS = {
    'halfcheetah_like': Layout(1000, _STEPS, (17,), (6,), 10),
    'cartpole_like': Layout(50, _STEPS, (4,), (1,), 200),
    'image_like': Layout(100, 20_000, (64, 64, 3), (1,), 20, image=True),
}


def _write_image_dataset(data_dir: pathlib.Path, name: str) -> pathlib.Path:
    """Writes the image layout through TFDS' own writer (PNG-encoded, as catalogues hold it)."""
    layout = _LAYOUTS[name]
    rng = np.random.default_rng(0)
    step_features = {
        types.OBSERVATION: tfds.features.Image(shape=layout.observation_shape, dtype=np.uint8),
        types.ACTION: tfds.features.Tensor(shape=layout.action_shape, dtype=np.float32),
        types.REWARD: tfds.features.Scalar(dtype=np.float32),
        types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
    }
    features = tfds_writer.make_rlds_features(step_features)

    def _episode(length: int) -> dict:
        # Smooth images with noise compress as camera frames do, unlike pure noise.
        base = rng.integers(0, 200, size=layout.observation_shape, dtype=np.uint8)
        noise = rng.integers(0, 8, size=(length, *layout.observation_shape), dtype=np.uint8)
        flags = np.arange(length)
        return {
            types.STEPS: {
                types.OBSERVATION: base[None] + noise,
                types.ACTION: rng.standard_normal((length, *layout.action_shape), np.float32),
                types.REWARD: rng.standard_normal(length, np.float32),
                types.DISCOUNT: np.ones(length, np.float32),
                types.IS_FIRST: flags == 0,
                types.IS_LAST: flags == length - 1,
                types.IS_TERMINAL: np.zeros(length, bool),
            }
        }

    count = layout.steps // layout.episode_length
    tfds.dataset_builders.store_as_tfds_dataset(
        name=name,
        version='1.0.0',
        features=features,
        split_datasets={'train': [(str(i), _episode(layout.episode_length)) for i in range(count)]},
        data_dir=os.fspath(data_dir),
        disable_shuffling=True,
    )
    return data_dir / name / '1.0.0'


def _make_default_data_dir() -> pathlib.Path:
    """Returns this user's private cache in the temp dir (datasets there are reused as is)."""
    path = files.make_private_dirs(
        pathlib.Path(tempfile.gettempdir()) / f'rlds_reverb_bench_{os.getuid()}'
    )
    if path.stat().st_uid != os.getuid():  # Someone else's datasets would be benchmarked.
        raise SystemExit(f'{path} belongs to another user; pass --data-dir.')
    return path


def write_dataset(data_dir: pathlib.Path, name: str) -> pathlib.Path:
    """Writes (unless present) the layout `name` as a TFDS directory; returns it."""
    layout = _LAYOUTS[name]
    length, obs_shape, action_shape = (
        layout.episode_length,
        layout.observation_shape,
        layout.action_shape,
    )
    target = data_dir / name / '1.0.0'
    if (target / 'dataset_info.json').is_file():
        return target
    if layout.image:
        return _write_image_dataset(data_dir, name)
    data = synthetic.make_synthetic_episodes(
        num_episodes=layout.steps // length,
        episode_length=length,
        observation_shape=obs_shape,
        action_shape=action_shape,
        seed=0,
    )
    episodes = (
        {types.STEPS: steps} for steps in episodes_lib.to_episode_tensors(data).as_numpy_iterator()
    )
    features = tfds_writer.make_rlds_features(
        {
            types.OBSERVATION: tfds.features.Tensor(shape=obs_shape, dtype=np.float32),
            types.ACTION: tfds.features.Tensor(shape=action_shape, dtype=np.float32),
            types.REWARD: tfds.features.Scalar(dtype=np.float32),
            types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
        }
    )
    return tfds_writer.write_rlds_dataset(
        target, episodes, features=features, name=name, episodes_per_shard=max(1, 20_000 // length)
    )


def _consume(elements, count_steps) -> tuple[int, float, float]:
    """Returns (steps, seconds to the end, seconds to the first element) from now."""
    started = time.perf_counter()
    first, steps = None, 0
    for element in elements():
        steps += count_steps(element)
        first = first or time.perf_counter() - started
    return steps, time.perf_counter() - started, first or 0.0


def _row(name: str, steps: int, seconds: float, first: float) -> float:
    rate = steps / seconds
    steady = steps / max(seconds - first, 1e-9)
    print(
        f'{name:<44} {rate:>11,.0f} steps/s  steady {steady:>11,.0f}  ({steps:,} in {seconds:.2f} s)'
    )
    return rate


def _critic(observation: tf.Tensor) -> tf.Tensor:
    """A stand-in critic: the mean of the observation (the data have no values)."""
    flat = tf.reshape(observation, [tf.shape(observation)[0], -1])
    return tf.reduce_mean(tf.cast(flat, tf.float32), axis=-1)


def _trajectory_steps(batch) -> int:
    return int(batch.step_type.shape[0])


def _episode_steps(steps) -> int:
    return int(steps[types.IS_FIRST].shape[0])


def _push_tf_agents(directory: pathlib.Path, episodes: int) -> tuple[int, float, float]:
    data = tfds.builder_from_directory(os.fspath(directory)).as_dataset(split='train')
    signature = tables.signature_for(items.TwoStep(), rlds_reverb.load(directory))
    server = reverb.Server([tables.uniform('replay', max_size=10**7, signature=signature)])
    try:
        client = reverb.Client(f'localhost:{server.port}')
        observer = reverb_utils.ReverbAddTrajectoryObserver(client, 'replay', sequence_length=2)
        started = time.perf_counter()
        tfa_rlds.push_rlds_to_reverb(data.take(episodes), observer)
        observer.close()
        seconds = time.perf_counter() - started
        steps = int(client.server_info()['replay'].current_size) + episodes
    finally:
        server.stop()
    return steps, seconds, 0.0


def _push_ours(directory: pathlib.Path) -> tuple[int, float, float]:
    started = time.perf_counter()
    episodes = rlds_reverb.load(directory)
    signature = tables.signature_for(items.TwoStep(), episodes)
    server = reverb.Server([tables.uniform('replay', max_size=10**7, signature=signature)])
    try:
        stats = rlds_reverb.push(episodes, f'localhost:{server.port}', 'replay')
    finally:
        server.stop()
    return stats.steps, time.perf_counter() - started, 0.0


def compare_push(directory: pathlib.Path, anchor_episodes: int, *, rounds: int) -> None:
    """Times TF-Agents' push and ours `rounds` times, alternating which goes first.

    On this VM a push runs at one of two speeds from one run to the next (writer and
    server threads waking each other across vCPUs: benchmarks/README.md), so every round
    is printed, with the best and the median ratio.
    """
    ratios = []
    for index in range(rounds):
        order = ['anchor', 'ours'] if index % 2 == 0 else ['ours', 'anchor']
        rates = {}
        for who in order:
            if who == 'anchor':
                rates[who] = _row(
                    'TF-Agents push_rlds_to_reverb', *_push_tf_agents(directory, anchor_episodes)
                )
            else:
                rates[who] = _row('ours push two-step', *_push_ours(directory))
        ratios.append(rates['ours'] / rates['anchor'])
        print(f'  ratio push, round {index + 1}: {ratios[-1]:.1f}x')
    ordered = sorted(ratios)
    print(
        f'  ratio push: best {ordered[-1]:.1f}x, median {ordered[len(ordered) // 2]:.1f}x, '
        f'worst {ordered[0]:.1f}x (target >= 12x)'
    )


def run_layout(directory: pathlib.Path, name: str, *, push_rounds: int = 3) -> None:
    anchor_episodes = _LAYOUTS[name].anchor_episodes
    print(f'\n== {name}: {directory}')

    def _tfa_convert():
        data = tfds.builder_from_directory(os.fspath(directory)).as_dataset(split='train')
        return tfa_rlds.convert_rlds_to_trajectories(data.take(anchor_episodes)).batch(_BATCH)

    def _ours_convert():
        return rlds_reverb.convert_rlds_to_trajectories(
            rlds_reverb.load(directory), batch_size=_BATCH
        )

    def _ours_adder(adder):
        return lambda: episodes_lib.to_episode_tensors(rlds_reverb.load(directory).apply(adder))

    _row(
        'ours load (whole episodes, read only)',
        *_consume(
            lambda: episodes_lib.to_episode_tensors(rlds_reverb.load(directory)), _episode_steps
        ),
    )
    anchor = _row('TF-Agents convert .batch(256)', *_consume(_tfa_convert, _trajectory_steps))
    ours = _row('ours convert batch_size=256', *_consume(_ours_convert, _trajectory_steps))
    print(f'  ratio convert: {ours / anchor:.1f}x (target >= 20x)')
    started = time.perf_counter()
    report = rlds_reverb.validate(rlds_reverb.load(directory))
    _row('ours validate', report.steps, time.perf_counter() - started, 0.0)
    _row(
        'ours adders.n_step(3, 0.99)',
        *_consume(_ours_adder(adders.n_step(3, 0.99)), _episode_steps),
    )
    _row(
        'ours adders.gae(0.99, 0.95, value_fn)',
        *_consume(_ours_adder(adders.gae(0.99, 0.95, value_fn=_critic)), _episode_steps),
    )
    compare_push(directory, anchor_episodes, rounds=push_rounds)


def _probe_rss(directory: str, episodes: int) -> None:
    data = rlds_reverb.load(directory, split=f'train[:{episodes}]')
    for _ in rlds_reverb.convert_rlds_to_trajectories(data, batch_size=_BATCH):
        pass
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)


def measure_rss(directory: pathlib.Path) -> None:
    total = _STEPS // _LAYOUTS['halfcheetah_like'].episode_length
    for episodes in (total // 4, total):
        out = subprocess.run(
            [sys.executable, '-m', 'benchmarks.disk', '--probe-rss', str(directory), str(episodes)],
            capture_output=True,
            text=True,
            check=True,
        )
        mib = out.stdout.strip().splitlines()[-1]
        print(f'peak RSS, convert of {episodes * 1000:,} steps: {mib} MiB')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--data-dir', type=pathlib.Path, default=None)
    parser.add_argument('--rss', action='store_true', help='also measure peak RSS')
    parser.add_argument(
        '--layouts', nargs='+', choices=sorted(_LAYOUTS), default=list(_LAYOUTS), help='datasets'
    )
    parser.add_argument('--push-rounds', type=int, default=3, help='alternated push rounds')
    parser.add_argument('--probe-rss', nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe_rss:
        _probe_rss(args.probe_rss[0], int(args.probe_rss[1]))
        return 0
    data_dir = args.data_dir or _make_default_data_dir()
    directories = {name: write_dataset(data_dir, name) for name in args.layouts}
    for name, directory in directories.items():
        run_layout(directory, name, push_rounds=args.push_rounds)
    if args.rss:
        measure_rss(write_dataset(data_dir, 'halfcheetah_like'))
    return 0


if __name__ == '__main__':
    tf.get_logger().setLevel('ERROR')
    sys.exit(main())
