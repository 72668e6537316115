"""Statistics saved beside the dataset with a fingerprint, reused only while it matches
(rlds_reverb.check.statistics_files), and their JSON form (statistics_json)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np
import pytest

import rlds_reverb
from rlds_reverb.check import statistics_files, statistics_json
from rlds_reverb.check.statistics import StatisticsOptions, compute_statistics
from rlds_reverb.check.statistics_files import ensure_statistics, read_statistics, save_statistics
from rlds_reverb.core import errors
from tests import builders, d4rl_files

_NAME = 'stats_data'


def _episodes(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        builders.episode(
            n,
            observation=rng.normal(size=(n, 2)).astype(np.float32),
            action=rng.integers(0, 4, size=n),
            ending=builders.TRUNCATED if n % 2 else builders.TERMINATED,
        )
        for n in (4, 9, 1, 30, 12, 7)
    ]


def _write(directory: pathlib.Path, seed: int) -> pathlib.Path:
    return builders.write_tfds(directory, _episodes(seed), name=_NAME, episodes_per_shard=2)


@pytest.fixture
def dataset_dir(tmp_path) -> pathlib.Path:
    return _write(tmp_path / 'a', seed=0)


def _assert_same(a, b) -> None:
    assert list(a.fields) == list(b.fields) and a.skipped == b.skipped
    assert (a.episodes, a.steps, a.options) == (b.episodes, b.steps, b.options)
    for path, field in a.fields.items():
        other = b.fields[path]
        assert (field.dtype, field.shape, field.quantile_levels) == (
            other.dtype,
            other.shape,
            other.quantile_levels,
        )
        for name in ('count', 'mean', 'std', 'minimum', 'maximum', 'quantiles', 'nan_count'):
            np.testing.assert_array_equal(getattr(field, name), getattr(other, name))
        np.testing.assert_array_equal(field.quantile_rank_error, other.quantile_rank_error)


def test_saved_beside_dataset_info_and_reused_while_the_data_is_unchanged(dataset_dir):
    first = ensure_statistics(dataset_dir)
    saved = dataset_dir / 'rlds_reverb_statistics-train.json'
    assert saved.is_file() and (dataset_dir / 'dataset_info.json').is_file()
    assert not first.reused and first.fingerprint
    again = ensure_statistics(dataset_dir)
    assert again.reused and again.fingerprint == first.fingerprint
    _assert_same(first, again)
    _assert_same(first, compute_statistics(rlds_reverb.load(dataset_dir)))
    assert rlds_reverb.load(dataset_dir) is not None  # The file does not disturb TFDS.
    assert oct(saved.stat().st_mode & 0o002) == '0o0'  # Never world-writable.
    document = json.loads(saved.read_text())
    assert document['format'] == statistics_json.FORMAT
    assert document['data']['location'] == str(dataset_dir)
    assert [s['records'] for s in document['data']['shards']] == [2, 2, 2]


def test_other_options_a_refresh_or_another_split_recompute(dataset_dir):
    first = ensure_statistics(dataset_dir)
    other = ensure_statistics(dataset_dir, quantiles=[0.05, 0.95])
    assert not other.reused and other.fingerprint != first.fingerprint
    assert other['observation'].quantile_levels == (0.05, 0.95)
    assert ensure_statistics(dataset_dir, quantiles=[0.05, 0.95]).reused
    assert not ensure_statistics(dataset_dir, quantiles=[0.05, 0.95], refresh=True).reused
    sliced = ensure_statistics(dataset_dir, split='train[:3]')
    assert not sliced.reused and sliced.episodes == 3
    names = sorted(p.name for p in dataset_dir.glob('rlds_reverb_statistics*'))
    assert len(names) == 2 and 'rlds_reverb_statistics-train.json' in names
    assert ensure_statistics(dataset_dir, split='train[:3]').reused


def test_a_changed_dataset_recomputes_even_with_records_of_the_same_size(tmp_path, dataset_dir):
    before = ensure_statistics(dataset_dir)
    other_dir = _write(tmp_path / 'b', seed=1)  # Same lengths and shapes, other values.
    assert (other_dir / 'dataset_info.json').read_bytes() == (
        dataset_dir / 'dataset_info.json'
    ).read_bytes()
    for shard in sorted(other_dir.glob(f'{_NAME}-train.tfrecord-*')):
        assert shard.stat().st_size == (dataset_dir / shard.name).stat().st_size
        shutil.copyfile(shard, dataset_dir / shard.name)
    after = ensure_statistics(dataset_dir)
    assert not after.reused and after.fingerprint != before.fingerprint
    assert not np.array_equal(after['observation'].mean, before['observation'].mean)
    _assert_same(after, compute_statistics(rlds_reverb.load(other_dir)))


def test_a_rewritten_dataset_recomputes_with_the_file_kept_elsewhere(tmp_path):
    path = tmp_path / 'kept.json'
    directory = _write(tmp_path / 'a', seed=0)
    first = ensure_statistics(directory, path=path)
    shutil.rmtree(directory)
    rng = np.random.default_rng(3)
    longer = [
        *_episodes(0),
        builders.episode(5, observation=rng.normal(size=(5, 2)).astype(np.float32)),
    ]
    builders.write_tfds(tmp_path / 'a', longer, name=_NAME, episodes_per_shard=2)
    second = ensure_statistics(directory, path=path)
    assert not second.reused and second.steps == first.steps + 5
    assert not any(directory.glob('rlds_reverb_statistics*'))


def test_moving_a_dataset_with_its_times_keeps_its_statistics(tmp_path, dataset_dir):
    first = ensure_statistics(dataset_dir)
    moved = tmp_path / 'moved'
    shutil.copytree(dataset_dir, moved)  # copy2: the times are kept.
    again = ensure_statistics(moved)
    assert again.reused and again.fingerprint == first.fingerprint


def test_a_tfds_name_and_a_parent_directory_find_the_same_file(tmp_path, dataset_dir):
    first = ensure_statistics(dataset_dir)
    by_name = ensure_statistics(_NAME, data_dir=tmp_path / 'a')
    by_parent = ensure_statistics(dataset_dir.parent)
    assert by_name.reused and by_parent.reused
    assert by_name.fingerprint == by_parent.fingerprint == first.fingerprint


def test_a_d4rl_file_keeps_its_statistics_beside_it(tmp_path):
    path = d4rl_files.write_d4rl_file(tmp_path / 'hopper-v2.hdf5', next_observations=True)
    first = ensure_statistics(path)
    assert (tmp_path / 'hopper-v2.hdf5.rlds_reverb_statistics-train.json').is_file()
    assert ensure_statistics(path).reused
    os.utime(path, ns=(1, 1))  # Touched: read again.
    assert not ensure_statistics(path).reused
    _assert_same(first, compute_statistics(rlds_reverb.load(path)))


def test_a_tf_data_source_needs_a_path_and_is_never_reused(tmp_path):
    dataset = builders.rlds(_episodes(0))
    with pytest.raises(ValueError, match='pass path='):
        ensure_statistics(dataset)
    path = tmp_path / 'from_tf_data.json'
    first = ensure_statistics(dataset, path=path)
    assert first.fingerprint is None and path.is_file()
    assert not ensure_statistics(dataset, path=path).reused
    _assert_same(first, read_statistics(path))


def test_a_malformed_file_is_recomputed(dataset_dir, caplog):
    saved = dataset_dir / 'rlds_reverb_statistics-train.json'
    saved.write_text('{"format": "rlds-reverb statistics 1", "fields": ')
    found = ensure_statistics(dataset_dir)
    assert not found.reused and 'Recomputing the statistics' in caplog.text
    assert ensure_statistics(dataset_dir).reused


def test_json_round_trip_keeps_nan_figures_as_null(tmp_path):
    nan_observation = np.array([[1.0, np.nan], [2.0, np.nan]], np.float32)
    found = compute_statistics(builders.rlds([builders.episode(observation=nan_observation)]))
    path = save_statistics(found, tmp_path / 's.json')
    text = path.read_text()
    assert 'NaN' not in text and 'Infinity' not in text
    document = json.loads(text)
    assert document['fields']['observation']['mean'] == [1.5, None]
    assert document['fields']['observation']['empty_dims'] == [1]
    back = read_statistics(path)
    _assert_same(found, back)
    assert back['observation'].empty_dims == (1,)


# --- Errors ------------------------------------------------------------------------------------


def test_an_unwritable_place_fails_before_the_data_is_read(dataset_dir, tmp_path):
    read = []
    with pytest.raises(OSError, match='Cannot write statistics'):
        ensure_statistics(
            dataset_dir, path=tmp_path / 'missing' / 's.json', progress=lambda *a: read.append(a)
        )
    assert read == []
    with pytest.raises(IsADirectoryError, match='it is a directory'):
        save_statistics(ensure_statistics(dataset_dir), tmp_path)


def test_read_statistics_names_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_statistics(tmp_path / 'none.json')
    for text, message in [
        ('not json', 'holds no readable statistics'),
        ('[1, 2]', "format 'list'"),
        ('{"format": "other"}', "format 'other'"),
        ('{"format": "rlds-reverb statistics 1"}', 'malformed statistics'),
    ]:
        path = tmp_path / 'bad.json'
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_statistics(path)


def test_missing_sources_and_bad_options_are_refused(tmp_path, dataset_dir):
    with pytest.raises(errors.SourceNotFoundError):
        ensure_statistics(tmp_path / 'nowhere')
    with pytest.raises(errors.SourceNotFoundError):
        ensure_statistics('no_such_dataset', data_dir=tmp_path)
    with pytest.raises(errors.SourceError):
        ensure_statistics(tmp_path)  # A directory without a dataset.
    with pytest.raises(errors.SpecMismatchError, match='which the steps do not hold'):
        ensure_statistics(dataset_dir, fields=['velocity'])
    with pytest.raises(ValueError, match='quantiles'):
        ensure_statistics(dataset_dir, quantiles=[2.0])


def test_a_directory_of_several_datasets_is_refused(tmp_path):
    _write(tmp_path / 'two', seed=0)
    builders.write_tfds(tmp_path / 'two', _episodes(1), name='other', episodes_per_shard=2)
    with pytest.raises(errors.SourceError, match='several TFDS datasets'):
        statistics_files.locate_statistics(
            tmp_path / 'two', split='train', data_dir=None, path=None, options=StatisticsOptions()
        )


def test_describe_data_and_fingerprints(dataset_dir):
    where, description = statistics_files.describe_data(dataset_dir)
    assert where == dataset_dir / 'rlds_reverb_statistics-train.json'
    assert description is not None and description['kind'] == 'tfds'
    sliced, _ = statistics_files.describe_data(dataset_dir, split='train[:10%]')
    assert sliced is not None and sliced.name.startswith('rlds_reverb_statistics-train__10__-')
    assert statistics_files.describe_data(builders.rlds(_episodes(0))) == (None, None)
