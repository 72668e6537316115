"""Readers by protocol: a reader written here plugs in and is picked by load, validate,
push and `rlds-reverb info` unchanged; every reader refuses, by name, the options it does
not accept; `LoadOptions` is the one place load's options are defined and checked.

The reader here reads a tiny format of its own: a directory holding `npz_episodes.json`
(the episode count) and one `episode_<i>.npz` per episode (the step fields as `[T, ...]`
arrays). It selects episodes by index (split slices, `take`, `skip`, `shard`) with the
toolkit's one selection value, and ends with the common tail (`finish_episodes`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds

import rlds_reverb
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources, types
from rlds_reverb.core.errors import SourceError, SpecMismatchError
from rlds_reverb.read import loading, readers
from rlds_reverb.read import options as options_lib
from rlds_reverb.read.options import LoadOptions
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from tests import builders, reverb_tables

_MARKER = 'npz_episodes.json'
_LENGTHS = [3, 5, 2, 4, 6]


@dataclasses.dataclass(frozen=True, eq=False)
class _NpzSource(sources.EpisodeSource):
    """The episodes of an npz directory, read one file at a time, by index."""

    directory: pathlib.Path
    step_spec: dict
    index: sources.IndexSelection

    def read(self) -> tf.data.Dataset:
        def _generate():
            for position in self.index.positions():
                with np.load(self.directory / f'episode_{position}.npz') as arrays:
                    steps = {key: arrays[key] for key in self.step_spec}
                yield {types.EPISODE_ID: np.int64(position), types.STEPS: steps}

        signature = {
            types.EPISODE_ID: tf.TensorSpec([], tf.int64),
            types.STEPS: {
                k: tf.TensorSpec([None, *s.shape], s.dtype) for k, s in self.step_spec.items()
            },
        }
        return tf.data.Dataset.from_generator(_generate, output_signature=signature)

    def select(self, selection: sources.Selection) -> _NpzSource:
        return dataclasses.replace(self, index=self.index.select(selection))


class NpzReader:
    """A reader of the npz format above: split slices, take, skip and shard, step fields."""

    name = 'npz'
    accepts = frozenset({'split', 'step_fields'})

    def recognizes(self, source: Any) -> bool:
        return isinstance(source, str | pathlib.Path) and (pathlib.Path(source) / _MARKER).is_file()

    def open(self, source: Any, options: LoadOptions) -> tf.data.Dataset:
        directory = pathlib.Path(source)
        count = json.loads((directory / _MARKER).read_text())['episodes']
        with np.load(directory / 'episode_0.npz') as first:
            step_spec = {
                k: tf.TensorSpec(v.shape[1:], tf.as_dtype(v.dtype)) for k, v in first.items()
            }
        index = sources.IndexSelection.from_split(options.split, count)
        episodes = episodes_lib.from_source(_NpzSource(directory, step_spec, index))
        return readers.finish_episodes(episodes, options, where=f'the npz episodes in {source}')


def write_npz(directory: pathlib.Path, *, discount: bool = True) -> pathlib.Path:
    """Writes the episodes of `_LENGTHS` (the last one truncated) in the npz format."""
    directory.mkdir(parents=True)
    for index, length in enumerate(_LENGTHS):
        ending = builders.TERMINATED if index % 2 == 0 else builders.TRUNCATED
        steps = builders.episode(length, ending=ending, start=10.0 * index)
        if not discount:
            steps.pop(types.DISCOUNT)
        np.savez(directory / f'episode_{index}.npz', **steps)
    (directory / _MARKER).write_text(json.dumps({'episodes': len(_LENGTHS)}))
    return directory


@pytest.fixture
def npz_reader():
    reader = NpzReader()
    loading.register_reader(reader)
    yield reader
    loading.unregister_reader(reader.name)


@pytest.fixture
def npz_dir(tmp_path) -> pathlib.Path:
    return write_npz(tmp_path / 'npz')


def _ids(episodes: tf.data.Dataset) -> list[int]:
    return [int(e[types.EPISODE_ID]) for e in episodes]


# --- A reader written outside the package --------------------------------------------------


def test_a_registered_reader_is_asked_first_and_read_whole(npz_reader, npz_dir):
    assert loading.list_readers()[0] is npz_reader
    assert [r.name for r in loading.list_readers()[1:]] == [
        'lerobot',
        'minari',
        'd4rl',
        'tf.data',
        'tfds',
    ]
    assert loading.find_reader(str(npz_dir)) is npz_reader
    episodes = rlds_reverb.load(npz_dir)
    assert isinstance(episodes_lib.find_source(episodes), _NpzSource)
    assert _ids(episodes) == [0, 1, 2, 3, 4]
    steps = list(next(iter(episodes))[types.STEPS].as_numpy_iterator())
    np.testing.assert_array_equal(
        [s[types.OBSERVATION] for s in steps], builders.episode(3)[types.OBSERVATION]
    )


@pytest.mark.parametrize(
    ('select', 'expected'),
    [(lambda e: e.take(2), [0, 1]), (lambda e: e.skip(3), [3, 4]),
     (lambda e: e.shard(2, 1), [1, 3]), (lambda e: e.skip(1).take(3).shard(2, 0), [1, 3])],
)  # fmt: skip
def test_selections_stay_on_the_readers_source(npz_reader, npz_dir, select, expected):
    selected = select(rlds_reverb.load(npz_dir))
    source = episodes_lib.find_source(selected)
    assert isinstance(source, _NpzSource) and source.index.positions().tolist() == expected
    assert _ids(selected) == expected


@pytest.mark.parametrize(
    ('split', 'expected'),
    [('train[1:3]', [1, 2]), ('train[-2:]', [3, 4]), ('train[:40%]', [0, 1])],
)
def test_split_slices_use_the_one_selection(npz_reader, npz_dir, split, expected):
    assert _ids(rlds_reverb.load(npz_dir, split=split)) == expected
    assert _ids(rlds_reverb.load(npz_dir, options=LoadOptions(split=split))) == expected


def test_validate_and_push_take_it_unchanged(npz_reader, npz_dir):
    episodes = rlds_reverb.load(npz_dir)
    report = rlds_reverb.validate(episodes)
    assert report.ok and report.valid == 5 and report.steps == sum(_LENGTHS)
    assert (report.terminated, report.truncated) == (3, 2)
    kind = items.TwoStep()
    table = reverb_tables.make_fifo_table('npz', tables.signature_for(kind, episodes))
    server = reverb.Server([table], port=None)
    try:
        client = server.localhost_client()
        stats = rlds_reverb.push(episodes, client, 'npz', item=kind)
        assert stats.episodes == 5 and stats.items == {'npz': sum(n - 1 for n in _LENGTHS)}
        assert len(reverb_tables.read_items(client, 'npz')) == sum(n - 1 for n in _LENGTHS)
    finally:
        server.stop()


def test_the_command_line_reads_it_unchanged(npz_reader, npz_dir, run_cli):
    code, out, _ = run_cli('info', npz_dir)
    assert code == 0
    assert 'episodes: 5' in out and f'steps: {sum(_LENGTHS)}' in out
    code, out, _ = run_cli('validate', npz_dir, '--split', 'train[:2]')
    assert code == 0 and 'episodes: 2 (valid 2, invalid 0)' in out


def test_the_common_tail_keeps_step_fields_and_fills_the_discount(npz_reader, tmp_path):
    directory = write_npz(tmp_path / 'npz', discount=False)
    with pytest.warns(UserWarning, match="have no 'discount' field; using 1.0") as caught:
        episodes = rlds_reverb.load(directory, step_fields=[types.OBSERVATION])
    assert caught[0].filename == __file__  # Points at the caller of load.
    assert isinstance(episodes_lib.find_source(episodes), sources.MappedSource)
    step_spec = episodes.element_spec[types.STEPS].element_spec
    assert set(step_spec) == set(types.REQUIRED_STEP_FIELDS)
    assert step_spec[types.DISCOUNT] == tf.TensorSpec([], tf.float32)
    whole = next(iter(episodes.skip(1).whole_episodes.as_numpy_iterator()))
    np.testing.assert_array_equal(whole[types.STEPS][types.DISCOUNT], np.ones(5, np.float32))
    assert int(whole[types.EPISODE_ID]) == 1
    with pytest.raises(SpecMismatchError, match="step_fields names 'language'"):
        rlds_reverb.load(directory, step_fields=['language'])


def test_an_option_the_reader_does_not_accept_is_refused_by_name(npz_reader, npz_dir):
    with pytest.raises(
        SourceError,
        match=r'read by the npz reader, which does not take shuffle_files=True \(shuffle_files '
        r'and read_config are TFDS read options.*It accepts split, step_fields',
    ):
        rlds_reverb.load(npz_dir, shuffle_files=True)
    with pytest.raises(SourceError, match=r'check_files=False .*whole_episodes=False'):
        rlds_reverb.load(npz_dir, check_files=False, whole_episodes=False)
    assert _ids(rlds_reverb.load(npz_dir, check_files=True)) == [0, 1, 2, 3, 4]  # Defaults.


def test_registering_checks_the_reader(npz_reader):
    with pytest.raises(ValueError, match="A reader named 'npz' is already registered"):
        loading.register_reader(NpzReader())
    with pytest.raises(ValueError, match="A reader named 'tfds' is already registered"):
        loading.register_reader(type('Tfds', (NpzReader,), {'name': 'tfds'})())
    with pytest.raises(TypeError, match='is not a Reader: it lacks accepts, open'):
        loading.register_reader(type('Half', (), {'name': 'half', 'recognizes': len})())
    bad = type('Bad', (NpzReader,), {'name': 'bad', 'accepts': frozenset({'splits'})})()
    with pytest.raises(ValueError, match=r"accepts \['splits'\], which are not options of load"):
        loading.register_reader(bad)
    with pytest.raises(ValueError, match="No registered reader is named 'tfds'"):
        loading.unregister_reader('tfds')
    assert [r.name for r in loading.list_readers()] == [
        'npz',
        'lerobot',
        'minari',
        'd4rl',
        'tf.data',
        'tfds',
    ]


def test_without_the_reader_the_source_is_not_a_dataset(npz_dir):
    assert loading.find_reader(str(npz_dir)).name == 'tfds'
    with pytest.raises(SourceError, match='is not an RLDS dataset directory'):
        rlds_reverb.load(npz_dir)


def test_registered_readers_come_in_the_order_registered(npz_reader, npz_dir):
    class Greedy(NpzReader):
        name = 'greedy'

        def recognizes(self, source: Any) -> bool:
            return isinstance(source, str | pathlib.Path)

    loading.register_reader(Greedy())
    try:
        assert loading.find_reader(str(npz_dir)).name == 'npz'  # Registered first.
        assert loading.find_reader('/data/other').name == 'greedy'  # Before the built-ins.
    finally:
        loading.unregister_reader('greedy')


# --- Built-in readers refuse what they do not accept ---------------------------------------


def test_a_tf_data_dataset_takes_step_fields_only(cartpole_episodes):
    assert rlds_reverb.load(cartpole_episodes) is cartpole_episodes
    kept = rlds_reverb.load(cartpole_episodes, step_fields=[types.OBSERVATION])
    assert episodes_lib.has_whole_episodes(kept)  # Still read whole.
    for option in ({'split': 'test'}, {'data_dir': '/data'}, {'check_files': 'full'}):
        with pytest.raises(SourceError, match='the given tf.data.Dataset is read by the tf.data'):
            rlds_reverb.load(cartpole_episodes, **option)


def test_the_tfds_reader_takes_every_option(cartpole_dir):
    options = LoadOptions(
        split='train[:3]',
        shuffle_files=True,
        read_config=tfds.ReadConfig(shuffle_seed=1),
        check_files='full',
        step_fields=[types.OBSERVATION],
        whole_episodes=False,
    )
    assert sum(1 for _ in rlds_reverb.load(cartpole_dir, options=options)) == 3


# --- LoadOptions ---------------------------------------------------------------------------


def test_options_and_keyword_overrides_make_one_value():
    options = LoadOptions(split='train[:5]', step_fields=['observation/image'])
    assert options.step_fields == ('observation/image',)
    assert options.step_paths == (('observation', 'image'),)
    assert options.list_changed() == ['split', 'step_fields']
    merged = options_lib.make_options(options, {'split': 'train'})
    assert merged.split == 'train' and merged.step_fields == ('observation/image',)
    assert options.split == 'train[:5]'  # The caller's value is never changed.
    assert options_lib.make_options(options, {}) is options
    assert LoadOptions().list_changed() == []


@pytest.mark.parametrize(
    ('options', 'error', 'match'),
    [
        ({'check_files': 'fast'}, ValueError, "check_files='fast' is not valid"),
        ({'shuffle_files': 1}, ValueError, 'shuffle_files=1 is not valid'),
        ({'whole_episodes': 'yes'}, ValueError, "whole_episodes='yes' is not valid"),
        ({'split': 3}, TypeError, 'split must be a string'),
        ({'step_fields': 'observation'}, TypeError, 'step_fields must be a sequence'),
        ({'read_config': {'seed': 1}}, TypeError, 'read_config must be a tfds.ReadConfig'),
    ],
)
def test_invalid_options_are_named(options, error, match):
    with pytest.raises(error, match=match):
        LoadOptions(**options)
    with pytest.raises(error, match=match):
        rlds_reverb.load('/nowhere', **options)


def test_unknown_keywords_and_options_of_another_type_are_refused():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'splits'.*check_files"):
        rlds_reverb.load('/nowhere', splits='train')
    with pytest.raises(TypeError, match='options must be a LoadOptions; got dict'):
        rlds_reverb.load('/nowhere', options={'split': 'train'})
