"""Dataset statistics (rlds_reverb.check.statistics) against NumPy on the pooled episodes.

The oracle is NumPy over the episodes the data was written from: `mean`, `std`, `min`,
`max` over every step of every episode, and `np.quantile` (exact, linear interpolation) for
the quantiles. Users' data is written by TFDS's own writer with its defaults (the
`users_dir` fixture: shuffled shards of 100 episodes, lengths 1 to 1,000, both endings,
images and strings). Tolerance: a relative 1e-12 of the data's scale for means and
standard deviations (float64 rounding); counts, extremes and exact quantiles are equal.
"""

from __future__ import annotations

import hypothesis
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import strategies as st

import rlds_reverb
from rlds_reverb.check import statistics, statistics_fields
from rlds_reverb.check.statistics import StatisticsOptions, compute_statistics
from rlds_reverb.check.statistics_fields import SKIP_IMAGE, SKIP_SHAPE, SKIP_STRING
from rlds_reverb.core import episodes as tf_episodes
from rlds_reverb.core import errors, specs, types
from tests import builders, users_data
from tests.conftest import USERS_SPEC

_TOLERANCE = 1e-12
_LEVELS = (0.01, 0.25, 0.5, 0.99)


def _pooled(episodes: list[dict], *path: str) -> np.ndarray:
    """Every step's value of the field at `path`, as `[N, D]` float64."""
    values = []
    for episode in episodes:
        leaf = episode[types.STEPS]
        for key in path:
            leaf = leaf[key]
        values.append(np.asarray(leaf, np.float64).reshape(len(leaf), -1))
    return np.concatenate(values)


def _check_against_numpy(found: statistics.FieldStatistics, pooled: np.ndarray) -> None:
    scale = max(float(np.abs(pooled).max()), 1.0)
    np.testing.assert_array_equal(found.count, len(pooled))
    np.testing.assert_array_equal(found.minimum, pooled.min(axis=0))
    np.testing.assert_array_equal(found.maximum, pooled.max(axis=0))
    np.testing.assert_allclose(found.mean, pooled.mean(axis=0), rtol=0, atol=_TOLERANCE * scale)
    np.testing.assert_allclose(found.std, pooled.std(axis=0), rtol=0, atol=_TOLERANCE * scale)


def test_users_data_matches_numpy_on_the_pooled_steps(users_dir):
    episodes = users_data.make_episodes(USERS_SPEC)
    found = compute_statistics(rlds_reverb.load(users_dir), quantiles=_LEVELS)
    assert found.episodes == len(USERS_SPEC.lengths) and found.steps == USERS_SPEC.num_steps
    assert list(found.fields) == ['action', 'discount', 'observation/state', 'reward']
    assert found.skipped == {
        'language_instruction': SKIP_STRING,
        'observation/image': SKIP_IMAGE,
    }
    for path in found.fields:
        pooled = _pooled(episodes, *path.split('/'))
        _check_against_numpy(found[path], pooled)
        # Fewer values than the sketch's capacity: np.quantile exactly.
        np.testing.assert_array_equal(found[path].quantiles, np.quantile(pooled, _LEVELS, axis=0))
        np.testing.assert_array_equal(found[path].quantile_rank_error, 0.0)


def test_users_data_quantiles_beyond_the_capacity_lie_within_their_bound(users_dir):
    episodes = users_data.make_episodes(USERS_SPEC)
    found = compute_statistics(
        rlds_reverb.load(users_dir), fields=['action'], quantiles=_LEVELS, sketch_capacity=256
    )
    pooled = _pooled(episodes, 'action')
    field = found['action']
    assert (field.quantile_rank_error > 0).all()
    n = len(pooled)
    capacity_levels = np.floor(np.log2(n / 256)) + 1
    assert (field.quantile_rank_error <= capacity_levels / 256).all()  # The stated bound.
    for i, q in enumerate(_LEVELS):
        for dim in range(field.dims):
            value, error = field.quantiles[i, dim], field.quantile_rank_error[dim] * n
            assert (pooled[:, dim] < value).sum() <= q * n + error
            assert (pooled[:, dim] <= value).sum() >= q * n - error


def test_scalar_and_vector_fields_give_vectors(users_dir):
    found = compute_statistics(rlds_reverb.load(users_dir))
    reward, action = found['reward'], found['action']
    assert reward.shape == () and reward.dims == 1
    for figure in (reward.mean, reward.std, reward.minimum, reward.count, reward.nan_count):
        assert figure.shape == (1,)
    assert reward.quantiles.shape == (2, 1) and reward.get_quantile(0.99).shape == (1,)
    assert reward.reshape(reward.mean).shape == ()
    assert action.mean.shape == (2,) and action.quantiles.shape == (2, 2)


def test_an_image_field_gets_statistics_when_named(users_dir):
    episodes = users_data.make_episodes(USERS_SPEC)
    found = compute_statistics(rlds_reverb.load(users_dir), fields=['observation/image'])
    image = found['observation/image']
    assert image.dims == 8 * 8 * 3 and image.shape == users_data.IMAGE_SHAPE
    _check_against_numpy(image, _pooled(episodes, 'observation', users_data.IMAGE))
    assert list(found.fields) == ['observation/image']
    # A parent path names the numeric fields under it, images left out.
    parent = compute_statistics(rlds_reverb.load(users_dir), fields=['observation'])
    assert list(parent.fields) == ['observation/state']
    assert parent.skipped == {'observation/image': SKIP_IMAGE}


def _special_episodes() -> list[dict]:
    observation = np.array(
        [
            # dim 0 varies; dim 1 constant; dim 2 NaN once; dim 3 never finite; dim 4 ±inf.
            [0.0, 0.1, 1.0, np.nan, 1.0],
            [1.0, 0.1, np.nan, np.nan, np.inf],
            [2.0, 0.1, 3.0, np.inf, -np.inf],
        ],
        np.float32,
    )
    return [
        builders.episode(observation=observation, extras={'gripper': [[1], [1], [0]]}),
        builders.episode(
            observation=observation[:1] + np.float32([5, 0, 5, 0, 5]), extras={'gripper': [[1]]}
        ),
    ]


def test_nan_infinite_constant_and_empty_dimensions_are_reported_never_divided_by():
    found = compute_statistics(builders.rlds(_special_episodes()))
    observation = found['observation']
    assert observation.zero_variance_dims == (1,)
    assert observation.nan_dims == (2, 3)
    assert observation.inf_dims == (3, 4)
    assert observation.empty_dims == (3,)
    np.testing.assert_array_equal(observation.count, [4, 4, 3, 0, 2])
    np.testing.assert_array_equal(observation.nan_count, [0, 0, 1, 3, 0])
    np.testing.assert_array_equal(observation.inf_count, [0, 0, 0, 1, 2])
    assert observation.std[1] == 0.0  # Exactly, though 0.1 + 0.1 + ... rounds.
    assert np.isnan(observation.mean[3]) and np.isnan(observation.quantiles[:, 3]).all()
    np.testing.assert_allclose(observation.mean[[0, 2, 4]], [2.0, 10 / 3, 3.5], rtol=1e-6)
    assert found['gripper'].dtype == 'int32' and found['gripper'].shape == (1,)
    assert 'zero variance' in found.format() and 'dims 2, 3' in found.format()


def test_integer_fields_and_empty_episodes():
    episodes = [builders.episode(4), builders.episode(0), builders.episode(2, start=10.0)]
    found = compute_statistics(builders.rlds(episodes))
    assert found.episodes == 3 and found.steps == 6
    action = found['action']  # int64 step indices: 0 1 2 3 0 1.
    assert action.dtype == 'int64'
    np.testing.assert_allclose(action.mean, [7 / 6])
    np.testing.assert_array_equal(action.get_quantile(0.99), np.quantile([0, 1, 2, 3, 0, 1], 0.99))


def test_a_field_of_unknown_shape_is_skipped_or_refused_when_named():
    episodes = [builders.episode(3, obs_dim=2), builders.episode(2, obs_dim=3)]
    signature = builders.step_signature(observation=tf.TensorSpec([None], tf.float32))
    dataset = builders.rlds_from_generator(episodes, signature)
    found = compute_statistics(dataset)
    assert found.skipped == {'observation': SKIP_SHAPE}
    with pytest.raises(errors.SpecMismatchError, match='per-step shape is not fixed'):
        compute_statistics(dataset, fields=['observation'])


def _episode_ranges(count: int, cuts: list[int]) -> list[tuple[int, int]]:
    points = sorted({0, count, *(min(c, count) for c in cuts)})
    return list(zip(points[:-1], points[1:], strict=True))


@pytest.fixture(scope='module')
def plain_reductions(users_plain_dir) -> tuple[dict, list[dict]]:
    """The step spec of users' plain data, and each episode's reduction (one TF pass)."""
    episodes = rlds_reverb.load(users_plain_dir)
    step_spec = specs.get_step_spec(episodes)
    plans = statistics.start_totals(step_spec, StatisticsOptions()).plans
    reduced = tf_episodes.to_episode_tensors(episodes).map(
        lambda steps: statistics_fields.reduce_episode(steps, plans)
    )
    return step_spec, list(reduced.as_numpy_iterator())


def _fold(step_spec, reductions, options) -> statistics_fields.StatisticsTotals:
    totals = statistics.start_totals(step_spec, options)
    for reduced in reductions:
        totals.add_reduction(reduced)
    return totals


@hypothesis.given(
    cuts=st.lists(st.integers(0, 300), max_size=6),
    capacity=st.sampled_from([64, 16384]),
    data=st.data(),
)
@hypothesis.settings(max_examples=25, deadline=None)
def test_totals_merged_over_any_split_of_the_episodes_equal_one_pass(
    plain_reductions, cuts, capacity, data
):
    step_spec, reductions = plain_reductions
    options = StatisticsOptions(sketch_capacity=capacity)
    parts = [
        _fold(step_spec, reductions[first:last], options)
        for first, last in _episode_ranges(len(reductions), cuts)
    ]
    order = data.draw(st.permutations(list(range(len(parts)))))
    merged = parts[order[0]]
    for i in order[1:]:
        merged.merge(parts[i])
    one = statistics.finish_statistics(_fold(step_spec, reductions, options), options)
    split = statistics.finish_statistics(merged, options)
    assert (split.episodes, split.steps) == (one.episodes, one.steps) == (300, 8462)
    for path, field in one.fields.items():
        other = split[path]
        scale = max(float(np.abs([field.minimum, field.maximum]).max()), 1.0)
        np.testing.assert_array_equal(other.count, field.count)
        np.testing.assert_array_equal(other.minimum, field.minimum)
        np.testing.assert_array_equal(other.maximum, field.maximum)
        np.testing.assert_allclose(other.mean, field.mean, rtol=0, atol=_TOLERANCE * scale)
        np.testing.assert_allclose(other.std, field.std, rtol=0, atol=_TOLERANCE * scale)
        if capacity == 16384:  # Exact on both sides (8,462 values).
            np.testing.assert_array_equal(other.quantiles, field.quantiles)


def test_shards_read_apart_and_merged_equal_one_pass(users_plain_dir):
    episodes = rlds_reverb.load(users_plain_dir)
    options = StatisticsOptions(sketch_capacity=16384)  # Exact: 8,462 values per dimension.
    step_spec = specs.get_step_spec(episodes)
    whole = statistics.start_totals(step_spec, options)
    statistics.read_totals(episodes, whole)
    merged = statistics.start_totals(step_spec, options)
    for index in range(3):
        part = statistics.start_totals(step_spec, options)
        statistics.read_totals(episodes.shard(3, index), part)
        merged.merge(part)
    one, split = (statistics.finish_statistics(t, options) for t in (whole, merged))
    for path, field in one.fields.items():
        np.testing.assert_allclose(split[path].mean, field.mean, rtol=_TOLERANCE, atol=1e-300)
        np.testing.assert_allclose(split[path].std, field.std, rtol=_TOLERANCE)
        np.testing.assert_array_equal(split[path].quantiles, field.quantiles)


# --- Errors ------------------------------------------------------------------------------------


def test_a_dataset_without_steps_is_refused():
    with pytest.raises(errors.SourceError, match='steps'):
        compute_statistics(tf.data.Dataset.range(3))


def test_missing_required_fields_are_refused():
    steps = builders.episode(2)
    del steps[types.REWARD]
    with pytest.raises(errors.SpecMismatchError, match='reward'):
        compute_statistics(builders.rlds([steps]))


@pytest.mark.parametrize(
    ('fields', 'message'),
    [
        (['observation/velocity'], "'observation/velocity', which the steps do not hold"),
        (['language_instruction'], r'not numeric \(strings\)'),
        (['is_first'], r'not numeric \(booleans\)'),
    ],
)
def test_fields_that_get_no_statistics_are_refused_by_name(users_dir, fields, message):
    with pytest.raises(errors.SpecMismatchError, match=message):
        compute_statistics(rlds_reverb.load(users_dir), fields=fields)


@pytest.mark.parametrize(
    ('options', 'error', 'message'),
    [
        ({'fields': 'action'}, TypeError, 'sequence of field paths'),
        ({'fields': ['action', 3]}, TypeError, 'sequence of field paths'),
        ({'quantiles': 0.5}, TypeError, 'sequence of numbers'),
        ({'quantiles': [0.5, 1.5]}, ValueError, r'each of quantiles=1\.5'),
        ({'quantiles': [float('nan')]}, ValueError, 'each of quantiles=nan'),
        ({'sketch_capacity': 3}, ValueError, 'even'),
        ({'sketch_capacity': 1}, ValueError, 'sketch_capacity=1'),
    ],
)
def test_bad_options_are_refused(options, error, message):
    with pytest.raises(error, match=message):
        compute_statistics(builders.rlds([builders.episode(2)]), **options)
    with pytest.raises(error, match=message):
        StatisticsOptions(**options)


def test_lookups_name_what_is_missing():
    found = compute_statistics(builders.rlds([builders.episode(3)]), quantiles=[0.5])
    assert found['/observation'] is found['observation']
    with pytest.raises(KeyError, match='fields with statistics'):
        found['observation/velocity']  # noqa: B018
    with pytest.raises(KeyError, match=r'computed: \[0\.5\]'):
        found['observation'].get_quantile(0.99)
    extras = compute_statistics(builders.rlds([builders.episode(3, extras={'note': [1, 2, 3]})]))
    assert 'note' in extras.fields  # A numeric extra field.


def test_a_skipped_field_says_why_and_totals_of_other_fields_do_not_merge(users_dir):
    episodes = rlds_reverb.load(users_dir).take(3)
    found = compute_statistics(episodes)
    with pytest.raises(KeyError, match=r"'language_instruction' has no statistics: not numeric"):
        found['language_instruction']  # noqa: B018
    step_spec = specs.get_step_spec(episodes)
    actions = statistics.start_totals(step_spec, StatisticsOptions(fields=['action']))
    rewards = statistics.start_totals(step_spec, StatisticsOptions(fields=['reward']))
    with pytest.raises(ValueError, match=r'Cannot merge statistics of other fields'):
        actions.merge(rewards)
    smaller = statistics.start_totals(
        step_spec, StatisticsOptions(fields=['action'], sketch_capacity=64)
    )
    with pytest.raises(ValueError, match='capacity 64'):
        actions.merge(smaller)


def test_options_keep_quantiles_sorted_without_repeats():
    options = StatisticsOptions(quantiles=[0.99, 0.01, 0.99], fields=['action'])
    assert options.quantiles == (0.01, 0.99) and options.fields == ('action',)


def test_progress_counts_every_episode_and_step():
    seen: list[tuple[int, int]] = []
    lengths = [3, 5, 1] * 7  # 21 episodes: a batch of 16, then 5.
    episodes = builders.rlds([builders.episode(n) for n in lengths])
    found = compute_statistics(episodes, progress=lambda e, s: seen.append((e, s)))
    assert seen == [(16, sum(lengths[:16])), (5, sum(lengths[16:]))]
    assert (found.episodes, found.steps) == (21, sum(lengths))
