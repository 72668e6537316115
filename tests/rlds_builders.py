"""Builds small in-memory RLDS datasets for tests (real tf.data, no mocks)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from rlds_reverb.core import types


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


def make_step_signature(**replaced: tf.TensorSpec) -> dict[str, tf.TensorSpec]:
    """Returns the per-step signature of `make_episode` steps, with some fields replaced."""
    signature = {
        types.OBSERVATION: tf.TensorSpec([2], tf.float32),
        types.ACTION: tf.TensorSpec([], tf.int64),
        types.REWARD: tf.TensorSpec([], tf.float32),
        types.DISCOUNT: tf.TensorSpec([], tf.float32),
    }
    signature.update({flag: tf.TensorSpec([], tf.bool) for flag in types.FLAG_FIELDS})
    signature.update(replaced)
    return signature


def make_rlds_from_generator(episodes: Sequence[dict], step_signature: dict) -> tf.data.Dataset:
    """Returns an RLDS dataset whose step shapes may vary (unknown dims in the signature)."""

    def _generate():
        yield from episodes

    batched_signature = tf.nest.map_structure(
        lambda s: tf.TensorSpec([None, *s.shape], s.dtype), step_signature
    )
    whole = tf.data.Dataset.from_generator(_generate, output_signature=batched_signature)
    return whole.map(lambda steps: {types.STEPS: tf.data.Dataset.from_tensor_slices(steps)})


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Runs `python -m rlds_reverb.cli ARGS` in a subprocess (bounded); returns the result."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
    return subprocess.run(
        [sys.executable, '-m', 'rlds_reverb.cli', *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
