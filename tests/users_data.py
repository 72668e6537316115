"""RLDS test data shaped like users' data, written by TFDS's own writer with its defaults.

The suite's other data (`tests/builders.py`, `rlds_reverb.storage.tfds_writer`) is written in
episode order, 3 to 100 episodes per shard. Users' datasets come from TFDS builders:
`download_and_prepare` orders examples by a hash of their keys (shuffling is allowed by
default), and `as_dataset` interleaves the shards 16 records at a time. This module writes
such datasets with a real `tfds.core.GeneratorBasedBuilder` and TFDS's defaults, only the
shard count fixed (TFDS picks it from the size, which is one shard below 64 MiB).

`UsersSpec` describes a dataset (episodes, lengths, endings, which features); the
`make_episodes(spec)` NumPy episodes are what the builder writes, so tests can compute
references from them. Step t of episode e has `observation/state` = [e, t, noise], which
names every step's origin. Features:

    steps/observation/state      float32[3]
    steps/observation/image      uint8[8, 8, 3], tfds.features.Image (PNG)   (images=True)
    steps/action                 float32[2]
    steps/reward, discount       float32 (discounts: 1, now and then less)
    steps/language_instruction   tfds.features.Text                         (strings=True)
    steps/is_first, is_last, is_terminal
    episode_metadata/episode_id  int64 (e: the index in `make_episodes`)
    episode_metadata/agent       tfds.features.Text                         (strings=True)
    episode_metadata/score       float32 (the episode's return)
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from tests import builders

SPLIT = 'train'
STATE, IMAGE, INSTRUCTION = 'state', 'image', 'language_instruction'
METADATA, EPISODE_ID, AGENT, SCORE = 'episode_metadata', 'episode_id', 'agent', 'score'
IMAGE_SHAPE = (8, 8, 3)
# A spread of lengths every default dataset holds: the shortest, the longest, near both.
SPECIAL_LENGTHS = (1, 1, 2, 3, 1000, 999, 500, 17)


def draw_lengths(count: int, *, seed: int = 0, max_drawn: int = 500) -> tuple[int, ...]:
    """Returns `count` episode lengths: `SPECIAL_LENGTHS` (1 to 1,000), then mostly short ones.

    The drawn lengths are log-uniform over [1, max_drawn], so short episodes dominate and a
    few reach hundreds of steps (about 80 steps on average for 500, 21 for 100).
    """
    rng = np.random.default_rng(seed)
    special = list(SPECIAL_LENGTHS[:count])
    drawn = np.exp(rng.uniform(0, np.log(max_drawn + 1), size=count - len(special)))
    lengths = [*special, *np.clip(drawn.astype(int), 1, max_drawn).tolist()]
    rng.shuffle(lengths)  # The special lengths end up anywhere in the split.
    return tuple(int(n) for n in lengths)


@dataclasses.dataclass(frozen=True)
class UsersSpec:
    """What a users' dataset holds.

    Attributes:
      lengths: The episode lengths (>= 1), in key order (episode e has key e).
      num_shards: How many shards TFDS writes (`DownloadConfig(num_shards=...)`).
      images: Whether observations hold a uint8 `image` (`tfds.features.Image`).
      strings: Whether steps hold a `language_instruction` and the metadata an `agent`.
      terminated: Per episode, whether it ends terminated (else truncated); default: a
        seeded draw, both endings present when there are two or more episodes.
      seed: Seeds every value.
      flag_discounts: Whether a terminated episode has discount 0 into and on its terminal
        step, as push's items carry it (then push and export give back the data exactly);
        by default the discounts there are as random as elsewhere (Open X-Embodiment data
        leaves them at 1).
    """

    lengths: tuple[int, ...]
    num_shards: int = 3
    images: bool = True
    strings: bool = True
    terminated: tuple[bool, ...] | None = None
    seed: int = 0
    flag_discounts: bool = False

    def endings(self) -> tuple[bool, ...]:
        """Per episode, True when it is terminated."""
        if self.terminated is not None:
            if len(self.terminated) != len(self.lengths):
                raise ValueError(
                    f'terminated has {len(self.terminated)} entries for '
                    f'{len(self.lengths)} episodes; give one per episode.'
                )
            return tuple(self.terminated)
        rng = np.random.default_rng(self.seed + 1)
        drawn = rng.random(len(self.lengths)) < 0.5
        if len(drawn) >= 2:
            drawn[:2] = (True, False)
        return tuple(bool(x) for x in drawn)

    @property
    def num_steps(self) -> int:
        return sum(self.lengths)


def users_spec(
    num_episodes: int = 300, *, seed: int = 0, max_drawn: int = 500, **options
) -> UsersSpec:
    """Returns a spec of `num_episodes` episodes of `draw_lengths` lengths; `UsersSpec` options."""
    lengths = draw_lengths(num_episodes, seed=seed, max_drawn=max_drawn)
    return UsersSpec(lengths, seed=seed, **options)


def make_episode(spec: UsersSpec, index: int, terminated: bool) -> dict:
    """Returns episode `index` as TFDS writes it: `steps` a dict of `[T, ...]` arrays."""
    length = spec.lengths[index]
    rng = np.random.default_rng([spec.seed, index])
    t = np.arange(length)
    state = np.stack([np.full(length, index), t, rng.normal(size=length)], axis=1)
    observation = {STATE: state.astype(np.float32)}
    if spec.images:
        observation[IMAGE] = rng.integers(0, 256, size=(length, *IMAGE_SHAPE), dtype=np.uint8)
    discount = np.where(rng.random(length) < 0.9, 1.0, rng.random(length)).astype(np.float32)
    if spec.flag_discounts and terminated:
        discount[-2:] = 0
    reward = rng.normal(size=length).astype(np.float32)
    is_last = t == length - 1
    steps = {
        types.OBSERVATION: observation,
        types.ACTION: rng.uniform(-1, 1, size=(length, 2)).astype(np.float32),
        types.REWARD: reward,
        types.DISCOUNT: discount,
        types.IS_FIRST: t == 0,
        types.IS_LAST: is_last,
        types.IS_TERMINAL: is_last & terminated,
    }
    metadata = {EPISODE_ID: np.int64(index), SCORE: np.float32(reward[:-1].sum())}
    if spec.strings:
        steps[INSTRUCTION] = np.array([f'pick block {index % 7}'.encode()] * length, object)
        metadata[AGENT] = f'agent-{index % 3}'.encode()
    return {types.STEPS: steps, METADATA: metadata}


@functools.lru_cache(maxsize=8)
def _cached_episodes(spec: UsersSpec) -> tuple[dict, ...]:
    endings = spec.endings()
    return tuple(make_episode(spec, i, endings[i]) for i in range(len(spec.lengths)))


def make_episodes(spec: UsersSpec) -> list[dict]:
    """Returns the spec's episodes in key order (NumPy; treat as read-only, they are cached)."""
    return list(_cached_episodes(spec))


def make_features(spec: UsersSpec) -> tfds.features.FeaturesDict:
    """Returns the TFDS features of the spec's episodes (see the module docstring)."""
    observation = {STATE: tfds.features.Tensor(shape=(3,), dtype=np.float32)}
    if spec.images:
        observation[IMAGE] = tfds.features.Image(shape=IMAGE_SHAPE, dtype=np.uint8)
    steps = {
        types.OBSERVATION: tfds.features.FeaturesDict(observation),
        types.ACTION: tfds.features.Tensor(shape=(2,), dtype=np.float32),
        types.REWARD: tfds.features.Scalar(dtype=np.float32),
        types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
        **{flag: tfds.features.Scalar(dtype=np.bool_) for flag in types.FLAG_FIELDS},
    }
    metadata = {
        EPISODE_ID: tfds.features.Scalar(dtype=np.int64),
        SCORE: tfds.features.Scalar(dtype=np.float32),
    }
    if spec.strings:
        steps[INSTRUCTION] = tfds.features.Text()
        metadata[AGENT] = tfds.features.Text()
    return tfds.features.FeaturesDict(
        {
            types.STEPS: tfds.features.Dataset(steps),
            METADATA: tfds.features.FeaturesDict(metadata),
        }
    )


class UsersRlds(builders.SpecBuilder, skip_registration=True):
    """A TFDS builder of a `UsersSpec`'s episodes, keyed by their index, TFDS's defaults."""

    VERSION = tfds.core.Version('1.0.0')
    RELEASE_NOTES = {'1.0.0': "Test data shaped like users' data."}

    def make_features(self) -> tfds.features.FeaturesDict:
        return make_features(self.spec)

    def make_examples(self):
        return make_episodes(self.spec)


def write(data_dir: pathlib.Path | str, spec: UsersSpec) -> pathlib.Path:
    """Prepares the spec's dataset with TFDS in `data_dir/users_rlds/1.0.0`; returns that dir."""
    tfds.disable_progress_bar()
    builder = UsersRlds(spec=spec, data_dir=str(data_dir))
    config = tfds.download.DownloadConfig(num_shards=spec.num_shards)
    builder.download_and_prepare(download_config=config)
    return pathlib.Path(builder.data_dir)


def read_with_tfds(directory: pathlib.Path | str, split: str = SPLIT) -> list[dict]:
    """Reads a dataset as TFDS's `as_dataset` gives it: NumPy episodes, steps `[T, ...]`."""
    dataset = tfds.builder_from_directory(str(directory)).as_dataset(split=split)
    return read_numpy(dataset)


def read_numpy(dataset: tf.data.Dataset) -> list[dict]:
    """Returns an RLDS dataset's episodes as NumPy, steps batched to `[T, ...]`."""

    def _whole(episode):
        return {**episode, types.STEPS: episodes_lib.batch_steps(episode[types.STEPS])}

    return [tf.nest.map_structure(lambda x: np.asarray(x.numpy()), e) for e in dataset.map(_whole)]


def episode_ids(episodes: Sequence[dict]) -> list[int]:
    """The `make_episodes` index of each episode (read back from its metadata)."""
    return [int(e[METADATA][EPISODE_ID]) for e in episodes]
