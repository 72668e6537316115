"""Dataset statistics with Apache Beam (rlds_reverb.distribute.statistics) equal the
single-process pass: on Beam's DirectRunner (the FnApiRunner), on users' data written by
TFDS's own writer (3 shuffled shards of 100 episodes).

Tolerance: counts, extremes and exact quantiles are equal; means and standard deviations
agree to a relative 1e-12 (the merge order differs, float64 rounding does too).
"""

from __future__ import annotations

import pathlib
import shutil

import numpy as np
import pytest

import rlds_reverb
from rlds_reverb.check import statistics as statistics_lib
from rlds_reverb.check import statistics_fields
from rlds_reverb.check.statistics import StatisticsOptions, compute_statistics, start_totals
from rlds_reverb.check.statistics_files import ensure_statistics
from rlds_reverb.core import specs
from tests import users_data
from tests.conftest import USERS_PLAIN_SPEC

beam_statistics = pytest.importorskip('rlds_reverb.distribute.statistics')  # The `beam` extra.

_TWO_WORKERS = ['--runner=DirectRunner', '--direct_num_workers=2']
_TOLERANCE = 1e-12


@pytest.fixture
def plain_copy(users_plain_dir, tmp_path) -> pathlib.Path:
    """The users' plain dataset, copied so that statistics files stay in this test."""
    return pathlib.Path(shutil.copytree(users_plain_dir, tmp_path / 'users_plain'))


def _assert_equal_statistics(beam_found, single, *, exact_quantiles: bool) -> None:
    assert (beam_found.episodes, beam_found.steps) == (single.episodes, single.steps)
    assert list(beam_found.fields) == list(single.fields)
    assert beam_found.skipped == single.skipped
    for path, field in single.fields.items():
        other = beam_found[path]
        np.testing.assert_array_equal(other.count, field.count)
        np.testing.assert_array_equal(other.minimum, field.minimum)
        np.testing.assert_array_equal(other.maximum, field.maximum)
        np.testing.assert_allclose(other.mean, field.mean, rtol=_TOLERANCE, atol=1e-300)
        np.testing.assert_allclose(other.std, field.std, rtol=_TOLERANCE)
        if exact_quantiles:
            np.testing.assert_array_equal(other.quantiles, field.quantiles)
            np.testing.assert_array_equal(other.quantile_rank_error, 0.0)


@pytest.mark.slow  # A Beam pipeline: about 15 s.
def test_beam_statistics_equal_the_single_process_pass(plain_copy):
    # 8,462 values per dimension: exact below a capacity of 16,384.
    found = beam_statistics.compute_statistics_with_beam(
        plain_copy, sketch_capacity=16384, pipeline_options=_TWO_WORKERS
    )
    single = compute_statistics(rlds_reverb.load(plain_copy), sketch_capacity=16384)
    assert found.episodes == len(USERS_PLAIN_SPEC.lengths)
    _assert_equal_statistics(found, single, exact_quantiles=True)
    # Saved beside dataset_info.json with the fingerprint ensure_statistics computes.
    assert (plain_copy / 'rlds_reverb_statistics-train.json').is_file()
    again = ensure_statistics(plain_copy, sketch_capacity=16384)
    assert again.reused and again.fingerprint == found.fingerprint
    # And the pipeline does not run for a current file.
    assert beam_statistics.compute_statistics_with_beam(plain_copy, sketch_capacity=16384).reused


@pytest.mark.slow  # A Beam pipeline: about 15 s.
def test_beam_quantiles_beyond_the_capacity_lie_within_their_bound(plain_copy, tmp_path):
    path = tmp_path / 'beam.json'
    found = beam_statistics.compute_statistics_with_beam(
        plain_copy, path=path, fields=['action'], sketch_capacity=64, pipeline_options=_TWO_WORKERS
    )
    assert path.is_file() and not found.reused
    single = compute_statistics(rlds_reverb.load(plain_copy), fields=['action'], sketch_capacity=64)
    _assert_equal_statistics(found, single, exact_quantiles=False)
    pooled = np.concatenate([e['steps']['action'] for e in _read_actions(plain_copy)])
    field = found['action']
    n = len(pooled)
    for i, q in enumerate(field.quantile_levels):
        for dim in range(field.dims):
            value, error = field.quantiles[i, dim], field.quantile_rank_error[dim] * n
            assert 0 < error <= n / 64 * (np.floor(np.log2(n / 64)) + 1)
            assert (pooled[:, dim] < value).sum() <= q * n + error
            assert (pooled[:, dim] <= value).sum() >= q * n - error


def _read_actions(directory):
    return users_data.read_numpy(rlds_reverb.load(directory, step_fields=['action']))


def test_the_combine_fn_merges_in_any_grouping(users_plain_dir):
    episodes = rlds_reverb.load(users_plain_dir)
    options = StatisticsOptions(sketch_capacity=16384)
    step_spec = specs.get_step_spec(episodes)
    parts = []
    for index in range(4):
        part = start_totals(step_spec, options)
        statistics_lib.read_totals(episodes.shard(4, index), part)
        parts.append(part)
    combine = beam_statistics.StatisticsCombineFn(start_totals(step_spec, options), options)
    left = combine.add_input(combine.add_input(combine.create_accumulator(), parts[0]), parts[1])
    right = combine.add_input(combine.create_accumulator(), parts[3])
    right = combine.add_input(right, parts[2])
    merged = combine.merge_accumulators([right, combine.create_accumulator(), left])
    found = combine.extract_output(merged)
    _assert_equal_statistics(
        found, compute_statistics(episodes, sketch_capacity=16384), exact_quantiles=True
    )
    assert isinstance(merged, statistics_fields.StatisticsTotals)
    empty = combine.extract_output(combine.merge_accumulators([]))
    assert empty.episodes == 0 and (empty['action'].count == 0).all()


def test_beam_refuses_sliced_splits_and_other_fields(plain_copy, tmp_path):
    with pytest.raises(ValueError, match='reads whole splits by shard'):
        beam_statistics.compute_statistics_with_beam(plain_copy, split='train[:10]')
    with pytest.raises(ValueError, match="split='test' is not a split"):
        beam_statistics.compute_statistics_with_beam(plain_copy, split='test')
    with pytest.raises(rlds_reverb.SourceNotFoundError):
        beam_statistics.compute_statistics_with_beam(plain_copy / 'missing')
    with pytest.raises(rlds_reverb.SpecMismatchError, match='which the steps do not hold'):
        beam_statistics.compute_statistics_with_beam(plain_copy, fields=['velocity'])
    with pytest.raises(OSError, match='Cannot write statistics'):
        beam_statistics.compute_statistics_with_beam(plain_copy, path=plain_copy / 'no' / 'x.json')
    empty = tmp_path / 'empty'
    empty.mkdir()
    with pytest.raises(rlds_reverb.SourceError, match='not an RLDS dataset directory'):
        beam_statistics.compute_statistics_with_beam(empty)
