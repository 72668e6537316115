"""The toolkit on data recorded by envlogger 1.2 through its TFDS backend.

`tests/envlogger_env.py` drives a small dm_env environment of the tests' own through
envlogger's `EnvLogger` and `TFDSBackendWriter` (several shards, both endings, lengths 2 to
301 RLDS steps, a dict observation with a PNG image, float64 rewards and discounts, step and
episode metadata) and keeps what the environment produced. Each check compares the toolkit
on envlogger's files with that record, episode by episode, or with the plain NumPy
references (`tests/item_references.py`, `tests/adders/test_adders_properties.py`).

Interrupted recordings: TFDS' `SequentialWriter` (under envlogger's backend) lists a shard
in `dataset_info.json` only when it is finished, and its TFRecord writer buffers, so a
recording killed mid-episode leaves an unlisted last shard whose last record is usually cut.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import warnings

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
import tree

pytest.importorskip(
    'envlogger',
    reason='envlogger 1.2 (the test extra) is not installed, or its riegeli parts miss '
    "libgmp.so.10 / libgmpxx.so.4 (Debian's libgmp10, libgmpxx4ldbl; `make` installs them)",
)
from envlogger.backends import rlds_utils  # noqa: E402

import adders  # noqa: E402
import rlds_reverb  # noqa: E402
from rlds_reverb.core import types  # noqa: E402
from rlds_reverb.core.errors import SourceError  # noqa: E402
from rlds_reverb.read import records  # noqa: E402
from rlds_reverb.read.loading import load  # noqa: E402
from rlds_reverb.serve import tables  # noqa: E402
from rlds_reverb.transform import items  # noqa: E402
from tests import envlogger_env as env_lib  # noqa: E402
from tests import item_references as refs  # noqa: E402
from tests import reverb_tables, users_data  # noqa: E402
from tests.adders.test_adders_properties import reference_gae, reference_n_step  # noqa: E402
from tests.rlds_copies import assert_same_episodes  # noqa: E402

EPISODES_PER_FILE = 3
KINDS = {
    'two_step': items.TwoStep(),
    'n_step': items.NStep(3, 0.9),
    'seq_pad': items.Sequence(8, 5, end='pad'),
    'episode_split': items.Episode(64, overflow='split'),
}
# The killed recording: it is killed at step ANNOUNCE_AT of this episode.
KILLED_IN = 6
# A copy of its files is taken at step ANNOUNCE_AT of this one (no shard finished yet).
COPIED_IN = 2


def as_stored(episodes: list[dict]) -> list[dict]:
    """The episodes as TFDS stores them: float64 values rounded to float32, dtype kept.

    `tf.train.Example` has only float32 lists, so TFDS' serializer writes a float64 feature
    (envlogger's rewards and discounts, dm_env's Python floats) as float32 values, read back
    as float64.
    """

    def _round(x):
        x = np.asarray(x)
        return x.astype(np.float32).astype(np.float64) if x.dtype == np.float64 else x

    return [tree.map_structure(_round, e) for e in episodes]


@pytest.fixture(scope='module')
def produced(tmp_path_factory) -> tuple[pathlib.Path, list[dict]]:
    """(directory, the episodes the environment produced) of `env_lib.PLAN`, 4 shards."""
    directory = tmp_path_factory.mktemp('envlogger') / env_lib.NAME
    expected = env_lib.record(directory, max_episodes_per_file=EPISODES_PER_FILE)
    return directory, expected


@pytest.fixture(scope='module')
def recording(produced) -> tuple[pathlib.Path, list[dict]]:
    """(directory, the produced episodes as stored: `as_stored`)."""
    return produced[0], as_stored(produced[1])


def _ends(episode: dict) -> bool:
    return bool(episode[types.STEPS][types.IS_TERMINAL][-1])


# --- What envlogger writes --------------------------------------------------------------------


def test_envlogger_writes_a_tfds_directory_of_sequential_shards(recording):
    directory, expected = recording
    info = json.loads((directory / 'dataset_info.json').read_text())
    (split,) = info['splits']
    assert split['name'] == env_lib.SPLIT
    # The sequential writer's names: no '-of-N' (TFDS' default template has it).
    assert split['filepathTemplate'] == '{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_INDEX}'
    assert [int(n) for n in split['shardLengths']] == [3, 3, 3, 2]
    shards = sorted(p.name for p in directory.glob('*.tfrecord-*'))
    assert shards == [f'{env_lib.NAME}-train.tfrecord-{i:05d}' for i in range(4)]
    steps = tfds.builder_from_directory(str(directory)).info.features[types.STEPS]
    assert steps.feature[types.REWARD].np_dtype == np.float64
    assert steps.feature[types.DISCOUNT].np_dtype == np.float64
    assert len(expected) == len(env_lib.PLAN)
    assert [len(e[types.STEPS][types.IS_FIRST]) for e in expected] == [
        env_lib.rlds_length(p) for p in env_lib.PLAN
    ]


# --- Load -------------------------------------------------------------------------------------


def test_load_reads_the_episodes_the_environment_produced(recording):
    directory, expected = recording
    episodes = load(directory)
    assert records.find_record_source(episodes) is not None  # The fast record path.
    assert_same_episodes(users_data.read_numpy(episodes), expected)


def test_float64_rewards_come_back_float64_with_float32_values(produced):
    """TFDS' tf.Example float lists hold float32: the one change between what the
    environment produced and what envlogger's files hold (not the reader's doing)."""
    directory, produced_episodes = produced
    episode = users_data.read_numpy(load(directory))[4]
    reward = episode[types.STEPS][types.REWARD]
    want = produced_episodes[4][types.STEPS][types.REWARD]
    assert reward.dtype == np.float64
    np.testing.assert_array_equal(reward, want.astype(np.float32).astype(np.float64))
    assert not np.array_equal(reward, want)  # Rewards such as 0.257 are not float32 numbers.
    np.testing.assert_allclose(reward, want, rtol=6e-8)
    # TFDS reads the same values.
    theirs = users_data.read_with_tfds(directory)[4][types.STEPS][types.REWARD]
    np.testing.assert_array_equal(reward, theirs)


@pytest.mark.parametrize(
    'options',
    [
        {'read_config': tfds.ReadConfig(interleave_block_length=16)},  # TFDS' as_dataset
        {'whole_episodes': False},  # TFDS' nested steps
    ],
    ids=['as_dataset', 'nested_steps'],
)
def test_every_read_path_gives_the_same_episodes(recording, options):
    directory, expected = recording
    episodes = load(directory, **options)
    assert records.find_record_source(episodes) is None
    assert_same_episodes(users_data.read_numpy(episodes), expected)
    # And what TFDS itself reads.
    assert_same_episodes(users_data.read_with_tfds(directory), expected)


def test_step_fields_select_envlogger_metadata(recording):
    directory, expected = recording
    episodes = load(directory, step_fields=['observation/state', types.STEP_INDEX])
    got = users_data.read_numpy(episodes)
    steps = got[4][types.STEPS]
    assert set(steps) == {*types.REQUIRED_STEP_FIELDS, types.STEP_INDEX}
    assert set(steps[types.OBSERVATION]) == {env_lib.STATE}
    np.testing.assert_array_equal(
        steps[types.STEP_INDEX], expected[4][types.STEPS][types.STEP_INDEX]
    )


# --- Endings and validation --------------------------------------------------------------------


def test_endings_are_rlds_terminations_and_truncations(recording):
    """envlogger sets is_terminal iff the last timestep's discount is 0 (dm_env.termination);
    the last step's action, reward and discount are zeros whatever the ending."""
    directory, _ = recording
    for plan, episode in zip(env_lib.PLAN, users_data.read_numpy(load(directory)), strict=True):
        steps = episode[types.STEPS]
        terminated = plan.ending == env_lib.TERMINATED
        assert steps[types.IS_LAST][-1] and not steps[types.IS_LAST][:-1].any()
        assert steps[types.IS_TERMINAL].tolist() == [False] * (len(steps[types.IS_LAST]) - 1) + [
            terminated
        ]
        # The discount into the last step: 0 into a terminal state, 1 at a time limit.
        assert steps[types.DISCOUNT][-2] == (0.0 if terminated else 1.0)
        assert (steps[types.DISCOUNT][-1], steps[types.REWARD][-1], steps[types.ACTION][-1]) == (
            0.0,
            0.0,
            0,
        )


def test_validate_passes_and_counts_both_endings(recording):
    directory, expected = recording
    report = rlds_reverb.validate(load(directory), on_invalid='report')
    terminated = sum(p.ending == env_lib.TERMINATED for p in env_lib.PLAN)
    assert report.ok
    assert (report.valid, report.invalid) == (len(expected), 0)
    assert report.steps == sum(len(e[types.STEPS][types.IS_FIRST]) for e in expected)
    assert (report.terminated, report.truncated) == (terminated, len(expected) - terminated)


def test_convert_bootstraps_truncations_and_not_terminations(recording):
    directory, expected = recording
    got = list(rlds_reverb.convert_rlds_to_trajectories(load(directory)).batch(10_000))
    (batch,) = got
    want = [refs.reference_trajectories(e[types.STEPS]) for e in expected]
    np.testing.assert_array_equal(batch.discount, np.concatenate([w['discount'] for w in want]))
    np.testing.assert_array_equal(batch.step_type, np.concatenate([w['step_type'] for w in want]))
    assert batch.discount.dtype == tf.float64 and batch.reward.dtype == tf.float64


def test_tf_agents_own_converter_fails_on_envlogger_float64_discounts(recording):
    """Why the toolkit's converter is needed here: TF-Agents 0.19 builds the terminal
    discount as a float32 constant (deviation D4), and envlogger's discounts are float64."""
    rlds_to_reverb = pytest.importorskip('tf_agents.replay_buffers.rlds_to_reverb')
    episodes = tfds.builder_from_directory(str(recording[0])).as_dataset(split=env_lib.SPLIT)
    with pytest.raises(TypeError):
        next(iter(rlds_to_reverb.convert_rlds_to_trajectories(episodes)))


# --- Push and the adders ------------------------------------------------------------------------


@pytest.fixture(scope='module')
def envlogger_server(recording):
    """A server with a FIFO-read table per item kind, signatures from the recording."""
    episodes = load(recording[0])
    made = [
        reverb_tables.make_fifo_table(name, tables.signature_for(kind, episodes), max_size=10_000)
        for name, kind in KINDS.items()
    ]
    server = reverb.Server(made, port=None)
    yield server
    server.stop()


@pytest.mark.parametrize('kind_name', list(KINDS))
def test_push_writes_the_reference_items(recording, envlogger_server, kind_name):
    directory, expected = recording
    client = reverb_tables.clean_client(envlogger_server)
    kind = KINDS[kind_name]
    stats = rlds_reverb.push(
        load(directory), f'localhost:{envlogger_server.port}', kind_name, item=kind
    )
    want = refs.reference_items(kind, expected)
    assert stats.items == {kind_name: len(want)}
    assert stats.steps == sum(len(e[types.STEPS][types.IS_FIRST]) for e in expected)
    got = [sample.data for sample in reverb_tables.read_items(client, kind_name)]
    refs.assert_same_items(got, want, where=kind_name)
    item = refs._as_dict(got[0])
    reward = item[types.N_STEP_RETURN if kind_name == 'n_step' else types.REWARD]
    assert np.asarray(reward).dtype == np.float64  # Kept, not cast to float32.


def _by_id(episodes: list[dict]) -> dict[int, dict]:
    return {int(e[types.EPISODE_ID]): e for e in episodes}


def test_n_step_adder_equals_the_numpy_reference(recording):
    directory, expected = recording
    out = _by_id(users_data.read_numpy(load(directory).apply(adders.n_step(3, 0.9))))
    assert sorted(out) == list(range(len(expected)))
    for index, episode in enumerate(expected):
        got = out[index][types.STEPS]
        for name, value in reference_n_step(episode[types.STEPS], 3, 0.9).items():
            tree.map_structure(
                lambda a, e, name=name, index=index: np.testing.assert_allclose(
                    a, e, rtol=1e-12, err_msg=f'episode {index}, {name}'
                ),
                got[name],
                value,
            )
        assert got[types.N_STEP_RETURN].dtype == np.float64
        np.testing.assert_array_equal(got[types.STEP_INDEX], episode[types.STEPS][types.STEP_INDEX])


def test_gae_adder_equals_the_numpy_reference(recording):
    directory, expected = recording

    def value_of(observation):
        return tf.cast(observation[env_lib.STATE][:, 2], tf.float64)

    out = _by_id(
        users_data.read_numpy(load(directory).apply(adders.gae(0.9, 0.95, value_fn=value_of)))
    )
    for index, episode in enumerate(expected):
        steps = dict(episode[types.STEPS])
        steps[types.VALUE] = steps[types.OBSERVATION][env_lib.STATE][:, 2].astype(np.float64)
        got = out[index][types.STEPS]
        for name, value in reference_gae(steps, 0.9, 0.95).items():
            np.testing.assert_allclose(got[name], value, rtol=1e-9, atol=1e-9, err_msg=name)


# --- An unlisted last shard (regressions of load's check) ---------------------------------------


def _unlist_last_shard(directory: pathlib.Path) -> pathlib.Path:
    """Makes `dataset_info.json` say what it says while the last shard is still open."""
    builder = tfds.builder_from_directory(str(directory))
    split = builder.info.splits[env_lib.SPLIT]
    last = pathlib.Path(os.fspath(split.filepaths[-1]))
    unlisted_bytes = sum(len(r) for r in tf.data.TFRecordDataset(str(last)).as_numpy_iterator())
    kept = split.replace(
        shard_lengths=split.shard_lengths[:-1], num_bytes=split.num_bytes - unlisted_bytes
    )
    builder.info.set_splits(tfds.core.SplitDict([kept]))
    builder.info.write_to_directory(str(directory))
    return last


def recover(directory: pathlib.Path) -> None:
    """docs/envlogger.md's recovery: keep the unlisted shard's whole records, then list it."""
    builder = tfds.builder_from_directory(str(directory))
    split = builder.info.splits[env_lib.SPLIT]
    path = split.filename_template.sharded_filepath(
        shard_index=split.num_shards, num_shards=split.num_shards + 1
    )
    whole = []
    try:
        for record in tf.data.TFRecordDataset(str(path)):
            whole.append(record.numpy())
    except tf.errors.DataLossError:
        pass  # The record being written when the recording stopped: lost.
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in whole:
            writer.write(record)
    rlds_utils.maybe_recover_last_shard(builder)


@pytest.fixture
def unlisted(recording, tmp_path) -> tuple[pathlib.Path, pathlib.Path, list[dict]]:
    """A copy of the recording whose last shard (2 episodes) is unlisted: (dir, shard, episodes)."""
    directory = pathlib.Path(shutil.copytree(recording[0], tmp_path / env_lib.NAME))
    return directory, _unlist_last_shard(directory), recording[1]


def test_load_warns_of_an_unlisted_shard_and_reads_the_listed_ones(unlisted):
    directory, shard, expected = unlisted
    with pytest.warns(UserWarning, match='unlisted') as caught:
        episodes = load(directory)
    message = str(caught[0].message)
    assert str(shard) in message
    assert 'It holds 2 complete episode(s), which are NOT read' in message
    assert 'only the 9 episode(s) of the listed shards are' in message
    assert 'maybe_recover_last_shard' in message and 'docs/envlogger.md' in message
    assert caught[0].filename == __file__  # Points at the caller of load.
    assert_same_episodes(users_data.read_numpy(episodes), expected[:9])


def test_load_counts_a_cut_last_record_of_an_unlisted_shard(unlisted):
    directory, shard, _ = unlisted
    with shard.open('r+b') as file:
        file.truncate(shard.stat().st_size - 100)
    with pytest.warns(UserWarning, match=r'1 complete episode\(s\) and an incomplete last record'):
        load(directory)


def test_load_without_a_listed_shard_names_the_unlisted_one(recording, tmp_path):
    directory = pathlib.Path(shutil.copytree(recording[0], tmp_path / env_lib.NAME))
    builder = tfds.builder_from_directory(str(directory))
    split = builder.info.splits[env_lib.SPLIT]
    for path in split.filepaths[1:]:
        pathlib.Path(os.fspath(path)).unlink()
    builder.info.set_splits(tfds.core.SplitDict([split.replace(shard_lengths=[], num_bytes=0)]))
    builder.info.write_to_directory(str(directory))
    with pytest.raises(SourceError, match=r'lists 0 shard\(s\).*tfrecord-00000 also exists') as e:
        load(directory)
    assert 'nothing else is there to read' in str(e.value)
    assert 'maybe_recover_last_shard' in str(e.value)


def test_recovery_lists_the_unlisted_shard_and_load_reads_it_all(unlisted):
    directory, _, expected = unlisted
    recover(directory)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # Nothing unlisted any more.
        episodes = load(directory, check_files='full')
    assert_same_episodes(users_data.read_numpy(episodes), expected)


# --- A real recording, killed mid-episode --------------------------------------------------------


@pytest.fixture(scope='module')
def killed(tmp_path_factory, subprocess_env) -> dict:
    """Records `env_lib.LONG_PLAN` in a subprocess, copies its files at step ANNOUNCE_AT of
    episode COPIED_IN, and SIGKILLs it at that step of episode KILLED_IN.

    Returns:
      'directory' (killed in KILLED_IN), 'early' (the copy), and 'expected': the first
      KILLED_IN episodes as an uninterrupted recording of the same plan and seed stores them.
    """
    root = tmp_path_factory.mktemp('killed')
    directory, early = root / 'killed', root / 'early'
    command = [sys.executable, '-m', 'tests.envlogger_env', str(directory)]
    errors = (root / 'stderr.txt').open('w+')
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
        env=subprocess_env,
    )
    try:
        for line in process.stdout:
            episode = int(line.split()[1])
            if episode == COPIED_IN:
                shutil.copytree(directory, early)
            if episode == KILLED_IN:
                process.send_signal(signal.SIGKILL)
                break
            process.stdin.write('go\n')
            process.stdin.flush()
    finally:
        process.kill()
        process.wait(timeout=60)
    errors.seek(0)
    assert process.returncode == -signal.SIGKILL, errors.read()[-3000:]
    errors.close()
    expected = env_lib.record(
        root / 'reference', env_lib.LONG_PLAN[:KILLED_IN], max_episodes_per_file=KILLED_IN
    )
    return {'directory': directory, 'early': early, 'expected': as_stored(expected)}


_PER_FILE = env_lib.KILLED_EPISODES_PER_FILE


@pytest.mark.slow  # A subprocess that records ~1,500 steps: about 15 s on a loaded host.
def test_killed_recording_loads_its_finished_shards_and_names_what_is_lost(killed):
    """Killed in episode 6 with 4 episodes a shard: shard 0 (episodes 0-3) is listed; the open
    shard 1 holds episode 4 and the start of episode 5 (the writer's buffer held the rest);
    episode 6 was still in envlogger's memory."""
    directory = killed['directory']
    shards = sorted(p.name for p in directory.glob('*.tfrecord-*'))
    assert shards == [f'{env_lib.NAME}-train.tfrecord-{i:05d}' for i in range(2)]
    with pytest.warns(UserWarning) as caught:
        episodes = load(directory)
    message = str(caught[0].message)
    assert f'{env_lib.NAME}-train.tfrecord-00001 also exists, unlisted' in message
    assert '1 complete episode(s) and an incomplete last record' in message
    assert f'only the {_PER_FILE} episode(s) of the listed shards are' in message
    assert_same_episodes(users_data.read_numpy(episodes), killed['expected'][:_PER_FILE])
    assert rlds_reverb.validate(episodes, on_invalid='report').ok


@pytest.mark.slow  # The killed recording (see above).
def test_envlogger_recovery_alone_fails_on_the_cut_record(killed, tmp_path):
    """`maybe_recover_last_shard` reads the whole unlisted shard, so its cut last record
    stops it; docs/envlogger.md's recovery keeps the whole records first."""
    directory = pathlib.Path(shutil.copytree(killed['directory'], tmp_path / 'copy'))
    with pytest.raises(tf.errors.DataLossError, match='truncated record'):
        rlds_utils.maybe_recover_last_shard(tfds.builder_from_directory(str(directory)))


@pytest.mark.slow  # The killed recording (see above).
def test_recovered_killed_recording_loads_every_finished_episode(killed, tmp_path):
    directory = pathlib.Path(shutil.copytree(killed['directory'], tmp_path / 'copy'))
    recover(directory)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        episodes = load(directory, check_files='full')
    # Episodes 0-4: episode 5's record was cut, episode 6 never reached the writer.
    assert_same_episodes(users_data.read_numpy(episodes), killed['expected'][: _PER_FILE + 1])
    assert rlds_reverb.validate(load(directory), on_invalid='report').ok


@pytest.mark.slow  # The killed recording (see above).
def test_killed_before_a_shard_finished_is_a_clear_error_until_recovered(killed, tmp_path):
    directory = pathlib.Path(shutil.copytree(killed['early'], tmp_path / 'copy'))
    with pytest.raises(SourceError, match=r'lists 0 shard\(s\).*tfrecord-00000 also exists'):
        load(directory)
    recover(directory)
    # Episode 0 (episode 1, handed to the writer at episode 2's start, was still buffered).
    got = users_data.read_numpy(load(directory))
    assert_same_episodes(got, killed['expected'][: len(got)])
    assert len(got) >= 1


@pytest.mark.slow  # The killed recording (see above).
def test_reopening_envlogger_on_a_killed_recording_overwrites_it(killed, tmp_path):
    """envlogger 1.2 has no append: a new TFDSBackendWriter on the same directory starts the
    split again from shard 0. Record into a new directory, and recover the old one."""
    directory = pathlib.Path(shutil.copytree(killed['directory'], tmp_path / 'copy'))
    expected = as_stored(env_lib.record(directory, env_lib.PLAN[:2], max_episodes_per_file=5))
    # The killed recording's shard 1 is left behind, unlisted, and named.
    with pytest.warns(UserWarning, match='tfrecord-00001 also exists, unlisted'):
        episodes = load(directory)
    assert_same_episodes(users_data.read_numpy(episodes), expected)
