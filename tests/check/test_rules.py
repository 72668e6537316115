"""The one rule table (`rlds_reverb.check.rules`): complete, and TF and NumPy agree on it.

Every `Rule` has exactly one entry, and on random batches of episodes (valid and broken,
from hypothesis) the TF checks `validate` runs in graph, the same predicates evaluated with
NumPy one episode at a time and on the flat steps of the whole batch, and the bulk verdict
`record_checks` gives on the batch's serialized records all agree.
"""

import collections

import hypothesis
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from hypothesis import strategies as st

from rlds_reverb.check import record_checks, rules, validation
from rlds_reverb.check.rules import Rule
from rlds_reverb.core import types
from rlds_reverb.storage import tfds_writer
from tests import builders


def test_every_rule_has_exactly_one_table_entry_in_reporting_order():
    counts = collections.Counter(entry.rule for entry in rules.RULES)
    assert counts == {rule: 1 for rule in Rule}
    assert [entry.rule for entry in rules.RULES] == list(Rule)
    for entry in rules.RULES:
        assert entry.rule.entry is entry
        assert entry.advice and callable(entry.predicate)
        assert entry.rule.hint.startswith(entry.advice)


def test_checks_follow_the_table_and_name_every_leaf():
    spec = builders.step_signature(
        **{
            types.REWARD: {'a': tf.TensorSpec([], tf.float32), 'b': tf.TensorSpec([2], tf.int32)},
        }
    )
    checks = [(c.rule, c.field) for c in validation.list_checks(spec)]
    assert checks == [
        (Rule.FIRST_AT_START, types.IS_FIRST),
        (Rule.FIRST_ONLY_AT_START, types.IS_FIRST),
        (Rule.LAST_AT_END, types.IS_LAST),
        (Rule.LAST_ONLY_AT_END, types.IS_LAST),
        (Rule.TERMINAL_IMPLIES_LAST, types.IS_TERMINAL),
        (Rule.FINITE, 'reward.a'),
        (Rule.FINITE, 'reward.b'),
        (Rule.FINITE, types.DISCOUNT),
        (Rule.DISCOUNT_IN_RANGE, types.DISCOUNT),
    ]


def test_hints_with_details_keep_their_format():
    shape = Rule.CONSISTENT_SHAPE.entry
    assert shape.format_hint([3], [4]) == (
        f'{Rule.CONSISTENT_SHAPE.hint} (expected per-step shape [3], found [4])'
    )
    assert shape.format_hint([3]) == f'{Rule.CONSISTENT_SHAPE.hint} (expected per-step shape [3])'
    assert Rule.READABLE.entry.format_hint('bad') == f'{Rule.READABLE.hint} (TF: bad)'
    assert Rule.FIRST_AT_START.hint == (
        'set is_first on the first step of each episode (TF-Agents: Last step of an episode '
        'must be followed by a first step.)'
    )


@pytest.mark.parametrize(
    ('shape', 'reference'),
    [([3], [3]), ([3], [4]), ([3], [3, 1]), ([], []), ([2, 2], [2]), ([], [1])],
)
def test_shape_rule_agrees_in_tf_and_numpy(shape, reference):
    shape, reference = np.array(shape, np.int32), np.array(reference, np.int32)
    in_numpy = rules.is_broken(Rule.CONSISTENT_SHAPE, rules.NUMPY, shape, reference)
    in_tf = rules.is_broken(Rule.CONSISTENT_SHAPE, rules.TF, tf.constant(shape), reference)
    assert bool(in_numpy) == bool(in_tf.numpy()) == (shape.tolist() != reference.tolist())


def test_episode_and_decode_rules_agree_in_tf_and_numpy():
    lengths = np.array([0, 1, 3, 0], np.int64)
    values = np.array([0, 2, 5, 1], np.int64)
    for rule, args in (
        (Rule.NON_EMPTY, (lengths,)),
        (Rule.READABLE, (lengths, values, 2)),
    ):
        in_numpy = rules.is_broken(rule, rules.NUMPY, *args)
        tensors = [tf.constant(a) if isinstance(a, np.ndarray) else a for a in args]
        in_tf = rules.is_broken(rule, rules.TF, *tensors)
        np.testing.assert_array_equal(in_numpy, in_tf.numpy())
    np.testing.assert_array_equal(
        rules.is_broken(Rule.READABLE, rules.NUMPY, lengths, values, 2), [False, False, True, True]
    )


# --- TF and NumPy on random batches ----------------------------------------------------------

_REWARDS = st.sampled_from([0.0, 1.0, -2.0, np.nan, np.inf, -np.inf])
_DISCOUNTS = st.sampled_from([0.0, 0.5, 1.0, 1.5, -0.25, np.nan, np.inf])
# Reward layouts: (per-step shape, dtype).
_LAYOUTS = {'scalar': ((), np.float32), 'vector': ((2,), np.float32), 'int': ((), np.int32)}


@st.composite
def _episode(draw, layout: str) -> dict:
    length = draw(st.integers(0, 6))
    ending = draw(st.sampled_from([builders.TERMINATED, builders.TRUNCATED, builders.SEGMENT]))
    steps = builders.episode(length, ending=ending)
    shape, dtype = _LAYOUTS[layout]
    steps[types.REWARD] = np.zeros((length, *shape), dtype)
    if not draw(st.booleans()):
        return steps  # Valid unless empty or a segment.
    bools = st.lists(st.booleans(), min_size=length, max_size=length)
    for flag in types.FLAG_FIELDS:
        if draw(st.booleans()):
            steps[flag] = np.array(draw(bools), bool).reshape(length)
    if dtype == np.float32 and draw(st.booleans()):
        rewards = draw(st.lists(_REWARDS, min_size=length, max_size=length))
        steps[types.REWARD] = np.broadcast_to(
            np.array(rewards, dtype).reshape(length, *([1] * len(shape))), (length, *shape)
        ).copy()
    if draw(st.booleans()):
        discounts = draw(st.lists(_DISCOUNTS, min_size=length, max_size=length))
        steps[types.DISCOUNT] = np.array(discounts, np.float32).reshape(length)
    return steps


@st.composite
def _batches(draw) -> tuple[str, list[dict]]:
    layout = draw(st.sampled_from(sorted(_LAYOUTS)))
    return layout, draw(st.lists(_episode(layout), min_size=1, max_size=5))


_CHECKED = (*types.FLAG_FIELDS, types.REWARD, types.DISCOUNT)
_MASK_FUNCTIONS = {}


def _tf_masks(layout: str, steps: dict) -> np.ndarray:
    """`validation.compute_problem_masks` in graph, as `validate`'s tf.data map runs it."""
    if layout not in _MASK_FUNCTIONS:
        shape, dtype = _LAYOUTS[layout]
        signature = builders.step_signature(**{types.REWARD: tf.TensorSpec(shape, dtype)})
        whole = {
            k: tf.TensorSpec([None, *signature[k].shape], signature[k].dtype) for k in _CHECKED
        }
        _MASK_FUNCTIONS[layout] = tf.function(
            validation.compute_problem_masks, input_signature=[whole]
        )
    return _MASK_FUNCTIONS[layout]({k: steps[k] for k in _CHECKED}).numpy()


def _numpy_masks(steps: dict) -> np.ndarray:
    length = len(steps[types.IS_FIRST])
    at = rules.StepIndex(np.arange(length), length - 1)
    return np.stack(rules.evaluate_step_checks(rules.NUMPY, at, steps))


def _bulk_verdict(layout: str, episodes: list[dict]) -> record_checks.EpisodeCounts | None:
    shape, dtype = _LAYOUTS[layout]
    features = builders.step_features(
        **{types.REWARD: tfds.features.Tensor(shape=shape, dtype=dtype)}
    )
    info = features.get_serialized_info()
    records = [tfds_writer.serialize_episode({types.STEPS: s}, info) for s in episodes]
    signature = builders.step_signature(**{types.REWARD: tf.TensorSpec(shape, dtype)})
    plan = record_checks._plan_checks(info[types.STEPS], signature)
    assert plan is not None
    return record_checks._count_batch(records, plan)


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(_batches())
def test_tf_and_numpy_evaluations_agree(batch):
    layout, episodes = batch
    tf_masks = [_tf_masks(layout, steps) for steps in episodes]
    for steps, masks in zip(episodes, tf_masks, strict=True):
        np.testing.assert_array_equal(_numpy_masks(steps), masks)
    # The flat steps of the whole batch, as the bulk check sees them.
    lengths = np.array([len(s[types.IS_FIRST]) for s in episodes], np.int64)
    flat = {k: np.concatenate([s[k] for s in episodes]) for k in _CHECKED}
    at = rules.flat_step_index(np.concatenate([[0], np.cumsum(lengths)]))
    np.testing.assert_array_equal(
        np.stack(rules.evaluate_step_checks(rules.NUMPY, at, flat)),
        np.concatenate(tf_masks, axis=1),
    )
    empty = rules.is_broken(Rule.NON_EMPTY, rules.NUMPY, lengths)
    empty_in_tf = [rules.is_broken(Rule.NON_EMPTY, rules.TF, tf.constant(n)) for n in lengths]
    np.testing.assert_array_equal(empty, [bool(e) for e in empty_in_tf])
    # The bulk verdict from the records: counts exactly when no rule is broken.
    invalid = empty.any() or any(m.any() for m in tf_masks)
    counts = _bulk_verdict(layout, episodes)
    if invalid:
        assert counts is None
    else:
        terminated = sum(bool(s[types.IS_TERMINAL][-1]) for s in episodes)
        assert counts == (len(episodes), int(lengths.sum()), terminated)
