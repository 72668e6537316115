"""From TFDS directories on disk: TF-Agents' util vs ours, on the same steps, set-up included.

Writes (once, into `--data-dir`) RLDS datasets with TFDS' own writer
(`tfds.dataset_builders.store_as_tfds_dataset`, its defaults: shuffled keys, its own
sharding): HalfCheetah-like (observation float32[17], action float32[6], 1,000-step
episodes, 200,000 steps), CartPole-like (observation float32[4], 50-step episodes, 200,000
steps) and images (a PNG-encoded `tfds.features.Image` uint8[64,64,3], 100-step episodes,
20,000 steps).

Both sides are timed the same way, on every step of the dataset:

* every timing starts before the dataset is opened (TF-Agents: `tfds.builder_from_directory
  (...).as_dataset()`; ours: `rlds_reverb.load`) and, for pushes, before the server is
  started; it ends after the last element (convert) or the last item written (push);
* convert: TF-Agents' `convert_rlds_to_trajectories(ds).batch(256)`; ours as a drop-in user
  writes it, `convert_rlds_to_trajectories(ds).batch(256)`, on TFDS' dataset and on
  `load`'s, and our fast path `convert_rlds_to_trajectories(load(dir), batch_size=256)`;
* push: TF-Agents' `push_rlds_to_reverb` into the table its own test builds (signature
  `add_outer_dim(create_trajectory_data_spec(ds))`, uniform, FIFO removal, a
  `ReverbReplayBuffer`'s client and a `ReverbAddTrajectoryObserver(sequence_length=2,
  stride_length=1)`); ours `rlds_reverb.push` into our uniform preset;
* the trajectories (convert) and the table's items (push) are counted on both sides, and
  a difference is reported;
* `--rounds` alternated rounds (who goes first alternates); medians are reported;
* time to the first element: the first batch (load: the first episode) for convert and
  load, the first item handed to Reverb for push (TF-Agents: the first trajectory given to
  its observer; ours: the first episode written), the first batch of a `LearnerDataset`
  (and of TF-Agents' `ReverbReplayBuffer.as_dataset`) on the pushed table.

An untimed warm-up runs first, so that neither side pays TensorFlow's one-time start.

Run: `.venv/bin/python -m benchmarks.disk [--data-dir DIR] [--layouts ...] [--rounds N]
[--rss]`.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds
from tf_agents.specs import tensor_spec

import adders
import rlds_reverb
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import files, types
from rlds_reverb.examples import synthetic
from rlds_reverb.learn import sampling
from rlds_reverb.serve import tables

_BATCH = 256
_STEPS = 200_000
_TABLE = 'replay'
_MAX_ITEMS = 10**7


class Layout(NamedTuple):
    """One benchmark dataset: its shapes and its size."""

    episode_length: int
    steps: int
    observation_shape: tuple[int, ...]
    action_shape: tuple[int, ...]
    image: bool = False
    value: bool = False  # A float32 `value` per step (a fixed linear critic's), for GAE.


_LAYOUTS = {
    'halfcheetah_like': Layout(1000, _STEPS, (17,), (6,)),
    'cartpole_like': Layout(50, _STEPS, (4,), (1,)),
    'image_like': Layout(100, 20_000, (64, 64, 3), (1,), image=True),
}


class Timing(NamedTuple):
    """One timed run: what it produced, in how long, and when the first element came."""

    steps: int  # Steps of the dataset the run went through.
    count: int  # Trajectories (convert) or table items (push) actually produced.
    seconds: float
    first_s: float

    @property
    def rate(self) -> float:
        return self.steps / self.seconds


def _tensor_episodes(layout: Layout) -> list[dict]:
    """The steps of every episode as NumPy arrays (synthetic, seeded)."""
    data = synthetic.make_synthetic_episodes(
        num_episodes=layout.steps // layout.episode_length,
        episode_length=layout.episode_length,
        observation_shape=layout.observation_shape,
        action_shape=layout.action_shape,
        seed=0,
    )
    episodes = list(episodes_lib.to_episode_tensors(data).as_numpy_iterator())
    if layout.value:
        weights = np.linspace(-1.0, 1.0, int(np.prod(layout.observation_shape)), dtype=np.float32)
        for steps in episodes:
            flat = steps[types.OBSERVATION].reshape(layout.episode_length, -1)
            steps[types.VALUE] = flat @ weights
    return episodes


def _image_episodes(layout: Layout) -> list[dict]:
    """Smooth images with noise (they compress as camera frames do, unlike pure noise)."""
    rng = np.random.default_rng(0)
    length = layout.episode_length
    flags = np.arange(length)
    episodes = []
    for _ in range(layout.steps // length):
        base = rng.integers(0, 200, size=layout.observation_shape, dtype=np.uint8)
        noise = rng.integers(0, 8, size=(length, *layout.observation_shape), dtype=np.uint8)
        episodes.append(
            {
                types.OBSERVATION: base[None] + noise,
                types.ACTION: rng.standard_normal((length, *layout.action_shape), np.float32),
                types.REWARD: rng.standard_normal(length, np.float32),
                types.DISCOUNT: np.ones(length, np.float32),
                types.IS_FIRST: flags == 0,
                types.IS_LAST: flags == length - 1,
                types.IS_TERMINAL: np.zeros(length, bool),
            }
        )
    return episodes


def _make_default_data_dir() -> pathlib.Path:
    """Returns this user's private cache in the temp dir (datasets there are reused as is)."""
    path = files.make_private_dirs(
        pathlib.Path(tempfile.gettempdir()) / f'rlds_reverb_bench_{os.getuid()}'
    )
    if path.stat().st_uid != os.getuid():  # Someone else's datasets would be benchmarked.
        raise SystemExit(f'{path} belongs to another user; pass --data-dir.')
    return path


def write_dataset(
    data_dir: pathlib.Path, name: str, *, layout: Layout | None = None
) -> pathlib.Path:
    """Writes (unless present) the layout `name` with TFDS' own writer; returns its directory.

    `layout` overrides the one `name` stands for (another benchmark's size).
    """
    target = data_dir / name / '1.0.0'
    if (target / 'dataset_info.json').is_file():
        return target
    layout = layout or _LAYOUTS[name]
    if layout.image:
        observation = tfds.features.Image(shape=layout.observation_shape, dtype=np.uint8)
    else:
        observation = tfds.features.Tensor(shape=layout.observation_shape, dtype=np.float32)
    steps = tfds.features.Dataset(
        {
            types.OBSERVATION: observation,
            types.ACTION: tfds.features.Tensor(shape=layout.action_shape, dtype=np.float32),
            types.REWARD: tfds.features.Scalar(dtype=np.float32),
            types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
            **{flag: tfds.features.Scalar(dtype=np.bool_) for flag in types.FLAG_FIELDS},
            **({types.VALUE: tfds.features.Scalar(dtype=np.float32)} if layout.value else {}),
        }
    )
    episodes = _image_episodes(layout) if layout.image else _tensor_episodes(layout)
    tfds.dataset_builders.store_as_tfds_dataset(
        name=name,
        version='1.0.0',
        features=tfds.features.FeaturesDict({types.STEPS: steps}),
        split_datasets={
            'train': [(f'episode_{i}', {types.STEPS: e}) for i, e in enumerate(episodes)]
        },
        data_dir=os.fspath(data_dir),
    )
    return target


def _tfds_dataset(directory: pathlib.Path) -> tf.data.Dataset:
    """The dataset as TF-Agents users open it (TFDS' nested steps)."""
    return tfds.builder_from_directory(os.fspath(directory)).as_dataset(split='train')


def _consume(make: Callable[[], tf.data.Dataset], steps: int, count: Callable) -> Timing:
    """Times building `make()` and iterating it to the end; counts what it yields."""
    started = time.perf_counter()
    first, produced = None, 0
    for element in make():
        produced += count(element)
        if first is None:
            first = time.perf_counter() - started
    return Timing(steps, produced, time.perf_counter() - started, first or 0.0)


def _trajectories(batch) -> int:
    return int(batch.step_type.shape[0])


def _episode_steps(steps) -> int:
    return int(steps[types.IS_FIRST].shape[0])


def _row(name: str, timing: Timing, unit: str = 'trajectories') -> None:
    steady = timing.steps / max(timing.seconds - timing.first_s, 1e-9)
    print(
        f'  {name:<46} {timing.rate:>10,.0f} steps/s  steady {steady:>10,.0f}  '
        f'first {timing.first_s:5.2f} s  ({timing.steps:,} steps in {timing.seconds:.2f} s; '
        f'{timing.count:,} {unit})',
        flush=True,
    )


class _FirstCallObserver:
    """Wraps TF-Agents' observer to note when the first trajectory reaches it."""

    def __init__(self, observer, started: float):
        self._observer = observer
        self._started = started
        self.first_s = None

    def get_table_signature(self):
        return self._observer.get_table_signature()

    def __call__(self, trajectory):
        if self.first_s is None:
            self.first_s = time.perf_counter() - self._started
        self._observer(trajectory)


def _push_tf_agents(directory: pathlib.Path, steps: int, *, sample: bool) -> Timing:
    """TF-Agents' push, as its own test sets it up; set-up and close inside the timing."""
    started = time.perf_counter()
    data = _tfds_dataset(directory)
    data_spec = tfa_rlds.create_trajectory_data_spec(data)
    table = reverb.Table(
        name=_TABLE,
        max_size=_MAX_ITEMS,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=tensor_spec.add_outer_dim(data_spec),
    )
    server = reverb.Server([table])
    try:
        replay_buffer = reverb_replay_buffer.ReverbReplayBuffer(
            data_spec, sequence_length=2, table_name=_TABLE, local_server=server
        )
        observer = _FirstCallObserver(
            reverb_utils.ReverbAddTrajectoryObserver(
                replay_buffer.py_client, _TABLE, sequence_length=2, stride_length=1
            ),
            started,
        )
        tfa_rlds.push_rlds_to_reverb(data, observer)
        observer._observer.close()  # noqa: SLF001  (flushes the last items)
        seconds = time.perf_counter() - started
        items = int(replay_buffer.py_client.server_info()[_TABLE].current_size)
        if sample:
            started = time.perf_counter()
            dataset = replay_buffer.as_dataset(sample_batch_size=_BATCH, num_steps=2)
            next(iter(dataset))
            print(
                f'  TF-Agents ReverbReplayBuffer.as_dataset: first batch {time.perf_counter() - started:.2f} s'
            )
    finally:
        server.stop()
    return Timing(steps, items, seconds, observer.first_s or 0.0)


def _push_ours(directory: pathlib.Path, steps: int, *, sample: bool) -> Timing:
    """Our push into our uniform preset; opening the dataset and the server inside the timing."""
    first = []
    started = time.perf_counter()
    episodes = rlds_reverb.load(directory)
    signature = tables.signature_for(rlds_reverb.items.TwoStep(), episodes)
    server = reverb.Server([tables.uniform(_TABLE, max_size=_MAX_ITEMS, signature=signature)])
    try:
        address = f'localhost:{server.port}'
        rlds_reverb.push(
            episodes,
            address,
            _TABLE,
            progress=lambda *_: first or first.append(time.perf_counter() - started),
        )
        seconds = time.perf_counter() - started
        items = int(reverb.Client(address).server_info()[_TABLE].current_size)
        if sample:
            started = time.perf_counter()
            data_spec = tf.nest.map_structure(
                lambda s: tf.TensorSpec(s.shape[1:], s.dtype), signature
            )
            learner = sampling.LearnerDataset(
                address, _TABLE, data_spec=data_spec, batch_size=_BATCH, sequence_length=2
            )
            next(iter(learner.as_dataset()))
            print(f'  ours LearnerDataset: first batch {time.perf_counter() - started:.2f} s')
    finally:
        server.stop()
    return Timing(steps, items, seconds, first[0] if first else 0.0)


def _median(timings: list[Timing]) -> Timing:
    return Timing(
        timings[0].steps,
        timings[0].count,
        statistics.median(t.seconds for t in timings),
        statistics.median(t.first_s for t in timings),
    )


def _check_counts(what: str, results: dict[str, list[Timing]]) -> None:
    counts = {name: sorted({t.count for t in ts}) for name, ts in results.items()}
    if len({tuple(c) for c in counts.values()}) != 1:
        print(f'  COUNT MISMATCH in {what}: {counts}')
    else:
        print(f'  {what}: every side produced {next(iter(counts.values()))[0]:,}')


def _compare(
    what: str, runs: dict[str, Callable[[], Timing]], *, rounds: int, unit: str
) -> dict[str, list[Timing]]:
    """Runs each entry `rounds` times, the order reversed every other round; prints ratios."""
    names = list(runs)
    results: dict[str, list[Timing]] = {name: [] for name in names}
    for index in range(rounds):
        print(f' {what}, round {index + 1}')
        for name in names if index % 2 == 0 else names[::-1]:
            results[name].append(runs[name]())
            _row(name, results[name][-1], unit)
    anchor = names[0]
    _check_counts(what, results)
    for name in names[1:]:
        ratios = [o.rate / a.rate for o, a in zip(results[name], results[anchor], strict=True)]
        print(
            f'  ratio {name} / {anchor}: rounds '
            + ', '.join(f'{r:.1f}x' for r in ratios)
            + f'; median {statistics.median(ratios):.1f}x'
        )
    print(f' {what}, medians:')
    for name in names:
        _row(name, _median(results[name]), unit)
    return results


def _critic(observation: tf.Tensor) -> tf.Tensor:
    """A stand-in critic: the mean of the observation (the data have no values)."""
    flat = tf.reshape(observation, [tf.shape(observation)[0], -1])
    return tf.reduce_mean(tf.cast(flat, tf.float32), axis=-1)


def _warm_up(directory: pathlib.Path) -> None:
    """Pays TensorFlow's one-time start (first traced function, first iterator) untimed."""
    for _ in _tfds_dataset(directory).take(1):
        pass
    for _ in episodes_lib.to_episode_tensors(rlds_reverb.load(directory)).take(1):
        pass


def _print_setup(directory: pathlib.Path) -> None:
    """Where the time to the first element goes in ours, stage by stage (one run)."""
    marks = [('start', time.perf_counter())]

    def _mark(label: str) -> None:
        marks.append((label, time.perf_counter()))

    episodes = rlds_reverb.load(directory)
    _mark('load()')
    batches = rlds_reverb.convert_rlds_to_trajectories(episodes, batch_size=_BATCH)
    _mark('convert(batch_size=256) (pipeline built, traced)')
    iterator = iter(batches)
    _mark('iter()')
    next(iterator)
    _mark('first batch')
    signature = tables.signature_for(rlds_reverb.items.TwoStep(), episodes)
    _mark('push: table signature')
    server = reverb.Server([tables.uniform(_TABLE, max_size=_MAX_ITEMS, signature=signature)])
    _mark('push: server started')
    try:
        address = f'localhost:{server.port}'
        first = []
        rlds_reverb.push(
            episodes.take(1), address, _TABLE, progress=lambda *_: first.append(time.perf_counter())
        )
        marks.append(('push: first episode written', first[0]))
        _mark('push: returned (1 episode)')
        data_spec = tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), signature)
        learner = sampling.LearnerDataset(
            address, _TABLE, data_spec=data_spec, batch_size=_BATCH, sequence_length=2
        )
        _mark('LearnerDataset()')
        dataset = learner.as_dataset()
        _mark('LearnerDataset.as_dataset()')
        next(iter(dataset))
        _mark('LearnerDataset: first batch')
    finally:
        server.stop()
    print(' set-up of ours, stage by stage (seconds since the previous stage):')
    for (_, before), (label, at) in zip(marks, marks[1:], strict=False):
        print(f'  {label:<52} {at - before:6.3f} s')


def run_layout(directory: pathlib.Path, name: str, *, rounds: int) -> None:
    steps = _LAYOUTS[name].steps
    print(f'\n== {name}: {directory} ({steps:,} steps)', flush=True)
    _warm_up(directory)
    _print_setup(directory)

    def _load():
        return episodes_lib.to_episode_tensors(rlds_reverb.load(directory))

    _compare(
        'convert',
        {
            'TF-Agents convert(ds).batch(256)': lambda: _consume(
                lambda: tfa_rlds.convert_rlds_to_trajectories(_tfds_dataset(directory)).batch(
                    _BATCH
                ),
                steps,
                _trajectories,
            ),
            'ours convert(tfds ds).batch(256) (drop-in)': lambda: _consume(
                lambda: rlds_reverb.convert_rlds_to_trajectories(_tfds_dataset(directory)).batch(
                    _BATCH
                ),
                steps,
                _trajectories,
            ),
            'ours convert(load(dir)).batch(256)': lambda: _consume(
                lambda: rlds_reverb.convert_rlds_to_trajectories(rlds_reverb.load(directory)).batch(
                    _BATCH
                ),
                steps,
                _trajectories,
            ),
            'ours convert(load(dir), batch_size=256)': lambda: _consume(
                lambda: rlds_reverb.convert_rlds_to_trajectories(
                    rlds_reverb.load(directory), batch_size=_BATCH
                ),
                steps,
                _trajectories,
            ),
        },
        rounds=rounds,
        unit='trajectories',
    )
    print(' ours only (rounds: median of 3)')
    for label, make in (
        ('ours load (whole episodes)', _load),
        (
            'ours adders.n_step(3, 0.99)',
            lambda: episodes_lib.to_episode_tensors(
                rlds_reverb.load(directory).apply(adders.n_step(3, 0.99))
            ),
        ),
        (
            'ours adders.gae(0.99, 0.95, value_fn)',
            lambda: episodes_lib.to_episode_tensors(
                rlds_reverb.load(directory).apply(adders.gae(0.99, 0.95, value_fn=_critic))
            ),
        ),
    ):
        _row(label, _median([_consume(make, steps, _episode_steps) for _ in range(3)]), 'steps')
    started = time.perf_counter()
    report = rlds_reverb.validate(rlds_reverb.load(directory))
    _row('ours validate', Timing(steps, report.steps, time.perf_counter() - started, 0.0), 'steps')
    pushes: dict[str, int] = {}

    def _sample_once(side: str) -> bool:
        # The learner's first batch is timed once per side, after its first push.
        pushes[side] = pushes.get(side, 0) + 1
        return pushes[side] == 1

    _compare(
        'push two-step',
        {
            'TF-Agents push_rlds_to_reverb': lambda: _push_tf_agents(
                directory, steps, sample=_sample_once('anchor')
            ),
            'ours push': lambda: _push_ours(directory, steps, sample=_sample_once('ours')),
        },
        rounds=rounds,
        unit='items',
    )


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
    parser.add_argument('--rounds', type=int, default=3, help='alternated rounds per comparison')
    parser.add_argument('--write-only', action='store_true', help='write the datasets, time none')
    parser.add_argument(
        '--episodes', type=int, default=None, help='a quick check: this many episodes per layout'
    )
    parser.add_argument('--probe-rss', nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe_rss:
        _probe_rss(args.probe_rss[0], int(args.probe_rss[1]))
        return 0
    data_dir = args.data_dir or _make_default_data_dir()
    if args.episodes:
        for name, layout in _LAYOUTS.items():
            _LAYOUTS[name] = layout._replace(steps=args.episodes * layout.episode_length)
        data_dir = data_dir / f'{args.episodes}_episodes'
    directories = {name: write_dataset(data_dir, name) for name in args.layouts}
    if args.write_only:
        return 0
    for name, directory in directories.items():
        run_layout(directory, name, rounds=args.rounds)
    if args.rss:
        measure_rss(write_dataset(data_dir, 'halfcheetah_like'))
    return 0


if __name__ == '__main__':
    tf.get_logger().setLevel('ERROR')
    sys.exit(main())
