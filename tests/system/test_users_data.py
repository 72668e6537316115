"""Every entry point on data shaped like users' data (`tests/users_data.py`), counted exactly.

The datasets are written by TFDS's own writer with its defaults: episodes shuffled by key
hash, 100 to 125 episodes per shard, read back with shards interleaved 16 at a time;
lengths 1 to 1,000, both endings, dict observations, uint8 images, strings and episode
metadata. Each check compares with what TFDS itself reads or with the plain NumPy
references of `tests/item_references.py` and `tests/adders/test_adders_properties.py`.
"""

from __future__ import annotations

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
import tree
from reverb.platform import checkpointers_lib

import adders
import rlds_reverb
from rlds_reverb.core import types
from rlds_reverb.read.loading import load
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from tests import item_references as refs
from tests import reverb_tables, users_data
from tests.adders.test_adders_properties import reference_gae, reference_n_step, reference_stack
from tests.conftest import USERS_PLAIN_SPEC, USERS_SPEC

_SPECS = {'users': USERS_SPEC, 'users_plain': USERS_PLAIN_SPEC}
# Every kind of item, each in its own table of the module's server.
KINDS = {
    'two_step': items.TwoStep(),
    'n_step': items.NStep(3, 0.9),
    'seq_truncate': items.Sequence(8, 5, end='truncate'),
    'seq_pad': items.Sequence(8, 5, end='pad'),
    'seq_drop': items.Sequence(8, 8, end='drop'),
    'seq_last': items.Sequence(8, 3, end='last'),
    'episode': items.Episode(1000),
    'episode_split': items.Episode(64, overflow='split'),
    'episode_truncate': items.Episode(64, overflow='truncate'),
}


@pytest.fixture(params=['users', 'users_plain'])
def data(request) -> tuple:
    """(directory, spec) of each users' dataset."""
    return request.getfixturevalue(f'{request.param}_dir'), _SPECS[request.param]


def _sorted_by_id(episodes):
    return sorted(episodes, key=lambda e: int(e[users_data.METADATA][users_data.EPISODE_ID]))


def _assert_same_episodes(actual, expected) -> None:
    assert len(actual) == len(expected)
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        flat_got = dict(tree.flatten_with_path(got))
        flat_want = dict(tree.flatten_with_path(want))
        assert sorted(flat_got) == sorted(flat_want), index
        for path, value in flat_want.items():
            a, e = np.asarray(flat_got[path]), np.asarray(value)
            assert a.dtype == e.dtype or e.dtype == object, (index, path, a.dtype, e.dtype)
            assert a.tolist() == e.tolist(), (index, path)


# --- The data itself ----------------------------------------------------------------------


def test_users_data_has_the_shapes_of_users_data(data):
    directory, spec = data
    builder = tfds.builder_from_directory(str(directory))
    shard_lengths = builder.info.splits[users_data.SPLIT].shard_lengths
    assert len(shard_lengths) == spec.num_shards >= 2
    assert min(shard_lengths) >= 100
    assert min(spec.lengths) == 1 and max(spec.lengths) == 1000
    endings = spec.endings()
    assert 0 < sum(endings) < len(endings)
    # Shuffled: TFDS reads the episodes in neither key order nor shard-by-shard blocks.
    ids = users_data.episode_ids(users_data.read_with_tfds(directory))
    assert sorted(ids) == list(range(len(spec.lengths)))
    assert ids != sorted(ids)


# --- Load -----------------------------------------------------------------------------------


@pytest.mark.slow  # Every episode of both users' datasets: 20 s on a loaded host.
def test_load_reads_what_tfds_reads_episode_by_episode(data):
    directory, spec = data
    theirs = users_data.read_with_tfds(directory)
    ours = users_data.read_numpy(load(directory))
    _assert_same_episodes(ours, theirs)
    # And what TFDS reads is what the builder wrote (images, strings and metadata included).
    _assert_same_episodes(_sorted_by_id(theirs), users_data.make_episodes(spec))


@pytest.mark.parametrize(
    'options',
    [{'whole_episodes': False}, {'read_config': tfds.ReadConfig(interleave_block_length=16)}],
)
def test_load_variants_read_what_tfds_reads(users_plain_dir, options):
    theirs = users_data.read_with_tfds(users_plain_dir)
    _assert_same_episodes(users_data.read_numpy(load(users_plain_dir, **options)), theirs)


@pytest.mark.parametrize('split', ['train[10:150]', 'train[:33%]', 'train[250:]'])
def test_load_of_a_slice_reads_what_tfds_reads(users_plain_dir, split):
    theirs = users_data.read_with_tfds(users_plain_dir, split=split)
    assert theirs
    _assert_same_episodes(users_data.read_numpy(load(users_plain_dir, split=split)), theirs)


def test_load_keeps_chosen_step_fields(users_dir):
    episodes = load(users_dir, step_fields=['observation/image', 'language_instruction'])
    steps = episodes.element_spec[types.STEPS].element_spec
    assert set(steps[types.OBSERVATION]) == {users_data.IMAGE}
    assert steps[users_data.INSTRUCTION].dtype == tf.string
    first = next(iter(users_data.read_numpy(episodes)))
    assert first[types.STEPS][types.OBSERVATION][users_data.IMAGE].dtype == np.uint8


# --- Validate -------------------------------------------------------------------------------


def test_validate_counts_every_episode_and_ending(data):
    directory, spec = data
    report = rlds_reverb.validate(load(directory), on_invalid='report')
    terminated = sum(spec.endings())
    assert report.ok
    assert (report.valid, report.invalid, report.steps) == (
        len(spec.lengths),
        0,
        spec.num_steps,
    )
    assert (report.terminated, report.truncated) == (terminated, len(spec.lengths) - terminated)


# --- Convert --------------------------------------------------------------------------------


@pytest.mark.slow  # Both users' datasets through convert: 13 s on a loaded host.
def test_convert_yields_each_steps_trajectory_once(data):
    directory, spec = data
    episodes = load(directory)
    batches = rlds_reverb.convert_rlds_to_trajectories(episodes).batch(4096)
    got = [tf.nest.map_structure(lambda x: x.numpy(), b) for b in batches]
    got = tf.nest.map_structure(lambda *xs: np.concatenate(xs), *got)
    assert len(got.step_type) == spec.num_steps  # One trajectory per step.
    # In the order TFDS reads the episodes, each as the reference converts it.
    rows = [
        refs.reference_trajectories(e[types.STEPS]) for e in users_data.read_with_tfds(directory)
    ]
    want = {
        k: tf.nest.map_structure(lambda *xs: np.concatenate(xs), *[r[k] for r in rows])
        for k in ('step_type', 'next_step_type', 'reward', 'discount', 'observation')
    }
    np.testing.assert_array_equal(got.step_type, want['step_type'])
    np.testing.assert_array_equal(got.next_step_type, want['next_step_type'])
    np.testing.assert_array_equal(got.reward, want['reward'])
    np.testing.assert_array_equal(got.discount, want['discount'])
    tf.nest.map_structure(np.testing.assert_array_equal, got.observation, want['observation'])
    assert got.policy_info == ()  # Extra fields dropped, as TF-Agents does.


# --- Push, every item kind -------------------------------------------------------------------


@pytest.fixture(scope='module')
def users_server(users_dir, users_plain_dir):
    """A server with a FIFO-read table per (dataset, kind): `users:two_step`, ..."""
    made = []
    for name, directory in (('users', users_dir), ('users_plain', users_plain_dir)):
        episodes = load(directory)
        for kind_name, kind in KINDS.items():
            signature = tables.signature_for(kind, episodes)
            made.append(
                reverb_tables.make_fifo_table(f'{name}:{kind_name}', signature, max_size=1_000_000)
            )
    server = reverb.Server(made, port=None)
    yield server
    server.stop()


@pytest.fixture
def users_client(users_server) -> reverb.Client:
    return reverb_tables.clean_client(users_server)


@pytest.fixture
def users_address(users_server, users_client) -> str:
    """The address of `users_server`, every table emptied."""
    return f'localhost:{users_server.port}'


_SLOW = pytest.mark.slow  # Over 10 s on a loaded 2-core host.


@pytest.mark.parametrize(
    'kind_name',
    # Episode(1000) pads every episode to 1,000 rows: 300,000 rows (over a minute).
    [pytest.param(k, marks=_SLOW) if k == 'episode' else k for k in KINDS],
)
def test_push_writes_the_reference_items_each_once(
    users_plain_dir, users_client, users_address, kind_name
):
    kind = KINDS[kind_name]
    table = f'users_plain:{kind_name}'
    stats = rlds_reverb.push(load(users_plain_dir), users_address, table, item=kind)
    expected = refs.reference_items(kind, users_data.make_episodes(USERS_PLAIN_SPEC))
    assert stats.items == {table: len(expected)}
    assert (stats.episodes, stats.steps) == (
        len(USERS_PLAIN_SPEC.lengths),
        USERS_PLAIN_SPEC.num_steps,
    )
    actual = [sample.data for sample in reverb_tables.read_items(users_client, table)]
    refs.assert_same_items(actual, expected, where=table)


@pytest.mark.slow  # Images and strings into Reverb: 15 s per kind on a loaded host.
@pytest.mark.parametrize('kind_name', ['two_step', 'n_step', 'seq_pad', 'episode_split'])
def test_push_with_images_and_strings(users_dir, users_client, users_address, kind_name):
    kind = KINDS[kind_name]
    table = f'users:{kind_name}'
    stats = rlds_reverb.push(load(users_dir), users_address, table, item=kind)
    expected = refs.reference_items(kind, users_data.make_episodes(USERS_SPEC))
    assert stats.items == {table: len(expected)}
    actual = [sample.data for sample in reverb_tables.read_items(users_client, table)]
    refs.assert_same_items(actual, expected, where=table)


# --- Adders ---------------------------------------------------------------------------------


def _adder_output(directory, transform) -> dict[int, dict]:
    out = users_data.read_numpy(load(directory).apply(transform))
    return refs.by_origin(out)


def test_n_step_adder_equals_reference(users_dir):
    out = _adder_output(users_dir, adders.n_step(3, 0.9))
    assert len(out) == len(USERS_SPEC.lengths)
    for episode in users_data.make_episodes(USERS_SPEC):
        steps = episode[types.STEPS]
        got = out[int(episode[users_data.METADATA][users_data.EPISODE_ID])][types.STEPS]
        for name, value in reference_n_step(steps, 3, 0.9).items():
            tree.map_structure(
                lambda a, e: np.testing.assert_allclose(a, e, atol=1e-4), got[name], value
            )
        np.testing.assert_array_equal(got[users_data.INSTRUCTION], steps[users_data.INSTRUCTION])


def _value_of(observation):
    return observation[users_data.STATE][:, 2]


def test_gae_adder_equals_reference(users_plain_dir):
    out = _adder_output(users_plain_dir, adders.gae(0.9, 0.95, value_fn=_value_of))
    for episode in users_data.make_episodes(USERS_PLAIN_SPEC):
        steps = dict(episode[types.STEPS])
        steps[types.VALUE] = steps[types.OBSERVATION][users_data.STATE][:, 2]
        got = out[int(episode[users_data.METADATA][users_data.EPISODE_ID])][types.STEPS]
        for name, value in reference_gae(steps, 0.9, 0.95).items():
            np.testing.assert_allclose(got[name], value, atol=1e-3, rtol=1e-4, err_msg=name)


def test_stack_frames_adder_equals_reference(users_dir):
    out = _adder_output(users_dir, adders.stack_frames(4))
    for episode in users_data.make_episodes(USERS_SPEC):
        got = out[int(episode[users_data.METADATA][users_data.EPISODE_ID])][types.STEPS]
        tree.map_structure(
            np.testing.assert_array_equal,
            got[types.OBSERVATION],
            reference_stack(episode[types.STEPS], 4),
        )


@pytest.mark.parametrize('end', ['truncate', 'pad', 'drop', 'last'])
def test_sequences_adder_equals_reference(users_plain_dir, end):
    windows = load(users_plain_dir).apply(adders.sequences(8, 5, end=end))
    actual = [tf.nest.map_structure(lambda x: x.numpy(), w) for w in windows]
    actual = [{k: v for k, v in w.items() if k != types.IS_BURN_IN} for w in actual]
    expected = refs.reference_items(
        items.Sequence(8, 5, end=end), users_data.make_episodes(USERS_PLAIN_SPEC)
    )
    refs.assert_same_items(actual, expected, where=end)


# --- Beam ------------------------------------------------------------------------------------


@pytest.mark.slow  # Beam's DirectRunner.
def test_push_with_beam_writes_the_reference_items_each_once(users_plain_dir, tmp_path):
    pipeline = pytest.importorskip('rlds_reverb.distribute.pipeline')
    kind = items.TwoStep()
    signature = tables.signature_for(kind, load(users_plain_dir))
    servers = [
        reverb.Server(
            [reverb_tables.make_fifo_table('replay', signature, max_size=1_000_000)], port=None
        )
        for _ in range(2)
    ]
    try:
        addresses = [f'localhost:{s.port}' for s in servers]
        result = pipeline.push_with_beam(users_plain_dir, addresses, 'replay', item=kind)
        expected = refs.reference_items(kind, users_data.make_episodes(USERS_PLAIN_SPEC))
        assert result.items == len(expected)
        actual = [
            sample.data
            for s in servers
            for sample in reverb_tables.read_items(reverb.Client(f'localhost:{s.port}'), 'replay')
        ]
        refs.assert_same_items(actual, expected, where='beam')
    finally:
        for server in servers:
            server.stop()


# --- Export and the CLI ---------------------------------------------------------------------


def _as_pushed(episode: dict) -> dict:
    """The episode as items carry it: discount 0 into and on a terminal step."""
    steps = dict(episode[types.STEPS])
    steps[types.DISCOUNT] = refs.reference_trajectories(steps)['discount']
    return {**episode, types.STEPS: steps}


@pytest.fixture
def export_address(users_dir, tmp_path):
    """A checkpointing server with a table 'replay' of `Sequence(8, 8, 'pad')` items with ids."""
    signature = tables.signature_for(
        items.Sequence(8, 8, end='pad'),
        load(users_dir),
        add_ids=True,
        episode_fields=(users_data.METADATA,),
    )
    (tmp_path / 'ckpt').mkdir()  # Export names it; Reverb makes it only when it checkpoints.
    checkpointer = checkpointers_lib.DefaultCheckpointer(str(tmp_path / 'ckpt'))
    table = tables.uniform('replay', max_size=1_000_000, signature=signature)
    server = reverb.Server([table], port=None, checkpointer=checkpointer)
    yield f'localhost:{server.port}'
    server.stop()


@pytest.mark.slow  # Two exports of 7,412 steps with images: 15 to 45 s.
def test_export_gives_back_the_pushed_episodes_with_images_strings_and_metadata(
    users_dir, export_address, tmp_path, run_cli
):
    item = items.Sequence(8, 8, end='pad')
    carry = dict(add_ids=True, episode_fields=(users_data.METADATA,))
    rlds_reverb.push(load(users_dir), export_address, 'replay', item=item, **carry)
    expected = [_as_pushed(e) for e in users_data.make_episodes(USERS_SPEC)]
    stats = rlds_reverb.export_table(
        tmp_path / 'api' / '1.0.0',
        'replay',
        server=export_address,
        server_checkpoint_dir=tmp_path / 'ckpt',
        episode_fields=(users_data.METADATA,),
    )
    assert (stats.episodes, stats.steps) == (len(USERS_SPEC.lengths), USERS_SPEC.num_steps)
    exported = users_data.read_with_tfds(tmp_path / 'api' / '1.0.0')
    _assert_same_episodes(_sorted_by_id(exported), expected)
    code, out, err = run_cli(
        'export',
        '--server',
        export_address,
        '--server-checkpoint-dir',
        tmp_path / 'ckpt',
        '--table',
        'replay',
        '--episode-field',
        users_data.METADATA,
        '--no-progress',
        tmp_path / 'cli' / '1.0.0',
    )
    assert code == 0, err
    assert f'Exported {len(USERS_SPEC.lengths)} episodes' in out
    exported = users_data.read_with_tfds(tmp_path / 'cli' / '1.0.0')
    _assert_same_episodes(_sorted_by_id(exported), expected)


def test_cli_info_and_validate_count_episodes_steps_and_endings(users_dir, run_cli):
    terminated = sum(USERS_SPEC.endings())
    truncated = len(USERS_SPEC.lengths) - terminated
    code, out, err = run_cli('info', users_dir)
    assert code == 0, err
    assert f'episodes: {len(USERS_SPEC.lengths)}' in out
    assert f'terminated: {terminated}  truncated: {truncated}' in out
    code, out, err = run_cli('validate', users_dir)
    assert code == 0, err
    assert f'valid {len(USERS_SPEC.lengths)}, invalid 0' in out


@pytest.mark.parametrize(
    ('kind_name', 'flags'),
    [
        ('two_step', ['--item', 'two-step']),
        ('n_step', ['--item', 'n-step', '--n', '3', '--gamma', '0.9']),
    ],
)
def test_cli_push_inserts_the_reference_count(
    users_dir, users_client, users_address, run_cli, kind_name, flags
):
    table = f'users:{kind_name}'
    code, _, err = run_cli(
        'push', users_dir, '--server', users_address, '--table', table, *flags, '--no-progress'
    )
    assert code == 0, err
    expected = refs.reference_items(KINDS[kind_name], users_data.make_episodes(USERS_SPEC))
    assert reverb_tables.table_size(users_client, table) == len(expected)


@pytest.mark.slow  # Real programs.
@pytest.mark.parametrize('command', ['info', 'validate'])
def test_cli_prints_only_its_own_output_on_image_data(users_dir, run_cli, command):
    code, _, err = run_cli(command, users_dir, subprocess=True)
    assert code == 0
    assert 'deprecated' not in err, err


@pytest.mark.slow  # Two worker processes.
def test_cli_push_with_workers_writes_each_item_once(
    users_plain_dir, users_client, users_address, run_cli
):
    table = 'users_plain:two_step'
    code, _, err = run_cli(
        'push',
        users_plain_dir,
        '--server',
        users_address,
        '--table',
        table,
        '--item',
        'two-step',
        '--workers',
        '2',
        '--no-progress',
        subprocess=True,
    )
    assert code == 0, err
    expected = refs.reference_items(items.TwoStep(), users_data.make_episodes(USERS_PLAIN_SPEC))
    actual = [sample.data for sample in reverb_tables.read_items(users_client, table)]
    refs.assert_same_items(actual, expected, where='--workers 2')
