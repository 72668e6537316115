"""Dataset statistics for `rlds-reverb info`: counts, endings, lengths and returns."""

from __future__ import annotations

import tensorflow as tf
import tree

from rlds_reverb.check import summary
from rlds_reverb.check.summary import DatasetStats
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import specs, types

__all__ = [
    'DatasetStats',
    'describe_dataset',
]


def summarize_episode(steps: types.Nest) -> dict[str, tf.Tensor]:
    """Length, ending and undiscounted return (all reward leaves summed) of one episode."""
    is_last = steps[types.IS_LAST]
    rewards = [tf.reduce_sum(tf.cast(r, tf.float64)) for r in tree.flatten(steps[types.REWARD])]
    return {
        'length': episodes_lib.episode_length(steps),
        'terminal': tf.reduce_any(is_last & steps[types.IS_TERMINAL]),
        'finished': tf.reduce_any(is_last),
        'return': tf.add_n(rewards),
    }


def describe_dataset(episodes: tf.data.Dataset) -> DatasetStats:
    """Walks an RLDS dataset once, one whole episode at a time, and summarizes it.

    The return of an episode is the sum of its rewards (every leaf of a nested reward).

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).

    Returns:
      A `DatasetStats`.

    Raises:
      SourceError: If the dataset holds no RLDS steps.
      SpecMismatchError: If required step fields are missing.

    Example:
      >>> print(describe_dataset(rlds_reverb.load(path)).format())
    """
    step_spec = specs.get_step_spec(episodes)
    summaries = episodes_lib.to_episode_tensors(episodes).map(
        episodes_lib.without_autograph(summarize_episode),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    rows = list(summaries.as_numpy_iterator())
    return summary.summarize_episodes(
        [r['length'] for r in rows],
        [r['terminal'] for r in rows],
        [r['finished'] for r in rows],
        [r['return'] for r in rows],
        step_spec=step_spec,
    )
