"""`validate` decides from a TFDS dataset's records in bulk, and agrees with the episode walk.

`rlds_reverb.check.record_checks` answers "is every episode valid, and how many steps,
terminated and truncated episodes?" straight from TFRecord shards. Each case here is
written to a real TFDS directory; the bulk answer must be None exactly when the walk
through the nested steps (`load(..., whole_episodes=False)`) finds a problem, and give the
walk's counts otherwise.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import rlds_reverb
from rlds_reverb.check import record_checks
from rlds_reverb.core import specs, types
from rlds_reverb.read import records
from tests import builders


def _with(length=4, ending=builders.TERMINATED, **fields):
    episode = builders.episode(length, ending=ending)
    for name, value in fields.items():
        episode[name] = np.asarray(value, episode[name].dtype)
    return episode


def _source(episodes):
    source = records.find_record_source(episodes)
    assert source is not None
    return source


def _bulk(directory, split='train', batch_records=64):
    episodes = rlds_reverb.load(directory, split=split)
    return record_checks.count_valid_episodes(
        _source(episodes), specs.get_step_spec(episodes), batch_records=batch_records
    )


def _walk(directory, split='train'):
    data = rlds_reverb.load(directory, split=split, whole_episodes=False)
    return rlds_reverb.validate(data, on_invalid='report')


_VALID = [builders.episode(3), builders.episode(1), builders.episode(5, ending='truncated')]

# One broken rule each, in the middle of valid episodes.
_BROKEN = {
    'empty': _with(length=0),
    'first_missing': _with(is_first=[0, 0, 0, 0]),
    'first_twice': _with(is_first=[1, 0, 1, 0]),
    'last_missing': _with(is_last=[0, 0, 0, 0], is_terminal=[0, 0, 0, 0]),
    'last_early': _with(is_last=[0, 1, 0, 1]),
    'terminal_not_last': _with(is_terminal=[0, 1, 0, 1]),
    'nan_reward': _with(reward=[0.0, np.nan, 1.0, 0.0]),
    'inf_reward': _with(reward=[0.0, 1.0, -np.inf, 0.0]),
    'nan_discount': _with(discount=[1.0, 1.0, np.nan, 1.0]),
    'discount_above_one': _with(discount=[1.0, 1.5, 1.0, 1.0]),
    'discount_below_zero': _with(discount=[1.0, 1.0, -0.1, 1.0]),
}


@pytest.mark.parametrize('episodes_per_shard', [1, 2, 100])
@pytest.mark.parametrize('batch_records', [1, 2, 64])
def test_valid_dataset_counts_equal_the_walk(tmp_path, episodes_per_shard, batch_records):
    directory = builders.write_tfds(
        tmp_path, _VALID * 3, name='valid', episodes_per_shard=episodes_per_shard
    )
    counts = _bulk(directory, batch_records=batch_records)
    report = _walk(directory)
    assert report.ok
    assert counts == (report.episodes, report.steps, report.terminated)
    assert counts == (9, 27, 6)


@pytest.mark.parametrize('case', sorted(_BROKEN))
def test_any_broken_rule_sends_validate_to_the_walk(tmp_path, case):
    directory = builders.write_tfds(
        tmp_path, [*_VALID, _BROKEN[case], builders.episode(2)], name='broken'
    )
    assert _bulk(directory) is None
    walked = _walk(directory)
    assert not walked.ok
    assert walked.invalid_episodes == [3]
    # validate on load's dataset (bulk first, then the walk) reports what the walk does.
    report = rlds_reverb.validate(rlds_reverb.load(directory), on_invalid='report')
    assert report.format() == walked.format()


def test_step_field_with_another_step_count_goes_to_the_walk(tmp_path):
    episode = builders.episode(3)
    episode[types.OBSERVATION] = episode[types.OBSERVATION][:2]  # 2 observations, 3 flags
    directory = builders.write_tfds(tmp_path, [builders.episode(2), episode], name='uneven')
    assert _bulk(directory) is None
    report = rlds_reverb.validate(rlds_reverb.load(directory), on_invalid='report')
    assert report.invalid_episodes == [1]
    assert report.problems[0].rule is rlds_reverb.check.validation.Rule.READABLE


@pytest.mark.parametrize('batch_records', [3, 64])
def test_summarize_records_marks_exactly_the_invalid_episodes(tmp_path, batch_records):
    # Every broken rule once, each between valid episodes: per episode, the bulk summary is
    # clean exactly where the walk finds no problem, and counts the walk's steps.
    broken = [_BROKEN[case] for case in sorted(_BROKEN)]
    mixed = [episode for pair in zip(_VALID * 4, broken, strict=False) for episode in pair]
    directory = builders.write_tfds(tmp_path, mixed, name='mixed', episodes_per_shard=5)
    episodes = rlds_reverb.load(directory)
    source = _source(episodes)
    plan = record_checks.plan_record_checks(source.serialized_steps, specs.get_step_spec(episodes))
    summaries = [
        record_checks.summarize_records(batch, plan)
        for batch in records.read_serialized_batches(source, batch_records=batch_records)
    ]
    clean = np.concatenate([s.clean for s in summaries])
    lengths = np.concatenate([s.lengths for s in summaries])
    walked = _walk(directory)
    assert np.flatnonzero(~clean).tolist() == walked.invalid_episodes
    assert np.flatnonzero(~clean).tolist() == list(range(1, 2 * len(broken), 2))
    assert lengths.tolist() == [len(e[types.IS_FIRST]) for e in mixed]
    terminated = np.concatenate([s.terminated for s in summaries])
    assert terminated.sum() == sum(
        bool(e[types.IS_TERMINAL][-1]) for e, ok in zip(mixed, clean, strict=True) if ok
    )


def test_summarize_records_decides_nothing_when_a_field_has_another_step_count(tmp_path):
    episode = builders.episode(3)
    episode[types.OBSERVATION] = episode[types.OBSERVATION][:2]  # 2 observations, 3 flags
    directory = builders.write_tfds(tmp_path, [builders.episode(2), episode], name='uneven')
    episodes = rlds_reverb.load(directory)
    source = _source(episodes)
    plan = record_checks.plan_record_checks(source.serialized_steps, specs.get_step_spec(episodes))
    (batch,) = records.read_serialized_batches(source, batch_records=64)
    summary = record_checks.summarize_records(batch, plan)
    assert summary.lengths.tolist() == [2, 3]
    assert not summary.clean.any()  # The valid first episode too: the caller decodes both.


def test_summarize_records_raises_on_a_record_that_does_not_parse(tmp_path):
    directory = builders.write_tfds(tmp_path, _VALID, name='garbage')
    episodes = rlds_reverb.load(directory)
    source = _source(episodes)
    plan = record_checks.plan_record_checks(source.serialized_steps, specs.get_step_spec(episodes))
    with pytest.raises(tf.errors.InvalidArgumentError):
        record_checks.summarize_records([b'not a tf.train.Example'], plan)


def test_sliced_split_counts_only_the_slice(tmp_path):
    episodes = [builders.episode(length) for length in (1, 2, 3, 4, 5, 6)]
    directory = builders.write_tfds(tmp_path, episodes, name='sliced', episodes_per_shard=2)
    assert _bulk(directory, split='train[1:4]') == (3, 2 + 3 + 4, 3)
    report = rlds_reverb.validate(rlds_reverb.load(directory, split='train[1:4]'))
    assert (report.episodes, report.steps) == (3, 9)


def test_dict_observations_int_rewards_and_no_discount(tmp_path):
    features = builders.step_features(
        **{
            types.OBSERVATION: tfds.features.FeaturesDict(
                {
                    'state': tfds.features.Tensor(shape=(2,), dtype=np.float32),
                    'pixels': tfds.features.Tensor(shape=(4, 4, 3), dtype=np.uint8),
                }
            ),
            types.REWARD: tfds.features.Scalar(dtype=np.int32),
            types.DISCOUNT: None,
        }
    )

    def _episode(length):
        steps = builders.episode(length)
        del steps[types.DISCOUNT]
        steps[types.REWARD] = np.arange(length, dtype=np.int32)
        steps[types.OBSERVATION] = {
            'state': np.zeros((length, 2), np.float32),
            'pixels': np.full((length, 4, 4, 3), 7, np.uint8),
        }
        return steps

    directory = builders.write_tfds(
        tmp_path, [_episode(2), _episode(3)], name='dicts', features=features
    )
    with pytest.warns(UserWarning, match='discount'):
        assert _bulk(directory) == (2, 5, 2)


def test_encoded_features_are_left_to_the_walk(tmp_path):
    features = builders.step_features(
        **{types.OBSERVATION: tfds.features.Image(shape=(4, 4, 3), encoding_format='png')}
    )
    steps = builders.episode(2)
    steps[types.OBSERVATION] = np.zeros((2, 4, 4, 3), np.uint8)
    tfds.dataset_builders.store_as_tfds_dataset(  # TFDS' own writer encodes the images.
        name='images',
        version='1.0.0',
        features=features,
        split_datasets={'train': [('0', {types.STEPS: steps})]},
        data_dir=str(tmp_path),
        disable_shuffling=True,
    )
    directory = tmp_path / 'images' / '1.0.0'
    assert _bulk(directory) is None
    report = rlds_reverb.validate(rlds_reverb.load(directory))
    assert (report.episodes, report.steps) == (1, 2)


def test_datasets_not_read_from_records_have_no_source(tmp_path):
    directory = builders.write_tfds(tmp_path, _VALID, name='sources')
    # A user's own map is read through its steps (take, skip and shard keep the source).
    assert records.find_record_source(rlds_reverb.load(directory).map(lambda e: e)) is None
    shuffled = rlds_reverb.load(directory, shuffle_files=True)
    assert records.find_record_source(shuffled) is None


def _shard(directory):
    (path,) = sorted(directory.glob('*.tfrecord*'))
    return path


def test_read_serialized_batches_raises_on_a_truncated_shard(tmp_path):
    directory = builders.write_tfds(tmp_path, _VALID, name='truncated')
    episodes = rlds_reverb.load(directory)
    source = _source(episodes)
    path = _shard(directory)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(tf.errors.DataLossError):
        list(records.read_serialized_batches(source, batch_records=2))
    assert record_checks.count_valid_episodes(source, specs.get_step_spec(episodes)) is None


def test_a_flipped_byte_fails_the_checksum(tmp_path):
    directory = builders.write_tfds(tmp_path, _VALID, name='flipped')
    episodes = rlds_reverb.load(directory)
    path = _shard(directory)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        list(records.read_serialized_batches(_source(episodes), batch_records=2))
    assert (
        record_checks.count_valid_episodes(_source(episodes), specs.get_step_spec(episodes)) is None
    )


def test_read_serialized_batches_raises_on_a_missing_shard(tmp_path):
    directory = builders.write_tfds(tmp_path, _VALID, name='missing')
    source = _source(rlds_reverb.load(directory))
    _shard(directory).unlink()
    with pytest.raises(tf.errors.NotFoundError):
        list(records.read_serialized_batches(source, batch_records=2))
