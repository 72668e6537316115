"""Every corpus case through `convert_rlds_to_trajectories`: named faults, exact skips."""

import re

import numpy as np
import pytest
import tensorflow as tf
import tree

import rlds_reverb
from rlds_reverb.core import types
from tests import builders
from tests.reliability import corpus

_DATA = corpus.variants(data=True)


def _convert(build, variant, mode):
    return rlds_reverb.convert_rlds_to_trajectories(
        rlds_reverb.load(build(variant)), on_invalid=mode
    )


def _expected_message(variant: corpus.Variant) -> str:
    """What raise mode must say: the rule text of the first invalid episode, or TF's reason."""
    first = variant.invalid[0]
    faults = [f for f in variant.faults if f.episode == first]
    if faults[0].rule == rlds_reverb.check.validation.Rule.READABLE.rule_id:
        return re.escape(variant.read_error)
    return f'Episode {first} is invalid: (?:.*; )?{faults[0].pattern}'


@pytest.mark.parametrize('variant', _DATA, ids=corpus.variant_id)
def test_raise_mode_names_episode_step_field_and_rule(build, variant):
    trajectories = _convert(build, variant, 'raise')
    with pytest.raises(tf.errors.InvalidArgumentError, match=_expected_message(variant)) as info:
        for _ in trajectories:
            pass
    message = info.value.message
    for fault in variant.faults:
        if fault.rule != rlds_reverb.check.validation.Rule.READABLE.rule_id:
            assert re.search(fault.pattern, message), message


@pytest.mark.parametrize('variant', _DATA, ids=corpus.variant_id)
def test_skip_mode_yields_exactly_the_valid_episodes(build, variant):
    got = list(_convert(build, variant, 'skip').as_numpy_iterator())
    expected = list(
        rlds_reverb.convert_rlds_to_trajectories(
            builders.rlds(variant.valid_episodes())
        ).as_numpy_iterator()
    )
    assert (
        len(got) == len(expected) == sum(len(e[types.IS_FIRST]) for e in variant.valid_episodes())
    )
    for got_step, expected_step in zip(got, expected, strict=True):
        tree.map_structure(np.testing.assert_array_equal, got_step, expected_step)


@pytest.mark.parametrize('variant', corpus.variants(data=False), ids=corpus.variant_id)
def test_refused_source_is_refused_before_any_conversion(build, variant):
    with pytest.raises(variant.failure.error, match=variant.failure.match):
        _convert(build, variant, 'skip')
