"""Robot-scale image data: the limits, the toolkit, TF-Agents, and frames kept encoded.

Writes (once, into `--data-dir`) RLDS datasets in the layout of Open X-Embodiment's
fractal data with TFDS' own writer (`tfds.dataset_builders.store_as_tfds_dataset`, its
defaults: shuffled keys, its own sharding):

* `fractal_like`: `observation = {image: JPEG uint8[256, 320, 3], state: float32[8]}`;
* `two_cameras`: the same plus `wrist_image: JPEG uint8[128, 128, 3]`;

both with `action = {world_vector: float32[3], rotation_delta: float32[3], gripper:
float32[1]}`, a `language_instruction` string per step, reward and discount, episodes of
20 to 80 steps (mean about 40, as fractal's), half of them ending terminal, 20,000 steps
(`--steps`). Frames compress like camera images: a smooth scene (bilinear gradients,
textured surfaces, objects) in which an arm moves from step to step, with sensor noise on
every frame; they are JPEG-encoded at quality 90 (`tf.io.encode_jpeg`) and handed to TFDS
as bytes, about 16.7 KB a frame (4.5 KB for the wrist camera; each run prints the means).

Then, in one process, `--rounds` alternated rounds (the order flips every round), each
side's set-up timed (opening the dataset, building the pipeline; for pushes the Reverb
server is started, untimed, in a child process of its own, so that its RSS growth is the
push's alone):

* limits: JPEG decode alone (frames read into memory first, then `tf.io.decode_jpeg` in a
  parallel map, batches of 256), the raw record read (`tf.data.TFRecordDataset` over the
  shards), the bare Reverb writer loop (a `StructuredWriter`, as our push's engine, writing
  the two-step items of 2,000 in-memory decoded steps, twice), a bare sampler
  (`reverb.TrajectoryDataset(...).batch(64)`, 4 workers, 32 samples in flight each, on
  the table our push filled) and, taking
  turns with the samplers, JPEG decode alone again in batches of 64 steps;
* the toolkit: `convert_rlds_to_trajectories(load(dir)).batch(256)`, `rlds_reverb.push`
  of two-step items with the server's RSS growth per stored step, and sampling (batch 64,
  two-step items, uniform table, in-process server as a learner has it) with
  `LearnerDataset` and TF-Agents' `ReverbReplayBuffer` on the same table: samples/s and
  the CPU cores this process used (CPU time / wall; the in-process server's work included);
* TF-Agents' anchor: `rlds_to_reverb.convert_rlds_to_trajectories(ds).batch(256)` and
  `push_rlds_to_reverb` (its own test's observer: two-step, stride 1);
* frames kept encoded (a prototype on Reverb's writer, not the package): the episodes read
  with TFDS' `SkipDecoding` and pushed with the JPEG bytes as tf.string columns by a
  `StructuredWriter` (every step appended once; 32 rows of chunk room, as our push),
  two-step and three-step items, server RSS per stored step against the JPEG bytes; and
  sampling with the frames decoded after sampling (`tf.io.decode_jpeg` in a parallel map,
  then batches of 64): samples/s and decoded frames/s as a share of the decode limit.

Run: `.venv/bin/python -m benchmarks.images [--data-dir DIR] [--layouts ...] [--rounds N]
[--steps N] [--parts limits convert push sampling] [--anchor-push-steps N] [--quick]`.
TF-Agents' push stores about 0.5 MB a step (every frame twice), so it pushes only the first
`--anchor-push-steps` (5,000). `--quick` (1,500-step datasets, one round, short sampling
slices; about 2.5 minutes on the shared 2-core machine) checks that every measurement runs.
"""

from __future__ import annotations

import argparse
import gc
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
import tree
from reverb import structured_writer as sw
from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds
from tf_agents.specs import tensor_spec

import rlds_reverb
from benchmarks import disk
from benchmarks.image_data import (
    LANGUAGE_INSTRUCTION,
    LAYOUTS,
    MAX_ITEMS,
    ServerProcess,
    write_dataset,
)
from rlds_reverb.core import types
from rlds_reverb.learn import sampling
from rlds_reverb.serve import tables

_TABLE = 'replay'
_BATCH = 256  # Convert's batch.
_SAMPLE_BATCH = 64
_FIRST, _MID, _LAST = 0, 1, 2  # TF-Agents' step types.
_ENCODED_TABLE = 'encoded'
# Rows every column of the prototype's writer keeps, so that Reverb's auto-tuned chunker
# may group small columns into long chunks (as our push): 21.4 KB a stored step instead
# of 25.0 for 16.6 KB of JPEG (fractal_like, two-step items).
_CHUNK_ROOM_ROWS = 32


class Push(NamedTuple):
    """One timed push into a fresh server process."""

    steps: int  # Steps read.
    items: int  # Items in the table afterwards.
    seconds: float  # From opening the dataset to the last item confirmed.
    server_bytes: int  # The server's RSS growth.

    @property
    def rate(self) -> float:
        return self.steps / self.seconds


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


# ------------------------------------------------------------------------------ data access


def _read_steps(directory: pathlib.Path, cameras, *, encoded: bool) -> tf.data.Dataset:
    """Whole-episode steps from TFDS (frames left as JPEG bytes when `encoded`)."""
    decoders = None
    if encoded:
        skip = {name: tfds.decode.SkipDecoding() for name in cameras}
        decoders = {types.STEPS: {types.OBSERVATION: skip}}
    episodes = tfds.builder_from_directory(os.fspath(directory)).as_dataset(
        split='train', decoders=decoders
    )
    return episodes.flat_map(lambda episode: episode[types.STEPS].batch(1 << 20))


def _dataset_facts(directory: pathlib.Path, cameras) -> dict:
    """Steps, episodes, the encoded frames (in memory) and their mean sizes."""
    frames: dict[str, list] = {name: [] for name in cameras}
    lengths = []
    for steps in _read_steps(directory, cameras, encoded=True).as_numpy_iterator():
        lengths.append(len(steps[types.IS_FIRST]))
        for name in cameras:
            frames[name].extend(steps[types.OBSERVATION][name])
    return {
        'episodes': len(lengths),
        'lengths': lengths,  # In the order TFDS reads them (`train[:k]` is a prefix).
        'steps': len(frames[next(iter(cameras))]),
        'frames': {name: np.array(f, dtype=object) for name, f in frames.items()},
        'jpeg_bytes': {name: float(np.mean([len(x) for x in f])) for name, f in frames.items()},
    }


def _step_rows(steps: dict) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The columns of one episode's two-step-trajectory rows, as our push lays them out
    (step type, observation, action, instruction, next step type, reward, discount; the
    frames as the reader gave them). Returns (columns, each column's first row)."""
    first, last = steps[types.IS_FIRST], steps[types.IS_LAST]
    step_type = np.where(first, _FIRST, np.where(last, _LAST, _MID)).astype(np.int32)
    next_step_type = np.roll(step_type, -1)
    next_step_type[-1] = _FIRST
    columns = [
        step_type,
        *tree.flatten(steps[types.OBSERVATION]),
        *tree.flatten(steps[types.ACTION]),
        steps[LANGUAGE_INSTRUCTION],
        next_step_type,
        steps[types.REWARD],
        steps[types.DISCOUNT],
    ]
    return columns, [c[0] for c in columns]


def _last_rows(num_columns: int, rows: int):
    return sw.pattern_from_transform(
        [None] * num_columns, lambda ref: tree.map_structure(lambda x: x[-rows:], ref)
    )


def _window_configs(num_columns: int, length: int, table: str, *, room: int = 0) -> list:
    """StructuredWriter configs: every row from the `length`-th on ends an item of the last
    `length` rows (Reverb's C++ creates the items). With `room`, a config that never
    applies makes every column keep `room` rows, so that Reverb's auto-tuned chunker may
    grow chunks that long (our push does the same with 32 rows)."""
    index = sw.Condition.step_index()
    window = _last_rows(num_columns, length)
    configs = [sw.create_config(window, table, conditions=[index >= length - 1])]
    if room > length:
        never = index == 2**31 - 1
        configs.append(sw.create_config(_last_rows(num_columns, room), table, conditions=[never]))
    return configs


def _write_rows(writer, episodes: list[list[np.ndarray]]) -> int:
    """Appends every row of `episodes` (lists of columns); returns the rows written."""
    rows = 0
    for columns in episodes:
        for row in zip(*columns, strict=True):
            writer.append(list(row))
        writer.end_episode(timeout_ms=600_000)
        rows += len(columns[0])
    return rows


# ------------------------------------------------------------------------------ limits


def measure_decode(frames: dict[str, tf.Tensor]) -> tuple[float, float]:
    """JPEG decode alone of in-memory frames (string tensors), parallel map, batches of 256:
    (steps/s, seconds), timed from building the pipeline to its last batch."""
    started = time.perf_counter()
    data = tf.data.Dataset.from_tensor_slices(frames)
    decoded = data.map(
        lambda step: {k: tf.io.decode_jpeg(v, channels=3) for k, v in step.items()},
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=False,
    ).batch(_BATCH)
    steps = sum(int(tf.nest.flatten(batch)[0].shape[0]) for batch in decoded)
    seconds = time.perf_counter() - started
    return steps / seconds, seconds


def measure_raw_read(directory: pathlib.Path) -> tuple[float, float, float]:
    """TFRecordDataset over the shards: (records/s, bytes/s, seconds)."""
    started = time.perf_counter()
    files = sorted(str(p) for p in directory.glob('*.tfrecord*'))
    records = nbytes = 0
    for batch in tf.data.TFRecordDataset(files).batch(64):
        records += int(batch.shape[0])
        nbytes += int(tf.reduce_sum(tf.strings.length(batch)))
    seconds = time.perf_counter() - started
    return records / seconds, nbytes / seconds, seconds


def measure_bare_writer(episodes: list[list[np.ndarray]], *, passes: int, room: int = 0) -> Push:
    """The bare writer loop: in-memory rows, two-step items by a StructuredWriter (as our
    push's engine), into a server process; timed from the writer's creation. `room`: as
    `_window_configs`."""
    with ServerProcess([(_TABLE, None)]) as server:
        started = time.perf_counter()
        configs = _window_configs(len(episodes[0]), 2, _TABLE, room=room)
        writer = reverb.Client(server.address).structured_writer(configs)
        rows = sum(_write_rows(writer, episodes) for _ in range(passes))
        seconds = time.perf_counter() - started
        del writer
        return Push(rows, server.size(), seconds, server.rss_bytes() - server.rss_start)


# ------------------------------------------------------------------------------ pushes


def push_ours(directory: pathlib.Path, signature, steps: int) -> Push:
    with ServerProcess([(_TABLE, signature)]) as server:
        started = time.perf_counter()
        rlds_reverb.push(rlds_reverb.load(directory), server.address, _TABLE)
        seconds = time.perf_counter() - started
        return Push(steps, server.size(), seconds, server.rss_bytes() - server.rss_start)


def push_tf_agents(directory: pathlib.Path, signature, steps: int, *, episodes: int) -> Push:
    """TF-Agents' push as its own test sets it up (observer: two-step, stride 1), of the
    first `episodes` episodes only: it stores every step twice (its items are two rows of
    two-step trajectories) and uncompressed, about 0.5 MB a step here."""
    with ServerProcess([(_TABLE, signature)]) as server:
        started = time.perf_counter()
        data = tfds.builder_from_directory(os.fspath(directory)).as_dataset(
            split=f'train[:{episodes}]'
        )
        observer = reverb_utils.ReverbAddTrajectoryObserver(
            reverb.Client(server.address), _TABLE, sequence_length=2, stride_length=1
        )
        tfa_rlds.push_rlds_to_reverb(data, observer)
        observer.close()
        seconds = time.perf_counter() - started
        return Push(steps, server.size(), seconds, server.rss_bytes() - server.rss_start)


def push_encoded(
    directory: pathlib.Path, cameras, steps: int, *, length: int = 2, room: int = 0, server=None
) -> Push:
    """The prototype: JPEG bytes read with SkipDecoding and written as tf.string columns
    by a StructuredWriter (items of `length` rows); into a fresh server process unless
    `server` (an in-process `reverb.Server`) is given."""
    owned = ServerProcess([(_TABLE, None)]) if server is None else None
    address = owned.address if owned else f'localhost:{server.port}'
    table = _TABLE if owned else _ENCODED_TABLE
    try:
        started = time.perf_counter()
        episodes = _read_steps(directory, cameras, encoded=True).prefetch(4)
        writer, rows = None, 0
        for steps_np in episodes.as_numpy_iterator():
            columns, _ = _step_rows(steps_np)
            if writer is None:
                configs = _window_configs(len(columns), length, table, room=room)
                writer = reverb.Client(address).structured_writer(configs)
            rows += _write_rows(writer, [columns])
        seconds = time.perf_counter() - started  # Each end_episode waited for its items.
        del writer
        if not owned:
            return Push(rows, 0, seconds, 0)
        return Push(rows, owned.size(), seconds, owned.rss_bytes() - owned.rss_start)
    finally:
        if owned:
            owned.__exit__(None, None, None)


# ------------------------------------------------------------------------------ sampling


class _Sampler:
    """One side's iterator: its set-up timed, then samples, wall and CPU time summed over
    the time slices it runs (the sides take turns, so a change of the machine's load falls
    on every side alike)."""

    def __init__(self, make: Callable[[], tf.data.Dataset], *, warmup_batches: int):
        started = time.perf_counter()
        self._iterator = iter(make())
        next(self._iterator)
        self.setup_s = time.perf_counter() - started
        for _ in range(warmup_batches):
            next(self._iterator)
        self.samples, self.seconds, self.cpu_s = 0, 0.0, 0.0

    def run(self, seconds: float) -> None:
        cpu, started = _cpu_seconds(), time.perf_counter()
        while time.perf_counter() - started < seconds:
            batch = next(self._iterator)
            self.samples += int(tf.nest.flatten(batch)[0].shape[0])
        self.seconds += time.perf_counter() - started
        self.cpu_s += _cpu_seconds() - cpu

    def close(self) -> None:
        """Drops the iterator: its in-flight samples (up to 1 GB for decoded frames) go."""
        self._iterator = None

    @property
    def rate(self) -> float:
        return self.samples / self.seconds

    @property
    def cores(self) -> float:
        return self.cpu_s / self.seconds


def _item_spec(columns_first_rows: list[np.ndarray], length: int):
    dtypes = [
        tf.string if np.asarray(x).dtype == object else tf.as_dtype(np.asarray(x).dtype)
        for x in columns_first_rows
    ]
    shapes = [tf.TensorShape([length, *np.shape(x)]) for x in columns_first_rows]
    return dtypes, shapes


def make_encoded_sampler(
    address: str, table: str, first_rows: list, camera_columns: dict[int, tuple], **options
) -> tf.data.Dataset:
    """Two-step items of JPEG bytes, decoded after sampling: a parallel map, batch 64."""
    dtypes, shapes = _item_spec(first_rows, 2)
    samples = reverb.TrajectoryDataset(
        address,
        table,
        dtypes,
        shapes,
        max_in_flight_samples_per_worker=options.get('max_in_flight', 2 * _SAMPLE_BATCH),
        num_workers_per_iterator=options.get('workers', 4),
    )

    def decode(sample):
        data = list(sample.data)
        for index, shape in camera_columns.items():
            frames = [tf.io.decode_jpeg(data[index][t], channels=3) for t in range(2)]
            data[index] = tf.ensure_shape(tf.stack(frames), [2, *shape])
        return data

    decoded = samples.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    return decoded.batch(_SAMPLE_BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def make_sampling_sides(server: reverb.Server, signature, encoded: dict) -> dict:
    """The sides sampling the same in-process tables: {name: make_dataset}."""
    address = f'localhost:{server.port}'
    data_spec = tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), signature)
    item_spec = tf.nest.map_structure(
        lambda s: tf.TensorSpec([2, *s.shape[1:]], s.dtype), signature
    )

    def bare():
        return reverb.TrajectoryDataset(
            address,
            _TABLE,
            tf.nest.map_structure(lambda s: s.dtype, item_spec),
            tf.nest.map_structure(lambda s: s.shape, item_spec),
            max_in_flight_samples_per_worker=32,
            num_workers_per_iterator=4,
        ).batch(_SAMPLE_BATCH, drop_remainder=True)

    def ours(**options):
        learner = sampling.LearnerDataset(
            address,
            _TABLE,
            data_spec=data_spec,
            batch_size=_SAMPLE_BATCH,
            sequence_length=2,
            **options,
        )
        return learner.as_dataset()

    def tf_agents():
        buffer = reverb_replay_buffer.ReverbReplayBuffer(
            data_spec, _TABLE, sequence_length=2, local_server=server
        )
        return buffer.as_dataset(sample_batch_size=_SAMPLE_BATCH, num_steps=2)

    def encoded_decode():
        return make_encoded_sampler(
            address, _ENCODED_TABLE, encoded['first_rows'], encoded['camera_columns']
        )

    def decode_only():
        frames = tf.data.Dataset.from_tensor_slices(encoded['frames']).repeat()
        decoded = frames.map(
            lambda step: {k: tf.io.decode_jpeg(v, channels=3) for k, v in step.items()},
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=False,
        )
        return decoded.batch(_SAMPLE_BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    return {
        _DECODE_SIDE: decode_only,
        _BARE_SAMPLER: bare,
        _TFA_SAMPLER: tf_agents,
        'ours LearnerDataset': ours,
        'ours, 1 iterator, 32 in flight per worker': lambda: ours(
            iterators_per_stream=1, max_in_flight_samples_per_worker=32
        ),
        _ENCODED_SAMPLER: encoded_decode,
    }


_DECODE_SIDE = 'limit: JPEG decode alone, batch 64 (steps)'
_BARE_SAMPLER = 'limit: bare TrajectoryDataset.batch(64)'
_TFA_SAMPLER = 'TF-Agents ReverbReplayBuffer.as_dataset'
_ENCODED_SAMPLER = 'encoded + decode after sampling'


def measure_sampling(
    sides: dict, *, rounds: int, slices: int, slice_s: float, warmup_batches: int
) -> dict[str, list[_Sampler]]:
    """Every round builds each side anew (set-up timed); the sides take turns in slices."""
    results: dict[str, list[_Sampler]] = {name: [] for name in sides}
    for index in range(rounds):
        names = list(sides) if index % 2 == 0 else list(sides)[::-1]
        timed = {}
        for name in names:
            timed[name] = _Sampler(sides[name], warmup_batches=warmup_batches)
        for _ in range(slices):
            for name in names:
                timed[name].run(slice_s)
        for name in names:
            t = timed[name]
            print(
                f'  round {index + 1}: {name:<42} {t.rate:>8,.0f} samples/s, '
                f'{t.cores:.2f} cores, set-up {t.setup_s:.2f} s',
                flush=True,
            )
            t.close()
            results[name].append(t)
        del timed
        gc.collect()
    return results


# ------------------------------------------------------------------------------ one layout


def _alternate(runs: dict[str, Callable[[], object]], *, rounds: int, show) -> dict:
    """Runs each entry `rounds` times, the order reversed every other round."""
    results: dict[str, list] = {name: [] for name in runs}
    for index in range(rounds):
        for name in runs if index % 2 == 0 else list(runs)[::-1]:
            results[name].append(runs[name]())
            print(f'  round {index + 1}: {name:<42} {show(results[name][-1])}', flush=True)
    return results


def _show_push(push: Push) -> str:
    return (
        f'{push.rate:>8,.0f} steps/s ({push.steps:,} steps, {push.items:,} items in '
        f'{push.seconds:.2f} s), server +{push.server_bytes / push.steps / 1024:,.1f} KB/step'
    )


def _median(values) -> float:
    return float(statistics.median(values))


def _in_memory_episodes(
    directory: pathlib.Path, cameras, *, steps: int, encoded: bool = False
) -> list:
    """The first episodes' two-step rows (columns), `steps` steps or more; the frames
    decoded, or as JPEG bytes when `encoded`."""
    episodes, total = [], 0
    for steps_np in _read_steps(directory, cameras, encoded=encoded).as_numpy_iterator():
        episodes.append(_step_rows(steps_np)[0])
        total += len(episodes[-1][0])
        if total >= steps:
            break
    return episodes


class _Layout(NamedTuple):
    """What every part of one layout's run needs."""

    name: str
    directory: pathlib.Path
    cameras: dict
    facts: dict
    signature: object  # Our push's table signature (two-step items).


def run_limits(layout: _Layout, args, figures: dict) -> None:
    """JPEG decode, the raw record read and the bare writer loop."""
    facts, directory = layout.facts, layout.directory
    print(' limits')
    in_memory = {k: tf.constant(list(v)) for k, v in facts['frames'].items()}
    runs = _alternate(
        {
            'JPEG decode (in memory, parallel map)': lambda: measure_decode(in_memory),
            'raw record read (TFRecordDataset)': lambda: measure_raw_read(directory),
        },
        rounds=args.rounds,
        show=lambda r: f'{r[0]:>10,.0f} per s'
        + (f', {r[1] / 1e6:,.0f} MB/s' if len(r) == 3 else ''),
    )
    decode = runs['JPEG decode (in memory, parallel map)']
    figures['decode_steps_s'] = _median(r[0] for r in decode)
    raw = runs['raw record read (TFRecordDataset)']
    figures['raw_records_s'] = _median(r[0] for r in raw)
    figures['raw_mb_s'] = _median(r[1] for r in raw) / 1e6
    figures['raw_steps_s'] = figures['raw_records_s'] * facts['steps'] / facts['episodes']
    memory = _in_memory_episodes(directory, layout.cameras, steps=min(2_000, facts['steps']))
    bare = _alternate(
        {'bare StructuredWriter loop (decoded)': lambda: measure_bare_writer(memory, passes=2)},
        rounds=args.rounds,
        show=_show_push,
    )['bare StructuredWriter loop (decoded)']
    memory.clear()  # About 0.5 GB of decoded frames.
    figures['bare_writer_steps_s'] = _median(p.rate for p in bare)
    figures['bare_writer_kb'] = _median(p.server_bytes / p.steps for p in bare) / 1024


def run_convert(layout: _Layout, args, figures: dict) -> None:
    """TF-Agents' convert and ours, `.batch(256)`, from opening the dataset."""
    directory, steps = layout.directory, layout.facts['steps']

    def tf_agents():
        data = disk._tfds_dataset(directory)
        return tfa_rlds.convert_rlds_to_trajectories(data).batch(_BATCH)

    def ours():
        return rlds_reverb.convert_rlds_to_trajectories(rlds_reverb.load(directory)).batch(_BATCH)

    print(' convert, batch 256 (set-up included)')
    converts = _alternate(
        {
            'TF-Agents convert(ds).batch(256)': lambda: disk._consume(
                tf_agents, steps, disk._trajectories
            ),
            'ours convert(load(dir)).batch(256)': lambda: disk._consume(
                ours, steps, disk._trajectories
            ),
        },
        rounds=args.rounds,
        show=lambda t: f'{t.rate:>8,.0f} steps/s ({t.count:,} trajectories in {t.seconds:.2f} s)',
    )
    figures['convert'] = {k: _median(t.rate for t in v) for k, v in converts.items()}


def run_push(layout: _Layout, args, figures: dict) -> None:
    """TF-Agents' push (a prefix), ours, and the encoded prototype (2-step, then 3-step)."""
    directory, cameras, facts = layout.directory, layout.cameras, layout.facts
    steps = facts['steps']
    tfa_spec = tfa_rlds.create_trajectory_data_spec(disk._tfds_dataset(directory))
    tfa_signature = tensor_spec.add_outer_dim(tfa_spec)
    cumulative = np.cumsum(facts['lengths'])
    anchor_episodes = int(np.searchsorted(cumulative, args.anchor_push_steps)) + 1
    anchor_episodes = min(anchor_episodes, facts['episodes'])
    anchor_steps = int(cumulative[anchor_episodes - 1])
    print(
        ' push, two-step items (a fresh server process each; the dataset opened in the timing;'
        f' TF-Agents: the first {anchor_steps:,} steps)'
    )
    pushes = _alternate(
        {
            'TF-Agents push_rlds_to_reverb': lambda: push_tf_agents(
                directory, tfa_signature, anchor_steps, episodes=anchor_episodes
            ),
            'ours push': lambda: push_ours(directory, layout.signature, steps),
            'encoded prototype push (2-step)': lambda: push_encoded(
                directory, cameras, steps, room=_CHUNK_ROOM_ROWS
            ),
        },
        rounds=args.rounds,
        show=_show_push,
    )
    label = 'encoded prototype push (3-step)'
    pushes[label] = [push_encoded(directory, cameras, steps, length=3, room=_CHUNK_ROOM_ROWS)]
    print(f'  3-step items (chunks shared?): {label:<33} {_show_push(pushes[label][0])}')
    figures['push'] = {
        k: (_median(p.rate for p in v), _median(p.server_bytes / p.steps for p in v) / 1024)
        for k, v in pushes.items()
    }


def run_sampling(layout: _Layout, args, figures: dict) -> None:
    """Every sampler on the same in-process tables (ours pushed, and the encoded copy)."""
    directory, cameras = layout.directory, layout.cameras
    print(' sampling, batch 64 of two-step items, uniform table, in-process server')
    server = reverb.Server(
        [
            tables.uniform(_TABLE, max_size=MAX_ITEMS, signature=layout.signature),
            tables.uniform(_ENCODED_TABLE, max_size=MAX_ITEMS),
        ]
    )
    try:
        rlds_reverb.push(rlds_reverb.load(directory), f'localhost:{server.port}', _TABLE)
        push_encoded(directory, cameras, 0, room=_CHUNK_ROOM_ROWS, server=server)
        first = next(_read_steps(directory, cameras, encoded=True).as_numpy_iterator())
        _, first_rows = _step_rows(first)
        observation_keys = sorted(first[types.OBSERVATION])
        encoded = {
            'first_rows': first_rows,
            'camera_columns': {1 + observation_keys.index(c): s for c, s in cameras.items()},
            'frames': {k: tf.constant(list(v)) for k, v in layout.facts['frames'].items()},
        }
        sampled = measure_sampling(
            make_sampling_sides(server, layout.signature, encoded),
            rounds=args.rounds,
            slices=2 if args.quick else 4,
            slice_s=0.5 if args.quick else 3.0,
            warmup_batches=3 if args.quick else 20,
        )
    finally:
        server.stop()
    figures['sampling'] = {
        k: (_median(t.rate for t in v), _median(t.cores for t in v)) for k, v in sampled.items()
    }


_PARTS = {'limits': run_limits, 'convert': run_convert, 'push': run_push, 'sampling': run_sampling}


def run_layout(directory: pathlib.Path, name: str, args) -> dict:
    """The parts asked for of one layout; returns the figures of the summary."""
    cameras = LAYOUTS[name].cameras
    facts = _dataset_facts(directory, cameras)
    sizes = ', '.join(f'{k} {v / 1024:.1f} KB' for k, v in facts['jpeg_bytes'].items())
    print(
        f'\n== {name}: {directory}\n {facts["steps"]:,} steps in {facts["episodes"]} episodes;'
        f' JPEG mean {sizes}; load average {os.getloadavg()}'
    )
    signature = tables.signature_for(rlds_reverb.items.TwoStep(), rlds_reverb.load(directory))
    disk._warm_up(directory)
    layout = _Layout(name, directory, cameras, facts, signature)
    figures: dict = {
        'jpeg_per_step': sum(facts['jpeg_bytes'].values()),
        'frames_per_step': len(cameras),
    }
    for part in args.parts:
        _PARTS[part](layout, args, figures)
    return figures


def print_summary(name: str, f: dict, rounds: int) -> None:
    """The figures of one layout and each as a share of its limit (medians of the rounds)."""
    frames = f['frames_per_step']
    jpeg_kb = f['jpeg_per_step'] / 1024
    print(f'\n summary of {name} (medians of {rounds} round(s)); JPEG {jpeg_kb:.1f} KB/step')

    def row(label: str, value: str, share: str = '') -> None:
        print(f'  {label:<44} {value:<50} {share}')

    if 'decode_steps_s' in f:
        decode_frames = f['decode_steps_s'] * frames
        row(
            'limit: JPEG decode',
            f'{f["decode_steps_s"]:,.0f} steps/s = {decode_frames:,.0f} frames/s',
        )
        row(
            'limit: raw record read',
            f'{f["raw_records_s"]:,.0f} records/s, {f["raw_mb_s"]:,.0f} MB/s',
            f'= {f["raw_steps_s"]:,.0f} steps/s',
        )
        row(
            'limit: bare writer loop (decoded rows)',
            f'{f["bare_writer_steps_s"]:,.0f} steps/s',
            f'server {f["bare_writer_kb"]:,.1f} KB/step',
        )
    if 'convert' in f:
        anchor = f['convert']['TF-Agents convert(ds).batch(256)']
        for label, rate in f['convert'].items():
            share = f'{rate / anchor:.2f}x TF-Agents'
            if 'decode_steps_s' in f:
                share = f'{rate / f["decode_steps_s"]:.0%} of decode; ' + share
            row(label, f'{rate:,.0f} steps/s', share)
    if 'push' in f:
        ours = f['push']['ours push'][0]
        for label, (rate, kb) in f['push'].items():
            share = f'{rate / ours:.1f}x ours; {rate / _ISSUE_PUSH_STEPS_S:.1f}x 784'
            if 'bare_writer_steps_s' in f and 'encoded' not in label:
                share = f'{rate / f["bare_writer_steps_s"]:.0%} of bare writer; ' + share
            row(
                label,
                f'{rate:,.0f} steps/s; server {kb:,.1f} KB/step = {kb / jpeg_kb:.2f}x JPEG',
                share,
            )
    if 'sampling' in f:
        _print_sampling(f['sampling'], frames, row)


# The issue's push of decoded frames (steps/s), the unit of the encoded path's target.
_ISSUE_PUSH_STEPS_S = 784


def _print_sampling(sampling: dict, frames: int, row: Callable) -> None:
    bare = sampling[_BARE_SAMPLER][0]
    anchor = sampling[_TFA_SAMPLER][0]
    decode = sampling[_DECODE_SIDE][0] * frames  # Frames/s, measured in the same turns.
    for label, (rate, cores) in sampling.items():
        value = f'{rate:,.0f} samples/s, {cores:.2f} cores'
        share = f'{rate / bare:.0%} of bare; {rate / anchor:.2f}x TF-Agents'
        if label == _DECODE_SIDE:
            value = f'{rate * frames:,.0f} frames/s, {cores:.2f} cores'
            share = ''
        elif label == _ENCODED_SAMPLER:
            decoded = rate * 2 * frames
            value += f' = {decoded:,.0f} frames/s'
            share = f'{decoded / decode:.0%} of decode; {rate / anchor:.2f}x TF-Agents'
        row(label, value, share)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--data-dir', type=pathlib.Path, default=None)
    parser.add_argument('--layouts', nargs='+', choices=sorted(LAYOUTS), default=list(LAYOUTS))
    parser.add_argument('--rounds', type=int, default=3, help='alternated rounds')
    parser.add_argument('--steps', type=int, default=20_000, help='steps per dataset')
    parser.add_argument('--parts', nargs='+', choices=list(_PARTS), default=list(_PARTS))
    parser.add_argument(
        '--anchor-push-steps', type=int, default=5_000, help="steps of TF-Agents' push"
    )
    parser.add_argument('--quick', action='store_true', help='a smoke run of about two minutes')
    parser.add_argument('--write-only', action='store_true', help='write the datasets only')
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.rounds = 1_500, 1
    data_dir = args.data_dir or disk._make_default_data_dir()  # noqa: SLF001
    data_dir = data_dir / f'images_{args.steps}_steps'
    directories = {
        name: write_dataset(data_dir, name, LAYOUTS[name]._replace(steps=args.steps))
        for name in args.layouts
    }
    if args.write_only:
        return 0
    print(f'load average at the start: {os.getloadavg()}')
    figures = {name: run_layout(directory, name, args) for name, directory in directories.items()}
    for name, values in figures.items():
        print_summary(name, values, args.rounds)
    print(f'load average at the end: {os.getloadavg()}')
    return 0


if __name__ == '__main__':
    tf.get_logger().setLevel('ERROR')
    sys.exit(main())
