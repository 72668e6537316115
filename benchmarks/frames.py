"""Frames kept encoded (issue 31): server memory per stored step, convert against the decode
limit, and how to decode a batch of frames in a `tf.data` map.

On the image layouts of `benchmarks/image_data.py` (fractal-like, one 256x320 JPEG camera;
two cameras, plus a 128x128 wrist camera), written by TFDS' own writer:

* `memory`: `rlds_reverb.push(load(dir, encoded_frames='all'), ...)` of two-step and
  three-step items into a Reverb server in a process of its own; its resident memory
  growth divided by the steps stored, against the encoded bytes of a step's frames (the
  issue's target: at most 1.3 times). The server is started (untimed) and its baseline
  read before the push.
* `convert`: alternated rounds, in this process, of the decode limit (a step's frames, read
  into memory first, decoded alone with TFDS' op in a parallel map, batches of 256) and
  `convert_rlds_to_trajectories(load(dir, encoded_frames='all'), batch_size=256)` (frames
  decoded in convert, the default), each from building its pipeline to its last batch;
  also the convert of `load(dir)` (TFDS decodes in the reader), of the bytes
  (`decode_frames=()`, the frames never decoded), TF-Agents' own converter
  (`rlds_to_reverb.convert_rlds_to_trajectories(ds).batch(256)` on TFDS' `as_dataset`) and
  the raw record read (`tf.data.TFRecordDataset` over the shards, records counted as
  episodes). Steps/s, and each side's share of the limit, round by round.
* `push`: alternated rounds, each into a fresh server process (started untimed), timed
  from opening the dataset to the last item confirmed: `rlds_reverb.push(load(dir,
  encoded_frames='all'))` of two-step items (frames never decoded); the limit, the bare
  Reverb writer loop (a `StructuredWriter` as our push's engine) writing the same two-step
  items of the encoded rows held in memory; today's push of decoded frames
  (`push(load(dir))`); and TF-Agents' `push_rlds_to_reverb` (its own test's observer,
  the first `--anchor-push-steps` steps: it stores every frame twice, decoded). Steps/s,
  the server's growth per stored step, and the load average beside every round.
* `sampling`: two-step items of the encoded frames in one uniform table of an in-process
  Reverb server (as a learner beside its server, no gRPC), batches of 64, decoded frames
  delivered. Alternated rounds (the order flips each round), each side timed from building
  its pipeline to its last batch (set-up counted) and from its 10th batch on (steady), in
  this process: `LearnerDataset` (frames
  decoded after sampling, its defaults), TF-Agents' `ReverbReplayBuffer.as_dataset` on the
  same table followed by the same decode (`core.frames.decode_fields`) in a parallel map,
  and the decode limit (the same frames decoded alone from memory, a parallel map). Samples/s,
  decoded frames/s, CPU per sample, and the shares (ours / TF-Agents, ours / the limit).
* `methods`: decoding `[256]` frames inside one `tf.data` map: `core.frames.decode_frames`
  (a parallel map nested in the graph), `tf.map_fn`, and a parallel map over single frames
  (`unbatch`, decode, `batch`), frames/s.

Every part prints the machine's load average before and after (2 shared cores: other
work moves the figures). Run: `.venv/bin/python -m benchmarks.frames [--data-dir DIR]
[--layouts ...] [--steps N] [--rounds N] [--parts memory convert push sampling methods]
[--anchor-push-steps N] [--sampling-batches N]`. With `--data-dir D` the datasets are written once into
`D/<layout>_<steps>/` and reused by later runs.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import tempfile
import time

import numpy as np
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
from tf_agents.replay_buffers import reverb_replay_buffer
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds
from tf_agents.specs import tensor_spec

import rlds_reverb
from benchmarks import disk, image_data, images
from rlds_reverb import items, tables
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import frames as frames_lib
from rlds_reverb.core import types
from rlds_reverb.transform import plans as plans_lib

_BATCH = 256
_ITEMS = {'two-step': items.TwoStep(), 'n-step (3)': items.NStep(3, 0.99)}


def _load_average() -> str:
    return '/'.join(f'{x:.1f}' for x in os.getloadavg())


def _camera_paths(layout: image_data.Layout) -> list[str]:
    return [f'{types.OBSERVATION}/{name}' for name in layout.cameras]


def _read_frames(directory: pathlib.Path, layout: image_data.Layout) -> dict[str, np.ndarray]:
    """Every step's encoded frames, by camera (object arrays of bytes), in memory."""
    episodes = rlds_reverb.load(directory, encoded_frames='all')
    found: dict[str, list] = {name: [] for name in layout.cameras}
    whole = episodes_lib.to_whole_episodes(episodes)
    for episode in whole.as_numpy_iterator():
        for name in layout.cameras:
            found[name].extend(episode[types.STEPS][types.OBSERVATION][name])
    return {name: np.array(values, dtype=object) for name, values in found.items()}


# --- memory ----------------------------------------------------------------------------------


def measure_memory(directory, layout, frame_bytes: float, steps: int) -> None:
    episodes = rlds_reverb.load(directory, encoded_frames='all')
    for name, item in _ITEMS.items():
        signature = tables.signature_for(item, episodes)
        with image_data.ServerProcess([('replay', signature)]) as server:
            started = time.perf_counter()
            stats = rlds_reverb.push(episodes, server.address, 'replay', item=item)
            seconds = time.perf_counter() - started
            growth = server.rss_bytes() - server.rss_start
        per_step = growth / steps
        print(
            f'  {name}: {stats.items["replay"]:,} items in {seconds:.1f} s '
            f'({steps / seconds:,.0f} steps/s); server +{growth / 2**20:,.1f} MiB = '
            f'{per_step / 1e3:.1f} KB per stored step, {per_step / frame_bytes:.2f}x the '
            f'{frame_bytes / 1e3:.1f} KB of encoded frames per step (load {_load_average()})',
            flush=True,
        )


# --- convert ---------------------------------------------------------------------------------


def _count(dataset: tf.data.Dataset) -> tuple[int, float]:
    """(steps, seconds) from building the pipeline (`dataset` is a thunk) to its end."""
    started = time.perf_counter()
    steps = 0
    for batch in dataset():
        steps += int(tf.nest.flatten(batch)[0].shape[0])
    return steps, time.perf_counter() - started


def _decode_limit(frames: dict[str, np.ndarray], layout) -> tf.data.Dataset:
    formats = {
        name: frames_lib.FrameFormat('jpeg', shape) for name, shape in layout.cameras.items()
    }
    tensors = {name: tf.constant(values) for name, values in frames.items()}  # Untimed.

    def _make():
        def _decode(step):
            return {
                name: tf.ensure_shape(
                    tf.image.decode_image(step[name], channels=3, dtype=tf.uint8),
                    formats[name].shape,
                )
                for name in step
            }

        data = tf.data.Dataset.from_tensor_slices(tensors)
        return data.map(_decode, num_parallel_calls=tf.data.AUTOTUNE).batch(_BATCH)

    return _make


def _cpu_seconds() -> float:
    """This process's CPU time (every thread: tf.data's and Reverb's work included)."""
    times = os.times()
    return times.user + times.system


def _tf_agents_convert(directory) -> tf.data.Dataset:
    data = tfds.builder_from_directory(os.fspath(directory)).as_dataset(split='train')
    return tfa_rlds.convert_rlds_to_trajectories(data).batch(_BATCH)


def _raw_read(directory, steps: int) -> tuple[int, float]:
    """(steps, seconds) of reading every record (an episode each) of the shards."""
    _, _, seconds = images.measure_raw_read(directory)
    return steps, seconds


_LIMIT = 'limit: decode alone (in memory)'
_CONVERT = 'convert, encoded, frames decoded'


def measure_convert(directory, layout, frames: dict[str, np.ndarray], rounds: int) -> None:
    steps = len(next(iter(frames.values())))
    sides = {
        _LIMIT: _decode_limit(frames, layout),
        _CONVERT: lambda: rlds_reverb.convert_rlds_to_trajectories(
            rlds_reverb.load(directory, encoded_frames='all'), batch_size=_BATCH
        ),
        'convert of load(dir) (TFDS decodes)': lambda: rlds_reverb.convert_rlds_to_trajectories(
            rlds_reverb.load(directory), batch_size=_BATCH
        ),
        'convert, encoded, bytes (no decode)': lambda: rlds_reverb.convert_rlds_to_trajectories(
            rlds_reverb.load(directory, encoded_frames='all'), batch_size=_BATCH, decode_frames=()
        ),
        "TF-Agents' convert(ds).batch(256)": lambda: _tf_agents_convert(directory),
    }
    runs = {name: (lambda make=make: _count(make)) for name, make in sides.items()}
    runs['raw record read (TFRecordDataset)'] = lambda: _raw_read(directory, steps)
    rates: dict[str, list[float]] = {name: [] for name in runs}
    cpu_us: dict[str, list[float]] = {name: [] for name in runs}  # CPU time per step.
    for index in range(rounds):
        order = list(runs) if index % 2 == 0 else list(reversed(runs))
        print(f'  round {index + 1} (load {_load_average()})', flush=True)
        for name in order:
            cpu_start = _cpu_seconds()
            count, seconds = runs[name]()
            cpu_us[name].append((_cpu_seconds() - cpu_start) / count * 1e6)
            rates[name].append(count / seconds)
            print(
                f'    {name}: {count / seconds:,.0f} steps/s ({count:,} in {seconds:.1f} s; '
                f'{cpu_us[name][-1]:,.0f} µs CPU a step; load {_load_average()})',
                flush=True,
            )
    limit_cpu = statistics.median(cpu_us[_LIMIT])
    for name, values in cpu_us.items():
        median = statistics.median(values)
        print(
            f'  {name}: median {median:,.0f} µs of CPU a step '
            f'({", ".join(f"{v:,.0f}" for v in values)}); the limit\'s CPU a step is '
            f'{limit_cpu / median:.0%} of it'
        )
    limit = statistics.median(rates[_LIMIT])
    anchor = statistics.median(rates["TF-Agents' convert(ds).batch(256)"])
    for name, values in rates.items():
        median = statistics.median(values)
        shares = ', '.join(f'{v:,.0f}' for v in values)
        per_round = ', '.join(f'{v / w:.0%}' for v, w in zip(values, rates[_LIMIT], strict=True))
        print(
            f'  {name}: median {median:,.0f} steps/s ({shares}); {median / limit:.0%} of the '
            f'limit (round by round {per_round}); {median / anchor:.2f}x TF-Agents'
        )


# --- push ------------------------------------------------------------------------------------


def _push_encoded(directory, signature, steps: int) -> images.Push:
    with image_data.ServerProcess([('replay', signature)]) as server:
        started = time.perf_counter()
        episodes = rlds_reverb.load(directory, encoded_frames='all')
        rlds_reverb.push(episodes, server.address, 'replay', item=items.TwoStep())
        seconds = time.perf_counter() - started
        grown = server.rss_bytes() - server.rss_start
        return images.Push(steps, server.size(), seconds, grown)


def _read_plans(directory, steps: int) -> images.Push:
    """The read side of the encoded push alone: its episode plans (rows and items, from
    `load(dir, encoded_frames='all')`) iterated to the end, nothing written."""
    started = time.perf_counter()
    episodes = rlds_reverb.load(directory, encoded_frames='all')
    for _ in plans_lib.make_episode_plans(episodes, items.TwoStep()):
        pass
    return images.Push(steps, 0, time.perf_counter() - started, 0)


def _encoded_rows(directory, layout, steps: int) -> list:
    """Every episode's two-step rows with the frames as JPEG bytes, in memory."""
    return images._in_memory_episodes(directory, layout.cameras, steps=steps, encoded=True)


def measure_push(directory, layout, steps: int, *, rounds: int, anchor_steps: int) -> None:
    encoded_signature = tables.signature_for(
        items.TwoStep(), rlds_reverb.load(directory, encoded_frames='all')
    )
    decoded_signature = tables.signature_for(items.TwoStep(), rlds_reverb.load(directory))
    tfa_signature = tensor_spec.add_outer_dim(
        tfa_rlds.create_trajectory_data_spec(disk._tfds_dataset(directory))
    )
    lengths = [
        int(e[types.STEPS][types.IS_FIRST].shape[0])
        for e in episodes_lib.to_whole_episodes(rlds_reverb.load(directory, encoded_frames='all'))
    ]
    cumulative = np.cumsum(lengths)
    anchor_episodes = min(int(np.searchsorted(cumulative, anchor_steps)) + 1, len(lengths))
    anchor_steps = int(cumulative[anchor_episodes - 1])
    rows = _encoded_rows(directory, layout, steps)  # Untimed: the limit's input.
    runs = {
        'limit: bare writer loop, encoded rows in memory': lambda: images.measure_bare_writer(
            rows, passes=1, room=images._CHUNK_ROOM_ROWS
        ),
        "read side alone: the encoded push's plans, no writer": lambda: _read_plans(
            directory, steps
        ),
        "ours push(load(dir, encoded_frames='all'))": lambda: _push_encoded(
            directory, encoded_signature, steps
        ),
        'ours push(load(dir)), frames decoded': lambda: images.push_ours(
            directory, decoded_signature, steps
        ),
        f"TF-Agents' push_rlds_to_reverb (first {anchor_steps:,} steps)": lambda: (
            images.push_tf_agents(directory, tfa_signature, anchor_steps, episodes=anchor_episodes)
        ),
    }
    pushes: dict[str, list] = {name: [] for name in runs}
    for index in range(rounds):
        order = list(runs) if index % 2 == 0 else list(reversed(runs))
        for name in order:
            pushes[name].append(runs[name]())
            print(
                f'  round {index + 1}: {name}: {images._show_push(pushes[name][-1])} '
                f'(load {_load_average()})',
                flush=True,
            )
    rows.clear()
    limit = pushes['limit: bare writer loop, encoded rows in memory']
    for name, values in pushes.items():
        rates = [p.rate for p in values]
        per_round = ', '.join(f'{r / w.rate:.0%}' for r, w in zip(rates, limit, strict=True))
        print(
            f'  {name}: median {statistics.median(rates):,.0f} steps/s '
            f'({", ".join(f"{r:,.0f}" for r in rates)}); of the bare writer {per_round}; '
            f'{statistics.median(rates) / images._ISSUE_PUSH_STEPS_S:.1f}x 784; server '
            f'{statistics.median(p.server_bytes / p.steps for p in values) / 1e3:,.1f} KB/step'
        )


# --- sampling --------------------------------------------------------------------------------

_SAMPLE_BATCH = 64
_LIMIT = 'limit: decode alone (in memory)'
_OURS = 'ours: LearnerDataset, frames decoded'
_TF_AGENTS = 'TF-Agents ReverbReplayBuffer.as_dataset + decode'


def _per_step(signature):
    return tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), signature)


def _sampling_sides(server: reverb.Server, signature, frames: dict[str, np.ndarray], layout):
    """{side: (make_dataset, frames per element's sample)} over the same table."""
    address = f'localhost:{server.port}'
    formats = frames_lib.find_spec_formats(signature)
    encoded_spec = _per_step(signature)
    decoded_spec = _per_step(frames_lib.decode_spec(signature, formats))
    cameras = len(layout.cameras)

    def ours():
        learner = rlds_reverb.LearnerDataset(
            address, 'replay', data_spec=decoded_spec, batch_size=_SAMPLE_BATCH
        )
        return learner.as_dataset()

    def tf_agents():
        buffer = reverb_replay_buffer.ReverbReplayBuffer(
            encoded_spec, 'replay', sequence_length=2, local_server=server
        )
        samples = buffer.as_dataset(sample_batch_size=_SAMPLE_BATCH, num_steps=2)
        return samples.map(
            lambda data, info: (frames_lib.decode_fields(data, formats), info),
            num_parallel_calls=tf.data.AUTOTUNE,
        ).prefetch(tf.data.AUTOTUNE)

    tensors = {name: tf.constant(values) for name, values in frames.items()}  # Untimed.

    def limit():
        def _decode(step):
            return {
                name: tf.ensure_shape(
                    tf.image.decode_image(step[name], channels=3, dtype=tf.uint8), shape
                )
                for name, shape in layout.cameras.items()
            }

        steps = tf.data.Dataset.from_tensor_slices(tensors).repeat()
        decoded = steps.map(_decode, num_parallel_calls=tf.data.AUTOTUNE)
        return decoded.batch(2 * _SAMPLE_BATCH).prefetch(tf.data.AUTOTUNE)  # 2 frames a sample.

    return {_LIMIT: limit, _OURS: ours, _TF_AGENTS: tf_agents}, 2 * cameras


_WARMUP_BATCHES = 10
_WHOLE, _STEADY = 'set-up counted', f'steady (after {_WARMUP_BATCHES} batches)'


def _time_batches(make, batches: int) -> dict[str, tuple[float, float, int]]:
    """{window: (seconds, CPU seconds of this process, samples)}: from building the pipeline
    to `batches`, and from its `_WARMUP_BATCHES`-th batch to the end."""
    started, cpu = time.perf_counter(), time.process_time()
    for index, _ in enumerate(make().take(batches)):
        if index + 1 == _WARMUP_BATCHES:
            warm, warm_cpu = time.perf_counter(), time.process_time()
    ended, ended_cpu = time.perf_counter(), time.process_time()
    return {
        _WHOLE: (ended - started, ended_cpu - cpu, batches * _SAMPLE_BATCH),
        _STEADY: (ended - warm, ended_cpu - warm_cpu, (batches - _WARMUP_BATCHES) * _SAMPLE_BATCH),
    }


def measure_sampling(directory, layout, frames, rounds: int, batches: int) -> None:
    episodes = rlds_reverb.load(directory, encoded_frames='all')
    signature = tables.signature_for(items.TwoStep(), episodes)
    server = reverb.Server(
        [tables.uniform('replay', max_size=image_data.MAX_ITEMS, signature=signature)], port=None
    )
    try:
        address = f'localhost:{server.port}'
        started = time.perf_counter()
        pushed = rlds_reverb.push(episodes, address, 'replay', item=items.TwoStep())
        print(
            f'  table: {pushed.items["replay"]:,} two-step items of encoded frames, pushed in '
            f'{time.perf_counter() - started:.1f} s',
            flush=True,
        )
        sides, per_sample = _sampling_sides(server, signature, frames, layout)
        found: dict = {w: {n: ([], []) for n in sides} for w in (_WHOLE, _STEADY)}
        for index in range(rounds):
            order = list(sides) if index % 2 == 0 else list(reversed(sides))
            print(f'  round {index + 1} (load {_load_average()})', flush=True)
            for name in order:
                for window, (seconds, cpu_seconds, samples) in _time_batches(
                    sides[name], max(batches, _WARMUP_BATCHES + 1)
                ).items():
                    found[window][name][0].append(samples / seconds)
                    found[window][name][1].append(cpu_seconds / samples * 1e6)
                    print(
                        f'    {name}, {window}: {samples / seconds:,.0f} samples/s = '
                        f'{samples * per_sample / seconds:,.0f} frames/s '
                        f'({seconds:.1f} s, {cpu_seconds / samples * 1e6:,.0f} µs CPU a sample)',
                        flush=True,
                    )
    finally:
        server.stop()
    for window, by_side in found.items():
        print(f'  {window}:')
        _show_sampling(
            {n: r for n, (r, _) in by_side.items()},
            {n: c for n, (_, c) in by_side.items()},
            per_sample,
        )


def _show_sampling(rates: dict, cpu: dict, frames_per_sample: int) -> None:
    for name, values in rates.items():
        median = statistics.median(values)
        print(
            f'    {name}: median {median:,.0f} samples/s = {median * frames_per_sample:,.0f} '
            f'decoded frames/s ({", ".join(f"{v:,.0f}" for v in values)}); '
            f'{statistics.median(cpu[name]):,.0f} µs CPU a sample'
        )
    for other in (_TF_AGENTS, _LIMIT):
        shares = [o / t for o, t in zip(rates[_OURS], rates[other], strict=True)]
        print(f'    ours / {other}, round by round: {", ".join(f"{x:.2f}" for x in shares)}')


# --- decode methods --------------------------------------------------------------------------


def measure_methods(frames: np.ndarray, shape, rounds: int) -> None:
    fmt = frames_lib.FrameFormat('jpeg', shape)
    batches = tf.data.Dataset.from_tensor_slices(tf.constant(frames)).batch(_BATCH)

    def one(x):
        return tf.ensure_shape(tf.image.decode_image(x, channels=3, dtype=tf.uint8), shape)

    methods = {
        'core.frames.decode_frames (nested parallel map)': lambda: batches.map(
            lambda x: frames_lib.decode_frames(x, fmt)[0], num_parallel_calls=tf.data.AUTOTUNE
        ),
        'tf.map_fn in a parallel map': lambda: batches.map(
            lambda x: tf.map_fn(one, x, fn_output_signature=tf.TensorSpec(shape, tf.uint8)),
            num_parallel_calls=tf.data.AUTOTUNE,
        ),
        'unbatch, parallel map, batch': lambda: batches.unbatch()
        .map(one, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(_BATCH),
    }
    for index in range(rounds):
        print(f'  round {index + 1} (load {_load_average()})', flush=True)
        for name, make in methods.items():
            count, seconds = _count(make)
            print(f'    {name}: {count / seconds:,.0f} frames/s', flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', default=os.path.join(tempfile.gettempdir(), 'rr-frames'))
    parser.add_argument('--layouts', nargs='+', default=list(image_data.LAYOUTS))
    parser.add_argument('--steps', type=int, default=20_000)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument(
        '--parts', nargs='+', default=['memory', 'convert', 'push', 'sampling', 'methods']
    )
    parser.add_argument('--anchor-push-steps', type=int, default=5_000)
    parser.add_argument('--sampling-batches', type=int, default=100)
    args = parser.parse_args(argv)
    for name in args.layouts:
        layout = image_data.LAYOUTS[name]._replace(steps=args.steps)
        directory = image_data.write_dataset(
            pathlib.Path(args.data_dir), f'{name}_{args.steps}', layout
        )
        frames = _read_frames(directory, layout)
        frame_bytes = sum(float(np.mean([len(f) for f in v])) for v in frames.values())
        print(
            f'{name}: {args.steps:,} steps, cameras {layout.cameras}, '
            f'{frame_bytes / 1e3:.1f} KB of JPEG per step',
            flush=True,
        )
        if 'memory' in args.parts:
            print(f' memory (load {_load_average()})', flush=True)
            measure_memory(directory, layout, frame_bytes, args.steps)
        if 'convert' in args.parts:
            print(f' convert (load {_load_average()})', flush=True)
            measure_convert(directory, layout, frames, args.rounds)
        if 'push' in args.parts:
            print(f' push, two-step items (load {_load_average()})', flush=True)
            measure_push(
                directory,
                layout,
                args.steps,
                rounds=args.rounds,
                anchor_steps=args.anchor_push_steps,
            )
        if 'sampling' in args.parts:
            print(f' sampling (load {_load_average()})', flush=True)
            measure_sampling(directory, layout, frames, args.rounds, args.sampling_batches)
        if 'methods' in args.parts and name == args.layouts[0]:
            print(f' decode methods (load {_load_average()})', flush=True)
            camera = next(iter(layout.cameras))
            measure_methods(frames[camera][:4096], layout.cameras[camera], args.rounds)


if __name__ == '__main__':
    main()
