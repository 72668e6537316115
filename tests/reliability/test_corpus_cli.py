"""Every TFDS corpus case through `rlds-reverb validate`: exit codes, named faults, no traceback."""

import re

import pytest

from rlds_reverb import cli
from tests.reliability import corpus

_TFDS = corpus.variants(form=corpus.TFDS)
# Invalid episodes the CLI reports one by one (exit 1).
_REPORTED = [v for v in _TFDS if v.failure is None and v.full_check is None]
# Sources refused whole, naming the file or field (exit 2): the CLI's full file check
# catches an episode record that does not decode before validation starts.
_REFUSED = [v for v in _TFDS if v.failure is not None or v.full_check is not None]


def _refusal(variant: corpus.Variant) -> str:
    return variant.failure.match if variant.failure else variant.full_check


@pytest.mark.parametrize('variant', _REPORTED, ids=corpus.variant_id)
def test_validate_lists_each_fault_and_exits_1(build, variant, run_cli):
    code, out, err = run_cli('validate', build(variant))
    assert code == cli.EXIT_INVALID_DATA, err
    for fault in variant.faults:
        assert re.search(fault.pattern, out), out
    assert f'valid {len(variant.valid)}, invalid {len(variant.invalid)}' in out


# Raise mode shares validate's walk (test_corpus_validate.py runs it on every case).
@pytest.mark.parametrize('variant', _REPORTED[::4], ids=corpus.variant_id)
def test_validate_raise_mode_is_one_line_naming_the_episode(build, variant, run_cli):
    code, _, err = run_cli('validate', build(variant), '--on-invalid', 'raise')
    assert code == cli.EXIT_INVALID_DATA
    assert err.startswith(f'rlds-reverb validate: error: Episode {variant.invalid[0]} is invalid')
    assert re.search(variant.faults[0].pattern, err), err


@pytest.mark.parametrize('variant', _REFUSED, ids=corpus.variant_id)
def test_refused_source_names_the_file_or_field_and_exits_2(build, variant, run_cli):
    code, out, err = run_cli('validate', build(variant))
    assert code == cli.EXIT_ERROR
    assert err.startswith('rlds-reverb validate: error: ')
    assert re.search(_refusal(variant), err), err
    assert 'Traceback' not in out + err


def _by_id(name: str) -> corpus.Variant:
    (variant,) = (v for v in _TFDS if v.id == name)
    return variant


@pytest.mark.slow
def test_subprocess_exits_non_zero_without_traceback(build, run_cli):
    # One real process; the in-process tests above cover every case's exit code and output.
    directory = build(_by_id('is_last_mid_episode-tfds'))
    code, _, err = run_cli('validate', directory, '--on-invalid', 'raise', subprocess=True)
    assert code == cli.EXIT_INVALID_DATA, err
    assert 'rlds-reverb validate: error: Episode 1 is invalid' in err
    assert 'Traceback' not in err


@pytest.mark.slow
def test_debug_shows_the_traceback(build, run_cli):
    variant = _by_id('no_dataset_info-tfds')
    code, _, err = run_cli('--debug', 'validate', build(variant), subprocess=True)
    assert code != 0
    assert 'Traceback (most recent call last)' in err
    assert re.search(variant.failure.match, err)
