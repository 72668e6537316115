"""Minari datasets through `rlds_reverb.load`: minari 0.5.4's own files, errors, the toolkit.

`tests/fixtures/minari/` holds datasets written by minari 0.5.4 itself (HDF5 and Arrow, a
Dict observation with a JPEG-encoded uint8 image, a Tuple observation, Box and Discrete
actions, terminated, truncated and both-flag episodes, an episode of one step) and
`expected.json`, what minari's own `iterate_episodes()` read from them
(`tests/fixtures/minari/make_fixtures.py`, run in a separate environment). Each episode
read here is compared with it. Other datasets are written here in Minari's layout with
h5py and pyarrow (shapes, memory).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pyarrow as pa
import pytest
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
import tree

import adders
import rlds_reverb
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import MinariFormatError, SourceError, SpecMismatchError
from rlds_reverb.core.sources import Shard, Skip, Take
from rlds_reverb.read import minari
from rlds_reverb.read.loading import load
from rlds_reverb.serve import tables
from rlds_reverb.storage import features as storage_features
from rlds_reverb.storage import tfds_writer
from rlds_reverb.transform import items
from tests import reverb_tables

_FIXTURES = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'minari'
_EXPECTED = json.loads((_FIXTURES / 'expected.json').read_text())
_DATASETS = sorted(_EXPECTED)  # image-hdf5, image-arrow, tuple-hdf5, tuple-arrow


def _directory(name: str) -> pathlib.Path:
    return _FIXTURES / 'datasets' / _EXPECTED[name]['dataset_id']


def _leaf(nest: dict, path: str):
    for key in path.split('/')[1:]:
        nest = nest[key]
    return nest


def _read(episodes: tf.data.Dataset) -> list[dict]:
    return list(episodes_lib.to_whole_episodes(episodes).as_numpy_iterator())


@pytest.mark.parametrize('kind', ['image', 'tuple'])
def test_each_episode_is_what_minari_reads(kind):
    for data_format in ('hdf5', 'arrow'):
        _compare_with_minari(f'{kind}-{data_format}')


def _compare_with_minari(name: str) -> None:
    """Compares each episode `load` reads with what minari's `iterate_episodes()` read."""
    episodes = _read(load(_directory(name)))
    expected = _EXPECTED[name]['episodes']
    assert len(episodes) == len(expected) == 6
    for got, want in zip(episodes, expected, strict=True):
        steps, length = got[types.STEPS], want['length']
        where = f'{name} episode {want["id"]}'
        assert got[types.EPISODE_ID] == want['id'] and got[minari.SEED] == want['seed'], where
        assert len(steps[types.REWARD]) == length + 1, where  # The final observation's step.
        np.testing.assert_array_equal(steps[types.REWARD], [*want['rewards'], 0.0])
        terminated = want['terminations'][-1]  # Termination wins over truncation.
        np.testing.assert_array_equal(steps[types.IS_FIRST], np.arange(length + 1) == 0)
        np.testing.assert_array_equal(steps[types.IS_LAST], np.arange(length + 1) == length)
        np.testing.assert_array_equal(
            steps[types.IS_TERMINAL], (np.arange(length + 1) == length) & terminated
        )
        discount = np.ones(length + 1)
        if terminated:
            discount[-2:] = 0.0
        np.testing.assert_array_equal(steps[types.DISCOUNT], discount, err_msg=where)
        for field, top in ((types.OBSERVATION, 'observations'), (types.ACTION, 'actions')):
            for path, value in want[top].items():
                array = _leaf({top: steps[field]}, f'/{top}{path[len(top) :]}')
                if 'sha256' in value:  # A JPEG image: decoded exactly as minari (PIL) does.
                    assert array.dtype == np.uint8 and list(array.shape) == value['shape']
                    digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
                    assert digest == value['sha256'], (where, path)
                    continue
                stored = np.array(value['values'], value['dtype'])
                if field == types.ACTION:  # T actions, then the last step's zero placeholder.
                    stored = np.concatenate([stored, np.zeros_like(stored[:1])])
                assert array.dtype == stored.dtype, (where, path)
                np.testing.assert_array_equal(array, stored, err_msg=f'{where} {path}')


def test_both_endings_and_a_one_step_episode_are_in_the_fixtures():
    for name in _DATASETS:
        episodes = _EXPECTED[name]['episodes']
        assert min(e['length'] for e in episodes) == 1
        assert any(e['terminations'][-1] and e['truncations'][-1] for e in episodes)
        assert any(e['truncations'][-1] and not e['terminations'][-1] for e in episodes)


@pytest.mark.parametrize(
    ('name', 'inner'),
    [('image-hdf5', 'data'), ('image-hdf5', 'data/main_data.hdf5'), ('tuple-arrow', 'data')],
)
def test_the_data_directory_reads_the_same(name, inner):
    whole, data = load(_directory(name)), load(str(_directory(name) / inner))
    assert whole.element_spec == data.element_spec
    for a, b in zip(_read(whole), _read(data), strict=True):
        tree.map_structure(np.testing.assert_array_equal, a, b)


def test_the_spec_comes_from_metadata():
    spec = load(_directory('image-arrow')).element_spec
    steps = spec[types.STEPS].element_spec
    assert steps[types.OBSERVATION] == {
        'image': tf.TensorSpec([32, 32, 3], tf.uint8),
        'state': tf.TensorSpec([3], tf.float32),
    }
    assert steps[types.ACTION] == tf.TensorSpec([2], tf.float32)
    assert steps[types.REWARD] == steps[types.DISCOUNT] == tf.TensorSpec([], tf.float64)
    assert spec[types.EPISODE_ID] == spec[minari.SEED] == tf.TensorSpec([], tf.int64)
    tuple_steps = load(_directory('tuple-hdf5')).element_spec[types.STEPS].element_spec
    assert tuple_steps[types.OBSERVATION] == {
        '0': tf.TensorSpec([2], tf.float32),
        '1': tf.TensorSpec([], tf.int64),
    }
    assert tuple_steps[types.ACTION] == tf.TensorSpec([], tf.int64)


# --- selections ----------------------------------------------------------------------------

_SELECTIONS = {
    'take': (lambda d: d.take(4), [0, 1, 2, 3]),
    'skip': (lambda d: d.skip(2), [2, 3, 4, 5]),
    'shard': (lambda d: d.shard(3, 1), [1, 4]),
    'chain': (lambda d: d.skip(1).take(4).shard(2, 0), [1, 3]),
    'tensor': (lambda d: d.skip(tf.constant(5, tf.int64)), [5]),
    'all': (lambda d: d.take(-1), [0, 1, 2, 3, 4, 5]),
    'none': (lambda d: d.skip(-1), []),
}


@pytest.mark.parametrize('name', list(_SELECTIONS))
def test_selections_narrow_the_episode_list(name):
    select, ids = _SELECTIONS[name]
    part = select(load(_directory('tuple-arrow')))
    source = episodes_lib.find_source(part)
    assert isinstance(source, minari.MinariSource)
    assert source.episode_ids == tuple(ids) and not source.selections  # Nothing else is read.
    assert [int(e[types.EPISODE_ID]) for e in _read(part)] == ids
    assert [int(e[types.EPISODE_ID]) for e in part] == ids  # The RLDS view.


def test_a_selection_of_unknown_count_applies_to_the_ids_before_reading():
    source = episodes_lib.find_source(load(_directory('tuple-hdf5')))
    assert source.select(Take(3)).select(Shard(2, 1)).episode_ids == (1,)
    # A count known only when run (a graph tensor) is kept as a selection of the ids.
    unknown = Skip(0)
    object.__setattr__(unknown, 'count', tf.constant(4, tf.int64))
    pending = source.select(unknown).select(Take(1))
    assert pending.episode_ids == source.episode_ids and len(pending.selections) == 2
    assert [int(e[types.EPISODE_ID]) for e in pending.read().as_numpy_iterator()] == [4]


# --- the toolkit on a Minari source --------------------------------------------------------


@pytest.mark.parametrize('name', ['image-hdf5', 'tuple-arrow'])
def test_validate_counts_the_endings(name):
    report = rlds_reverb.validate(load(_directory(name)))
    lengths = [e['length'] for e in _EXPECTED[name]['episodes']]
    assert report.ok and report.valid == 6 and report.invalid == 0
    assert (report.terminated, report.truncated) == (3, 3)
    assert report.steps == sum(lengths) + 6


def test_convert_gives_tf_agents_trajectories():
    episodes = load(_directory('image-arrow'))
    spec = rlds_reverb.create_trajectory_data_spec(episodes)
    assert spec.observation['image'] == tf.TensorSpec([32, 32, 3], tf.uint8)
    batches = list(rlds_reverb.convert_rlds_to_trajectories(episodes, batch_size=100))
    assert len(batches) == 1
    trajectory = batches[0]
    lengths = [e['length'] + 1 for e in _EXPECTED['image-arrow']['episodes']]
    assert trajectory.step_type.shape[0] == sum(lengths)
    whole = _read(episodes)
    np.testing.assert_array_equal(
        trajectory.observation['image'],
        np.concatenate([e[types.STEPS][types.OBSERVATION]['image'] for e in whole]),
    )
    np.testing.assert_array_equal(
        trajectory.reward, np.concatenate([e[types.STEPS][types.REWARD] for e in whole])
    )
    # Episode 0: one environment step, terminated: (FIRST, LAST), discount 0 into the end.
    np.testing.assert_array_equal(trajectory.step_type[:2], [0, 2])
    np.testing.assert_array_equal(trajectory.discount[:2], [0.0, 0.0])


def test_push_writes_every_two_step_item_into_a_real_server():
    episodes = load(_directory('image-hdf5'))
    kind = items.TwoStep()
    table = reverb_tables.make_fifo_table('minari', tables.signature_for(kind, episodes))
    server = reverb.Server([table], port=None)
    try:
        client = server.localhost_client()
        stats = rlds_reverb.push(episodes, client, 'minari', item=kind)
        lengths = [e['length'] + 1 for e in _EXPECTED['image-hdf5']['episodes']]
        assert stats.episodes == 6 and stats.steps == sum(lengths)
        assert stats.items == {'minari': sum(n - 1 for n in lengths)}
        written = reverb_tables.read_items(client, 'minari')
        assert len(written) == sum(n - 1 for n in lengths)
        first_image = _read(episodes.skip(1).take(1))[0][types.STEPS][types.OBSERVATION]['image']
        # Episode 0 has one item; episode 1's first item starts at its first step.
        np.testing.assert_array_equal(written[1].data.observation['image'][0], first_image[0])
    finally:
        server.stop()


def test_the_adders_read_a_minari_source_as_its_nested_steps():
    episodes = load(_directory('tuple-hdf5'))
    # The same episodes as a plain RLDS dataset (nested steps, no source).
    plain = episodes.whole_episodes.map(
        lambda e: {**e, types.STEPS: tf.data.Dataset.from_tensor_slices(e[types.STEPS])}
    )
    assert episodes_lib.find_source(plain) is None
    for transform in (adders.n_step(3, 0.9), adders.n_step(1, 0.5)):
        fast, slow = _read(transform(episodes)), _read(transform(plain))
        assert len(fast) == len(slow) > 0
        for a, b in zip(fast, slow, strict=True):
            tree.map_structure(np.testing.assert_array_equal, a, b)


@pytest.mark.parametrize('name', ['image-hdf5', 'tuple-arrow'])
def test_written_as_rlds_tfds_the_episodes_load_back_the_same(tmp_path, name):
    episodes = load(_directory(name))
    step_specs = dict(episodes.element_spec[types.STEPS].element_spec)
    for flag in types.FLAG_FIELDS:
        step_specs.pop(flag)
    episode_specs = {k: v for k, v in episodes.element_spec.items() if k != types.STEPS}
    features = storage_features.make_rlds_features_from_specs(step_specs, episode_specs)
    written = tfds_writer.write_rlds_dataset(
        tmp_path / 'minari' / '1.0.0', _read(episodes), features=features, name='minari'
    )
    for a, b in zip(_read(load(written)), _read(episodes), strict=True):
        tree.map_structure(_assert_stored_equal, a, b)


def _assert_stored_equal(got: np.ndarray, want: np.ndarray) -> None:
    """Equal, but float64 to float32 precision: tf.train.Example stores floats as float32."""
    assert got.dtype == want.dtype
    if want.dtype == np.float64:
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_step_fields_keeps_the_named_observation_fields():
    episodes = load(_directory('image-arrow'), step_fields=['observation/state'])
    steps = episodes.element_spec[types.STEPS].element_spec
    assert list(steps[types.OBSERVATION]) == ['state']
    with pytest.raises(SpecMismatchError, match='observation/depth'):
        load(_directory('image-arrow'), step_fields=['observation/depth'])


# --- errors ---------------------------------------------------------------------------------


@pytest.fixture
def hdf5_copy(tmp_path) -> pathlib.Path:
    """A copy of the image HDF5 dataset that a test may damage."""
    return pathlib.Path(shutil.copytree(_directory('image-hdf5'), tmp_path / 'image-hdf5-v0'))


def _edit_metadata(directory: pathlib.Path, edit) -> pathlib.Path:
    file = directory / 'data' / 'metadata.json'
    metadata = json.loads(file.read_text())
    edit(metadata)
    file.write_text(json.dumps(metadata))
    return file


def test_a_missing_metadata_file_is_named(hdf5_copy):
    (hdf5_copy / 'data' / 'metadata.json').unlink()
    with pytest.raises(MinariFormatError, match=r'data/metadata\.json is missing'):
        load(hdf5_copy)


@pytest.mark.parametrize(
    ('text', 'match'),
    [
        ('', 'is empty'),
        ('{"total_episodes": 6,', 'is not valid JSON'),
        ('[1]', 'not a JSON object'),
    ],
)
def test_an_empty_or_malformed_metadata_file_is_named(hdf5_copy, text, match):
    file = hdf5_copy / 'data' / 'metadata.json'
    file.write_text(text)
    with pytest.raises(MinariFormatError, match=match) as raised:
        load(hdf5_copy)
    assert str(file) in str(raised.value)


@pytest.mark.parametrize(
    ('edit', 'key'),
    [
        (lambda m: m.pop('observation_space'), 'metadata.observation_space is missing'),
        (lambda m: m.pop('data_format'), 'metadata.data_format is missing'),
        (lambda m: m.update(total_episodes='6'), 'metadata.total_episodes is'),
        (lambda m: m.update(action_space='{"type": "Box"'), 'metadata.action_space is not a JSON'),
        (
            lambda m: m.update(action_space='{"type": "Box", "dtype": "float32"}'),
            'metadata.action_space.shape is missing',
        ),
        (
            lambda m: m.update(action_space='{"type": "Box", "dtype": "float33", "shape": [2]}'),
            'metadata.action_space is not a valid Box space',
        ),
        (
            lambda m: m.update(action_space='{"type": "Text", "max_length": 3}'),
            "metadata.action_space.type is 'Text'",
        ),
        (lambda m: m.update(data_format='parquet'), "metadata.data_format is 'parquet'"),
    ],
)
def test_a_missing_or_mangled_key_is_named(hdf5_copy, edit, key):
    file = _edit_metadata(hdf5_copy, edit)
    with pytest.raises(MinariFormatError, match=key.replace('.', r'\.').replace('[', r'\[')) as e:
        load(hdf5_copy)
    assert str(file) in str(e.value)


def test_an_empty_hdf5_file_is_named(hdf5_copy):
    file = hdf5_copy / 'data' / 'main_data.hdf5'
    file.write_bytes(b'')
    with pytest.raises(MinariFormatError, match='is not a readable HDF5 file') as e:
        load(hdf5_copy)
    assert str(file) in str(e.value)


def test_a_missing_data_file_or_episode_is_named(hdf5_copy, tmp_path):
    _edit_metadata(hdf5_copy, lambda m: m.update(total_episodes=8))
    with pytest.raises(MinariFormatError, match=r'total_episodes=8.*id \[6, 7\]'):
        load(hdf5_copy)
    (hdf5_copy / 'data' / 'main_data.hdf5').unlink()
    with pytest.raises(MinariFormatError, match='main_data.hdf5 is missing'):
        load(hdf5_copy)
    arrow = pathlib.Path(shutil.copytree(_directory('tuple-arrow'), tmp_path / 'tuple-arrow'))
    shutil.rmtree(arrow / 'data' / '3')
    with pytest.raises(MinariFormatError, match=r'episode directory\(s\) of id \[3\]'):
        load(arrow)


def test_data_that_disagrees_with_metadata_fails_naming_the_episode_and_key(hdf5_copy):
    _edit_metadata(
        hdf5_copy,
        lambda m: m.update(
            action_space='{"type": "Box", "dtype": "float32", "shape": [3], '
            '"low": [-1, -1, -1], "high": [1, 1, 1]}'
        ),
    )
    with pytest.raises(tf.errors.OpError, match=r'episode 0\).*actions.*has shape \(1, 2\)'):
        _read(load(hdf5_copy))


def test_a_minari_dataset_has_no_splits():
    with pytest.raises(SourceError, match=r"no splits \(split='test'\)"):
        load(_directory('tuple-hdf5'), split='test')


@pytest.mark.parametrize(
    ('split', 'ids'),
    [('train', [0, 1, 2, 3, 4, 5]), ('train[2:5]', [2, 3, 4]), ('train[-2:]', [4, 5]),
     ('train[:50%]', [0, 1, 2]), ('train[25%:]', [2, 3, 4, 5]), ('train[3:3]', [])],
)  # fmt: skip
@pytest.mark.parametrize('name', ['tuple-hdf5', 'tuple-arrow'])
def test_a_slice_of_the_one_split_selects_the_episode_ids(name, split, ids):
    episodes = load(_directory(name), split=split)
    source = episodes_lib.find_source(episodes)
    assert isinstance(source, minari.MinariSource) and source.episode_ids == tuple(ids)
    assert [int(e[types.EPISODE_ID]) for e in _read(episodes)] == ids
    # A selection of the slice narrows it further, still on the source.
    assert episodes_lib.find_source(episodes.skip(1)).episode_ids == tuple(ids[1:])


@pytest.mark.parametrize(
    ('split', 'message'),
    [('train[:20]', 'does not select'), ('train[:2]+train[4:]', 'joins 2 slices')],
)
def test_a_slice_out_of_range_or_several_slices_are_refused(split, message):
    with pytest.raises(SourceError, match=message):
        load(_directory('tuple-hdf5'), split=split)


@pytest.mark.parametrize(
    'option',
    [{'shuffle_files': True}, {'read_config': tfds.ReadConfig()}, {'check_files': False},
     {'check_files': 'full'}, {'whole_episodes': False}, {'data_dir': '/data'}],
    ids=lambda o: next(iter(o)),
)  # fmt: skip
def test_options_a_minari_dataset_does_not_take_are_refused_by_name(option):
    (name,) = option
    with pytest.raises(
        SourceError,
        match=rf'read by the minari reader, which does not take {name}=.*'
        r'It accepts split, step_fields',
    ):
        load(_directory('tuple-hdf5'), **option)


def test_open_minari_refuses_another_directory(tmp_path):
    with pytest.raises(SourceError, match='is not a Minari dataset directory'):
        minari.open_minari(tmp_path)
    assert minari.find_data_directory(tmp_path / 'nothing') is None
    (tmp_path / 'metadata.json').write_text('{"name": "not minari"}')
    assert minari.find_data_directory(tmp_path) is None  # load falls through to TFDS.
    with pytest.raises(SourceError, match='not an RLDS dataset directory'):
        load(tmp_path)


# --- files written here in Minari's layout: shapes, memory ----------------------------------


def write_minari(
    directory: pathlib.Path,
    data_format: str,
    lengths: list[int],
    *,
    observation_shape: tuple[int, ...] = (17,),
    action_shape: tuple[int, ...] = (6,),
) -> pathlib.Path:
    """Writes a Minari dataset (Box spaces, float32) as minari 0.5.4 lays it out."""
    data = directory / 'data'
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)

    def _box(shape):
        return json.dumps(
            {
                'type': 'Box',
                'dtype': 'float32',
                'shape': list(shape),
                'low': np.full(shape, -1.0).tolist(),
                'high': np.full(shape, 1.0).tolist(),
            }
        )

    metadata = {
        'total_episodes': len(lengths),
        'total_steps': sum(lengths),
        'data_format': data_format,
        'observation_space': _box(observation_shape),
        'action_space': _box(action_shape),
        'minari_version': '0.5.4',
    }
    (data / 'metadata.json').write_text(json.dumps(metadata))
    handle = h5py.File(data / 'main_data.hdf5', 'w') if data_format == 'hdf5' else None
    for index, length in enumerate(lengths):
        obs = rng.normal(size=(length + 1, *observation_shape)).astype(np.float32)
        actions = rng.normal(size=(length, *action_shape)).astype(np.float32)
        rewards = rng.normal(size=length)
        terminations = np.arange(length) == length - 1 if index % 2 else np.zeros(length, bool)
        truncations = ~terminations & (np.arange(length) == length - 1)
        if handle is not None:
            group = handle.create_group(f'episode_{index}')
            group.attrs.update({'id': index, 'seed': index, 'total_steps': length})
            for key, value in (
                ('observations', obs),
                ('actions', actions),
                ('rewards', rewards),
                ('terminations', terminations),
                ('truncations', truncations),
            ):
                group.create_dataset(key, data=value)
            continue

        def _column(values, pad):
            flat = np.pad(values.reshape(len(values), -1), ((0, pad), (0, 0)))
            kind = pa.list_(pa.from_numpy_dtype(values.dtype), flat.shape[1])
            return pa.FixedSizeListArray.from_arrays(flat.reshape(-1), type=kind)

        batch = pa.RecordBatch.from_pydict(
            {
                'observations': _column(obs, 0),
                'actions': _column(actions, 1),
                'rewards': np.pad(rewards, (0, 1)),
                'terminations': np.pad(terminations, (0, 1)),
                'truncations': np.pad(truncations, (0, 1)),
            }
        )
        episode_dir = data / str(index)
        episode_dir.mkdir()
        with pa.ipc.new_file(episode_dir / 'part-0.arrow', batch.schema) as writer:
            writer.write_batch(batch)
        (episode_dir / 'metadata.json').write_text(json.dumps({'id': index, 'seed': index}))
    if handle is not None:
        handle.close()
    return directory


@pytest.mark.parametrize('data_format', ['hdf5', 'arrow'])
@pytest.mark.parametrize(
    ('observation_shape', 'action_shape'), [((), ()), ((3,), (1,)), ((2, 3, 4), (2, 2))]
)
def test_box_spaces_of_every_rank_read_back(tmp_path, data_format, observation_shape, action_shape):
    lengths = [1, 4, 2]
    write_minari(
        tmp_path,
        data_format,
        lengths,
        observation_shape=observation_shape,
        action_shape=action_shape,
    )
    episodes = _read(load(tmp_path))
    rng = np.random.default_rng(0)  # The writer's draws, in its order.
    for index, (episode, length) in enumerate(zip(episodes, lengths, strict=True)):
        steps = episode[types.STEPS]
        obs = rng.normal(size=(length + 1, *observation_shape)).astype(np.float32)
        actions = rng.normal(size=(length, *action_shape)).astype(np.float32)
        rewards = rng.normal(size=length)
        np.testing.assert_array_equal(steps[types.OBSERVATION], obs)
        np.testing.assert_array_equal(steps[types.ACTION][:-1], actions)
        np.testing.assert_array_equal(steps[types.ACTION][-1], np.zeros(action_shape))
        np.testing.assert_array_equal(steps[types.REWARD], [*rewards, 0.0])
        assert bool(steps[types.IS_TERMINAL][-1]) == bool(index % 2)
        assert episode[minari.SEED] == index


# Peak resident set of this process's own memory (VmHWM, KiB): not ru_maxrss, which on Linux
# keeps the peak of the parent that spawned the process.
_MEMORY_PROBE = """
import re, sys
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.read.loading import load
steps = 0
for episode in episodes_lib.to_episode_tensors(load(sys.argv[1])).as_numpy_iterator():
    steps += len(episode['reward'])
status = open('/proc/self/status').read()
print(steps, re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1))
"""


@pytest.mark.slow
@pytest.mark.parametrize('data_format', ['hdf5', 'arrow'])
def test_peak_memory_is_flat_in_the_number_of_episodes(tmp_path, data_format, subprocess_env):
    """Reading 4x the episodes (of 1,000 steps, 17 + 6 floats) raises peak RSS by < 25 MB."""
    peaks = {}
    for count in (50, 200):
        directory = write_minari(tmp_path / f'{count}', data_format, [1000] * count)
        out = subprocess.run(
            [sys.executable, '-c', _MEMORY_PROBE, str(directory)],
            env=subprocess_env,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        ).stdout.split()
        assert int(out[0]) == count * 1001
        peaks[count] = int(out[1]) / 1024  # MiB
    data_mib = 150 * 1001 * (17 + 6 + 2) * 4 / 2**20  # What holding 150 more episodes takes.
    assert peaks[200] - peaks[50] < min(25.0, data_mib), (peaks, data_mib)


@pytest.mark.parametrize('data_format', ['hdf5', 'arrow'])
def test_a_dataset_without_episodes_reads_as_none(tmp_path, data_format):
    episodes = load(write_minari(tmp_path, data_format, []))
    assert _read(episodes) == []
    assert rlds_reverb.validate(episodes).episodes == 0


def test_the_command_line_reads_a_minari_directory(run_cli):
    code, out, _ = run_cli('validate', _directory('image-hdf5'))
    assert code == 0 and 'valid 6, invalid 0' in out
    code, out, _ = run_cli('info', _directory('tuple-arrow'))
    assert code == 0 and 'terminated: 3  truncated: 3' in out
