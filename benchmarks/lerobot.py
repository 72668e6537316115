"""LeRobot datasets: reading (`load`) and writing (`save_as_lerobot`), beside their limits.

Data: 20,000 frames (100 episodes of 200), two RGB cameras (256x320; `--shape`) (gradients,
a moving block, a scrolling coarse texture with +-2 sensor noise over a quarter of the
frame: PNGs of tens of KB, as camera frames compress), 7-d float32 state and action, a
reward, tasks; generated per episode in NumPy (the `source` line times the generator alone).

Timed, set-up included, frames/s (one frame = both cameras and every field):

* `write image` / `write video`: `save_as_lerobot(source, dir)` in image mode (PNG via
  Pillow, LeRobot's compress level 6) and video mode (AV1 via PyAV's SVT-AV1, LeRobot's
  settings, each packet decoded back for the PSNR); `write image, N worker(s)`: the first
  4,000 frames again, from the image-mode dataset (a source worker processes can open),
  with `workers=1` and `workers=2`, and `PNG encode alone` (Pillow, level 6, one thread);
* `read image` / `read video`: `to_episode_tensors(load(dir))`, every field of every frame;
  `convert image` / `convert video`: `convert_rlds_to_trajectories(load(dir), batch_size=256)`
  to the last batch (TF-Agents trajectories, cameras included);
* the limits, measured in the same run on the same files: `parquet alone` (pyarrow reads
  every data file, all columns), `PNG decode alone` (Pillow decodes every stored PNG, one
  thread), `AV1 decode alone` (PyAV decodes every mp4 to RGB, as the reader converts);
* `lerobot per frame` (with `--lerobot-python`, LeRobot 0.6.1's venv): `LeRobotDataset[i]`
  for every frame (or the first `--lerobot-frames`), image and video mode, the obvious
  alternative (LeRobot's own reader, in its own environment).

Every line carries the CPU seconds of the process that did the work (all its threads; for
LeRobot, its own process) and the 1-minute load average before and after it: the machine
is shared, and frames per CPU-second vary less with the load than frames per second.

Run: `.venv/bin/python -m benchmarks.lerobot [--frames N] [--shape H,W] [--dir DIR]
[--reuse] [--worker-episodes N] [--lerobot-python PATH] [--lerobot-frames N]` (`--reuse`:
read the datasets an earlier run left in `--dir`, write nothing).
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import pathlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from benchmarks import common  # noqa: F401  (quiet TensorFlow logs)
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.export import lerobot
from rlds_reverb.export.lerobot_segment import encode_png
from rlds_reverb.read.loading import load

_LENGTH = 200
_SHAPE = (256, 320, 3)
_FPS = 30
_WORKER_EPISODES = 20  # The workers' comparison: the first 4,000 frames.
_TASKS = ('pick up the red cube', 'open the drawer', 'wipe the table')


@functools.lru_cache(maxsize=2)
def _scene(camera: int, shape: tuple[int, int, int] = _SHAPE) -> np.ndarray:
    """One camera's 200 frames: a gradient, a moving block, a scrolling texture with noise."""
    rng = np.random.default_rng(camera)
    height, width, _ = shape
    t = np.arange(_LENGTH)[:, None, None]
    yy, xx = np.mgrid[0:height, 0:width]
    frames = np.empty((_LENGTH, *shape), np.uint8)
    frames[..., 0] = (xx * 255 // width)[None]
    frames[..., 1] = ((yy * 200 // height)[None] + t) % 256
    frames[..., 2] = camera * 90
    coarse = rng.integers(0, 256, size=(height // 16, width // 16, 3), dtype=np.uint8)
    texture = np.repeat(np.repeat(coarse, 8, axis=0), 8, axis=1)  # A quarter of the frame.
    for step in range(_LENGTH):
        x0 = (step * 3) % (width - 40)
        frames[step, 40:80, x0 : x0 + 40] = (200, 50 + camera * 100, step % 256)
        frames[step, height // 2 :, width // 2 :] = np.roll(texture, step, axis=1)
    noise = rng.integers(-2, 3, size=(_LENGTH, height // 2, width // 2, 3))
    quarter = frames[:, height // 2 :, width // 2 :].astype(np.int16) + noise
    frames[:, height // 2 :, width // 2 :] = np.clip(quarter, 0, 255).astype(np.uint8)
    return frames


def _frames(episode: int, camera: int, shape: tuple[int, int, int] = _SHAPE) -> np.ndarray:
    """The camera's scene, its colours shifted per episode (cheap: one vectorized add)."""
    return _scene(camera, shape) + np.uint8(episode * 37 % 256)


def _episode(index: int, shape: tuple[int, int, int] = _SHAPE) -> dict:
    rng = np.random.default_rng(index)
    t = np.arange(_LENGTH)
    state = np.cumsum(rng.normal(scale=0.02, size=(_LENGTH, 7)), axis=0).astype(np.float32)
    last = t == _LENGTH - 1
    return {
        types.STEPS: {
            types.OBSERVATION: {
                'images': {'front': _frames(index, 0, shape), 'wrist': _frames(index, 1, shape)},
                'state': state,
            },
            types.ACTION: state + np.float32(0.01),
            types.REWARD: np.where(last, 1.0, 0.0).astype(np.float32),
            types.DISCOUNT: np.ones(_LENGTH, np.float32),
            types.IS_FIRST: t == 0,
            types.IS_LAST: last,
            types.IS_TERMINAL: last & (index % 2 == 0),
            types.LANGUAGE_INSTRUCTION: np.array([_TASKS[index % 3].encode()] * _LENGTH, object),
        }
    }


def source(episodes: int, shape: tuple[int, int, int] = _SHAPE) -> tf.data.Dataset:
    """The benchmark's RLDS episodes, generated one at a time."""
    first = _episode(0, shape)
    signature = tf.nest.map_structure(
        lambda a: tf.TensorSpec([None, *a.shape[1:]], tf.string if a.dtype == object else a.dtype),
        first,
    )
    whole = tf.data.Dataset.from_generator(
        lambda: (_episode(i, shape) for i in range(episodes)), output_signature=signature
    )
    return episodes_lib.from_whole_episodes(whole)


def _line(
    label: str, frames: int, seconds: float, load_before: float, extra: str = '', cpu: float = 0
) -> None:
    load_after = os.getloadavg()[0]
    per_cpu = f'{frames / cpu:,.0f} frames/CPU-s, ' if cpu else ''
    print(
        f'{label:30s} {frames / seconds:10,.0f} frames/s  ({per_cpu}{frames} frames, '
        f'{seconds:7.1f} s, CPU {cpu:.1f} s; load {load_before:.1f} -> {load_after:.1f}){extra}',
        flush=True,
    )


def _timed(label: str, frames: int, run: Callable[[], object], extra: str = '') -> object:
    """Runs `run`; prints frames per wall second and per CPU second of this process (all of
    its threads; not its child processes)."""
    load_before = os.getloadavg()[0]
    started, cpu = time.perf_counter(), time.process_time()
    result = run()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    _line(label, frames, seconds, load_before, extra, cpu)
    return result


def _read_all(directory: pathlib.Path) -> int:
    count = 0
    for steps in episodes_lib.to_episode_tensors(load(directory)).as_numpy_iterator():
        count += len(steps[types.REWARD])
    return count


def _parquet_alone(directory: pathlib.Path) -> None:
    import pyarrow.parquet as pq

    for path in sorted((directory / 'data').rglob('*.parquet')):
        pq.read_table(path)


def _png_alone(directory: pathlib.Path) -> None:
    import pyarrow.parquet as pq
    from PIL import Image

    for path in sorted((directory / 'data').rglob('*.parquet')):
        file = pq.ParquetFile(path)
        for group in range(file.metadata.num_row_groups):
            table = file.read_row_group(
                group, columns=['observation.images.front', 'observation.images.wrist']
            )
            for column in table.columns:
                for blob in column.combine_chunks().field('bytes').to_pylist():
                    np.asarray(Image.open(io.BytesIO(blob)))


def _av1_alone(directory: pathlib.Path) -> None:
    import av

    for path in sorted((directory / 'videos').rglob('*.mp4')):
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = 'AUTO'
            for frame in container.decode(stream):
                frame.to_ndarray(format='rgb24')


_LEROBOT_SCRIPT = """
import os, sys, time, tempfile
os.environ['HF_HUB_OFFLINE'] = '1'
os.environ['HF_LEROBOT_HOME'] = tempfile.mkdtemp()
import logging; logging.disable(logging.WARNING)
from lerobot.datasets import LeRobotDataset
root, count = sys.argv[1], int(sys.argv[2])
started, cpu = time.perf_counter(), time.process_time()
dataset = LeRobotDataset('bench/' + os.path.basename(root), root=root)
for i in range(count):
    dataset[i]
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
print(seconds, cpu, dataset._video_backend if dataset.meta.video_keys else 'image')
"""


def _lerobot(python: str, directory: pathlib.Path, frames: int, label: str) -> None:
    load_before = os.getloadavg()[0]
    out = subprocess.run(
        [python, '-c', _LEROBOT_SCRIPT, str(directory), str(frames)],
        capture_output=True, text=True, check=True, timeout=3600,
    ).stdout.split()  # fmt: skip
    _line(label, frames, float(out[0]), load_before, f' [{out[2]}, its venv]', float(out[1]))


def _write_both(root: pathlib.Path, episodes: int, shape: tuple[int, int, int]) -> None:
    frames = episodes * _LENGTH
    _timed(
        'source (generator alone)',
        frames,
        lambda: sum(
            1 for _ in episodes_lib.to_whole_episodes(source(episodes, shape)).as_numpy_iterator()
        ),
    )
    for mode in ('image', 'video'):
        stats = _timed(
            f'write {mode}', frames,
            lambda mode=mode: lerobot.save_as_lerobot(source(episodes, shape), root / mode, fps=_FPS, cameras=mode),
        )  # fmt: skip
        size = sum(p.stat().st_size for p in (root / mode).rglob('*') if p.is_file())
        print(
            f'  {mode}: {size / 2**20:,.0f} MiB; PSNR {getattr(stats, "psnr_db", {})}',
            flush=True,
        )


def _convert_all(directory: pathlib.Path) -> int:
    from rlds_reverb.transform.convert import convert_rlds_to_trajectories

    count = 0
    for batch in convert_rlds_to_trajectories(load(directory), batch_size=256):
        count += int(batch.step_type.shape[0])
    return count


def _read_lines(root: pathlib.Path, frames: int) -> None:
    for mode in ('image', 'video'):
        _timed(f'read {mode}', frames, lambda mode=mode: _read_all(root / mode))
    for mode in ('image', 'video'):
        _timed(f'convert {mode} (trajectories)', frames, lambda m=mode: _convert_all(root / m))
    _timed('parquet alone (image mode)', frames, lambda: _parquet_alone(root / 'image'))
    _timed('PNG decode alone', frames, lambda: _png_alone(root / 'image'))
    _timed('AV1 decode alone', frames, lambda: _av1_alone(root / 'video'))


def _worker_lines(root: pathlib.Path, part: int, shape: tuple[int, int, int]) -> None:
    for workers in (1, 2) if part else ():  # From the image-mode dataset each worker opens.
        _timed(
            f'write image, {workers} worker(s)', part * _LENGTH,
            lambda workers=workers: lerobot.save_as_lerobot(
                root / 'image', root / f'workers-{workers}', workers=workers,
                split=f'train[:{part}]', frames_per_file=1000,
            ),
        )  # fmt: skip
    scene = _frames(0, 0, shape)
    _timed(
        'PNG encode alone (2 cameras)',
        _LENGTH,
        lambda: [encode_png(f) for f in scene for _ in '01'],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--frames', type=int, default=20_000)
    parser.add_argument('--dir', default=None, help='where to write (default: a temp dir)')
    parser.add_argument('--reuse', action='store_true', help="read --dir's datasets, no writes")
    parser.add_argument('--lerobot-python', default=None, help="LeRobot 0.6.1's venv python")
    parser.add_argument('--lerobot-frames', type=int, default=20_000)
    parser.add_argument('--shape', default='256,320', help='camera height,width')
    parser.add_argument(
        '--worker-episodes', type=int, default=_WORKER_EPISODES, help='0: no workers lines'
    )
    args = parser.parse_args()
    shape = (*(int(d) for d in args.shape.split(',')), 3)
    episodes = max(1, args.frames // _LENGTH)
    frames = episodes * _LENGTH
    root = pathlib.Path(args.dir or tempfile.mkdtemp(prefix='lerobot-bench-'))
    print(f'{episodes} episodes x {_LENGTH} frames, two {shape} cameras, in {root}; '
          f'{os.cpu_count()} CPUs', flush=True)  # fmt: skip
    try:
        if not args.reuse:
            _write_both(root, episodes, shape)
        _read_lines(root, frames)
        if not args.reuse:
            _worker_lines(root, min(episodes, args.worker_episodes), shape)
        if args.lerobot_python:
            count = min(args.lerobot_frames, frames)
            for mode in ('image', 'video'):
                _lerobot(args.lerobot_python, root / mode, count, f'lerobot per frame ({mode})')
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == '__main__':
    main()
