"""Synthetic RLDS datasets for benchmarks and tests (HalfCheetah-like by default).

All random data is drawn with NumPy up front and sliced by `tf.data`; no Python generator
runs while the dataset is read. Observations come from a table of at most
`_MAX_OBSERVATION_BYTES` (rows are reused beyond it), so large image variants stay small in
memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from rlds_reverb.core import checks, types

__all__ = [
    'make_synthetic_episodes',
]

_MAX_OBSERVATION_BYTES = 64 * 2**20


def _make_observation_table(
    rng: np.random.Generator, rows: int, shape: Sequence[int], dtype: np.dtype | type
) -> np.ndarray:
    """Returns `rows` random observations: uniform bytes for integers, normal for floats."""
    dtype = np.dtype(dtype)
    if dtype.kind in 'iu':
        count = rows * int(np.prod(shape, dtype=np.int64))
        raw = rng.bytes(count * dtype.itemsize)
        return np.frombuffer(raw, dtype=dtype).reshape(rows, *shape)
    if dtype.kind == 'f':
        return rng.standard_normal(size=(rows, *shape)).astype(dtype)
    raise ValueError(f'observation_dtype={dtype} is not supported; use a float or integer dtype.')


def _make_step_arrays(
    rng: np.random.Generator,
    *,
    num_episodes: int,
    episode_length: int,
    action_shape: Sequence[int],
    terminal: bool,
) -> dict[str, np.ndarray]:
    """Returns every field but the observation as `[num_episodes, episode_length, ...]`."""
    shape = (num_episodes, episode_length)
    last = np.arange(episode_length) == episode_length - 1
    actions = rng.uniform(-1.0, 1.0, size=(*shape, *action_shape)).astype(np.float32)
    rewards = rng.standard_normal(size=shape).astype(np.float32)
    actions[:, -1] = 0.0
    rewards[:, -1] = 0.0
    discounts = np.ones(shape, np.float32)
    discounts[:, -1] = 0.0 if terminal else 1.0
    return {
        types.ACTION: actions,
        types.REWARD: rewards,
        types.DISCOUNT: discounts,
        types.IS_FIRST: np.broadcast_to(np.arange(episode_length) == 0, shape).copy(),
        types.IS_LAST: np.broadcast_to(last, shape).copy(),
        types.IS_TERMINAL: np.broadcast_to(last & terminal, shape).copy(),
    }


def make_synthetic_episodes(
    *,
    num_episodes: int,
    episode_length: int,
    observation_shape: Sequence[int] = (17,),
    action_shape: Sequence[int] = (6,),
    observation_dtype: np.dtype | type = np.float32,
    seed: int = 0,
    terminal: bool = True,
) -> tf.data.Dataset:
    """Returns a synthetic RLDS dataset of equal-length episodes (deterministic for a seed).

    Each episode has `episode_length` steps: `is_first` on step 0, `is_last` on the final
    step (with `is_terminal` if `terminal`), whose action and reward are 0 and discount 0
    (terminal) or 1 (truncated). Other steps: random observations (normal floats, or uniform
    integers such as uint8 pixels), float32 actions uniform in [-1, 1], standard-normal
    float32 rewards, discount 1.

    Args:
      num_episodes: How many episodes.
      episode_length: Steps per episode, the last (bootstrap) step included; at least 1.
      observation_shape: The shape of one observation; `(84, 84, 3)` for images.
      action_shape: The shape of one action.
      observation_dtype: The observation dtype; `np.uint8` for images.
      seed: The NumPy seed.
      terminal: Whether episodes end in a terminal state (else they are truncated).

    Returns:
      An RLDS dataset (see `rlds_reverb.core.types`).

    Raises:
      ValueError: If a count is out of range or the dtype is not numeric.

    Example:
      >>> images = make_synthetic_episodes(num_episodes=4, episode_length=100,
      ...     observation_shape=(84, 84, 3), observation_dtype=np.uint8)
    """
    checks.check_int_at_least(num_episodes, 0, argument='num_episodes')
    checks.check_int_at_least(episode_length, 1, argument='episode_length')
    rng = np.random.default_rng(seed)
    row_bytes = (
        int(np.prod(observation_shape, dtype=np.int64)) * np.dtype(observation_dtype).itemsize
    )
    total_rows = num_episodes * episode_length
    rows = max(1, min(total_rows, _MAX_OBSERVATION_BYTES // max(row_bytes, 1)))
    table = tf.constant(
        _make_observation_table(rng, rows, tuple(observation_shape), observation_dtype)
    )
    steps = _make_step_arrays(
        rng,
        num_episodes=num_episodes,
        episode_length=episode_length,
        action_shape=tuple(action_shape),
        terminal=terminal,
    )
    starts = (np.arange(num_episodes, dtype=np.int64) * episode_length) % rows
    offsets = tf.range(episode_length, dtype=tf.int64)

    def _to_episode(start: tf.Tensor, episode_steps: types.Step) -> types.Episode:
        observations = tf.gather(table, (start + offsets) % rows)
        return {
            types.STEPS: tf.data.Dataset.from_tensor_slices(
                {types.OBSERVATION: observations, **episode_steps}
            )
        }

    return tf.data.Dataset.from_tensor_slices((starts, steps)).map(_to_episode)
