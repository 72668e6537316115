"""Every corpus case through `rlds_reverb.validate` (and `load`): named faults, exact skips."""

import re

import pytest
import tensorflow as tf

import rlds_reverb
from rlds_reverb.core import errors, types
from tests.reliability import corpus

_DATA = corpus.variants(data=True)
_REFUSED = corpus.variants(data=False)
_RECORD_LEVEL = [v for v in corpus.VARIANTS if v.full_check]


def _validate(build, variant, mode):
    return rlds_reverb.validate(rlds_reverb.load(build(variant)), on_invalid=mode)


@pytest.mark.parametrize('variant', _DATA, ids=corpus.variant_id)
def test_skip_mode_names_each_fault_and_counts_exactly_the_valid_episodes(build, variant):
    # 'skip' and 'report' walk the whole dataset alike (tests/check/test_validate.py covers both).
    report = _validate(build, variant, 'skip')
    found = {(p.episode, p.step, p.field, p.rule.rule_id) for p in report.problems}
    assert {(f.episode, f.step, f.field, f.rule) for f in variant.faults} <= found
    assert {p.episode for p in report.problems} == set(variant.invalid)
    text = report.format()
    for fault in variant.faults:
        assert re.search(fault.pattern, text), text
    valid = variant.valid_episodes()
    assert (report.valid, report.invalid) == (len(valid), len(variant.invalid))
    assert report.invalid_episodes == list(variant.invalid)
    assert report.steps == sum(len(e[types.IS_FIRST]) for e in valid)


@pytest.mark.parametrize('variant', _DATA, ids=corpus.variant_id)
def test_raise_mode_names_every_problem_of_the_first_invalid_episode(build, variant):
    first = variant.invalid[0]
    with pytest.raises(errors.InvalidEpisodeError, match=f'^Episode {first} is invalid') as info:
        _validate(build, variant, 'raise')
    assert isinstance(info.value, tf.errors.InvalidArgumentError)
    for fault in variant.faults:
        assert re.search(fault.pattern, str(info.value)), str(info.value)


@pytest.mark.parametrize('variant', _REFUSED, ids=corpus.variant_id)
def test_refused_source_names_the_file_or_field(build, variant):
    with pytest.raises(variant.failure.error, match=variant.failure.match):
        _validate(build, variant, 'report')


@pytest.mark.parametrize('variant', _RECORD_LEVEL, ids=corpus.variant_id)
def test_full_file_check_names_shard_record_and_field(build, variant):
    with pytest.raises(errors.SourceError, match=variant.full_check) as info:
        rlds_reverb.load(build(variant), check_files='full')
    assert 'record 0 of shard' in str(info.value)
