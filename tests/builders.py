"""Builds RLDS test data: one episode builder and the dataset forms (real tf.data, no mocks).

`episode()` returns one episode's steps as a dict of `[T, ...]` NumPy arrays (the step
fields and the three flags). Every field can be given per step; what is not given gets a
default. `case_episodes()` expands the compact episode specs of `tests/cases` with it.
The dataset constructors turn such dicts into an RLDS dataset (`rlds`), one whose step
shapes are partly unknown (`rlds_from_generator`), the whole-episode tensor form
(`episode_tensors`), or a TFDS directory (`write_tfds`; `SpecBuilder`, the base of the
test datasets written by TFDS' own builder with its defaults).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.storage import tfds_writer

# How an episode ends: `is_last` and `is_terminal` on its last step, `is_last` only, or
# neither (a segment: a chunk of a longer stream).
TERMINATED, TRUNCATED, SEGMENT = 'terminated', 'truncated', 'segment'
ENDINGS = (TERMINATED, TRUNCATED, SEGMENT)
# The dataset forms the adders accept: an RLDS dataset, or whole-episode tensors.
FORMS = ('rlds', 'tensors')


def as_arrays(values, dtype) -> np.ndarray | dict:
    """Returns `values` as arrays: lists become `dtype`, arrays keep theirs, dicts recurse."""
    if isinstance(values, dict):
        return {k: as_arrays(v, dtype) for k, v in values.items()}
    if isinstance(values, np.ndarray):
        return values
    return np.asarray(values, dtype)


def _length_of(*candidates) -> int:
    for values in candidates:
        if values is not None and not np.isscalar(values):
            return len(tf.nest.flatten(as_arrays(values, np.float32))[0])
    raise ValueError('episode() needs a length or per-step values to count the steps.')


def episode(
    length: int | None = None,
    *,
    ending: str = TERMINATED,
    observation=None,
    action=None,
    reward=None,
    discount=1.0,
    value=None,
    extras: dict | None = None,
    obs_dim: int | None = 2,
    start: float = 0.0,
    dtype: type = np.float32,
) -> dict:
    """Returns one valid episode's steps as a dict of `[T, ...]` arrays.

    Per-step values (lists, arrays or nested dicts of them) are used as given: arrays keep
    their dtype; lists become `dtype` (observation, reward, discount, value), int64
    (action) or int32 (extra fields). What is not given:

    * observation: `start + arange(T * obs_dim)` as `[T, obs_dim]`, or `start + t` (`[T]`)
      with `obs_dim=None`;
    * action: the step index t (int64); reward: `start + t`;
    * discount: the number given (1.0) on every step; value and extras: absent.

    Args:
      length: T; by default the number of per-step values given.
      ending: `TERMINATED` (`is_last` and `is_terminal` on the last step), `TRUNCATED`
        (`is_last` only) or `SEGMENT` (neither).
      observation: Per-step observations (any nest: dicts, images).
      action: Per-step actions.
      reward: Per-step rewards (scalars, vectors or a dict of them).
      discount: A number for every step, or per-step discounts (possibly a dict).
      value: Per-step value estimates, as the `value` field.
      extras: Extra step fields, name -> per-step values.
      obs_dim: The size of the default observation (None: scalar observations).
      start: Where the default observations and rewards start.
      dtype: The float dtype of defaults and of list values.

    Returns:
      The step fields, the flags and the extras, each `[T, ...]`.
    """
    if ending not in ENDINGS:
        raise ValueError(f'ending={ending!r} is not valid; expected one of {ENDINGS}.')
    if length is None:
        length = _length_of(reward, observation, action, discount, value)
    index = np.arange(length)
    if observation is None:
        if obs_dim is None:
            observation = (start + index).astype(dtype)
        else:
            observation = (start + np.arange(length * obs_dim)).reshape(length, obs_dim)
            observation = observation.astype(dtype)
    steps = {
        types.OBSERVATION: as_arrays(observation, dtype),
        types.ACTION: index.astype(np.int64) if action is None else as_arrays(action, np.int64),
        types.REWARD: (start + index).astype(dtype) if reward is None else as_arrays(reward, dtype),
        types.DISCOUNT: (
            np.full(length, discount, dtype)
            if np.isscalar(discount)
            else as_arrays(discount, dtype)
        ),
    }
    if value is not None:
        steps[types.VALUE] = as_arrays(value, dtype)
    is_last = np.zeros(length, bool)
    if length and ending != SEGMENT:
        is_last[-1] = True
    steps[types.IS_FIRST] = index == 0
    steps[types.IS_LAST] = is_last
    steps[types.IS_TERMINAL] = is_last & (ending == TERMINATED)
    for name, values in (extras or {}).items():
        steps[name] = as_arrays(values, np.int32)
    return steps


def case_episodes(specs: Sequence[dict]) -> list[dict]:
    """Returns the episodes of compact case specs (keyword arguments of `episode`).

    Unless a spec gives its observations, the observation of step t of episode e is the
    float scalar 10 e + t (the step's id in `tests/cases`).
    """
    return [
        episode(**{'obs_dim': None, 'start': 10.0 * index, **spec})
        for index, spec in enumerate(specs)
    ]


# --- Datasets ------------------------------------------------------------------------------


def rlds(episodes: Sequence[dict]) -> tf.data.Dataset:
    """Returns an RLDS dataset with one episode per dict of `[T, ...]` step arrays."""
    dataset = None
    for steps in episodes:
        element = tf.data.Dataset.from_tensors(
            {types.STEPS: tf.data.Dataset.from_tensor_slices(steps)}
        )
        dataset = element if dataset is None else dataset.concatenate(element)
    return dataset


def case_dataset(specs: Sequence[dict]) -> tf.data.Dataset:
    """Returns the RLDS dataset of compact case specs (see `case_episodes`)."""
    return rlds(case_episodes(specs))


def episode_tensors(episodes: Sequence[dict]) -> tf.data.Dataset:
    """Returns the episodes in the whole-episode tensor form: one `[T, ...]` nest each."""
    dataset = None
    for steps in episodes:
        element = tf.data.Dataset.from_tensors(steps)
        dataset = element if dataset is None else dataset.concatenate(element)
    return dataset


def dataset(episodes: Sequence[dict], form: str) -> tf.data.Dataset:
    """Returns the episodes as an RLDS dataset (`'rlds'`) or as episode tensors (`'tensors'`)."""
    if form not in FORMS:
        raise ValueError(f'form={form!r} is not valid; expected one of {FORMS}.')
    return rlds(episodes) if form == 'rlds' else episode_tensors(episodes)


def step_signature(**replaced: tf.TensorSpec) -> dict[str, tf.TensorSpec]:
    """Returns the per-step signature of default `episode()` steps, some fields replaced."""
    signature = {
        types.OBSERVATION: tf.TensorSpec([2], tf.float32),
        types.ACTION: tf.TensorSpec([], tf.int64),
        types.REWARD: tf.TensorSpec([], tf.float32),
        types.DISCOUNT: tf.TensorSpec([], tf.float32),
    }
    signature.update({flag: tf.TensorSpec([], tf.bool) for flag in types.FLAG_FIELDS})
    signature.update(replaced)
    return signature


def rlds_from_generator(episodes: Sequence[dict], signature: dict) -> tf.data.Dataset:
    """Returns an RLDS dataset read from a generator, so step shapes may vary by episode.

    `signature` is per step; a dimension given as None (or an unknown rank) stays unknown.
    """

    def _generate():
        yield from episodes

    def _whole(spec: tf.TensorSpec) -> tf.TensorSpec:
        if spec.shape.rank is None:
            return tf.TensorSpec(None, spec.dtype)
        return tf.TensorSpec([None, *spec.shape], spec.dtype)

    whole = tf.data.Dataset.from_generator(
        _generate, output_signature=tf.nest.map_structure(_whole, signature)
    )
    return whole.map(lambda steps: {types.STEPS: tf.data.Dataset.from_tensor_slices(steps)})


def read_episodes(dataset: tf.data.Dataset) -> list[dict]:
    """Returns each episode's steps (of either form) as a nest of NumPy `[T, ...]` arrays."""
    if isinstance(dataset.element_spec, dict) and isinstance(
        dataset.element_spec.get(types.STEPS), tf.data.DatasetSpec
    ):
        dataset = episodes_lib.to_episode_tensors(dataset)
    return [tf.nest.map_structure(lambda x: x.numpy(), e) for e in dataset]


# --- TFDS directories ----------------------------------------------------------------------


def step_features(**replaced) -> tfds.features.FeaturesDict:
    """The TFDS features of default `episode()` steps; a replacement of None drops a field."""
    fields = {
        types.OBSERVATION: tfds.features.Tensor(shape=(2,), dtype=np.float32),
        types.ACTION: tfds.features.Scalar(dtype=np.int64),
        types.REWARD: tfds.features.Scalar(dtype=np.float32),
        types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
        **replaced,
    }
    return tfds_writer.make_rlds_features({k: v for k, v in fields.items() if v is not None})


def write_tfds(
    directory: pathlib.Path,
    episodes,
    *,
    name: str,
    features: tfds.features.FeaturesDict | None = None,
    episodes_per_shard: int = 100,
) -> pathlib.Path:
    """Writes the episodes (dicts of step arrays) as a TFDS directory `directory/name/1.0.0`."""
    return tfds_writer.write_rlds_dataset(
        pathlib.Path(directory) / name / '1.0.0',
        ({types.STEPS: steps} for steps in episodes),
        features=features or step_features(),
        name=name,
        episodes_per_shard=episodes_per_shard,
    )


class SpecBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A TFDS builder of a test spec's episodes, keyed by their index, one split: 'train'.

    TFDS' own writer with its defaults: it orders examples by a hash of their keys, so the
    shards hold the episodes shuffled (unless `DISABLE_SHUFFLING`). A subclass is named
    for its dataset (TFDS takes the name from the class), sets `VERSION` and
    `RELEASE_NOTES`, and makes the features and examples of `self.spec`.
    """

    DISABLE_SHUFFLING = False

    def __init__(self, *, spec: Any, **kwargs):
        self.spec = spec
        super().__init__(**kwargs)

    def make_features(self) -> tfds.features.FeaturesDict:
        """Returns the dataset's features."""
        raise NotImplementedError

    def make_examples(self) -> Iterable[dict]:
        """Returns the episodes as TFDS takes them, in index order."""
        raise NotImplementedError

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self, features=self.make_features(), disable_shuffling=self.DISABLE_SHUFFLING
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        return {'train': self._generate_examples()}

    def _generate_examples(self):
        yield from enumerate(self.make_examples())


def run_transform(transform, episodes: Sequence[dict], form: str) -> list[dict]:
    """Applies a `tf.data` transform to the episodes in `form`; returns the output's steps."""
    return read_episodes(dataset(episodes, form).apply(transform))
