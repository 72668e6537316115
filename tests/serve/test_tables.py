"""Table presets: arguments checked before Reverb, signatures from the converter's specs."""

from __future__ import annotations

import pytest
import reverb
from tf_agents.replay_buffers import rlds_to_reverb as tfa_rlds
from tf_agents.specs import tensor_spec

from rlds_reverb.core import errors
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from tests import builders
from tests.cases.episodes import THREE_EPISODES


def test_two_step_signature_equals_tf_agents():
    episodes = builders.case_dataset(THREE_EPISODES)
    expected = tensor_spec.add_outer_dim(tfa_rlds.create_trajectory_data_spec(episodes))
    assert tables.signature_for(items.TwoStep(), episodes) == expected


@pytest.mark.parametrize(
    ('make', 'match'),
    [
        (
            lambda: tables.uniform('t', max_size=0),
            'max_size=0 is not valid; expected an integer >= 1',
        ),
        (lambda: tables.uniform('t', max_size=10, min_size_to_sample=0), 'min_size_to_sample=0'),
        (lambda: tables.uniform('t', max_size=10, max_times_sampled=-1), 'max_times_sampled=-1'),
        (lambda: tables.uniform('', max_size=10), "name='' is not valid"),
        (lambda: tables.uniform('t', max_size=10, samples_per_insert=0), 'samples_per_insert=0'),
        (
            lambda: tables.uniform('t', max_size=10, samples_per_insert=4.0, error_buffer=2.0),
            r'error_buffer=2.0 is not valid; expected >= max\(1.0, samples_per_insert\) = 4.0',
        ),
        (lambda: tables.uniform('t', max_size=10, error_buffer=2.0), 'only valid together'),
        (
            lambda: tables.prioritized('t', priority_exponent=-0.5, max_size=10),
            'priority_exponent=-0.5 is not valid',
        ),
        (lambda: tables.fifo_queue('t', max_size=0), 'max_size=0'),
    ],
)
def test_bad_arguments_raise_before_reverb(make, match):
    with pytest.raises(errors.TableError, match=match):
        make()


def test_presets_build_the_described_tables():
    signature = tables.signature_for(items.TwoStep(), builders.case_dataset(THREE_EPISODES))
    presets = [
        tables.uniform('u', max_size=10, signature=signature, max_times_sampled=3),
        tables.prioritized(
            'p', priority_exponent=0.6, max_size=20, samples_per_insert=2.0, min_size_to_sample=5
        ),
        tables.fifo_queue('q', max_size=30),
    ]
    server = reverb.Server(presets)
    try:
        info = reverb.Client(f'localhost:{server.port}').server_info()
    finally:
        server.stop()
    assert (info['u'].max_size, info['u'].max_times_sampled) == (10, 3)
    assert info['u'].sampler_options.HasField('uniform')
    assert info['p'].sampler_options.prioritized.priority_exponent == pytest.approx(0.6)
    assert info['p'].rate_limiter_info.samples_per_insert == 2.0
    assert info['p'].rate_limiter_info.min_size_to_sample == 5
    assert (info['q'].max_size, info['q'].max_times_sampled) == (30, 1)
    assert info['u'].signature == signature


def test_rate_limiter_is_min_size_without_a_ratio():
    limiter = tables.make_rate_limiter(min_size_to_sample=7)
    assert isinstance(limiter, reverb.rate_limiters.MinSize)


def test_rate_limiter_default_error_buffer_is_valid():
    limiter = tables.make_rate_limiter(min_size_to_sample=100, samples_per_insert=8.0)
    assert isinstance(limiter, reverb.rate_limiters.SampleToInsertRatio)
