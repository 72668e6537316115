"""Reading a Minari dataset: `rlds_reverb.load(dir)` against an h5py loop into `from_generator`.

Data: 200 episodes of 1,000 environment steps (200,000 steps; 200,200 RLDS steps with
each episode's final observation), HalfCheetah-like (observation float32[17], action
float32[6], float64 rewards), written once in minari 0.5.4's layout with h5py and pyarrow
directly (HDF5: `data/main_data.hdf5`; Arrow: `data/<id>/part-0.arrow`), as minari would
write them (minari itself cannot be installed beside TensorFlow 2.15).

Timed from before the dataset is opened to the last episode's tensors, every step read:

* `ours hdf5`, `ours arrow`: `rlds_reverb.core.episodes.to_episode_tensors(
  rlds_reverb.load(dir))`, the whole-episode tensors the toolkit's functions read;
* `generator per episode`: what a user would write with h5py: a generator opening
  `main_data.hdf5`, yielding each episode's RLDS fields as whole arrays (observations,
  actions padded by one zero step, rewards, discounts, flags), into
  `tf.data.Dataset.from_generator`;
* `generator per step`: the same generator yielding one step at a time, batched back into
  episodes is not done (the steps are counted as they come), as a per-step loop reads.

Rounds alternate the order; each round prints steps/s per side and ours' ratio to the
per-episode generator (above 1: ours faster). An untimed warm-up first, so that no side
pays TensorFlow's one-time start.

Run: `.venv/bin/python -m benchmarks.minari_read [--data-dir DIR] [--rounds N]`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import h5py
import numpy as np
import pyarrow as pa
import tensorflow as tf

from benchmarks import common  # noqa: F401  (quiet TensorFlow logs)
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.read.loading import load

_EPISODES = 200
_STEPS = 1000
_OBSERVATION = 17
_ACTION = 6


def _box(size: int) -> str:
    return json.dumps(
        {'type': 'Box', 'dtype': 'float32', 'shape': [size], 'low': [-1e9] * size,
         'high': [1e9] * size}
    )  # fmt: skip


def write_dataset(root: pathlib.Path, data_format: str) -> pathlib.Path:
    """Writes (once) the benchmark's dataset in Minari's layout; returns its directory."""
    directory = root / 'benchmark' / f'halfcheetah-like-{data_format}-v0'
    data = directory / 'data'
    if (data / 'metadata.json').is_file():
        return directory
    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    handle = h5py.File(data / 'main_data.hdf5', 'w') if data_format == 'hdf5' else None
    for index in range(_EPISODES):
        obs = rng.normal(size=(_STEPS + 1, _OBSERVATION)).astype(np.float32)
        actions = rng.uniform(-1, 1, size=(_STEPS, _ACTION)).astype(np.float32)
        rewards = rng.normal(size=_STEPS)
        terminations = np.zeros(_STEPS, bool)
        terminations[-1] = index % 3 == 0
        truncations = ~terminations & (np.arange(_STEPS) == _STEPS - 1)
        if handle is not None:
            group = handle.create_group(f'episode_{index}')
            group.attrs.update({'id': index, 'seed': index, 'total_steps': _STEPS})
            for key, value in (
                ('observations', obs),
                ('actions', actions),
                ('rewards', rewards),
                ('terminations', terminations),
                ('truncations', truncations),
            ):
                group.create_dataset(
                    key, data=value, chunks=True, maxshape=(None, *value.shape[1:])
                )
            continue

        def _column(values: np.ndarray, pad: int) -> pa.Array:
            padded = np.pad(values, ((0, pad), (0, 0)))
            kind = pa.list_(pa.float32(), values.shape[1])
            return pa.FixedSizeListArray.from_arrays(padded.reshape(-1), type=kind)

        batch = pa.RecordBatch.from_pydict(
            {
                'episode_id': np.full(_STEPS + 1, index, np.int32),
                'observations': _column(obs, 0),
                'actions': _column(actions, 1),
                'rewards': np.pad(rewards, (0, 1)),
                'terminations': np.pad(terminations, (0, 1)),
                'truncations': np.pad(truncations, (0, 1)),
            }
        )
        (data / str(index)).mkdir()
        with pa.ipc.new_file(data / str(index) / 'part-0.arrow', batch.schema) as writer:
            writer.write_batch(batch)
        (data / str(index) / 'metadata.json').write_text(json.dumps({'id': index, 'seed': index}))
    if handle is not None:
        handle.close()
    metadata = {
        'total_episodes': _EPISODES,
        'total_steps': _EPISODES * _STEPS,
        'data_format': data_format,
        'observation_space': _box(_OBSERVATION),
        'action_space': _box(_ACTION),
        'minari_version': '0.5.4',
    }
    (data / 'metadata.json').write_text(json.dumps(metadata))
    return directory


def _rlds_episode(group: h5py.Group) -> dict:
    """One episode's RLDS fields from its HDF5 group, as a user would build them."""
    obs = group['observations'][()]
    actions = group['actions'][()]
    rewards = group['rewards'][()]
    terminated = bool(group['terminations'][-1])
    length = len(rewards) + 1
    discount = np.ones(length)
    if terminated:
        discount[-2:] = 0.0
    is_last = np.arange(length) == length - 1
    return {
        'observation': obs,
        'action': np.concatenate([actions, np.zeros_like(actions[:1])]),
        'reward': np.concatenate([rewards, [0.0]]),
        'discount': discount,
        'is_first': np.arange(length) == 0,
        'is_last': is_last,
        'is_terminal': is_last & terminated,
    }


def _spec(time_dim: bool) -> dict:
    lead = [None] if time_dim else []
    return {
        'observation': tf.TensorSpec([*lead, _OBSERVATION], tf.float32),
        'action': tf.TensorSpec([*lead, _ACTION], tf.float32),
        'reward': tf.TensorSpec(lead, tf.float64),
        'discount': tf.TensorSpec(lead, tf.float64),
        'is_first': tf.TensorSpec(lead, tf.bool),
        'is_last': tf.TensorSpec(lead, tf.bool),
        'is_terminal': tf.TensorSpec(lead, tf.bool),
    }


def _generator_per_episode(directory: pathlib.Path) -> tf.data.Dataset:
    def _episodes():
        with h5py.File(directory / 'data' / 'main_data.hdf5', 'r') as handle:
            for index in range(len(handle)):
                yield _rlds_episode(handle[f'episode_{index}'])

    return tf.data.Dataset.from_generator(_episodes, output_signature=_spec(True))


def _generator_per_step(directory: pathlib.Path) -> tf.data.Dataset:
    def _steps():
        with h5py.File(directory / 'data' / 'main_data.hdf5', 'r') as handle:
            for index in range(len(handle)):
                episode = _rlds_episode(handle[f'episode_{index}'])
                for t in range(len(episode['reward'])):
                    yield {key: value[t] for key, value in episode.items()}

    return tf.data.Dataset.from_generator(_steps, output_signature=_spec(False))


def _count(make: Callable[[], tf.data.Dataset], *, per_step: bool = False) -> int:
    if per_step:
        return sum(1 for _ in make())
    return sum(len(steps['reward']) for steps in make().as_numpy_iterator())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--data-dir', type=pathlib.Path, default=None)
    parser.add_argument('--rounds', type=int, default=3, help='alternated rounds')
    parser.add_argument('--per-step', action='store_true', help='also time the per-step loop')
    args = parser.parse_args(argv)
    root = args.data_dir or pathlib.Path(tempfile.gettempdir()) / 'rlds_reverb_bench_minari'
    hdf5, arrow = write_dataset(root, 'hdf5'), write_dataset(root, 'arrow')
    sides: dict[str, Callable[[], int]] = {
        'ours hdf5': lambda: _count(lambda: episodes_lib.to_episode_tensors(load(hdf5))),
        'ours arrow': lambda: _count(lambda: episodes_lib.to_episode_tensors(load(arrow))),
        'generator per episode': lambda: _count(lambda: _generator_per_episode(hdf5)),
    }
    if args.per_step:
        sides['generator per step'] = lambda: _count(
            lambda: _generator_per_step(hdf5), per_step=True
        )
    for run in sides.values():  # Warm-up: TensorFlow's one-time start, the page cache.
        run()
    rates: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for index in range(args.rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            steps = sides[name]()
            seconds = time.perf_counter() - started
            rates[name].append(steps / seconds)
            common.print_row(f'round {index + 1} {name}', steps / seconds, steps, seconds)
        anchor = rates['generator per episode'][-1]
        print(
            f'round {index + 1} ratio to the per-episode generator: '
            f'hdf5 {rates["ours hdf5"][-1] / anchor:.2f}x, '
            f'arrow {rates["ours arrow"][-1] / anchor:.2f}x'
        )
    for name in names:
        median = statistics.median(rates[name])
        print(f'median {name:<24} {median:>12,.0f} steps/s')
    anchor = statistics.median(rates['generator per episode'])
    for name in names:
        print(f'median ratio {name:<24} {statistics.median(rates[name]) / anchor:.2f}x')
    return 0


if __name__ == '__main__':
    tf.get_logger().setLevel('ERROR')
    sys.exit(main())
