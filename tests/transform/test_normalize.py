"""Normalization (rlds_reverb.transform.normalize) against a NumPy reference, on every form
it takes: RLDS episodes read from users' data (TFDS's own writer: images and strings beside
the normalized fields), whole-episode tensors, TF-Agents trajectories and their batches, and
batches sampled from a real Reverb server (`[B, T, ...]` two-step items, `[B, ...]` n-step
items). Property tests: unnormalize(normalize(x)) == x to float32 rounding (relative 1e-6
of the data's scale), and clipping is lossy exactly outside the bounds.
"""

from __future__ import annotations

import hypothesis
import numpy as np
import pytest
import reverb
import tensorflow as tf
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import rlds_reverb
from rlds_reverb.check.statistics import (
    DatasetStatistics,
    FieldStatistics,
    StatisticsOptions,
    compute_statistics,
)
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import SpecMismatchError
from rlds_reverb.learn import sampling
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from rlds_reverb.transform.convert import convert_rlds_to_trajectories
from rlds_reverb.transform.normalize import (
    FieldNormalization,
    NormalizationMode,
    Normalizer,
    normalize,
    unnormalize,
)
from tests import builders, users_data

_RTOL = 1e-6
_STATE = 'observation/state'
_FIELDS = {
    _STATE: NormalizationMode.MEAN_STD,
    'action': FieldNormalization(mode='quantiles', mask=[True, False]),
    'reward': 'min_max',
}


def reference(x: np.ndarray, field: FieldStatistics, how: FieldNormalization) -> np.ndarray:
    """NumPy normalization of `x` (`[..., *shape]`), in float64, from the docstring's rules."""
    x = np.asarray(x, np.float64)
    flat = x.reshape(*x.shape[: x.ndim - len(field.shape)], field.dims)
    mask = np.ones(field.dims, bool) if how.mask is None else np.asarray(how.mask)
    if how.mode is NormalizationMode.MEAN_STD:
        center, half = field.mean, field.std
    elif how.mode is NormalizationMode.MIN_MAX:
        center, half = (field.minimum + field.maximum) / 2, (field.maximum - field.minimum) / 2
    else:
        low, high = (field.get_quantile(b) for b in how.bounds)
        center, half = (low + high) / 2, (high - low) / 2
    out = flat.copy()
    for d in range(field.dims):
        if mask[d] and field.count[d] > 0 and half[d] > 0:
            out[..., d] = (flat[..., d] - center[d]) / half[d]
            if how.clips:
                out[..., d] = np.clip(out[..., d], -1, 1)
    return out.reshape(x.shape)


def _reference_nest(element, statistics, fields: dict) -> dict:
    out = {}
    for path, how in fields.items():
        how = how if isinstance(how, FieldNormalization) else FieldNormalization(mode=how)
        value = element
        for key in path.split('/'):
            value = value[key] if isinstance(value, dict) else getattr(value, key)
        field = statistics[how.statistics_field or path]
        out[path] = reference(np.asarray(value), field, how)
    return out


def _get(element, path: str):
    for key in path.split('/'):
        element = element[key] if isinstance(element, dict) else getattr(element, key)
    return np.asarray(element)


def _check(normalized, original, statistics, fields) -> None:
    expected = _reference_nest(original, statistics, fields)
    for path, values in expected.items():
        found = _get(normalized, path)
        scale = max(float(np.abs(values).max(initial=0)), 1.0)
        np.testing.assert_allclose(found, values, rtol=0, atol=_RTOL * scale, err_msg=path)


@pytest.fixture(scope='module')
def users_statistics(users_dir) -> DatasetStatistics:
    return compute_statistics(rlds_reverb.load(users_dir))


# --- Every form ------------------------------------------------------------------------------


def test_rlds_episodes_of_users_data_match_numpy_and_stay_episode_datasets(
    users_dir, users_statistics
):
    episodes = rlds_reverb.load(users_dir)
    normalized = episodes.apply(normalize(users_statistics, _FIELDS))
    assert isinstance(normalized, episodes_lib.EpisodeDataset)
    assert normalized.element_spec == episodes.element_spec
    found = users_data.read_numpy(normalized.take(12))
    original = users_data.read_numpy(episodes.take(12))
    for new, old in zip(found, original, strict=True):
        _check(new[types.STEPS], old[types.STEPS], users_statistics, _FIELDS)
        np.testing.assert_array_equal(  # The untouched fields are the data's.
            new[types.STEPS]['observation']['image'], old[types.STEPS]['observation']['image']
        )
        np.testing.assert_array_equal(new[types.STEPS]['discount'], old[types.STEPS]['discount'])
        # The gripper-like dimension the mask leaves out is unchanged, exactly.
        np.testing.assert_array_equal(
            new[types.STEPS]['action'][:, 1], old[types.STEPS]['action'][:, 1]
        )
    back = users_data.read_numpy(normalized.apply(unnormalize(users_statistics, _FIELDS)).take(12))
    for new, old in zip(back, original, strict=True):
        np.testing.assert_allclose(
            new[types.STEPS]['observation']['state'],
            old[types.STEPS]['observation']['state'],
            rtol=_RTOL,
            atol=1e-4,
        )
    # Selections of the result still read the source's episodes.
    assert isinstance(normalized.skip(3).take(2), episodes_lib.EpisodeDataset)


def test_frames_kept_encoded_keep_their_formats(users_dir, users_statistics):
    episodes = rlds_reverb.load(users_dir, encoded_frames='all')
    normalized = episodes.apply(normalize(users_statistics, {'observation/state': 'mean_std'}))
    assert normalized.frame_formats == episodes.frame_formats != {}
    back = normalized.apply(unnormalize(users_statistics, {'observation/state': 'mean_std'}))
    assert back.frame_formats == episodes.frame_formats


def test_a_plain_rlds_dataset_and_episode_tensors(users_statistics):
    rng = np.random.default_rng(0)
    steps = [
        {
            **builders.episode(n, action=rng.uniform(-1, 1, (n, 2)).astype(np.float32)),
            'observation': {'state': rng.normal(size=(n, 3)).astype(np.float32)},
        }
        for n in (1, 5, 17)
    ]
    fields = {_STATE: 'mean_std', 'action': 'quantiles'}
    rlds = builders.rlds(steps).apply(normalize(users_statistics, fields))
    tensors = builders.episode_tensors(steps).apply(normalize(users_statistics, fields))
    for found in (builders.read_episodes(rlds), builders.read_episodes(tensors)):
        for new, old in zip(found, steps, strict=True):
            _check(new, old, users_statistics, fields)


def test_trajectories_and_their_batches(users_dir, users_statistics):
    episodes = rlds_reverb.load(users_dir, step_fields=['observation/state']).take(6)
    trajectories = convert_rlds_to_trajectories(episodes)
    fields = {_STATE: 'mean_std', 'action': 'min_max', 'reward': 'mean_std'}
    normalizer = Normalizer(users_statistics, fields)
    for batch in (trajectories.batch(5), trajectories.batch(3).batch(2)):  # [B], [B, T]
        for original in batch.take(3):
            _check(normalizer.normalize(original), original, users_statistics, fields)
    single = next(iter(trajectories.map(normalizer.normalize)))
    _check(single, next(iter(trajectories)), users_statistics, fields)


@pytest.fixture(scope='module')
def sampled_tables(users_plain_dir):
    """Two-step and n-step items of users' plain data in a real Reverb server."""
    episodes = rlds_reverb.load(users_plain_dir).take(30)
    kinds = {'two_step': items.TwoStep(), 'n_step': items.NStep(2, 0.9)}
    signatures = {name: tables.signature_for(kind, episodes) for name, kind in kinds.items()}
    server = reverb.Server(
        [tables.uniform(name, max_size=100_000, signature=signatures[name]) for name in kinds]
    )
    address = f'localhost:{server.port}'
    for name, kind in kinds.items():
        rlds_reverb.push(episodes, address, name, item=kind)
    yield address, signatures, compute_statistics(episodes)
    server.stop()


def test_batches_sampled_from_reverb(sampled_tables):
    address, signatures, statistics = sampled_tables
    cases = {
        # [B, 2, ...] trajectories.
        'two_step': {
            _STATE: 'mean_std',
            'action': FieldNormalization(mode='quantiles', clip=False),
        },
        # [B, ...] n-step items: the next observation by the observation's statistics.
        'n_step': {
            _STATE: 'mean_std',
            'next_observation/state': FieldNormalization(statistics_field=_STATE),
            'action': FieldNormalization(mode='min_max', mask=[False, True]),
        },
    }
    for table, fields in cases.items():
        learner = sampling.LearnerDataset(
            address, table, data_spec=signatures[table], batch_size=16, sequence_length=None
        )
        normalizer = Normalizer(statistics, fields)
        for batch in learner.as_dataset().take(2):
            normalized = normalizer.normalize(batch)
            assert isinstance(normalized, sampling.SampleBatch)
            _check(normalized.experience, batch.experience, statistics, fields)
            back = normalizer.unnormalize(normalized)
            np.testing.assert_allclose(
                _get(back.experience, _STATE), _get(batch.experience, _STATE), rtol=_RTOL, atol=1e-4
            )


# --- Special dimensions ------------------------------------------------------------------------


def _field(values: np.ndarray, path: str = 'action', levels=(0.01, 0.99)) -> FieldStatistics:
    """The statistics of `values` (`[N, D]`, finite), from NumPy."""
    constant = values.min(axis=0) == values.max(axis=0)
    return FieldStatistics(
        path=path,
        dtype='float32',
        shape=(values.shape[1],),
        count=np.full(values.shape[1], len(values), np.int64),
        mean=values.mean(axis=0),
        std=np.where(constant, 0.0, values.std(axis=0)),
        minimum=values.min(axis=0),
        maximum=values.max(axis=0),
        quantile_levels=tuple(levels),
        quantiles=np.quantile(values, levels, axis=0),
        quantile_rank_error=np.zeros(values.shape[1]),
        nan_count=np.zeros(values.shape[1], np.int64),
        inf_count=np.zeros(values.shape[1], np.int64),
    )


def _statistics(*fields: FieldStatistics) -> DatasetStatistics:
    return DatasetStatistics(
        fields={f.path: f for f in fields},
        skipped={},
        episodes=1,
        steps=1,
        options=StatisticsOptions(),
    )


@pytest.mark.parametrize('mode', list(NormalizationMode))
def test_zero_variance_empty_and_masked_dimensions_are_left_unchanged_exactly(mode):
    values = np.array([[0.1, 5.0, 1.0, 2.0], [0.1, 6.0, 1.0, 9.0], [0.1, 7.0, 1.0, 4.0]])
    field = _field(values)
    field = FieldStatistics(**{**field.__dict__, 'count': np.array([3, 3, 0, 3])})  # dim 2: empty
    statistics = _statistics(field)
    how = FieldNormalization(mode=mode, mask=[True, True, True, False])
    x = tf.constant([[0.1, 6.5, 123.0, -4.0], [7.0, 5.0, -1.0, 1e6]], tf.float32)
    y = Normalizer(statistics, {'action': how}).normalize({'action': x})['action'].numpy()
    np.testing.assert_array_equal(y[:, [0, 2, 3]], x.numpy()[:, [0, 2, 3]])  # Exactly.
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, reference(x.numpy(), field, how), rtol=1e-6)


def test_a_std_below_the_dtypes_smallest_normal_leaves_the_dimension_unchanged():
    # Found by the round-trip property: a float32 std of 4e-40 is 0 under TF's flush-to-zero.
    data = np.array([[8.37925e-40, 1.0], [0.0, 3.0]], np.float32)
    field = _field(data.astype(np.float64))
    assert 0 < field.std[0] < np.finfo(np.float32).tiny
    normalizer = Normalizer(_statistics(field), {'action': 'mean_std'})
    y = normalizer.normalize({'action': tf.constant(data)})['action'].numpy()
    np.testing.assert_array_equal(y[:, 0], data[:, 0])  # Bit for bit, the subnormal too.
    np.testing.assert_array_equal(y[:, 1], [-1.0, 1.0])
    back = normalizer.unnormalize({'action': tf.constant(y)})['action'].numpy()
    np.testing.assert_array_equal(back, data)
    # In float64 the same std is a normal number: that dimension is normalized there.
    wide = normalizer.normalize({'action': tf.constant(data, tf.float64)})['action'].numpy()
    np.testing.assert_allclose(wide[:, 0], [1.0, -1.0])


def test_integer_fields_become_float32_and_float64_stays():
    field = _field(np.array([[0.0], [4.0]]))
    normalizer = Normalizer(_statistics(field), {'action': 'min_max'})
    found = normalizer.normalize({'action': tf.constant([[0], [2], [4]], tf.int64)})['action']
    assert found.dtype == tf.float32
    np.testing.assert_array_equal(found.numpy(), [[-1.0], [0.0], [1.0]])
    wide = normalizer.normalize({'action': tf.constant([[3.0]], tf.float64)})['action']
    assert wide.dtype == tf.float64 and wide.numpy()[0, 0] == 0.5
    scalar = _field(np.array([[1.0], [3.0]]), path='reward')
    scalar = FieldStatistics(**{**scalar.__dict__, 'shape': ()})
    reward = Normalizer(_statistics(scalar), {'reward': 'mean_std'}).normalize(
        {'reward': tf.constant([[1.0, 3.0]])}  # [B, T] of a scalar field.
    )['reward']
    np.testing.assert_array_equal(reward.numpy(), [[-1.0, 1.0]])


# --- Round trips (properties) ---------------------------------------------------------------


_DATA = hnp.arrays(
    np.float32,
    st.tuples(st.integers(2, 40), st.integers(1, 4)),
    elements=st.floats(-1e4, 1e4, width=32, allow_nan=False),
)


@hypothesis.given(data=_DATA, mode=st.sampled_from(list(NormalizationMode)), clip=st.booleans())
@hypothesis.settings(max_examples=60, deadline=None)
def test_unnormalize_after_normalize_gives_the_action_back(data, mode, clip):
    field = _field(data.astype(np.float64))
    clip = clip and mode is not NormalizationMode.MEAN_STD
    how = FieldNormalization(
        mode=mode, clip=clip if mode is not NormalizationMode.MEAN_STD else None
    )
    normalizer = Normalizer(_statistics(field), {'action': how})
    normalized = normalizer.normalize({'action': tf.constant(data)})
    back = normalizer.unnormalize(normalized)['action'].numpy()
    expected = data.astype(np.float64)
    if how.clips:  # Lossy outside the bounds: the values come back clipped to them.
        low, high = (
            (field.minimum, field.maximum)
            if mode is NormalizationMode.MIN_MAX
            else (field.get_quantile(0.01), field.get_quantile(0.99))
        )
        expected = np.where(high > low, np.clip(expected, low, high), expected)
    scale = max(float(np.abs(data).max()), 1.0)
    np.testing.assert_allclose(back, expected, rtol=0, atol=_RTOL * scale * 4)
    # In float64 (the data's dtype is kept), normalize is the reference to float64 rounding.
    wide = normalizer.normalize({'action': tf.constant(data, tf.float64)})['action'].numpy()
    np.testing.assert_allclose(wide, reference(data, field, how), rtol=1e-12, atol=1e-12)


def test_clipping_is_lossy_outside_the_bounds_only():
    field = _field(np.linspace(-1.0, 1.0, 101)[:, None], levels=(0.1, 0.9))
    how = FieldNormalization(mode='quantiles', bounds=(0.1, 0.9))
    normalizer = Normalizer(_statistics(field), {'action': how})
    x = tf.constant([[-1.0], [-0.8], [0.0], [0.5], [0.8], [0.95]])
    y = normalizer.normalize({'action': x})['action'].numpy()
    np.testing.assert_allclose(y[:, 0], [-1.0, -1.0, 0.0, 0.625, 1.0, 1.0], atol=1e-6)
    back = normalizer.unnormalize({'action': y})['action'].numpy()
    np.testing.assert_allclose(back[:, 0], [-0.8, -0.8, 0.0, 0.5, 0.8, 0.8], atol=1e-6)
    unclipped = Normalizer(
        _statistics(field),
        {'action': FieldNormalization(mode='quantiles', bounds=(0.1, 0.9), clip=False)},
    )
    y = unclipped.normalize({'action': x})['action'].numpy()
    assert y[0, 0] == pytest.approx(-1.25) and y[-1, 0] == pytest.approx(1.1875)


# --- Errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ('kwargs', 'message'),
    [
        ({'mode': 'zscore'}, "mode='zscore' is not valid"),
        ({'mode': 'mean_std', 'clip': True}, 'no bounds to clip'),
        ({'clip': 'yes'}, "clip='yes' is not valid"),
        ({'bounds': (0.9, 0.1)}, 'low < high'),
        ({'bounds': (0.0, 1.5)}, 'bounds=1.5'),
        ({'mask': [1, 0]}, 'mask must hold booleans'),
    ],
)
def test_field_normalization_refuses_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FieldNormalization(**kwargs)


def test_normalizer_refuses_what_the_statistics_cannot_serve():
    statistics = _statistics(_field(np.array([[0.0, 1.0], [2.0, 3.0]]), levels=(0.05, 0.95)))
    with pytest.raises(KeyError, match='fields with statistics'):
        Normalizer(statistics, {'velocity': 'mean_std'})
    with pytest.raises(KeyError, match='fields with statistics'):
        normalize(statistics, {'next': FieldNormalization(statistics_field='velocity')})
    with pytest.raises(ValueError, match=r'quantiles=\[0\.01, 0\.99\]'):
        Normalizer(statistics, {'action': 'quantiles'})
    with pytest.raises(ValueError, match='has 3 entries; the field has 2 dimensions'):
        unnormalize(statistics, {'action': FieldNormalization(mask=[True, True, False])})
    with pytest.raises(ValueError, match='names no field'):
        Normalizer(statistics, {})
    with pytest.raises(TypeError, match='must be a DatasetStatistics'):
        Normalizer({'action': None}, {'action': 'mean_std'})  # type: ignore[arg-type]


def test_elements_without_the_field_or_of_another_shape_are_refused():
    statistics = _statistics(_field(np.array([[0.0, 1.0], [2.0, 3.0]])))
    normalizer = Normalizer(statistics, {'action': 'mean_std'})
    with pytest.raises(SpecMismatchError, match=r"Cannot normalize \['action'\]"):
        normalizer.normalize({'observation': tf.zeros([2])})
    with pytest.raises(SpecMismatchError, match=r'per-step shape \[2\]'):
        normalizer.unnormalize({'action': tf.zeros([4, 3])})
    dataset = tf.data.Dataset.from_tensors({'observation': tf.zeros([2])})
    with pytest.raises(SpecMismatchError, match='no such field'):
        dataset.apply(normalize(statistics, {'action': 'mean_std'}))
