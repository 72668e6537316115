"""Checks the episodes of a TFDS dataset straight from its records, all at once.

`validate` walks a dataset one episode at a time through a traced `tf.data` map, which
costs pipeline set-up and a Python step per episode. When `rlds_reverb.load` read the
dataset from TFRecord shards and every selected step field is a plain tensor (no image or
other encoded feature, every per-step shape fixed), the rules of docs/semantics.md §2 can
be decided from the records themselves: one eager parse per batch of records, then NumPy
over the steps of every episode of the batch at once. Fixed per-step shapes make the
consistent-shape rule hold by construction, and the parser's row lengths give each field's
step count.

This answers one question: is every episode valid, and if so how many steps, terminated
and truncated episodes are there? When any episode breaks a rule, or anything cannot be
decided here (a record that does not parse, an encoded feature), the answer is None and
`validate` walks the dataset as usual to name every problem. `tests/test_record_checks.py`
checks that both agree on valid and invalid datasets.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tree
from tensorflow_datasets.core import example_parser

from rlds_reverb.core import types
from rlds_reverb.read import records

# Records parsed per batch: enough that the parser's per-call cost vanishes, few enough
# that memory stays flat in the dataset's size.
_BATCH_RECORDS = 64


class EpisodeCounts(NamedTuple):
    """What a dataset of valid episodes holds."""

    episodes: int
    steps: int
    terminated: int


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What to parse and check: flat record keys and per-step sizes."""

    ragged_specs: dict
    step_sizes: dict  # flat key -> values per step
    flags: tuple[str, str, str]  # is_first, is_last, is_terminal keys
    finite: tuple[str, ...]  # float reward and discount keys
    unit_range: tuple[str, ...]  # discount keys


def _record_key(path: tuple) -> str:
    return '/'.join([types.STEPS, *map(str, path)])


def _plan_checks(serialized_steps: dict, step_spec: dict) -> _Plan | None:
    """Returns the plan, or None unless every step field parses straight to its tensor."""
    flat_specs = example_parser.ExampleParser({types.STEPS: serialized_steps}).flat_feature_specs
    decoded_specs = dict(tree.flatten_with_path(step_spec))
    ragged_specs, step_sizes = {}, {}
    for path, info in tree.flatten_with_path(serialized_steps):
        key = _record_key(path)
        parse_spec = flat_specs.get(key)
        decoded = decoded_specs.get(path)
        shape = tf.TensorShape(info.shape)
        if (
            not isinstance(parse_spec, tf.io.FixedLenSequenceFeature)
            or not isinstance(decoded, tf.TensorSpec)
            or not shape[1:].is_fully_defined()
            or shape[1:] != decoded.shape
            # An encoded feature (bytes standing for a tensor) needs its decoder.
            or (info.tf_dtype == tf.string) != (decoded.dtype == tf.string)
        ):
            return None
        ragged_specs[key] = tf.io.RaggedFeature(
            dtype=parse_spec.dtype, value_key=key, row_splits_dtype=tf.int64
        )
        step_sizes[key] = max(1, shape[1:].num_elements())
    flags = tuple(_record_key((f,)) for f in types.FLAG_FIELDS)
    finite, unit_range = [], []
    for field in (types.REWARD, types.DISCOUNT):
        if field not in serialized_steps:
            continue  # A discount load filled with 1.0: valid by construction.
        for path, spec in tree.flatten_with_path(step_spec[field]):
            key = _record_key((field, *path))
            if spec.dtype.is_floating:
                finite.append(key)
            if field == types.DISCOUNT:
                unit_range.append(key)
    if not all(f in ragged_specs for f in flags):
        return None
    return _Plan(ragged_specs, step_sizes, flags, tuple(finite), tuple(unit_range))


def _count_batch(serialized: list[bytes], plan: _Plan) -> EpisodeCounts | None:
    """Returns the counts of a batch of records, or None unless every episode is valid."""
    parsed = tf.io.parse_example(serialized, plan.ragged_specs)
    values = {k: v.values.numpy() for k, v in parsed.items()}
    splits = {k: v.row_splits.numpy() for k, v in parsed.items()}
    first_key, last_key, terminal_key = plan.flags
    lengths = np.diff(splits[first_key])
    if not lengths.all():
        return None  # An empty episode.
    for key, size in plan.step_sizes.items():
        if not np.array_equal(np.diff(splits[key]), lengths * size):
            return None  # A field with another step count: not readable as one episode.
    episodes = len(lengths)
    starts, ends = splits[first_key][:-1], splits[first_key][1:] - 1
    first, last = values[first_key] != 0, values[last_key] != 0
    terminal = values[terminal_key] != 0
    flags_ok = (
        first[starts].all()
        and np.count_nonzero(first) == episodes
        and last[ends].all()
        and np.count_nonzero(last) == episodes
        and not (terminal & ~last).any()
    )
    if not flags_ok:
        return None
    if not all(np.isfinite(values[k]).all() for k in plan.finite):
        return None
    if any(((values[k] < 0) | (values[k] > 1)).any() for k in plan.unit_range):
        return None
    return EpisodeCounts(episodes, int(lengths.sum()), int(np.count_nonzero(terminal[ends])))


def count_valid_episodes(
    source: records.RecordSource, step_spec: dict, *, batch_records: int = _BATCH_RECORDS
) -> EpisodeCounts | None:
    """Returns the counts of a dataset whose every episode is valid, read from its records.

    Args:
      source: The records `rlds_reverb.load` read the dataset from.
      step_spec: The dataset's step spec (as `load` decodes the steps).
      batch_records: Records parsed at a time.

    Returns:
      The counts, or None when an episode breaks a rule, a record does not parse, a shard
      cannot be read, or a step field needs decoding: the caller then walks the dataset
      to name the problems.

    Example:
      >>> source = records.find_record_source(episodes)
      >>> counts = count_valid_episodes(source, specs.get_step_spec(episodes))
    """
    plan = _plan_checks(source.serialized_steps, step_spec)
    if plan is None:
        return None
    total = EpisodeCounts(0, 0, 0)
    try:
        for batch in records.read_serialized_batches(source, batch_records=batch_records):
            counts = _count_batch(batch, plan)
            if counts is None:
                return None
            total = EpisodeCounts(*(a + b for a, b in zip(total, counts, strict=True)))
    except (tf.errors.OpError, ValueError):
        return None  # The walk through the dataset reports it, as it always has.
    return total
