"""Robot-scale image datasets for the benchmarks, and a Reverb server in a process of its own.

The layout of Open X-Embodiment's fractal data, written with TFDS' own writer
(`tfds.dataset_builders.store_as_tfds_dataset`, its defaults): `fractal_like` has one
256x320x3 JPEG camera, `two_cameras` adds a 128x128x3 wrist camera; dict observations
(`state` float32[8]) and actions, a `language_instruction` per step, episodes of 20 to 80
steps, half ending terminal. Frames compress like camera images (a smooth textured scene,
an arm moving, sensor noise), JPEG quality 90: about 16.7 KB a frame (4.5 KB for the
wrist camera). This is the writer of `benchmarks/images.py` (branch img-bench), shared so
that `benchmarks/frames.py` measures on the same data.

`ServerProcess` runs a Reverb server in a child process, so that its resident memory
grows with what is stored in it and nothing else.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import subprocess
import sys
import time
from typing import NamedTuple

import numpy as np
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.core import types

JPEG_QUALITY = 90
_INSTRUCTIONS = (
    'pick coke can',
    'move blue chip bag near sponge',
    'open top drawer',
    'place apple into bottom drawer',
    'knock redbull can over',
    'close middle drawer',
)
IMAGE = 'image'
WRIST_IMAGE = 'wrist_image'
STATE = 'state'
LANGUAGE_INSTRUCTION = 'language_instruction'


class Layout(NamedTuple):
    """One benchmark dataset: its cameras (name -> shape) and its size."""

    cameras: dict[str, tuple[int, int, int]]
    steps: int = 20_000


LAYOUTS = {
    'fractal_like': Layout({IMAGE: (256, 320, 3)}),
    'two_cameras': Layout({IMAGE: (256, 320, 3), WRIST_IMAGE: (128, 128, 3)}),
}


def _upsample(grid: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear upsampling of a `[h, w, c]` grid to `[height, width, c]` (float32)."""
    rows, cols = grid.shape[:2]
    y, x = np.linspace(0, rows - 1, height), np.linspace(0, cols - 1, width)
    y0, x0 = np.floor(y).astype(int), np.floor(x).astype(int)
    y1, x1 = np.minimum(y0 + 1, rows - 1), np.minimum(x0 + 1, cols - 1)
    fy, fx = (y - y0)[:, None, None], (x - x0)[None, :, None]
    top = grid[y0][:, x0] * (1 - fx) + grid[y0][:, x1] * fx
    bottom = grid[y1][:, x0] * (1 - fx) + grid[y1][:, x1] * fx
    return (top * (1 - fy) + bottom * fy).astype(np.float32)


def make_camera_frames(
    rng: np.random.Generator, length: int, shape: tuple[int, int, int]
) -> np.ndarray:
    """Returns `[length, *shape]` uint8 frames of one episode's camera.

    A fixed scene (smooth gradients, a fine texture, three flat objects) in which a dark
    arm moves along a straight path, plus sensor noise on every frame.
    """
    height, width, _ = shape
    scene = _upsample(rng.uniform(30, 220, (5, 6, 3)), height, width)
    scene += _upsample(rng.normal(0, 8, (height // 4, width // 4, 3)), height, width)
    scene += rng.normal(0, 2.7, shape).astype(np.float32)
    yy, xx = np.mgrid[0:height, 0:width]
    for _ in range(3):
        cy, cx = rng.uniform(0.3, 0.9) * height, rng.uniform(0.1, 0.9) * width
        radius = rng.uniform(0.05, 0.12) * height
        scene[(yy - cy) ** 2 + (xx - cx) ** 2 < radius**2] = rng.uniform(0, 255, 3)
    start = rng.uniform([0.1 * height, 0.1 * width], [0.4 * height, 0.9 * width])
    end = rng.uniform([0.4 * height, 0.1 * width], [0.8 * height, 0.9 * width])
    frames = np.empty((length, *shape), np.uint8)
    for t in range(length):
        frame = scene.copy()
        cy, cx = start + (end - start) * t / max(length - 1, 1)
        arm = ((yy - cy) / (0.18 * height)) ** 2 + ((xx - cx) / (0.1 * width)) ** 2 < 1
        frame[arm] = frame[arm] * 0.3 + 40
        frame += rng.normal(0, 1.5, shape).astype(np.float32)
        frames[t] = np.clip(frame, 0, 255)
    return frames


def make_episode_lengths(rng: np.random.Generator, steps: int) -> list[int]:
    """Returns episode lengths of 20 to 80 steps, mean about 40, summing to `steps`."""
    lengths: list[int] = []
    while sum(lengths) < steps:
        lengths.append(int(np.clip(20 + rng.gamma(2.0, 10.0), 20, 80)))
    lengths[-1] -= sum(lengths) - steps
    if lengths[-1] < 2:
        lengths[-2] += lengths.pop()
    return lengths


def make_episode(rng: np.random.Generator, length: int, layout: Layout) -> dict:
    """Returns one episode's steps (frames JPEG-encoded), as TFDS' writer takes them."""
    observation: dict = {
        name: [
            tf.io.encode_jpeg(frame, quality=JPEG_QUALITY).numpy()
            for frame in make_camera_frames(rng, length, shape)
        ]
        for name, shape in layout.cameras.items()
    }
    observation[STATE] = rng.standard_normal((length, 8)).astype(np.float32)
    terminal = bool(rng.integers(2))
    last = np.arange(length) == length - 1
    return {
        types.OBSERVATION: observation,
        types.ACTION: {
            'world_vector': rng.uniform(-0.1, 0.1, (length, 3)).astype(np.float32),
            'rotation_delta': rng.uniform(-0.2, 0.2, (length, 3)).astype(np.float32),
            'gripper': rng.uniform(-1, 1, (length, 1)).astype(np.float32),
        },
        LANGUAGE_INSTRUCTION: [_INSTRUCTIONS[rng.integers(len(_INSTRUCTIONS))]] * length,
        types.REWARD: (last & terminal).astype(np.float32),
        types.DISCOUNT: np.ones(length, np.float32),
        types.IS_FIRST: np.arange(length) == 0,
        types.IS_LAST: last,
        types.IS_TERMINAL: last & terminal,
    }


def make_features(layout: Layout) -> tfds.features.FeaturesDict:
    """Returns the TFDS features of `layout` (the frames as JPEG `Image` features)."""

    def vector(size: int) -> tfds.features.Tensor:
        return tfds.features.Tensor(shape=(size,), dtype=np.float32)

    cameras = {
        name: tfds.features.Image(shape=shape, dtype=np.uint8, encoding_format='jpeg')
        for name, shape in layout.cameras.items()
    }
    steps = tfds.features.Dataset(
        {
            types.OBSERVATION: {**cameras, STATE: vector(8)},
            types.ACTION: {
                'world_vector': vector(3),
                'rotation_delta': vector(3),
                'gripper': vector(1),
            },
            LANGUAGE_INSTRUCTION: tfds.features.Text(),
            types.REWARD: tfds.features.Scalar(dtype=np.float32),
            types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
            **{flag: tfds.features.Scalar(dtype=np.bool_) for flag in types.FLAG_FIELDS},
        }
    )
    return tfds.features.FeaturesDict({types.STEPS: steps})


def write_dataset(data_dir: pathlib.Path, name: str, layout: Layout) -> pathlib.Path:
    """Writes (unless present) `layout` with TFDS' own writer; returns its directory."""
    target = data_dir / name / '1.0.0'
    if (target / 'dataset_info.json').is_file():
        return target
    print(f'writing {name} ({layout.steps:,} steps) into {data_dir}', flush=True)
    rng = np.random.default_rng(0)
    lengths = make_episode_lengths(rng, layout.steps)
    episodes = (
        (f'episode_{i}', {types.STEPS: make_episode(rng, length, layout)})
        for i, length in enumerate(lengths)
    )
    tfds.dataset_builders.store_as_tfds_dataset(
        name=name,
        version='1.0.0',
        features=make_features(layout),
        split_datasets={'train': list(episodes)},
        data_dir=os.fspath(data_dir),
    )
    return target


MAX_ITEMS = 10**7

# A Reverb server in its own process: its RSS grows with what a push stores, and nothing
# else of the benchmark's (TensorFlow's allocations, datasets) is counted with it.
_SERVER_SCRIPT = """
import pickle, sys
import reverb
specs = pickle.load(sys.stdin.buffer)
server = reverb.Server([
    reverb.Table(name=name, sampler=reverb.selectors.Uniform(), remover=reverb.selectors.Fifo(),
                 max_size=size, rate_limiter=reverb.rate_limiters.MinSize(1), signature=signature)
    for name, size, signature in specs])
print(server.port, flush=True)
sys.stdin.buffer.read()  # Serves until the benchmark closes the pipe.
server.stop()
"""


class ServerProcess:
    """A Reverb server (uniform tables, FIFO removal, MinSize(1)) in a child process."""

    def __init__(self, specs: list[tuple[str, object]]):
        self._process = subprocess.Popen(
            [sys.executable, '-c', _SERVER_SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._pipe = self._process.stdin  # Closing it stops the server.
        self._pipe.write(pickle.dumps([(n, MAX_ITEMS, s) for n, s in specs]))
        self._pipe.flush()
        self.address = f'localhost:{int(self._process.stdout.readline())}'
        time.sleep(0.5)  # Lets the server settle before its baseline RSS is read.
        self.rss_start = self.rss_bytes()

    def rss_bytes(self) -> int:
        with open(f'/proc/{self._process.pid}/status') as status:
            line = next(x for x in status if x.startswith('VmRSS:'))
        return int(line.split()[1]) * 1024

    def size(self, table: str = 'replay') -> int:
        return int(reverb.Client(self.address).server_info()[table].current_size)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info) -> None:
        self._pipe.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
