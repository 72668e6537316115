"""Robot data shaped like users' (Open X-Embodiment style), for the LeRobot reader and writer.

`RobotSpec` describes a dataset; `make_episodes(spec)` gives its NumPy episodes, and
`write(data_dir, spec)` writes them with TFDS's own writer (a real
`tfds.core.GeneratorBasedBuilder`, cameras as `tfds.features.Image`, PNG-encoded as TFDS
stores them). Step t of episode e:

    steps/observation/images/front   uint8[48, 64, 3] (a gradient, a moving block, noise)
    steps/observation/images/wrist   uint8[32, 40, 3]
    steps/observation/state          float32[7] (a random walk: joint angles)
    steps/observation/gripper        float32 (scalar)
    steps/action                     float32[7]
    steps/reward                     float32 (1.0 on a terminal last step, small else)
    steps/discount                   float32 (1, 0 into and on a terminal last step)
    steps/language_instruction       text (one of four, one of them not ASCII; some
                                     episodes switch half way)
    steps/grasped                    bool (an extra step field)
    steps/is_first, is_last, is_terminal
    episode_metadata/episode_id      int64
    episode_metadata/operator        text
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

import numpy as np
import tensorflow_datasets as tfds

from rlds_reverb.core import types
from tests import builders

FRONT, WRIST = (48, 64, 3), (32, 40, 3)
JOINTS = ['shoulder_pan', 'shoulder_lift', 'elbow', 'wrist_flex', 'wrist_roll', 'forearm', 'grip']
TASKS = ('pick up the red cube', 'open the drawer', 'put the mug on the café shelf', 'wipe')
METADATA, EPISODE_ID, OPERATOR = 'episode_metadata', 'episode_id', 'operator'
GRASPED = 'grasped'


@dataclasses.dataclass(frozen=True)
class RobotSpec:
    """A robot dataset: episode lengths, endings (True: terminated), and the seed."""

    lengths: tuple[int, ...]
    terminated: tuple[bool, ...]
    seed: int = 0


def robot_spec(count: int = 110, *, seed: int = 0, longest: int = 300) -> RobotSpec:
    """Returns `count` episodes: lengths 1, 2, `longest` and log-uniform draws; both endings."""
    rng = np.random.default_rng(seed)
    drawn = np.exp(rng.uniform(0, np.log(longest), size=count)).astype(int).clip(1, longest)
    lengths = [1, 2, longest, *drawn[3:].tolist()][:count]
    ends = rng.random(count) < 0.5
    ends[:2] = (True, False)
    return RobotSpec(tuple(int(n) for n in lengths), tuple(bool(e) for e in ends), seed)


def _frames(rng, shape, episode: int, length: int, camera: int) -> np.ndarray:
    height, width, _ = shape
    t = np.arange(length)[:, None, None]
    yy, xx = np.mgrid[0:height, 0:width]
    frames = np.empty((length, *shape), np.uint8)
    frames[..., 0] = (xx[None] * 255 // (width - 1)) + 0 * t
    frames[..., 1] = (yy[None] * 255 // (height - 1) + 3 * t) % 256
    frames[..., 2] = (episode * 37 + camera * 90 + 5 * t) % 256
    for step in range(length):
        x0 = (step * 3 + episode * 7) % (width - 12)
        frames[step, 4:14, x0 : x0 + 12] = (episode * 53 % 256, 200 - camera * 150, step % 256)
    frames[:, -6:, -6:] = rng.integers(0, 256, (length, 6, 6, 3), dtype=np.uint8)
    return frames


def make_episode(spec: RobotSpec, index: int) -> dict:
    """Returns episode `index`: `steps` a dict of `[T, ...]` arrays, and its metadata."""
    length, terminated = spec.lengths[index], spec.terminated[index]
    rng = np.random.default_rng([spec.seed, index])
    t = np.arange(length)
    state = np.cumsum(rng.normal(scale=0.05, size=(length, 7)), axis=0).astype(np.float32)
    last = t == length - 1
    first_task, second_task = TASKS[index % 4], TASKS[(index // 4) % 4]
    switch = index % 5 == 0
    tasks = [second_task if switch and i >= (length + 1) // 2 else first_task for i in t]
    discount = np.ones(length, np.float32)
    if terminated:
        discount[-2:] = 0.0
    steps = {
        types.OBSERVATION: {
            'images': {
                'front': _frames(rng, FRONT, index, length, 0),
                'wrist': _frames(rng, WRIST, index, length, 1),
            },
            'state': state,
            'gripper': rng.uniform(0, 0.08, size=length).astype(np.float32),
        },
        types.ACTION: (state + rng.normal(scale=0.01, size=state.shape)).astype(np.float32),
        types.REWARD: np.where(last & terminated, 1.0, -0.01 * t).astype(np.float32),
        types.DISCOUNT: discount,
        types.IS_FIRST: t == 0,
        types.IS_LAST: last,
        types.IS_TERMINAL: last & terminated,
        types.LANGUAGE_INSTRUCTION: np.array([s.encode() for s in tasks], dtype=object),
        GRASPED: rng.random(length) < 0.3,
    }
    metadata = {EPISODE_ID: np.int64(index), OPERATOR: f'operator-{index % 3}'.encode()}
    return {types.STEPS: steps, METADATA: metadata}


@functools.lru_cache(maxsize=4)
def _cached(spec: RobotSpec) -> tuple[dict, ...]:
    return tuple(make_episode(spec, i) for i in range(len(spec.lengths)))


def make_episodes(spec: RobotSpec) -> list[dict]:
    """The spec's episodes in order (NumPy; cached, treat as read-only)."""
    return list(_cached(spec))


def make_features() -> tfds.features.FeaturesDict:
    """The TFDS features of the episodes (cameras as PNG-encoded `Image` features)."""
    scalar = tfds.features.Scalar
    observation = tfds.features.FeaturesDict(
        {
            'images': tfds.features.FeaturesDict(
                {
                    'front': tfds.features.Image(shape=FRONT, dtype=np.uint8),
                    'wrist': tfds.features.Image(shape=WRIST, dtype=np.uint8),
                }
            ),
            'state': tfds.features.Tensor(shape=(7,), dtype=np.float32),
            'gripper': scalar(dtype=np.float32),
        }
    )
    steps = {
        types.OBSERVATION: observation,
        types.ACTION: tfds.features.Tensor(shape=(7,), dtype=np.float32),
        types.REWARD: scalar(dtype=np.float32),
        types.DISCOUNT: scalar(dtype=np.float32),
        **{flag: scalar(dtype=np.bool_) for flag in types.FLAG_FIELDS},
        types.LANGUAGE_INSTRUCTION: tfds.features.Text(),
        GRASPED: scalar(dtype=np.bool_),
    }
    metadata = {EPISODE_ID: scalar(dtype=np.int64), OPERATOR: tfds.features.Text()}
    return tfds.features.FeaturesDict(
        {
            types.STEPS: tfds.features.Dataset(steps),
            METADATA: tfds.features.FeaturesDict(metadata),
        }
    )


class RobotRlds(builders.SpecBuilder, skip_registration=True):
    """A TFDS builder of a `RobotSpec`'s episodes, written in order (one split, 'train')."""

    VERSION = tfds.core.Version('1.0.0')
    RELEASE_NOTES = {'1.0.0': 'Robot-shaped test data.'}
    DISABLE_SHUFFLING = True

    def make_features(self) -> tfds.features.FeaturesDict:
        return make_features()

    def make_examples(self):
        return make_episodes(self.spec)


def write(data_dir: pathlib.Path | str, spec: RobotSpec) -> pathlib.Path:
    """Prepares the dataset with TFDS in `data_dir/robot_rlds/1.0.0`; returns that dir."""
    tfds.disable_progress_bar()
    builder = RobotRlds(spec=spec, data_dir=str(data_dir))
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=2))
    return pathlib.Path(builder.data_dir)
