"""D4RL's HDF5 files: `load` gives the episodes TFDS 4.9.4's own d4rl code makes of them.

Each test writes small files in D4RL's key layouts with h5py (with and without
`next_observations` and `timeouts`; terminated, time-limited and both-flag episodes, a
one-step episode, a last episode cut by the end of the file; `infos/*` and `metadata/*`),
runs TFDS' example generator (`tensorflow_datasets.d4rl.dataset_utils.generate_examples`,
what its builder's `_generate_examples` returns, on the local file: nothing downloaded) and
compares episode by episode: fields, dtypes, values. The one intended difference (TFDS puts
the file's last `next_observations` row at the end of every episode; we put the episode's
own) is asserted as such. validate, convert, push (a real in-process Reverb server) and an
adder run on what `load` reads unchanged.
"""

from __future__ import annotations

import pathlib
import tracemalloc

import h5py
import numpy as np
import pytest
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
import tree
from tensorflow_datasets.d4rl import dataset_builder, dataset_utils

import adders
import rlds_reverb
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import D4rlFileError, SourceError
from rlds_reverb.read import d4rl, d4rl_layout
from rlds_reverb.read.loading import load
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from tests import builders, reverb_tables
from tests import item_references as refs
from tests.d4rl_files import ACTION_DIM, EPISODES, OBS_DIM, QPOS_DIM, write_d4rl_file


def _as_arrays(node):
    """TFDS' generator mixes lists and arrays: lists become arrays."""
    if isinstance(node, dict):
        return {key: _as_arrays(value) for key, value in node.items()}
    return np.asarray(node) if isinstance(node, list) else node


def _tfds_episodes(path: pathlib.Path) -> list[dict]:
    """The episodes TFDS' d4rl code makes of the file, in order."""
    return [_as_arrays(episode) for _, episode in dataset_utils.generate_examples(str(path))]


def _cast_as_the_builder(episodes: list[dict], config_name: str) -> list[dict]:
    """TFDS' episodes with their steps cast to the dtypes of the builder config's features.

    TFDS' generator gives the extra last step's episodes a float32 discount and the others
    the rewards' dtype; its builder then casts every field to the config's features.
    """
    config = next(c for c in dataset_builder.MUJOCO_BUILDER_CONFIGS if c.name == config_name)
    shapes = dataset_builder.DatasetConfig(
        'halfcheetah', obs_len=OBS_DIM, action_len=ACTION_DIM, qpos_len=QPOS_DIM, qvel_len=1
    )
    features = tfds.features.FeaturesDict(dataset_builder.get_features_dict(config, shapes))
    dtypes = dict(tree.flatten_with_path(features[types.STEPS].tf_dtype))
    return [
        {
            **episode,
            types.STEPS: tree.map_structure_with_path(
                lambda path, x: x.astype(dtypes[path].as_numpy_dtype), episode[types.STEPS]
            ),
        }
        for episode in episodes
    ]


def _with_own_final_observations(episodes: list[dict], path: pathlib.Path) -> list[dict]:
    """TFDS' episodes with each one's own last next_observations row as its last observation."""
    with h5py.File(path, 'r') as file:
        next_obs = file['next_observations'][()]
    fixed, end = [], 0
    for episode in episodes:
        steps = dict(episode[types.STEPS])
        end += len(steps[types.IS_FIRST]) - 1  # Every episode has the extra last step.
        observation = steps[types.OBSERVATION].copy()
        observation[-1] = next_obs[end - 1]
        fixed.append({**episode, types.STEPS: {**steps, types.OBSERVATION: observation}})
    return fixed


def _read(episodes: tf.data.Dataset) -> list[dict]:
    return list(episodes_lib.to_whole_episodes(episodes).as_numpy_iterator())


def _assert_same_episodes(actual: list[dict], expected: list[dict]) -> None:
    assert len(actual) == len(expected)
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        flat_got, flat_want = dict(tree.flatten_with_path(got)), dict(tree.flatten_with_path(want))
        assert sorted(flat_got) == sorted(flat_want), index
        for path, value in flat_want.items():
            if isinstance(value, bytes):
                assert flat_got[path] == value, (index, path)
                continue
            assert flat_got[path].dtype == value.dtype, (index, path)
            np.testing.assert_array_equal(flat_got[path], value, err_msg=f'{index} {path}')


def _steps_of(episodes: list[dict]) -> list[dict]:
    return [episode[types.STEPS] for episode in episodes]


@pytest.fixture(scope='module')
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    root = tmp_path_factory.mktemp('d4rl')
    return {
        'plain': write_d4rl_file(root / 'halfcheetah_medium-v2.hdf5', next_observations=False),
        'next': write_d4rl_file(root / 'with_next.hdf5', next_observations=True),
        'next_no_timeouts': write_d4rl_file(
            root / 'old.h5', next_observations=True, timeouts=False
        ),
        'replay': write_d4rl_file(
            root / 'replay.hdf5',
            next_observations=False,
            float_dtype=np.float64,
            rewards_column=True,
            seed=1,
        ),
    }


# --- The episodes TFDS makes --------------------------------------------------------------


@pytest.mark.parametrize(
    ('name', 'config_name'), [('plain', 'v2-medium'), ('replay', 'v1-medium-replay')]
)
def test_episodes_equal_tfds_without_next_observations(files, name, config_name):
    expected = _cast_as_the_builder(_tfds_episodes(files[name]), config_name)
    actual = _read(load(files[name]))
    _assert_same_episodes(actual, expected)
    # Terminated, time-limited, both flags (terminal wins), cut by the end of the file.
    lengths = [len(e[types.STEPS][types.IS_FIRST]) for e in actual]
    assert lengths == [6, 4, 2, 2, 6, 4, 4]
    assert [bool(e[types.STEPS][types.IS_TERMINAL][-1]) for e in actual] == [
        True, False, True, True, False, True, False,
    ]  # fmt: skip
    terminated = actual[0][types.STEPS]
    np.testing.assert_array_equal(terminated[types.DISCOUNT], [1, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(terminated[types.OBSERVATION][-1], np.zeros(OBS_DIM))


def test_episodes_equal_tfds_with_next_observations_but_their_own_final_observation(files):
    path = files['next']
    tfds_episodes = _tfds_episodes(path)
    actual = _read(load(path))
    _assert_same_episodes(actual, _with_own_final_observations(tfds_episodes, path))
    # TFDS' only difference: every episode ends on the file's last next_observations row.
    with h5py.File(path, 'r') as file:
        last_row = file['next_observations'][-1]
    for episode in tfds_episodes:
        np.testing.assert_array_equal(episode[types.STEPS][types.OBSERVATION][-1], last_row)
    assert not np.array_equal(actual[0][types.STEPS][types.OBSERVATION][-1], last_row)
    # Every episode gains its last step; a time-limited one is truncated, discount 0 last.
    timed = actual[1][types.STEPS]
    np.testing.assert_array_equal(timed[types.DISCOUNT], [1, 1, 1, 1, 0])
    np.testing.assert_array_equal(timed[types.IS_LAST], [False] * 4 + [True])
    assert not timed[types.IS_TERMINAL].any()


def test_a_file_without_timeouts_ends_episodes_where_next_observations_do_not_continue(files):
    expected = _with_own_final_observations(_tfds_episodes(files['next']), files['next'])
    _assert_same_episodes(_read(load(files['next_no_timeouts'])), expected)
    with pytest.raises(ValueError, match='explicit timeouts'):  # TFDS refuses the file.
        list(dataset_utils.generate_examples(str(files['next_no_timeouts'])))


def test_step_and_episode_fields_and_specs(files):
    episodes = load(files['plain'])
    spec = episodes.element_spec
    assert spec['algorithm'] == tf.TensorSpec([], tf.string)
    assert spec['iteration'] == tf.TensorSpec([], tf.int64)
    assert spec['policy']['fc0']['bias'] == tf.TensorSpec([5], tf.float32)
    steps = spec[types.STEPS].element_spec
    assert steps[types.OBSERVATION] == tf.TensorSpec([OBS_DIM], tf.float32)
    assert steps[types.REWARD] == tf.TensorSpec([], tf.float32)
    assert steps[types.DISCOUNT] == tf.TensorSpec([], tf.float32)
    assert steps[d4rl.INFOS] == {
        'action_log_probs': tf.TensorSpec([], tf.float64),
        'qpos': tf.TensorSpec([QPOS_DIM], tf.float64),
    }
    replay = load(files['replay']).element_spec[types.STEPS].element_spec
    assert replay[types.REWARD] == replay[types.DISCOUNT] == tf.TensorSpec([], tf.float64)


def test_step_fields_keep_only_the_named_fields(files):
    plain = load(files['plain'], step_fields=['observation'])
    assert d4rl.INFOS not in plain.element_spec[types.STEPS].element_spec
    some = load(files['plain'], step_fields=['infos/qpos'])
    assert list(some.element_spec[types.STEPS].element_spec[d4rl.INFOS]) == ['qpos']
    expected = _tfds_episodes(files['plain'])
    for got, want in zip(_read(some), expected, strict=True):
        np.testing.assert_array_equal(
            got[types.STEPS][d4rl.INFOS]['qpos'], want[types.STEPS]['infos']['qpos']
        )
        assert 'action_log_probs' not in got[types.STEPS][d4rl.INFOS]


# --- Selections ----------------------------------------------------------------------------

_SELECTIONS = {
    'take': lambda d: d.take(3),
    'skip': lambda d: d.skip(4),
    'shard': lambda d: d.shard(3, 1),
    'chain': lambda d: d.skip(1).shard(2, 0).take(2),
    'tensor_count': lambda d: d.skip(tf.constant(5, tf.int64)),
    'past_the_end': lambda d: d.skip(20),
}


@pytest.mark.parametrize('name', sorted(_SELECTIONS))
def test_selections_read_only_the_selected_episodes_on_the_source(files, name):
    select = _SELECTIONS[name]
    selected = select(load(files['next']))
    source = episodes_lib.find_source(selected)
    assert isinstance(source, d4rl.D4rlSource)
    every = np.arange(len(EPISODES))
    expected_numbers = list(select(tf.data.Dataset.from_tensor_slices(every)).as_numpy_iterator())
    assert source.list_episodes().tolist() == expected_numbers
    expected = _with_own_final_observations(_tfds_episodes(files['next']), files['next'])
    _assert_same_episodes(_read(selected), [expected[i] for i in expected_numbers])


def test_episodes_longer_than_a_block_and_blocks_of_many_episodes(tmp_path, monkeypatch):
    # Blocks of 4 rows: episodes span several blocks or share one.
    monkeypatch.setattr(d4rl_layout, 'ROWS_PER_READ', 4)
    path = write_d4rl_file(tmp_path / 'f.hdf5', next_observations=True)
    expected = _with_own_final_observations(_tfds_episodes(path), path)
    _assert_same_episodes(_read(load(path)), expected)
    _assert_same_episodes(_read(load(path).shard(2, 1)), expected[1::2])


# --- The toolkit on it ---------------------------------------------------------------------


def test_validate_convert_and_an_adder_work_on_it_unchanged(files):
    path = files['next']
    expected = _steps_of(_with_own_final_observations(_tfds_episodes(path), path))
    reference = builders.rlds(expected)
    assert rlds_reverb.validate(load(path)) == rlds_reverb.validate(reference)
    report = rlds_reverb.validate(load(path))
    assert report.ok and report.episodes == len(EPISODES)
    converted = [
        list(rlds_reverb.convert_rlds_to_trajectories(e, batch_size=8).as_numpy_iterator())
        for e in (load(path), reference)
    ]
    tree.map_structure(np.testing.assert_array_equal, *converted)
    n_step = builders.read_episodes(load(path).apply(adders.n_step(3, 0.9)))
    want = builders.read_episodes(reference.apply(adders.n_step(3, 0.9)))
    tree.map_structure(np.testing.assert_allclose, n_step, want)


def test_push_writes_the_reference_two_step_items(files):
    path, kind, name = files['plain'], items.TwoStep(), 'd4rl'
    episodes = load(path)
    table = reverb_tables.make_fifo_table(name, tables.signature_for(kind, episodes))
    server = reverb.Server([table], port=None)
    try:
        client = reverb.Client(f'localhost:{server.port}')
        stats = rlds_reverb.push(episodes, client, name, item=kind)
        expected = refs.reference_items(kind, _tfds_episodes(path))
        actual = [sample.data for sample in reverb_tables.read_items(client, name)]
    finally:
        server.stop()
    assert stats.episodes == len(EPISODES)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        tree.map_structure(np.testing.assert_allclose, dict(got._asdict()), want)


def test_the_command_line_validates_a_file_and_a_slice_of_it(files, run_cli):
    code, out, _ = run_cli('validate', str(files['plain']))
    assert code == 0 and 'episodes: 7 (valid 7, invalid 0)' in out
    code, out, _ = run_cli('validate', str(files['plain']), '--split', 'train[2:5]')
    assert code == 0 and 'episodes: 3 (valid 3, invalid 0)' in out


# --- Errors --------------------------------------------------------------------------------


def test_a_file_without_d4rls_keys_is_an_error_naming_the_key(tmp_path):
    path = tmp_path / 'main_data.hdf5'
    with h5py.File(path, 'w') as file:
        file['episode_0/observations'] = np.zeros([3, 2])
    with pytest.raises(D4rlFileError, match=r"lacks the key\(s\) \['observations'.*Minari"):
        load(path)


def test_an_empty_file_is_an_error(tmp_path):
    path = tmp_path / 'empty.hdf5'
    with h5py.File(path, 'w') as file:
        for key, shape in (('observations', (0, 3)), ('actions', (0, 2))):
            file[key] = np.zeros(shape, np.float32)
        file['rewards'] = np.zeros([0], np.float32)
        file['terminals'] = np.zeros([0], bool)
        file['timeouts'] = np.zeros([0], bool)
    with pytest.raises(D4rlFileError, match=f"{path} holds no transitions: 'observations'"):
        load(path)


def test_mismatched_lengths_are_an_error_naming_the_key(tmp_path):
    path = write_d4rl_file(tmp_path / 'f.hdf5', next_observations=False)
    with h5py.File(path, 'r+') as file:
        del file['infos/qpos']
        file['infos/qpos'] = np.zeros([5, QPOS_DIM])
    with pytest.raises(D4rlFileError, match=r"key 'infos/qpos' has 5 rows but 'observations'"):
        load(path)


def test_no_timeouts_and_no_next_observations_is_an_error(tmp_path):
    path = write_d4rl_file(tmp_path / 'f.hdf5', next_observations=False, timeouts=False)
    with pytest.raises(D4rlFileError, match="no 'timeouts' and no 'next_observations'"):
        load(path)


def test_a_file_that_is_not_hdf5_is_an_error(tmp_path):
    path = tmp_path / 'partial.hdf5'
    path.write_bytes(b'not an hdf5 file')
    with pytest.raises(D4rlFileError, match='not a readable HDF5 file'):
        load(path)


@pytest.mark.parametrize(
    ('split', 'numbers'),
    [('train', range(7)), ('train[2:5]', range(2, 5)), ('train[-2:]', range(5, 7)),
     ('train[:50%]', range(4)), ('train[3:3]', [])],  # TFDS rounds 3.5 to 4.
)  # fmt: skip
def test_a_slice_of_the_one_split_selects_on_the_source(files, split, numbers):
    episodes = load(files['plain'], split=split)
    assert episodes_lib.find_source(episodes).list_episodes().tolist() == list(numbers)
    expected = _cast_as_the_builder(_tfds_episodes(files['plain']), 'v2-medium')
    _assert_same_episodes(_read(episodes), [expected[i] for i in numbers])


@pytest.mark.parametrize(
    ('split', 'message'),
    [
        ('test', "one split, 'train' \\(7 episodes\\); split='test' does not select"),
        ('train[:20]', 'does not select from it'),
        ('train[:2]+train[4:]', 'joins 2 slices'),
    ],
)
def test_another_split_or_a_union_of_slices_is_an_error(files, split, message):
    with pytest.raises(D4rlFileError, match=message):
        load(files['plain'], split=split)
    assert issubclass(D4rlFileError, SourceError)


@pytest.mark.parametrize(
    'options',
    [{'shuffle_files': True}, {'read_config': tfds.ReadConfig()}],
    ids=lambda options: next(iter(options)),  # str() holds an address: xdist needs stable ids.
)
def test_tfds_read_options_are_an_error(files, options):
    with pytest.raises(ValueError, match='TFDS read options'):
        load(files['plain'], **options)


@pytest.mark.parametrize(
    'option',
    [{'check_files': False}, {'whole_episodes': False}, {'data_dir': '/data'}],
    ids=lambda o: next(iter(o)),
)
def test_options_a_d4rl_file_does_not_take_are_refused_by_name(files, option):
    (name,) = option
    with pytest.raises(
        SourceError,
        match=rf'read by the d4rl reader, which does not take {name}=.*It accepts '
        r'split, step_fields',
    ):
        load(files['plain'], **option)


def test_only_existing_hdf5_files_are_d4rl_paths(files, tmp_path):
    assert d4rl.is_d4rl_path(files['plain']) and d4rl.is_d4rl_path(str(files['next_no_timeouts']))
    assert not d4rl.is_d4rl_path(tmp_path / 'missing.hdf5')
    assert not d4rl.is_d4rl_path(tmp_path)
    assert not d4rl.is_d4rl_path(tf.data.Dataset.range(1))


# --- Memory --------------------------------------------------------------------------------


def _write_large(path: pathlib.Path, episodes: int) -> pathlib.Path:
    rows = episodes * 1000
    with h5py.File(path, 'w') as file:
        file['observations'] = np.ones([rows, 17], np.float32)
        file['actions'] = np.ones([rows, 6], np.float32)
        file['rewards'] = np.ones([rows], np.float32)
        file['terminals'] = np.zeros([rows], bool)
        file['timeouts'] = np.tile(np.arange(1000) == 999, episodes)
    return path


def _measure_peak_bytes(path: pathlib.Path) -> tuple[int, int]:
    """Reads every episode of the file; returns (steps read, peak traced bytes meanwhile)."""
    tracemalloc.start()
    try:
        steps = 0
        for episode in load(path).whole_episodes:
            steps += int(episode[types.STEPS][types.IS_FIRST].shape[0])
        return steps, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_peak_memory_is_flat_in_the_number_of_episodes(tmp_path):
    # 100 vs 400 HalfCheetah-like episodes (9.6 MB vs 38.4 MB of columns): the reader holds
    # a block of at most 65,536 rows, and finds the boundaries a block at a time.
    peaks = {}
    for episodes in (100, 400):
        steps, peaks[episodes] = _measure_peak_bytes(
            _write_large(tmp_path / f'{episodes}.hdf5', episodes)
        )
        assert steps == episodes * 1000  # No next_observations: no extra steps.
    assert peaks[400] < 1.2 * peaks[100], peaks
    assert peaks[400] < 38_400_000 / 3, peaks  # Far below the file's columns.
