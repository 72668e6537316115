"""Checks the episodes of a TFDS dataset straight from its records, all at once.

`validate` walks a dataset one episode at a time through a traced `tf.data` map, which
costs pipeline set-up and a Python step per episode. When `rlds_reverb.load` read the
dataset from TFRecord shards and every selected step field is a plain tensor (no image or
other encoded feature, every per-step shape fixed), the rules of docs/semantics.md §2 can
be decided from the records themselves: one eager parse per batch of records, then the
predicates of `rules.RULES`, evaluated with NumPy over the steps of every episode of the
batch at once. Fixed per-step shapes make the consistent-shape rule hold by construction,
and the parser's row lengths give each field's step count.

This answers one question: is every episode valid, and if so how many steps, terminated
and truncated episodes are there? When any episode breaks a rule, or anything cannot be
decided here (a record that does not parse, an encoded feature), the answer is None and
`validate` walks the dataset as usual to name every problem. `tests/check/test_record_checks.py`
checks that both agree on valid and invalid datasets.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.check import rules
from rlds_reverb.check.rules import Rule
from rlds_reverb.core import compat, types
from rlds_reverb.read import records

__all__ = [
    'EpisodeCounts',
    'RecordSummary',
    'count_valid_episodes',
    'plan_record_checks',
    'summarize_records',
]

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
    """What to parse and check: flat record keys, per-step shapes and the checked fields."""

    ragged_specs: dict
    step_shapes: dict  # flat key -> per-step shape
    step_sizes: dict  # flat key -> values per step
    # Field -> its nest of flat keys (the fields the per-step rules read); a nest of
    # `tf.TensorSpec` stands for a discount `load` filled with 1.0.
    checked: dict


def _record_key(path: tuple) -> str:
    return '/'.join([types.STEPS, *map(str, path)])


def _plan_checks(serialized_steps: dict, step_spec: dict) -> _Plan | None:
    """Returns the plan, or None unless every step field parses straight to its tensor."""
    flat_specs = compat.make_example_parser({types.STEPS: serialized_steps}).flat_feature_specs
    decoded_specs = dict(tree.flatten_with_path(step_spec))
    ragged_specs, step_shapes, step_sizes = {}, {}, {}
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
        step_shapes[key] = tuple(shape[1:].as_list())
        step_sizes[key] = max(1, shape[1:].num_elements())
    checked = {}
    for field in (*types.FLAG_FIELDS, types.REWARD, types.DISCOUNT):
        if field in serialized_steps:
            checked[field] = tree.map_structure_with_path(
                lambda path, _, field=field: _record_key((field, *path)), step_spec[field]
            )
        elif field == types.DISCOUNT and all(
            spec.shape.is_fully_defined() for spec in tree.flatten(step_spec[field])
        ):
            checked[field] = step_spec[field]  # A discount load filled with 1.0.
        else:
            return None
    return _Plan(ragged_specs, step_shapes, step_sizes, checked)


def _checked_steps(values: dict, plan: _Plan, size: int) -> dict:
    """Returns the checked fields as `[N, ...]` arrays of the batch's N steps (flags bool)."""

    def _array(key):
        if not isinstance(key, str):  # The discount load fills in.
            return np.ones((size, *key.shape), key.dtype.as_numpy_dtype)
        return values[key].reshape(size, *plan.step_shapes[key])

    steps = {
        # dm-tree only for nested fields: it costs more than the arrays of a batch.
        field: _array(keys) if isinstance(keys, str) else tree.map_structure(_array, keys)
        for field, keys in plan.checked.items()
    }
    for flag in types.FLAG_FIELDS:
        steps[flag] = steps[flag] != 0
    return steps


class RecordSummary(NamedTuple):
    """Per record of a batch, what the bulk checks decided (steps never decoded).

    Attributes:
      lengths: int64 `[N]`, each episode's steps (its `is_first` values).
      clean: bool `[N]`, True where every rule holds; False where one is broken or the
        records cannot decide (a field of another step count): walk those to know.
      terminated: bool `[N]`, whether a clean episode's last step is terminal.
    """

    lengths: np.ndarray
    clean: np.ndarray
    terminated: np.ndarray


def plan_record_checks(serialized_steps: dict, step_spec: dict) -> _Plan | None:
    """Returns what `summarize_records` parses and checks, or None if the records cannot say.

    Args:
      serialized_steps: The serialized info of the step fields (`RecordSource`).
      step_spec: The dataset's step spec (as `load` decodes the steps).

    Returns:
      The plan, or None unless every step field parses straight to its tensor (no encoded
      feature such as an image, every per-step shape fixed).
    """
    return _plan_checks(serialized_steps, step_spec)


def _find_episodes_with(bad: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Returns, per episode, whether any of its values (`counts[i]` of them, in order) is bad."""
    owner = np.repeat(np.arange(len(counts)), counts)
    return np.bincount(owner, weights=bad, minlength=len(counts)) > 0


def summarize_records(serialized: list[bytes], plan: _Plan) -> RecordSummary:
    """Returns each record's step count and whether it is certainly valid, in one parse.

    Args:
      serialized: Serialized episodes (TFDS records).
      plan: `plan_record_checks`'s plan for their dataset.

    Raises:
      tf.errors.InvalidArgumentError: If a record does not parse.
    """
    parsed = tf.io.parse_example(serialized, plan.ragged_specs)
    values = {k: v.values.numpy() for k, v in parsed.items()}
    splits = {k: v.row_splits.numpy() for k, v in parsed.items()}
    row_splits = splits[plan.checked[types.IS_FIRST]]
    lengths = np.diff(row_splits)
    nothing = np.zeros(len(lengths), dtype=bool)
    for key, step_size in plan.step_sizes.items():
        if rules.is_broken(
            Rule.READABLE, rules.NUMPY, lengths, np.diff(splits[key]), step_size
        ).any():
            # A field with another step count (not readable as one episode) shifts every
            # later record's values against the flags': these records decide nothing.
            return RecordSummary(lengths, nothing, nothing)
    clean = ~np.asarray(rules.is_broken(Rule.NON_EMPTY, rules.NUMPY, lengths), dtype=bool)
    steps = _checked_steps(values, plan, int(lengths.sum()))
    at = rules.flat_step_index(row_splits)
    for mask in rules.iterate_step_checks(rules.NUMPY, at, steps):
        clean &= ~_find_episodes_with(mask, lengths)
    terminated = nothing.copy()
    nonempty = lengths > 0
    ends = row_splits[1:][nonempty] - row_splits[0] - 1
    terminated[nonempty] = steps[types.IS_TERMINAL][ends]
    return RecordSummary(lengths, clean, terminated & clean)


def _count_batch(serialized: list[bytes], plan: _Plan) -> EpisodeCounts | None:
    """Returns the counts of a batch of records, or None unless every episode is valid."""
    summary = summarize_records(serialized, plan)
    if not summary.clean.all():
        return None
    return EpisodeCounts(
        len(summary.lengths), int(summary.lengths.sum()), int(summary.terminated.sum())
    )


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
