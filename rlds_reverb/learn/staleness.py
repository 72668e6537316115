"""Staleness: drop samples whose data version is older than a bound, before batching.

With `LearnerDataset(..., staleness=StalenessFilter(version, max_staleness=k))`, items carry
a `types.DATA_VERSION` field; a sample whose version is below `version - k` is dropped
before batching (so the per-table counts of every batch stay exact) and counted in
`StalenessFilter.dropped`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import reverb
import tensorflow as tf
import tree

from rlds_reverb.core import checks, types

__all__ = ['StalenessFilter']


@dataclasses.dataclass
class StalenessFilter:
    """Drops samples whose data version is older than `current_version - max_staleness`.

    Items must carry an integer `types.DATA_VERSION` field (anywhere in the item nest, for
    example `policy_info['data_version']`); for sequence items the oldest step counts.

    Args:
      current_version: A scalar integer `tf.Variable` holding the learner's current version
        (for example the policy's training iteration); read for every sample.
      max_staleness: The largest accepted `current_version - version`, >= 0.
      field: The field name holding the version.

    Attributes:
      dropped: An int64 variable counting the samples dropped so far.

    Example:
      >>> staleness = StalenessFilter(version_variable, max_staleness=2)
    """

    current_version: tf.Variable
    max_staleness: int
    field: str = types.DATA_VERSION
    dropped: tf.Variable = dataclasses.field(init=False)

    def __post_init__(self):
        if not isinstance(self.current_version, tf.Variable):
            raise ValueError(
                f'current_version must be a tf.Variable; got {type(self.current_version)}.'
            )
        checks.check_int_at_least(self.max_staleness, 0, argument='max_staleness')
        self.dropped = tf.Variable(0, dtype=tf.int64, trainable=False, name='dropped_stale')

    def find_version_path(self, item_spec: types.SpecNest) -> tuple:
        """Returns the path of the version leaf in `item_spec`.

        Raises:
          ValueError: If no leaf, or more than one, is named `field`, or it is not integer.

        Example:
          >>> staleness.find_version_path(item_spec)
        """
        paths = [
            (path, spec)
            for path, spec in tree.flatten_with_path(item_spec)
            if path and path[-1] == self.field
        ]
        if len(paths) != 1:
            raise ValueError(
                f'Staleness needs exactly one {self.field!r} field in the items; found '
                f'{len(paths)} in the item spec {item_spec}.'
            )
        path, spec = paths[0]
        if not spec.dtype.is_integer:
            raise ValueError(f'The {self.field!r} field must be an integer; found {spec.dtype}.')
        return path

    def make_predicate(self, item_spec: types.SpecNest) -> Callable[[Any], tf.Tensor]:
        """Returns a `tf.data` filter predicate on `ReplaySample`s that counts what it drops.

        Example:
          >>> samples.filter(staleness.make_predicate(item_spec))
        """
        path = self.find_version_path(item_spec)

        def keep(sample: reverb.ReplaySample) -> tf.Tensor:
            leaf = _get_path(sample.data, path)
            oldest = tf.cast(tf.reduce_min(leaf), tf.int64)
            fresh = oldest >= tf.cast(self.current_version, tf.int64) - self.max_staleness
            self.dropped.assign_add(tf.cast(tf.logical_not(fresh), tf.int64))
            return fresh

        return keep


def _get_path(nest: Any, path: tuple) -> Any:
    for key in path:
        nest = (
            getattr(nest, key) if isinstance(key, str) and hasattr(nest, '_fields') else nest[key]
        )
    return nest
