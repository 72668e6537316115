"""Robot datasets of different specs and lengths, some episodes invalid, for mixtures.

Written by TFDS's own writer with its defaults (a `GeneratorBasedBuilder`, shards
shuffled by key), built on `tests/robot_data.py`'s episodes:

* `KIND_A`: `robot_data`'s spec as it is;
* `KIND_B`: the same shape under other names and types, as another lab would store it:
  `observation/state` is `observation/proprio`, `action/gripper` is float64, and an extra
  `observation/depth` float32[2]; `observation/proprio[0]` is the episode index + 1000
  (so a mixed element names its dataset: `OFFSET_B`).

In both, every `invalid_every`-th episode (index % invalid_every == 1) holds a NaN reward
at its first step: validation (rule `finite`) drops it.
"""

from __future__ import annotations

import pathlib

import numpy as np
import tensorflow_datasets as tfds

from rlds_reverb.core import types
from tests import robot_data as rd

KIND_A, KIND_B = 'a', 'b'
PROPRIO, DEPTH = 'proprio', 'depth'
OFFSET_B = 1000


def _variant_features(spec: rd.RobotSpec) -> tfds.features.FeaturesDict:
    """Returns kind B's features: robot_data's, renamed and retyped."""
    base = rd.make_features(spec)
    steps = dict(base[types.STEPS].feature.items())
    observation = dict(steps[types.OBSERVATION].items())
    observation[PROPRIO] = observation.pop(rd.STATE)
    observation[DEPTH] = tfds.features.Tensor(shape=(2,), dtype=np.float32)
    action = dict(steps[types.ACTION].items())
    action[rd.GRIPPER] = tfds.features.Tensor(shape=(1,), dtype=np.float64)
    steps[types.OBSERVATION] = tfds.features.FeaturesDict(observation)
    steps[types.ACTION] = tfds.features.FeaturesDict(action)
    metadata = dict(base[rd.METADATA].items())
    return tfds.features.FeaturesDict(
        {types.STEPS: tfds.features.Dataset(steps), rd.METADATA: metadata}
    )


def make_written(spec: rd.RobotSpec, index: int, *, kind: str, invalid_every: int) -> dict:
    """Returns episode `index` as the builder writes it (JPEG cameras as bytes)."""
    episode = rd.make_episode(spec, index)
    steps = dict(episode[types.STEPS])
    observation = {**steps[types.OBSERVATION], **episode['jpeg']}
    action = dict(steps[types.ACTION])
    if index % invalid_every == 1:
        reward = steps[types.REWARD].copy()
        reward[0] = np.nan
        steps[types.REWARD] = reward
    if kind == KIND_B:
        state = observation.pop(rd.STATE).copy()
        state[:, 0] += OFFSET_B
        observation[PROPRIO] = state
        observation[DEPTH] = np.full((len(state), 2), index, np.float32)
        action[rd.GRIPPER] = action[rd.GRIPPER].astype(np.float64)
    steps[types.OBSERVATION] = observation
    steps[types.ACTION] = action
    return {types.STEPS: steps, rd.METADATA: episode[rd.METADATA]}


class MixRlds(rd.RobotRlds, skip_registration=True):
    """A TFDS builder of kind A or B episodes with some invalid ones, TFDS's defaults."""

    def __init__(self, *, spec: rd.RobotSpec, kind: str, invalid_every: int, **kwargs):
        self._kind = kind
        self._invalid_every = invalid_every
        super().__init__(spec=spec, **kwargs)

    def make_features(self) -> tfds.features.FeaturesDict:
        if self._kind == KIND_A:
            return rd.make_features(self.spec)
        return _variant_features(self.spec)

    def make_examples(self):
        return (
            make_written(self.spec, index, kind=self._kind, invalid_every=self._invalid_every)
            for index in range(len(self.spec.lengths))
        )


def write(
    data_dir: pathlib.Path, spec: rd.RobotSpec, *, kind: str, invalid_every: int
) -> pathlib.Path:
    """Prepares the dataset in `data_dir/<kind><key>/mix_rlds/1.0.0` (once); returns it."""
    tfds.disable_progress_bar()
    root = pathlib.Path(data_dir) / f'{kind}{invalid_every}_{spec.key()}'
    builder = MixRlds(spec=spec, kind=kind, invalid_every=invalid_every, data_dir=str(root))
    builder.download_and_prepare()
    return pathlib.Path(builder.data_dir)
