"""Reverb table presets, their rate limiters, signatures and pre-push checks.

Every preset validates its arguments with reverb's own rules (`reverb/rate_limiters.py`)
before Reverb sees them, and raises `TableError` (a `ValueError`) naming the argument, the
value and the valid range. Signatures come from the item kind's spec, which uses the same
spec functions as the converter (`rlds_reverb.core.specs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import reverb
import tensorflow as tf

from rlds_reverb.core import checks, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core.errors import TableError
from rlds_reverb.core.frames import FrameFormats
from rlds_reverb.core.specs import PolicyInfoFn
from rlds_reverb.transform import carry
from rlds_reverb.transform import items as items_lib

__all__ = [
    'TablePreset',
    'fifo_queue',
    'make_rate_limiter',
    'make_table',
    'prioritized',
    'signature_for',
    'uniform',
]

# Defined with the vocabulary, so that the command line's parser loads without TensorFlow.
TablePreset = types.TablePreset


def _check_int(value: int, *, argument: str, minimum: int) -> int:
    return checks.check_int_at_least(value, minimum, argument=argument, error=TableError)


def _check_positive_number(value: float, *, argument: str) -> float:
    return checks.check_number_above(value, 0.0, argument=argument, error=TableError)


def make_rate_limiter(
    *,
    min_size_to_sample: int = 1,
    samples_per_insert: float | None = None,
    error_buffer: float | None = None,
) -> reverb.rate_limiters.RateLimiter:
    """Returns `MinSize` (no ratio) or `SampleToInsertRatio`, after checking the arguments.

    Args:
      min_size_to_sample: Items the table must hold before sampling starts, >= 1.
      samples_per_insert: If set, the target samples per inserted item, > 0.
      error_buffer: How far the ratio may drift, >= max(1, samples_per_insert); defaults
        to `max(1, samples_per_insert) * min_size_to_sample` (and at least that minimum).

    Returns:
      A reverb rate limiter.

    Raises:
      TableError: If an argument is out of range (a `ValueError`); names it and the range.

    Example:
      >>> make_rate_limiter(min_size_to_sample=1000, samples_per_insert=4.0)
    """
    _check_int(min_size_to_sample, argument='min_size_to_sample', minimum=1)
    if samples_per_insert is None:
        if error_buffer is not None:
            raise TableError('error_buffer is only valid together with samples_per_insert.')
        return reverb.rate_limiters.MinSize(min_size_to_sample)
    ratio = _check_positive_number(samples_per_insert, argument='samples_per_insert')
    least = max(1.0, ratio)
    if error_buffer is None:
        error_buffer = max(least, least * min_size_to_sample)
    error_buffer = _check_positive_number(error_buffer, argument='error_buffer')
    if error_buffer < least:
        raise TableError(
            f'error_buffer={error_buffer!r} is not valid; expected >= max(1.0, '
            f'samples_per_insert) = {least} (smaller values can block sampling or inserts).'
        )
    return reverb.rate_limiters.SampleToInsertRatio(ratio, min_size_to_sample, error_buffer)


def _make_table(name, *, sampler, max_size, rate_limiter, max_times_sampled, signature):
    _check_int(max_size, argument='max_size', minimum=1)
    _check_int(max_times_sampled, argument='max_times_sampled', minimum=0)
    if not isinstance(name, str) or not name:
        raise TableError(f'name={name!r} is not valid; expected a non-empty string.')
    return reverb.Table(
        name=name,
        sampler=sampler,
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=rate_limiter,
        max_times_sampled=max_times_sampled,
        signature=signature,
    )


def uniform(
    name: str,
    *,
    max_size: int,
    signature: types.SpecNest | None = None,
    min_size_to_sample: int = 1,
    samples_per_insert: float | None = None,
    error_buffer: float | None = None,
    max_times_sampled: int = 0,
) -> reverb.Table:
    """Returns a uniformly sampled table with FIFO removal.

    Args:
      name: The table name.
      max_size: The most items it holds, >= 1 (the oldest are removed beyond it).
      signature: The item spec, for example `signature_for(item, episodes)`.
      min_size_to_sample: See `make_rate_limiter`.
      samples_per_insert: See `make_rate_limiter` (None: a `MinSize` limiter).
      error_buffer: See `make_rate_limiter`.
      max_times_sampled: Samples after which an item is removed; 0 for no limit.

    Returns:
      A `reverb.Table`.

    Raises:
      TableError: If an argument is out of range (a `ValueError`).

    Example:
      >>> table = tables.uniform('replay', max_size=10**6, signature=signature)
    """
    limiter = make_rate_limiter(
        min_size_to_sample=min_size_to_sample,
        samples_per_insert=samples_per_insert,
        error_buffer=error_buffer,
    )
    return _make_table(
        name,
        sampler=reverb.selectors.Uniform(),
        max_size=max_size,
        rate_limiter=limiter,
        max_times_sampled=max_times_sampled,
        signature=signature,
    )


def prioritized(
    name: str,
    *,
    priority_exponent: float,
    max_size: int,
    signature: types.SpecNest | None = None,
    min_size_to_sample: int = 1,
    samples_per_insert: float | None = None,
    error_buffer: float | None = None,
    max_times_sampled: int = 0,
) -> reverb.Table:
    """Returns a prioritized table: P(i) proportional to priority_i ** priority_exponent.

    Args:
      name: The table name.
      priority_exponent: The exponent, >= 0 (0 samples uniformly; 0.6 is common).
      max_size: The most items it holds, >= 1.
      signature: The item spec.
      min_size_to_sample: See `make_rate_limiter`.
      samples_per_insert: See `make_rate_limiter`.
      error_buffer: See `make_rate_limiter`.
      max_times_sampled: Samples after which an item is removed; 0 for no limit.

    Returns:
      A `reverb.Table`.

    Raises:
      TableError: If an argument is out of range (a `ValueError`).

    Example:
      >>> table = tables.prioritized('per', priority_exponent=0.6, max_size=10**6)
    """
    checks.check_number_above(
        priority_exponent, 0.0, argument='priority_exponent', inclusive=True, error=TableError
    )
    limiter = make_rate_limiter(
        min_size_to_sample=min_size_to_sample,
        samples_per_insert=samples_per_insert,
        error_buffer=error_buffer,
    )
    return _make_table(
        name,
        sampler=reverb.selectors.Prioritized(float(priority_exponent)),
        max_size=max_size,
        rate_limiter=limiter,
        max_times_sampled=max_times_sampled,
        signature=signature,
    )


def fifo_queue(
    name: str, *, max_size: int, signature: types.SpecNest | None = None
) -> reverb.Table:
    """Returns a FIFO queue: each item is sampled once, in insertion order.

    Inserts block while the queue is full, so a push into it never evicts.

    Args:
      name: The table name.
      max_size: The queue capacity, >= 1.
      signature: The item spec.

    Returns:
      A `reverb.Table` (reverb's `Table.queue`: `max_times_sampled` 1).

    Raises:
      TableError: If an argument is out of range (a `ValueError`).

    Example:
      >>> table = tables.fifo_queue('queue', max_size=1000)
    """
    _check_int(max_size, argument='max_size', minimum=1)
    return reverb.Table.queue(name=name, max_size=max_size, signature=signature)


def signature_for(
    item: items_lib.ItemKind,
    episodes: tf.data.Dataset,
    *,
    policy_info_fn: PolicyInfoFn = None,
    episode_fields: Sequence[str] = (),
    add_ids: bool = False,
    frame_formats: FrameFormats | None = None,
) -> types.SpecNest:
    """Returns the table signature for `item`s built from `episodes`.

    Step fields holding encoded frames (`load(..., encoded_frames=...)`) are `tf.string`
    leaves whose `name` records their format (`frame.jpeg.256x320x3`, `core.frames`):
    Reverb keeps it, so the table itself says which fields hold encoded frames
    (`rlds-reverb status`, learners, export).

    Args:
      item: The item kind (`items.TwoStep()`, ...).
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).
      policy_info_fn: The function given to the push, if any (two-step items only).
      episode_fields: The push's `episode_fields` (episode fields carried into items).
      add_ids: The push's `add_ids` (`episode_id` and `step_index` in every item).
      frame_formats: The formats of the step fields holding encoded frames, by path;
        default: the dataset's (`core.episodes.find_frame_formats`; give them for a plain
        `tf.data` pipeline of encoded frames).

    Returns:
      A nest of `TensorSpec`s; for two-step items it equals TF-Agents'
      `add_outer_dim(create_trajectory_data_spec(episodes))` on data without extra step
      fields (`items.TwoStep()` carries them as `policy_info`; `TwoStep('drop')` does not)
      and without encoded frames.

    Example:
      >>> tables.uniform('replay', max_size=10**6,
      ...                signature=tables.signature_for(items.TwoStep(), episodes))
    """
    if frame_formats is None:
        frame_formats = episodes_lib.find_frame_formats(episodes)
    episodes = carry.carry_episode_fields(episodes, episode_fields, add_ids=add_ids)
    return item.compute_signature(
        episodes, policy_info_fn=policy_info_fn, frame_formats=frame_formats
    )


class _SampledTableOptions(TypedDict):
    """The options `make_table` passes to `uniform` and `prioritized` alike."""

    max_size: int
    signature: types.SpecNest | None
    min_size_to_sample: int
    samples_per_insert: float | None
    max_times_sampled: int


def make_table(
    preset: TablePreset | str,
    name: str,
    *,
    signature: types.SpecNest | None,
    max_size: int,
    priority_exponent: float = 0.6,
    min_size_to_sample: int = 1,
    samples_per_insert: float | None = None,
    max_times_sampled: int = 0,
) -> reverb.Table:
    """Returns the table of a preset: `uniform`, `prioritized` or `fifo`.

    Args:
      preset: A `TablePreset` or its value.
      name: The table name.
      signature: The item spec (None: no signature).
      max_size: The most items it holds.
      priority_exponent: For `prioritized`.
      min_size_to_sample: See `make_rate_limiter` (not for `fifo`).
      samples_per_insert: See `make_rate_limiter` (not for `fifo`).
      max_times_sampled: Samples after which an item is removed (not for `fifo`).

    Returns:
      A `reverb.Table`.

    Raises:
      ValueError: If the preset is unknown; `TableError` if an argument is out of range.

    Example:
      >>> make_table('prioritized', 'replay', signature=signature, max_size=10**6)
    """
    preset = types.as_enum(TablePreset, preset, argument='table_preset')
    if preset is TablePreset.FIFO:
        return fifo_queue(name, max_size=max_size, signature=signature)
    common = _SampledTableOptions(
        max_size=max_size,
        signature=signature,
        min_size_to_sample=min_size_to_sample,
        samples_per_insert=samples_per_insert,
        max_times_sampled=max_times_sampled,
    )
    if preset is TablePreset.PRIORITIZED:
        return prioritized(name, priority_exponent=priority_exponent, **common)
    return uniform(name, **common)
