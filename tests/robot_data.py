"""Robot-like RLDS test data with camera frames, written by TFDS's own writer (its defaults).

Shaped like Open X-Embodiment's datasets: two JPEG cameras and one PNG camera, dict
observations holding a string, a language instruction per step, dict actions, episode
metadata, both endings, lengths 1 to 1,000 where it matters, the shards shuffled by
TFDS (a `GeneratorBasedBuilder` keyed by episode index, one shard below 64 MiB: 100+
episodes a shard). The cameras are small by default (tests decode every frame); a
benchmark gives them Open X-Embodiment's 256x320 and 128x128.

    steps/observation/image        uint8[H, W, 3]   Image, JPEG (bytes encoded here, q 90)
    steps/observation/wrist_image  uint8[h, w, 3]   Image, JPEG (may hold b'' for a missing
                                                   frame: `RobotSpec.missing_every`)
    steps/observation/overhead     uint8[8, 8, 3]   Image, PNG (TFDS encodes the arrays)
    steps/observation/state        float32[4]       [episode, t, noise, noise]
    steps/observation/instruction  Text
    steps/action/world_vector      float32[3]
    steps/action/gripper           float32[1]
    steps/language_instruction     Text
    steps/reward, discount         float32
    steps/is_first, is_last, is_terminal
    episode_metadata/episode_id    int64
    episode_metadata/file_path     Text

`make_episodes(spec)` gives what the builder writes (frames as the decoded arrays, the
JPEG bytes beside them), so tests compute references from it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.core import types
from tests import builders

SPLIT = 'train'
IMAGE, WRIST, OVERHEAD = 'image', 'wrist_image', 'overhead'
STATE, TEXT, INSTRUCTION = 'state', 'instruction', 'language_instruction'
WORLD_VECTOR, GRIPPER = 'world_vector', 'gripper'
METADATA, EPISODE_ID, FILE_PATH = 'episode_metadata', 'episode_id', 'file_path'
OVERHEAD_SHAPE = (8, 8, 3)
JPEG_QUALITY = 90
# The frame fields, as `/` paths.
IMAGE_PATH = f'{types.OBSERVATION}/{IMAGE}'
WRIST_PATH = f'{types.OBSERVATION}/{WRIST}'
OVERHEAD_PATH = f'{types.OBSERVATION}/{OVERHEAD}'
FRAME_PATHS = (IMAGE_PATH, OVERHEAD_PATH, WRIST_PATH)


@dataclasses.dataclass(frozen=True)
class RobotSpec:
    """What a robot dataset holds.

    Attributes:
      lengths: The episode lengths (>= 1), in key order.
      image_shape: The main JPEG camera's frame shape.
      wrist_shape: The wrist JPEG camera's frame shape.
      missing_every: If set, every this many steps the wrist camera stores b'' (a missing
        frame, as some robot datasets store); TFDS then cannot decode the dataset, only
        `encoded_frames` reads it.
      seed: Seeds every value.
      num_shards: Shards TFDS writes; None lets TFDS choose (one below 64 MiB).
    """

    lengths: tuple[int, ...]
    image_shape: tuple[int, int, int] = (24, 32, 3)
    wrist_shape: tuple[int, int, int] = (16, 16, 3)
    missing_every: int | None = None
    seed: int = 0
    num_shards: int | None = None

    @property
    def num_steps(self) -> int:
        return sum(self.lengths)

    def key(self) -> str:
        """A short digest of the spec: the name of its directory in a shared cache."""
        return hashlib.sha1(repr(self).encode()).hexdigest()[:12]


def robot_lengths(count: int, *, seed: int = 0, longest: int = 1000) -> tuple[int, ...]:
    """Returns `count` lengths: 1, 2, `longest` and a log-uniform spread of short ones."""
    rng = np.random.default_rng(seed)
    drawn = np.exp(rng.uniform(0, np.log(60), size=max(count - 3, 0))).astype(int)
    lengths = [1, 2, longest, *np.clip(drawn, 1, 60).tolist()][:count]
    rng.shuffle(lengths)
    return tuple(int(n) for n in lengths)


def make_frames(rng: np.random.Generator, length: int, shape: tuple[int, ...]) -> np.ndarray:
    """Returns `[length, *shape]` uint8 frames: a smooth scene, a moving block, noise."""
    height, width, channels = shape
    base = rng.uniform(40, 200, (4, 4, channels))
    scene = np.repeat(np.repeat(base, -(-height // 4), 0), -(-width // 4), 1)[:height, :width]
    frames = np.repeat(scene[None], length, axis=0)
    for t in range(length):
        y, x = (t * 3) % max(height - 4, 1), (t * 5) % max(width - 4, 1)
        frames[t, y : y + 4, x : x + 4] = 20
    frames = frames + rng.normal(0, 3, frames.shape)
    return np.clip(frames, 0, 255).astype(np.uint8)


def encode_jpeg(frames: np.ndarray) -> np.ndarray:
    """Returns the frames JPEG-encoded (quality 90), an object array of bytes."""
    return np.array(
        [tf.io.encode_jpeg(f, quality=JPEG_QUALITY).numpy() for f in frames], dtype=object
    )


def make_episode(spec: RobotSpec, index: int) -> dict:
    """Returns episode `index`: `steps` `[T, ...]` arrays (frames decoded) and `jpeg` bytes.

    `jpeg` holds `{IMAGE: bytes[T], WRIST: bytes[T]}`, what the builder writes for the JPEG
    cameras (the decoded arrays are what TFDS decodes from them, `decoded_frames`).
    """
    length = spec.lengths[index]
    rng = np.random.default_rng([spec.seed, index])
    t = np.arange(length)
    terminated = index % 2 == 0
    is_last = t == length - 1
    images = {IMAGE: make_frames(rng, length, spec.image_shape)}
    images[WRIST] = make_frames(rng, length, spec.wrist_shape)
    jpeg = {name: encode_jpeg(frames) for name, frames in images.items()}
    if spec.missing_every:
        jpeg[WRIST][t % spec.missing_every == spec.missing_every - 1] = b''
    state = np.stack([np.full(length, index), t, *rng.normal(size=(2, length))], axis=1)
    steps = {
        types.OBSERVATION: {
            **images,
            OVERHEAD: make_frames(rng, length, OVERHEAD_SHAPE),
            STATE: state.astype(np.float32),
            TEXT: np.array([f'scene {index % 5}'.encode()] * length, object),
        },
        types.ACTION: {
            WORLD_VECTOR: rng.uniform(-1, 1, (length, 3)).astype(np.float32),
            GRIPPER: rng.uniform(0, 1, (length, 1)).astype(np.float32),
        },
        INSTRUCTION: np.array([f'pick object {index % 7}'.encode()] * length, object),
        types.REWARD: (is_last & terminated).astype(np.float32),
        types.DISCOUNT: np.ones(length, np.float32),
        types.IS_FIRST: t == 0,
        types.IS_LAST: is_last,
        types.IS_TERMINAL: is_last & terminated,
    }
    metadata = {EPISODE_ID: np.int64(index), FILE_PATH: f'/robot/episode_{index}.npz'.encode()}
    return {types.STEPS: steps, METADATA: metadata, 'jpeg': jpeg}


@functools.lru_cache(maxsize=4)
def _cached_episodes(spec: RobotSpec) -> tuple[dict, ...]:
    return tuple(make_episode(spec, i) for i in range(len(spec.lengths)))


def make_episodes(spec: RobotSpec) -> list[dict]:
    """Returns the spec's episodes in key order (cached: treat as read-only)."""
    return list(_cached_episodes(spec))


def make_features(spec: RobotSpec) -> tfds.features.FeaturesDict:
    """Returns the TFDS features of the spec's episodes (see the module docstring)."""

    def image(shape, codec):
        return tfds.features.Image(shape=shape, dtype=np.uint8, encoding_format=codec)

    steps = {
        types.OBSERVATION: {
            IMAGE: image(spec.image_shape, 'jpeg'),
            WRIST: image(spec.wrist_shape, 'jpeg'),
            OVERHEAD: image(OVERHEAD_SHAPE, 'png'),
            STATE: tfds.features.Tensor(shape=(4,), dtype=np.float32),
            TEXT: tfds.features.Text(),
        },
        types.ACTION: {
            WORLD_VECTOR: tfds.features.Tensor(shape=(3,), dtype=np.float32),
            GRIPPER: tfds.features.Tensor(shape=(1,), dtype=np.float32),
        },
        INSTRUCTION: tfds.features.Text(),
        types.REWARD: tfds.features.Scalar(dtype=np.float32),
        types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
        **{flag: tfds.features.Scalar(dtype=np.bool_) for flag in types.FLAG_FIELDS},
    }
    metadata = {EPISODE_ID: tfds.features.Scalar(dtype=np.int64), FILE_PATH: tfds.features.Text()}
    return tfds.features.FeaturesDict(
        {types.STEPS: tfds.features.Dataset(steps), METADATA: metadata}
    )


def _as_written(episode: dict) -> dict:
    """Returns an episode as the builder hands it to TFDS: the JPEG cameras as bytes."""
    steps = episode[types.STEPS]
    observation = {**steps[types.OBSERVATION], **episode['jpeg']}
    return {types.STEPS: {**steps, types.OBSERVATION: observation}, METADATA: episode[METADATA]}


class RobotRlds(builders.SpecBuilder, skip_registration=True):
    """A TFDS builder of a `RobotSpec`'s episodes, keyed by index, with TFDS's defaults."""

    VERSION = tfds.core.Version('1.0.0')
    RELEASE_NOTES = {'1.0.0': 'Robot-like test data with JPEG and PNG cameras.'}

    def make_features(self) -> tfds.features.FeaturesDict:
        return make_features(self.spec)

    def make_examples(self):
        return map(_as_written, make_episodes(self.spec))


def write(data_dir: pathlib.Path | str, spec: RobotSpec) -> pathlib.Path:
    """Prepares the spec's dataset in `data_dir/<spec key>/robot_rlds/1.0.0` (once); returns
    that directory."""
    tfds.disable_progress_bar()
    root = pathlib.Path(data_dir) / spec.key()
    builder = RobotRlds(spec=spec, data_dir=str(root))
    config = tfds.download.DownloadConfig(num_shards=spec.num_shards)
    builder.download_and_prepare(download_config=config)
    return pathlib.Path(builder.data_dir)


def digest(array: np.ndarray) -> str:
    """Returns a checksum of an array's bytes, dtype and shape."""
    array = np.ascontiguousarray(array)
    return hashlib.sha256(array.tobytes() + str((array.dtype, array.shape)).encode()).hexdigest()


def frame_digests(episodes: list[dict], path: str) -> dict[int, str]:
    """Returns `{episode id: digest of its [T, H, W, C] frames at path}` of NumPy episodes
    read back (steps `[T, ...]`, metadata kept)."""
    found = {}
    for episode in episodes:
        node = episode[types.STEPS]
        for key in path.split('/'):
            node = node[key]
        found[int(episode[METADATA][EPISODE_ID])] = digest(np.asarray(node))
    return found


# --- Shared datasets: written once per test session (each module's fixture: shared_dir) ---

# 120 episodes (lengths 1, 2, 1,000 and short ones; both endings) in one shard.
ROBOT_SPEC = RobotSpec(robot_lengths(120, longest=1000))
# A few short episodes and one of 1 step: copies and conversions.
SMALL_SPEC = RobotSpec(robot_lengths(6, seed=3, longest=40))
# Some wrist frames missing (b''), as some robot datasets store.
MISSING_SPEC = RobotSpec(robot_lengths(12, seed=1, longest=40), missing_every=3)


def shared_dir(factory: pytest.TempPathFactory, spec: RobotSpec) -> pathlib.Path:
    """Returns the spec's dataset, written once per test session (whichever module asks
    first: the builder finds the prepared data in the session's directory again)."""
    return write(factory.getbasetemp() / 'robot_data', spec)
