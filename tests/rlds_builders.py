"""Builds small in-memory RLDS datasets for tests (real tf.data, no mocks)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from rlds_reverb import types


def make_flags(length: int, *, terminal: bool) -> dict[str, np.ndarray]:
    """Returns valid is_first/is_last/is_terminal arrays for one episode."""
    is_first = np.zeros(length, bool)
    is_last = np.zeros(length, bool)
    if length:
        is_first[0] = True
        is_last[-1] = True
    return {
        types.IS_FIRST: is_first,
        types.IS_LAST: is_last,
        types.IS_TERMINAL: is_last & terminal,
    }


def make_episode(
    length: int,
    *,
    terminal: bool = True,
    obs_dim: int = 2,
    start: float = 0.0,
    discount: float = 1.0,
    dtype: type = np.float32,
) -> dict[str, np.ndarray]:
    """Returns one valid episode's steps as arrays: obs [T, obs_dim], int64 actions."""
    steps = {
        types.OBSERVATION: (start + np.arange(length * obs_dim))
        .reshape(length, obs_dim)
        .astype(dtype),
        types.ACTION: np.arange(length, dtype=np.int64),
        types.REWARD: (start + np.arange(length)).astype(dtype),
        types.DISCOUNT: np.full(length, discount, dtype),
    }
    steps.update(make_flags(length, terminal=terminal))
    return steps


def make_rlds(episodes: Sequence[dict]) -> tf.data.Dataset:
    """Returns an RLDS dataset with one episode per dict of `[T, ...]` step arrays."""
    dataset = None
    for steps in episodes:
        episode = tf.data.Dataset.from_tensors(
            {types.STEPS: tf.data.Dataset.from_tensor_slices(steps)}
        )
        dataset = episode if dataset is None else dataset.concatenate(episode)
    return dataset


def make_rlds_from_generator(episodes: Sequence[dict], step_signature: dict) -> tf.data.Dataset:
    """Returns an RLDS dataset whose step shapes may vary (unknown dims in the signature)."""

    def _generate():
        yield from episodes

    batched_signature = tf.nest.map_structure(
        lambda s: tf.TensorSpec([None, *s.shape], s.dtype), step_signature
    )
    whole = tf.data.Dataset.from_generator(_generate, output_signature=batched_signature)
    return whole.map(lambda steps: {types.STEPS: tf.data.Dataset.from_tensor_slices(steps)})
