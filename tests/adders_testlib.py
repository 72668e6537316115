"""Helpers shared by the adders tests: build episodes from compact cases, run transforms."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types


def to_arrays(x, dtype=np.float32):
    """Returns `x` with every list of numbers as an array; dicts stay dicts (case data)."""
    if isinstance(x, dict):
        return {k: to_arrays(v, dtype) for k, v in x.items()}
    return np.asarray(x, dtype)


def build_episode(spec: dict, index: int) -> dict:
    """Returns full RLDS step arrays of one compact case episode (see `cases.adders_cases`)."""
    reward = to_arrays(spec['reward'])
    size = len(tf.nest.flatten(reward)[0])
    ending = spec['ending']
    is_last = np.zeros(size, bool)
    if ending != 'segment':
        is_last[-1] = True
    steps = {
        types.OBSERVATION: np.asarray(
            spec.get('observation', 10 * index + np.arange(size)), np.float32
        ),
        types.ACTION: np.arange(size, dtype=np.int64),
        types.REWARD: reward,
        types.DISCOUNT: to_arrays(spec.get('discount', np.ones(size))),
        types.IS_FIRST: np.arange(size) == 0,
        types.IS_LAST: is_last,
        types.IS_TERMINAL: is_last & (ending == 'terminated'),
    }
    if 'value' in spec:
        steps[types.VALUE] = np.asarray(spec['value'], np.float32)
    for name, values in spec.get('extras', {}).items():
        steps[name] = np.asarray(values, np.int32)
    return steps


def make_dataset(episodes: Sequence[dict], form: str) -> tf.data.Dataset:
    """Returns the episodes (dicts of `[T, ...]` arrays) as an RLDS or episode-tensor dataset."""
    tensors = None
    for steps in episodes:
        element = tf.data.Dataset.from_tensors(steps)
        tensors = element if tensors is None else tensors.concatenate(element)
    if form == 'tensors':
        return tensors
    return episodes_lib.to_rlds_episodes(tensors)


def collect_episodes(dataset: tf.data.Dataset) -> list[dict]:
    """Returns each episode's steps as a nest of NumPy `[T, ...]` arrays."""
    if isinstance(dataset.element_spec, dict) and isinstance(
        dataset.element_spec.get(types.STEPS), tf.data.DatasetSpec
    ):
        dataset = episodes_lib.to_episode_tensors(dataset)
    return [tf.nest.map_structure(lambda x: x.numpy(), e) for e in dataset]


def run(transform: Callable, episodes: Sequence[dict], form: str) -> list[dict]:
    """Applies `transform` to the episodes in `form` and returns the output episodes."""
    return collect_episodes(make_dataset(episodes, form).apply(transform))


def assert_nest_close(actual, expected, *, atol: float = 1e-5, where: str = '') -> None:
    """Asserts two nests hold the same structure and numerically close leaves."""
    expected = to_arrays(expected, np.float64)
    tf.nest.assert_same_structure(actual, expected)
    for a, e in zip(tf.nest.flatten(actual), tf.nest.flatten(expected), strict=True):
        a = np.asarray(a)
        e = np.asarray(e, dtype=a.dtype if a.dtype != bool else None)
        np.testing.assert_allclose(
            a.astype(np.float64), np.asarray(e, np.float64), atol=atol, err_msg=where
        )
