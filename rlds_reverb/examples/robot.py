"""Robot-like RLDS datasets written by TFDS's own writer: two cameras, proprioception, 7-D actions.

For the robot-data notebook (notebooks/06_robot_data.ipynb) and quick experiments: small
datasets shaped like Open X-Embodiment's, written by a `tfds.core.GeneratorBasedBuilder`
with TFDS's defaults (shards shuffled by key). Two layouts, as two labs would store the same
kind of data (`RobotLayout`):

    steps/observation/image        uint8[32, 32, 3]  Image, JPEG (the scene camera)
    steps/observation/wrist_image  uint8[16, 16, 3]  Image, JPEG (the wrist camera)
    steps/observation/state        float32[8]        (`PROPRIO` layout: observation/proprio)
    steps/action                   float32[7]        (`PROPRIO` layout: float64[7])
    steps/language_instruction     Text
    steps/reward, discount         float32
    steps/is_first, is_last, is_terminal
    episode_metadata/episode_id    int64

The state is a random walk; the action is a fixed smooth function of the state (six arm
deltas in (-1, 1) and a gripper in {0, 1}) plus small noise, so a policy can learn it.
Even episodes end in a termination (reward 1 at the last step), odd ones are truncated.
"""

from __future__ import annotations

import enum
import pathlib

import numpy as np
import tensorflow_datasets as tfds

from rlds_reverb.core import types

__all__ = ['RobotLayout', 'make_robot_episode', 'write_robot_dataset']

STATE, PROPRIO = 'state', 'proprio'
IMAGE, WRIST_IMAGE = 'image', 'wrist_image'
METADATA, EPISODE_ID = 'episode_metadata', 'episode_id'
IMAGE_SHAPE, WRIST_SHAPE = (32, 32, 3), (16, 16, 3)
STATE_DIMS, ACTION_DIMS = 8, 7
_SPLIT = 'train'


class RobotLayout(enum.Enum):
    """How a robot dataset names and types its fields.

    STATE: `observation/state` float32, `action` float32.
    PROPRIO: `observation/proprio` float32, `action` float64 (another lab's layout: a
        mixture brings it to `STATE` with a `FieldMapping`).
    """

    STATE = 'state'
    PROPRIO = 'proprio'


def _frames(rng: np.random.Generator, state: np.ndarray, shape: tuple) -> np.ndarray:
    """Returns `[T, *shape]` uint8 frames: a flat scene with a block placed by the state."""
    height, width, _ = shape
    frames = np.broadcast_to(rng.uniform(60, 200, shape), (len(state), *shape)).copy()
    rows = ((np.tanh(state[:, 0]) + 1) / 2 * (height - 4)).astype(int)
    cols = ((np.tanh(state[:, 1]) + 1) / 2 * (width - 4)).astype(int)
    for t, (row, col) in enumerate(zip(rows, cols, strict=True)):
        frames[t, row : row + 4, col : col + 4] = 20
    return frames.astype(np.uint8)


def make_robot_episode(index: int, length: int, *, seed: int = 0) -> dict:
    """Returns episode `index` as NumPy arrays (layout `STATE`, frames decoded).

    Args:
      index: The episode's index (its id; even: terminated, odd: truncated).
      length: Its number of steps (>= 1).
      seed: Seeds every value with the index.

    Returns:
      `{'steps': {...}, 'episode_metadata': {'episode_id': index}}`, step leaves `[T, ...]`.

    Example:
      >>> make_robot_episode(0, 5)['steps']['action'].shape
      (5, 7)
    """
    rng = np.random.default_rng([seed, index])
    t = np.arange(length)
    state = np.cumsum(rng.normal(0, 0.3, (length, STATE_DIMS)), axis=0).astype(np.float32)
    arm = np.tanh(state[:, :6] - 0.5 * state[:, 2:8]) + rng.normal(0, 0.02, (length, 6))
    gripper = (state[:, :1] > 0).astype(np.float32)
    is_last = t == length - 1
    terminated = index % 2 == 0
    steps = {
        types.OBSERVATION: {
            IMAGE: _frames(rng, state, IMAGE_SHAPE),
            WRIST_IMAGE: _frames(rng, state[:, 2:], WRIST_SHAPE),
            STATE: state,
        },
        types.ACTION: np.concatenate([arm, gripper], axis=1).astype(np.float32),
        'language_instruction': np.array([f'stack block {index % 3}'.encode()] * length, object),
        types.REWARD: (is_last & terminated).astype(np.float32),
        types.DISCOUNT: np.ones(length, np.float32),
        types.IS_FIRST: t == 0,
        types.IS_LAST: is_last,
        types.IS_TERMINAL: is_last & terminated,
    }
    return {types.STEPS: steps, METADATA: {EPISODE_ID: np.int64(index)}}


def _features(layout: RobotLayout) -> tfds.features.FeaturesDict:
    state = PROPRIO if layout is RobotLayout.PROPRIO else STATE
    action_dtype = np.float64 if layout is RobotLayout.PROPRIO else np.float32
    steps = {
        types.OBSERVATION: {
            IMAGE: tfds.features.Image(shape=IMAGE_SHAPE, encoding_format='jpeg'),
            WRIST_IMAGE: tfds.features.Image(shape=WRIST_SHAPE, encoding_format='jpeg'),
            state: tfds.features.Tensor(shape=(STATE_DIMS,), dtype=np.float32),
        },
        types.ACTION: tfds.features.Tensor(shape=(ACTION_DIMS,), dtype=action_dtype),
        'language_instruction': tfds.features.Text(),
        types.REWARD: tfds.features.Scalar(dtype=np.float32),
        types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
        **{flag: tfds.features.Scalar(dtype=np.bool_) for flag in types.FLAG_FIELDS},
    }
    metadata = {EPISODE_ID: tfds.features.Scalar(dtype=np.int64)}
    return tfds.features.FeaturesDict(
        {types.STEPS: tfds.features.Dataset(steps), METADATA: metadata}
    )


def _as_layout(episode: dict, layout: RobotLayout) -> dict:
    if layout is RobotLayout.STATE:
        return episode
    steps = dict(episode[types.STEPS])
    observation = dict(steps[types.OBSERVATION])
    observation[PROPRIO] = observation.pop(STATE)
    steps[types.OBSERVATION] = observation
    steps[types.ACTION] = steps[types.ACTION].astype(np.float64)
    return {**episode, types.STEPS: steps}


class RobotLike(tfds.core.GeneratorBasedBuilder, skip_registration=True):  # type: ignore[call-arg]
    """The TFDS builder of `write_robot_dataset`: episodes keyed by index, TFDS's defaults."""

    VERSION = tfds.core.Version('1.0.0')
    RELEASE_NOTES = {'1.0.0': 'Robot-like episodes: two JPEG cameras, 7-D actions.'}

    def __init__(self, *, lengths: tuple[int, ...], layout: RobotLayout, seed: int, **kwargs):
        self._lengths = lengths
        self._layout = layout
        self._seed = seed
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(builder=self, features=_features(self._layout))

    def _split_generators(self, dl_manager):
        del dl_manager
        return {_SPLIT: self._generate_examples()}

    def _generate_examples(self):
        for index, length in enumerate(self._lengths):
            episode = make_robot_episode(index, length, seed=self._seed)
            yield index, _as_layout(episode, self._layout)


def write_robot_dataset(
    data_dir: str | pathlib.Path,
    *,
    num_episodes: int = 40,
    max_length: int = 60,
    layout: RobotLayout | str = RobotLayout.STATE,
    seed: int = 0,
) -> pathlib.Path:
    """Writes a robot-like dataset with TFDS's own writer (once); returns its directory.

    Args:
      data_dir: Where TFDS writes (`data_dir/robot_like/1.0.0`).
      num_episodes: How many episodes (>= 1); lengths 1 to `max_length`, log-uniform.
      max_length: The longest episode (>= 1).
      layout: Field names and types (`RobotLayout`).
      seed: Seeds the lengths and every value.

    Returns:
      The dataset directory, for `rlds_reverb.load`.

    Raises:
      ValueError: If `num_episodes` or `max_length` is below 1, or `layout` is not valid.

    Example:
      >>> episodes = rlds_reverb.load(write_robot_dataset('/tmp/robot'), encoded_frames='all')
    """
    chosen = types.as_enum(RobotLayout, layout, argument='layout')
    if num_episodes < 1 or max_length < 1:
        raise ValueError(
            f'num_episodes={num_episodes} and max_length={max_length} must both be >= 1.'
        )
    rng = np.random.default_rng(seed)
    lengths = np.exp(rng.uniform(0, np.log(max_length + 1), num_episodes)).astype(int)
    lengths = tuple(int(n) for n in np.clip(lengths, 1, max_length))
    tfds.disable_progress_bar()
    builder = RobotLike(lengths=lengths, layout=chosen, seed=seed, data_dir=str(data_dir))
    builder.download_and_prepare()
    return pathlib.Path(builder.data_dir)
