"""Export: RLDS -> push -> export equals the original, field by field and dtype by dtype.

Real in-process Reverb servers with checkpointers in tmp, real TFDS directories; the
tables sample uniformly (as a user's would): export does not depend on their sampler and
leaves them as they were.
"""

from __future__ import annotations

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
import tree
from reverb.platform import checkpointers_lib
from tf_agents.drivers import py_driver
from tf_agents.environments import suite_gym
from tf_agents.policies import py_policy
from tf_agents.specs import array_spec
from tf_agents.trajectories import policy_step

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import ExportError
from rlds_reverb.examples import cartpole
from rlds_reverb.export import chains, recorder, reverb_export
from rlds_reverb.read.loading import load
from rlds_reverb.serve import tables
from rlds_reverb.storage import tfds_writer
from rlds_reverb.transform import items
from rlds_reverb.write import push as push_lib
from tests import builders

METADATA = (cartpole.EPISODE_RETURN, cartpole.RANDOM_ACTION_FRACTION)


def read_tfds(directory) -> tuple[dict, list[dict]]:
    """Returns (element spec, episodes as NumPy: steps as `[T, ...]` arrays)."""
    dataset = tfds.builder_from_directory(str(directory)).as_dataset(split='train')

    def _whole(episode):
        return {**episode, types.STEPS: episodes_lib.batch_steps(episode[types.STEPS])}

    # np.asarray: a scalar string's .numpy() is `bytes`, without a dtype to compare.
    episodes = [
        tf.nest.map_structure(lambda x: np.asarray(x.numpy()), e) for e in dataset.map(_whole)
    ]
    return dataset.element_spec, episodes


def assert_same_dataset(original, exported) -> None:
    spec, expected = read_tfds(original)
    out_spec, actual = read_tfds(exported)
    assert out_spec == spec
    assert len(actual) == len(expected)
    for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
        flat_want = tree.flatten_with_path(want)
        flat_got = dict(tree.flatten_with_path(got))
        assert sorted(flat_got) == sorted(p for p, _ in flat_want)
        for path, value in flat_want:
            assert flat_got[path].dtype == value.dtype, (index, path)
            np.testing.assert_array_equal(flat_got[path], value, err_msg=f'{index} {path}')


def serve(tmp_path, item, episodes, *, name='replay', **carry) -> reverb.Server:
    signature = tables.signature_for(item, episodes, **carry)
    table = tables.uniform(name, max_size=100_000, signature=signature)
    (tmp_path / 'ckpt').mkdir(exist_ok=True)
    checkpointer = checkpointers_lib.DefaultCheckpointer(str(tmp_path / 'ckpt'))
    return reverb.Server([table], port=None, checkpointer=checkpointer)


@pytest.fixture
def server_for(tmp_path):
    servers = []

    def _make(item, episodes, **carry):
        servers.append(serve(tmp_path, item, episodes, **carry))
        return f'localhost:{servers[-1].port}'

    yield _make
    for server in servers:
        server.stop()


@pytest.mark.slow  # A CartPole push and export: 12-30 s here.
def test_episode_items_round_trip_with_metadata(cartpole_dir, tmp_path, server_for):
    episodes = load(cartpole_dir)
    item = items.Episode(501)
    address = server_for(item, episodes, episode_fields=METADATA)
    pushed = push_lib.push(episodes, address, 'replay', item=item, episode_fields=METADATA)
    stats = reverb_export.export_table(
        tmp_path / 'out',
        'replay',
        server=address,
        server_checkpoint_dir=tmp_path / 'ckpt',
        episode_fields=METADATA,
        episodes_per_shard=5,
    )
    assert stats.kind is reverb_export.ExportKind.WHOLE_EPISODES
    assert (stats.episodes, stats.steps, stats.items) == (pushed.episodes, pushed.steps, 12)
    assert_same_dataset(cartpole_dir, tmp_path / 'out')
    # The user's table is left as it was, and `load` reads the export.
    assert reverb.Client(address).server_info()['replay'].current_size == 12
    assert len(list(load(tmp_path / 'out'))) == 12


@pytest.mark.slow  # A CartPole push and export: 12-30 s here.
@pytest.mark.parametrize(
    ('add_ids', 'kind'),
    [
        (True, reverb_export.ExportKind.TWO_STEP_WITH_IDS),
        (False, reverb_export.ExportKind.TWO_STEP_IN_ORDER),
    ],
    ids=['with-ids', 'in-order'],
)
def test_two_step_items_round_trip(add_ids, kind, cartpole_dir, tmp_path, server_for):
    episodes = load(cartpole_dir)
    address = server_for(items.TwoStep(), episodes, episode_fields=METADATA, add_ids=add_ids)
    push_lib.push(episodes, address, 'replay', episode_fields=METADATA, add_ids=add_ids)
    stats = reverb_export.export_table(
        tmp_path / 'out',
        'replay',
        server=address,
        server_checkpoint_dir=tmp_path / 'ckpt',
        episode_fields=METADATA,
    )
    assert stats.kind is kind
    assert_same_dataset(cartpole_dir, tmp_path / 'out')


@pytest.mark.parametrize(
    'item',
    [
        items.Sequence(7, 3, end='pad'),
        items.Sequence(5, end='truncate'),
        items.Episode(100, 'split'),
    ],
    ids=['overlapping-pad', 'truncate', 'episode-chunks'],
)
@pytest.mark.parametrize('add_ids', [True, False], ids=['ids', 'in-order'])
@pytest.mark.slow  # A server, a checkpoint and an export per case: 50 s on a loaded host.
def test_step_items_round_trip_from_a_checkpoint(item, add_ids, tmp_path, server_for):
    # Discounts that agree with the flags (0 into and at the terminal step): items carry
    # the terminal rule's discounts (docs/semantics.md §3), so only such data round-trips.
    data = [
        builders.episode(9, discount=[1.0] * 7 + [0.0, 0.0], extras={'tag': np.arange(9)}),
        builders.episode(1, ending=builders.TRUNCATED, extras={'tag': [5]}),
        builders.episode(230, ending=builders.TRUNCATED, extras={'tag': np.arange(230)}),
    ]
    original = builders.write_tfds(
        tmp_path / 'in',
        data,
        name='toy',
        features=builders.step_features(tag=tfds.features.Scalar(np.int32)),
    )
    episodes = load(original)
    address = server_for(item, episodes, add_ids=add_ids)
    push_lib.push(episodes, address, 'replay', item=item, add_ids=add_ids)
    server_dir = reverb.Client(address).checkpoint()
    # Parts of about 50 rows: episodes span several temporary servers. Without ids, the
    # windows are placed by the item kind they were pushed with.
    stats = reverb_export.export_table(
        tmp_path / 'out',
        'replay',
        checkpoint=server_dir,
        part_rows=50,
        max_copy_bytes=0,
        item=item,
    )
    want = 'STEPS_WITH_IDS' if add_ids else 'WINDOWS_IN_ORDER'
    assert stats.kind is reverb_export.ExportKind[want]
    assert_same_dataset(original, tmp_path / 'out')


def test_items_are_read_once_in_insertion_order(tmp_path, server_for):
    data = [builders.episode(3 + i, start=100.0 * i) for i in range(20)]
    episodes = builders.rlds(data)
    address = server_for(items.Episode(30), episodes)
    push_lib.push(episodes, address, 'replay', item=items.Episode(30))
    stats = reverb_export.export_table(
        tmp_path / 'out',
        'replay',
        server=address,
        server_checkpoint_dir=tmp_path / 'ckpt',
        batch_items=3,
        part_rows=70,
    )
    assert stats.items == 20
    _, exported = read_tfds(tmp_path / 'out')
    starts = [e[types.STEPS][types.REWARD][0] for e in exported]
    assert starts == [100.0 * i for i in range(20)]


@pytest.mark.parametrize(
    ('item', 'carry', 'message'),
    [
        (items.NStep(3, 0.9), {}, 'n-step transitions'),
        (items.NStep(1, 0.9), {'add_ids': True}, 'n-step transitions'),
        (items.Sequence(2), {}, 'holds a part of an episode'),
        (items.Episode(2, 'split'), {}, 'holds a part of an episode'),
    ],
    ids=['n-step', 'n-step-ids', 'sequence', 'episode-chunks'],
)
def test_tables_that_cannot_be_exported_are_refused(item, carry, message, tmp_path, server_for):
    episodes = builders.rlds([builders.episode(4), builders.episode(3)])
    address = server_for(item, episodes, **carry)
    push_lib.push(episodes, address, 'replay', item=item, **carry)
    with pytest.raises(ExportError, match=message):
        reverb_export.export_table(
            tmp_path / 'out', 'replay', server=address, server_checkpoint_dir=tmp_path / 'ckpt'
        )
    assert not (tmp_path / 'out').exists()


def _two_step_data(tmp_path):
    """Three episodes whose discounts agree with their flags, written to TFDS and loaded.

    Items carry the terminal rule's discounts (0 into and at a terminal step,
    docs/semantics.md §3), so only such data round-trips exactly.
    """
    data = [
        builders.episode(6, discount=[1.0] * 4 + [0.0, 0.0], extras={'tag': np.arange(6)}),
        builders.episode(2, ending=builders.TRUNCATED, start=50.0, extras={'tag': [7, 8]}),
        builders.episode(
            9, discount=[1.0] * 7 + [0.0, 0.0], start=90.0, extras={'tag': np.arange(9)}
        ),
    ]
    original = builders.write_tfds(
        tmp_path / 'in',
        data,
        name='toy',
        features=builders.step_features(tag=tfds.features.Scalar(np.int32)),
    )
    return original, load(original)


@pytest.mark.slow  # About 20 s.
def test_two_step_items_without_ids_round_trip_in_insertion_order(tmp_path, server_for):
    original, episodes = _two_step_data(tmp_path)
    address = server_for(items.TwoStep(), episodes)
    push_lib.push(episodes, address, 'replay')
    # Batches of 3 items and parts of about 7 rows: episodes span batches and parts.
    stats = reverb_export.export_table(
        tmp_path / 'out',
        'replay',
        server=address,
        server_checkpoint_dir=tmp_path / 'ckpt',
        batch_items=3,
        part_rows=7,
        max_copy_bytes=0,
    )
    assert stats.kind is reverb_export.ExportKind.TWO_STEP_IN_ORDER
    assert (stats.episodes, stats.steps, stats.items) == (3, 17, 14)
    assert_same_dataset(original, tmp_path / 'out')


@pytest.mark.slow  # About 7 s.
def test_two_step_items_cut_by_a_queue_are_partial(tmp_path):
    original, episodes = _two_step_data(tmp_path)
    signature = tables.signature_for(items.TwoStep(), episodes)
    (tmp_path / 'ckpt').mkdir()
    server = reverb.Server(
        [tables.fifo_queue('replay', max_size=100, signature=signature)],
        checkpointer=checkpointers_lib.DefaultCheckpointer(str(tmp_path / 'ckpt')),
    )
    try:
        address = f'localhost:{server.port}'
        push_lib.push(episodes, address, 'replay')
        # A queue hands out (and removes) its oldest item: episode 0 loses its first step.
        next(iter(reverb.Client(address).sample('replay', num_samples=1)))
        # Without ids the episode is named by its place in the table, not a dataset index.
        with pytest.raises(ExportError, match=r'\(the 1st episode in the table.s insertion order'):
            reverb_export.export_table(
                tmp_path / 'out', 'replay', server=address, server_checkpoint_dir=tmp_path / 'ckpt'
            )
        stats = reverb_export.export_table(
            tmp_path / 'out',
            'replay',
            server=address,
            server_checkpoint_dir=tmp_path / 'ckpt',
            on_invalid='skip',
        )
    finally:
        server.stop()
    assert (stats.episodes, stats.skipped_episodes) == (2, 1)
    _, exported = read_tfds(tmp_path / 'out')
    assert [e[types.STEPS][types.REWARD][0] for e in exported] == [50.0, 90.0]


@pytest.mark.parametrize(
    'item', [items.Episode(10), items.TwoStep()], ids=['episodes', 'two-step-in-order']
)
def test_strings_round_trip_per_step_and_as_episode_metadata(item, tmp_path, server_for):
    # As Open X-Embodiment holds them: a per-step instruction, a string episode field.
    steps = [
        builders.episode(
            length,
            discount=[1.0] * (length - 2) + [0.0, 0.0],
            extras={'instruction': np.array([f'pick {i} up'] * length, dtype=object)},
        )
        for i, length in enumerate((4, 7))
    ]
    features = tfds_writer.make_rlds_features(
        {
            types.OBSERVATION: tfds.features.Tensor(shape=(2,), dtype=np.float32),
            types.ACTION: tfds.features.Scalar(dtype=np.int64),
            types.REWARD: tfds.features.Scalar(dtype=np.float32),
            types.DISCOUNT: tfds.features.Scalar(dtype=np.float32),
            'instruction': tfds.features.Text(),
        },
        {'file_path': tfds.features.Text()},
    )
    original = tfds_writer.write_rlds_dataset(
        tmp_path / 'in' / 'oxe' / '1.0.0',
        ({types.STEPS: s, 'file_path': f'/data/{i}.npz'} for i, s in enumerate(steps)),
        features=features,
        name='oxe',
    )
    episodes = load(original)
    carry = {'episode_fields': ('file_path',)}
    address = server_for(item, episodes, **carry)
    push_lib.push(episodes, address, 'replay', item=item, **carry)
    reverb_export.export_table(
        tmp_path / 'out', 'replay', server=address, server_checkpoint_dir=tmp_path / 'ckpt', **carry
    )
    assert_same_dataset(original, tmp_path / 'out')
    _, exported = read_tfds(tmp_path / 'out')
    assert exported[1]['file_path'] == b'/data/1.npz'
    assert exported[1][types.STEPS]['instruction'][0] == b'pick 1 up'


def _step_pairs(*pairs) -> dict:
    """Rows of two-step items as export reads them: each pair (episode, t) gives t, t + 1."""
    rows = []
    for episode, t, length in pairs:
        for step in (t, t + 1):
            rows.append(
                {
                    types.OBSERVATION: np.float32(100 * episode + step),
                    types.IS_FIRST: step == 0,
                    types.IS_LAST: step == length - 1,
                }
            )
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def test_interleaved_two_step_items_are_refused():
    chain = chains.TwoStepChain('replay')
    # Episode 0 (3 steps), then episode 1 starts before episode 0's last pair.
    with pytest.raises(ExportError, match='item 2 does not continue the episode of item 1'):
        chain.add_ids(_step_pairs((0, 0, 3), (1, 0, 3), (0, 1, 3)))


@pytest.mark.slow  # About 15 s per case on a loaded host.
@pytest.mark.parametrize('add_ids', [True, False], ids=['ids', 'in-order'])
def test_partial_episodes_raise_or_are_skipped(add_ids, tmp_path, server_for):
    episodes = builders.rlds([builders.episode(6), builders.episode(4)])
    item = items.Sequence(4, end='drop')  # Drops the tail of the 6-step episode.
    address = server_for(item, episodes, add_ids=add_ids)
    push_lib.push(episodes, address, 'replay', item=item, add_ids=add_ids)
    named = r'episode 0 \(its episode_id\)' if add_ids else r'the 1st episode in the table.s'
    with pytest.raises(ExportError, match=rf'part of 1 episode\(s\) \({named}[^:]*: 4 step'):
        reverb_export.export_table(
            tmp_path / 'out',
            'replay',
            server=address,
            server_checkpoint_dir=tmp_path / 'ckpt',
            item=item,
        )
    assert not (tmp_path / 'out').exists()
    stats = reverb_export.export_table(
        tmp_path / 'out',
        'replay',
        server=address,
        server_checkpoint_dir=tmp_path / 'ckpt',
        on_invalid='skip',
        item=item,
    )
    assert (stats.episodes, stats.skipped_episodes) == (1, 1)
    _, exported = read_tfds(tmp_path / 'out')
    np.testing.assert_array_equal(
        exported[0][types.STEPS][types.OBSERVATION], builders.episode(4)[types.OBSERVATION]
    )


def _windows(*windows, period: int) -> tuple[dict, np.ndarray, int]:
    """Rows of windows as export reads them: (episode, start, size, length) each, padded."""
    span = max(w[2] for w in windows)
    rows, valid = [], []
    for episode, start, size, length in windows:
        for i in range(span):
            step = start + i
            rows.append(
                {
                    types.OBSERVATION: np.float32(100 * episode + step),
                    types.IS_FIRST: step == 0,
                    types.IS_LAST: step == length - 1,
                }
            )
            valid.append(i < size)
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}, np.array(valid), len(windows)


def test_windows_in_insertion_order_get_episode_and_step_ids():
    chain = chains.WindowChain('replay', period=2)
    # Episode 0 (5 steps) in windows of 3 every 2 steps, then episode 1 (2 steps).
    rows, valid, count = _windows((0, 0, 3, 5), (0, 2, 3, 5), (1, 0, 2, 2), period=2)
    out = chain.add_ids(rows, valid, count)
    np.testing.assert_array_equal(out[types.EPISODE_ID], [0, 0, 0, 0, 0, 0, 1, 1, -1])
    np.testing.assert_array_equal(out[types.STEP_INDEX], [0, 1, 2, 2, 3, 4, 0, 1, -1])


@pytest.mark.parametrize(
    ('windows', 'message'),
    [
        (((0, 0, 3, 9), (1, 2, 3, 9)), 'item 1 does not continue the episode of item 0 2 steps'),
        (((0, 0, 2, 3), (0, 2, 2, 3)), 'holds the first step of an episode after its own first'),
    ],
    ids=['interleaved', 'across-episodes'],
)
def test_windows_out_of_one_writers_order_are_refused(windows, message):
    chain = chains.WindowChain('replay', period=2)
    rows, valid, count = _windows(*windows, period=2)
    if message.startswith('holds'):  # end='continue': the next episode starts inside.
        rows[types.IS_FIRST][3] = True
    with pytest.raises(ExportError, match=message):
        chain.add_ids(rows, valid, count)


@pytest.mark.parametrize(
    ('item', 'message'),
    [
        (items.Sequence(3, end='last'), "windows of end='last' cannot be placed without ids"),
        (items.Sequence(3, end='continue'), "end='continue' cannot be placed"),
        (items.TwoStep(), 'item= names the items.Sequence or items.Episode'),
    ],
    ids=['last', 'continue', 'two-step'],
)
def test_export_refuses_items_whose_windows_cannot_be_placed(item, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        reverb_export.export_table(tmp_path / 'out', 'replay', server='localhost:1', item=item)


def test_bad_export_options_are_refused(tmp_path, server_for):
    episodes = builders.rlds([builders.episode(3)])
    address = server_for(items.Episode(5), episodes)
    push_lib.push(episodes, address, 'replay', item=items.Episode(5))
    with pytest.raises(ValueError, match='exactly one of server'):
        reverb_export.export_table(tmp_path / 'out', 'replay')
    with pytest.raises(ExportError, match="names \\['agent'\\]"):
        reverb_export.export_table(
            tmp_path / 'out',
            'replay',
            server=address,
            server_checkpoint_dir=tmp_path / 'ckpt',
            episode_fields=('agent',),
        )
    with pytest.raises(ExportError, match="holds no table 'nope'"):
        reverb_export.export_table(
            tmp_path / 'out', 'nope', server=address, server_checkpoint_dir=tmp_path / 'ckpt'
        )
    with pytest.raises(ExportError, match='no complete Reverb checkpoint'):
        reverb_export.export_table(tmp_path / 'out', 'replay', checkpoint=tmp_path / 'empty')


def test_push_refuses_unknown_or_clashing_carried_fields(cartpole_episodes, server_for):
    address = server_for(items.TwoStep(), cartpole_episodes)
    with pytest.raises(ValueError, match="'agent', which is not an episode-level field"):
        push_lib.push(cartpole_episodes, address, 'replay', episode_fields=('agent',))
    with_ids = builders.rlds([builders.episode(3, extras={types.STEP_INDEX: [0, 1, 2]})])
    with pytest.raises(ValueError, match="'step_index' to the steps: they already hold"):
        push_lib.push(with_ids, address, 'replay', add_ids=True)


@pytest.mark.slow  # A CartPole push and export: 12-30 s here.
def test_cli_push_with_ids_then_export_and_record(cartpole_dir, tmp_path, server_for, run_cli):
    episodes = load(cartpole_dir)
    address = server_for(items.TwoStep(), episodes, episode_fields=METADATA, add_ids=True)
    fields = [a for f in METADATA for a in ('--episode-field', f)]
    code, _, _ = run_cli(
        'push', cartpole_dir, '--server', address, '--add-ids', *fields, '--no-progress'
    )
    assert code == 0
    code, out, _ = run_cli(
        'export',
        '--server',
        address,
        '--server-checkpoint-dir',
        tmp_path / 'ckpt',
        '--table',
        'replay',
        *fields,
        tmp_path / 'out',
    )
    assert code == 0 and 'Exported 12 episodes' in out and 'two-step-with-ids' in out
    assert_same_dataset(cartpole_dir, tmp_path / 'out')
    checkpoint = reverb.Client(address).checkpoint()
    code, out, _ = run_cli(
        'export', '--checkpoint', checkpoint, '--table', 'replay', tmp_path / 'again'
    )
    assert code == 0 and 'Exported 12 episodes' in out
    code, out, _ = run_cli(
        'record',
        '--episodes',
        '3',
        '--policy',
        'scripted',
        '--max-episode-steps',
        '30',
        tmp_path / 'rec',
    )
    assert code == 0 and 'Recorded 3 episodes' in out and '3 truncated' in out
    assert len(list(load(tmp_path / 'rec'))) == 3


def test_cli_export_errors_are_one_line(tmp_path, run_cli):
    code, _, err = run_cli(
        'export', '--checkpoint', tmp_path, '--table', 'replay', tmp_path / 'out'
    )
    assert code == 2 and 'no complete Reverb checkpoint' in err
    code, _, err = run_cli(
        'push', tmp_path, '--server', 'localhost:1', '--add-ids', '--workers', '2'
    )
    assert code == 2 and '--add-ids numbers the episodes' in err


def test_cli_exports_sequence_windows_without_ids(tmp_path, server_for, run_cli):
    data = [builders.episode(7, ending=builders.TRUNCATED), builders.episode(2)]
    data[1]['discount'] = np.array([0.0, 0.0], np.float32)  # Terminal: as items carry it.
    original = builders.write_tfds(tmp_path / 'in', data, name='toy')
    episodes = load(original)
    item = items.Sequence(3, 2, end='pad')
    address = server_for(item, episodes)
    push_lib.push(episodes, address, 'replay', item=item)
    options = ['--item', 'sequence', '--length', '3', '--period', '2', '--end', 'pad']
    code, out, _ = run_cli(
        'export',
        '--server',
        address,
        '--server-checkpoint-dir',
        tmp_path / 'ckpt',
        '--table',
        'replay',
        *options,
        tmp_path / 'out',
    )
    assert code == 0 and 'Exported 2 episodes' in out and 'windows-in-order' in out
    assert_same_dataset(original, tmp_path / 'out')
    code, _, err = run_cli(
        'export',
        '--server',
        address,
        '--server-checkpoint-dir',
        tmp_path / 'ckpt',
        '--table',
        'replay',
        '--item',
        'sequence',
        '--end',
        'last',
        tmp_path / 'again',
    )
    assert code != 0 and "end='last' cannot be placed without ids" in err


class _NotingPolicy(py_policy.PyPolicy):
    """Pushes the pole's way, and says which way in a string policy info field."""

    def __init__(self, env):
        info_spec = {'note': array_spec.ArraySpec((), np.object_, 'note')}
        super().__init__(env.time_step_spec(), env.action_spec(), info_spec=info_spec)

    def _action(self, time_step, policy_state):
        action = np.int64(time_step.observation[2] > 0)
        note = np.array(b'right' if action else b'left', dtype=object)
        return policy_step.PolicyStep(action, policy_state, {'note': note})


def test_record_and_export_store_a_string_policy_info_field_alike(tmp_path, server_for):
    # One mapping of specs to TFDS features: before, only export took tf.string fields.
    env = suite_gym.load('CartPole-v1', max_episode_steps=6)
    policy = _NotingPolicy(env)
    with recorder.RldsRecorder(tmp_path / 'recorded', policy.trajectory_spec) as rec:
        py_driver.PyDriver(env, policy, [rec], max_episodes=2).run(env.reset())
    episodes = load(tmp_path / 'recorded')
    assert episodes.element_spec[types.STEPS].element_spec['note'].dtype == tf.string
    address = server_for(items.TwoStep(), episodes)
    push_lib.push(episodes, address, 'replay')
    reverb_export.export_table(
        tmp_path / 'out', 'replay', server=address, server_checkpoint_dir=tmp_path / 'ckpt'
    )
    assert_same_dataset(tmp_path / 'recorded', tmp_path / 'out')
    _, recorded = read_tfds(tmp_path / 'recorded')
    assert set(recorded[0][types.STEPS]['note'][:-1]) <= {b'left', b'right'}
