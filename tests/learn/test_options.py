"""`SamplingOptions` (one value, keywords as overrides) and the sampling plan, without a server."""

from __future__ import annotations

import dataclasses
import sys
import types as pytypes

import pytest
import tensorflow as tf

from rlds_reverb.core.errors import TableError
from rlds_reverb.learn import plan, sampling
from rlds_reverb.learn.options import SamplingOptions, merge_overrides

SPEC = {'observation': tf.TensorSpec([3], tf.float32)}


def _info(name: str, size: int, *, fifo=False, max_times_sampled=0, max_diff=sys.float_info.max):
    """A table's info as a server gives it: only the fields the plan reads."""
    return pytypes.SimpleNamespace(
        name=name,
        current_size=size,
        max_times_sampled=max_times_sampled,
        sampler_options=pytypes.SimpleNamespace(fifo=fifo),
        rate_limiter_info=pytypes.SimpleNamespace(max_diff=max_diff),
    )


def _plan(counts, server_infos, **options):
    defaults = dict(
        server_ratios=None,
        iterators_per_stream=None,
        num_workers_per_iterator=None,
        max_in_flight_samples_per_worker=None,
        rate_limiter_timeout_ms=-1,
    )
    return plan.make_sampling_plan(counts, server_infos, **{**defaults, **options})


def test_the_plan_comes_from_table_infos_alone():
    infos = [
        {'a': _info('a', 15_000), 'b': _info('b', 10, max_times_sampled=1)},
        {'a': _info('a', 5_000), 'b': _info('b', 0, max_times_sampled=1)},
    ]
    made = _plan(plan.compute_mix_counts({'a': 3, 'b': 1, 'c': 0}, 256), infos)
    assert made.tables == ['a', 'b']
    assert made.counts == {'a': 192, 'b': 64}
    assert [(s.server_index, s.table_index, s.count) for s in made.sources] == [
        (0, 0, 144),
        (1, 0, 48),
        (0, 1, 64),
    ]
    assert made.unsampled_sizes == [0, 0]
    assert made.iterator_counts == [[72, 72], [24, 24], [64]]  # `b` limits its samples.
    assert made.num_workers == [4, 4, 4]
    assert made.max_in_flight == 256
    assert made.sliced == [True, True, False]  # `b` gives each item once: waited on whole.
    assert made.list_slot_values('table_index') == [0] * 192 + [1] * 64


def test_fifo_tables_are_read_by_one_iterator_and_one_worker():
    infos = [{'q': _info('q', 5, fifo=True, max_times_sampled=1)}]
    made = _plan({'q': 8}, infos)
    assert (made.iterator_counts, made.num_workers) == ([[8]], [1])
    with pytest.raises(TableError, match='must be read by 1 worker'):
        _plan({'q': 8}, infos, num_workers_per_iterator=2)
    with pytest.raises(TableError, match='must be read by 1 iterator'):
        _plan({'q': 8}, infos, iterators_per_stream=2)


def test_a_timeout_reads_without_slices():
    made = _plan({'a': 8}, [{'a': _info('a', 5)}], rate_limiter_timeout_ms=100)
    assert made.sliced == [False]


def test_keywords_override_the_options_in_a_copy():
    options = SamplingOptions(batch_size=32, beta=0.4)
    merged = merge_overrides(SamplingOptions, options, {'batch_size': 8}, entry_point='f')
    assert (merged.batch_size, merged.beta) == (8, 0.4)
    assert options.batch_size == 32  # The caller's value is not changed.
    assert merge_overrides(SamplingOptions, options, {}, entry_point='f') is options
    made = merge_overrides(SamplingOptions, None, {'batch_size': 4}, entry_point='f')
    assert made == SamplingOptions(batch_size=4)


def test_unknown_keywords_and_wrong_options_are_refused():
    with pytest.raises(TypeError, match=r'LearnerDataset\(\) got unexpected keyword argument'):
        sampling.LearnerDataset('localhost:1', 't', data_spec=SPEC, batch_sise=4)
    with pytest.raises(ValueError, match=r'expected SamplingOptions\(\.\.\.\)'):
        sampling.LearnerDataset('localhost:1', 't', data_spec=SPEC, options={'batch_size': 4})
    with pytest.raises(TypeError, match='batch_size'):
        SamplingOptions()  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ('field', 'value', 'match'),
    [
        ('prefetch_batches', -2, 'prefetch_batches=-2 is not valid'),
        ('num_workers_per_iterator', 0, 'num_workers_per_iterator=0 is not valid'),
        ('max_in_flight_samples_per_worker', 0, 'max_in_flight_samples_per_worker=0'),
        ('server_info_timeout_ms', 0, 'server_info_timeout_ms=0 is not valid'),
        ('experience_fn', 3, 'experience_fn=3 is not valid'),
        ('staleness', 3, 'staleness=3 is not valid'),
        ('stop_on_interrupt', 'yes', 'stop_on_interrupt'),
        ('server_ratios', [1, -1], 'finite and >= 0'),
    ],
)
def test_each_option_is_checked_once_where_it_is_defined(field, value, match):
    with pytest.raises(ValueError, match=match):
        SamplingOptions(batch_size=4, **{field: value})
    options = SamplingOptions(batch_size=4)
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(options, **{field: value})


def test_reverbs_own_worker_count_is_accepted():
    assert SamplingOptions(batch_size=4, num_workers_per_iterator=-1).num_workers_per_iterator == -1
    assert SamplingOptions(batch_size=4, server_ratios=[1, 2]).server_ratios == (1, 2)


def _signed(info, spec):
    info.signature = spec
    return info


FRAMES = tf.TensorSpec([2, 256, 320, 3], tf.uint8)  # A two-step item of decoded frames.


def test_items_of_decoded_frames_get_one_iterator_and_a_bounded_flight():
    """Items >= 64 KiB: one iterator per stream (no concat copy) and at most 64 MiB in
    flight per iterator; vectors, and encoded frames (strings), keep the defaults."""
    item_bytes = plan.estimate_item_bytes({'image': FRAMES, 'state': tf.TensorSpec([2, 8])})
    assert item_bytes == 2 * 256 * 320 * 3 + 2 * 8 * 4
    made = _plan({'a': 64}, [{'a': _signed(_info('a', 100), {'image': FRAMES})}])
    assert made.iterator_counts == [[64]]
    assert made.max_in_flight == 34  # 64 MiB // (491,520 B x 4 workers), above 64 // 4 + 1.
    assert made.max_in_flight * made.num_workers[0] * item_bytes <= 64 * 2**20 + 4 * item_bytes
    for small in (
        tf.TensorSpec([2, 8]),
        tf.TensorSpec([2], tf.string, name='frame.jpeg.256x320x3'),
    ):
        made = _plan({'a': 64}, [{'a': _signed(_info('a', 100), {'x': small})}])
        assert (made.iterator_counts, made.max_in_flight) == ([[32, 32]], 256)


def test_large_items_are_sized_from_the_item_spec_without_a_signature_and_knobs_win():
    infos = [{'a': _signed(_info('a', 100), None)}]
    made = _plan({'a': 64}, infos, item_spec={'image': FRAMES})
    assert (made.iterator_counts, made.max_in_flight) == ([[64]], 34)
    made = _plan(
        {'a': 64},
        infos,
        item_spec={'image': FRAMES},
        iterators_per_stream=2,
        max_in_flight_samples_per_worker=256,
    )
    assert (made.iterator_counts, made.max_in_flight) == ([[32, 32]], 256)
    # A batch larger than the byte budget still gets more than one batch's worth per worker.
    made = _plan({'a': 1024}, infos, item_spec={'image': FRAMES})
    assert made.max_in_flight == 1024 // 4 + 1
