"""One read path: what `load` returns carries its source, and selections stay on it.

`take`, `skip`, `shard` and split slices of a loaded dataset read the same episodes as the
same operations on TFDS' nested steps (`load(..., whole_episodes=False)`), on a dataset
TFDS wrote with its defaults (3 shuffled shards, read interleaved); they keep the fast path
(asserted on the source value, not on timings); a user's own `map` falls back to the nested
steps and is still right; a resumed push reads its remaining episodes the same way.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
import tree

import adders
import rlds_reverb
from rlds_reverb.check import stats
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources, types
from rlds_reverb.core.sources import Shard, Skip, Take
from rlds_reverb.read import records
from rlds_reverb.read.loading import load
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from rlds_reverb.write import resume
from tests import builders, reverb_tables, users_data
from tests import item_references as refs

# name: (selection, the selections the source then holds); 300 episodes in 3 shards.
_SELECTIONS = {
    'take': (lambda d: d.take(37), (Take(37),)),
    'skip': (lambda d: d.skip(230), (Skip(230),)),
    'skip_take': (lambda d: d.skip(20).take(100), (Skip(20), Take(100))),
    'shard': (lambda d: d.shard(3, 1), (Shard(3, 1),)),
    'chain': (lambda d: d.take(200).shard(4, 3).skip(5), (Take(200), Shard(4, 3), Skip(5))),
    'tensor_count': (lambda d: d.skip(tf.constant(280, tf.int64)), (Skip(280),)),
    'past_the_end': (lambda d: d.skip(400), (Skip(400),)),
}


def _assert_same_episodes(actual: list[dict], expected: list[dict]) -> None:
    assert len(actual) == len(expected)
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        flat_got, flat_want = dict(tree.flatten_with_path(got)), dict(tree.flatten_with_path(want))
        assert sorted(flat_got) == sorted(flat_want), index
        for path, value in flat_want.items():
            assert flat_got[path].dtype == value.dtype, (index, path)
            np.testing.assert_array_equal(flat_got[path], value, err_msg=f'{index} {path}')


def _bulk_ids(source: records.RecordSource) -> list[int]:
    """The episode ids of the records a bulk reader reads from `source`, sorted."""
    ids = []
    for batch in records.read_serialized_batches(source, batch_records=64):
        for record in batch:
            feature = tf.train.Example.FromString(record).features.feature
            ids.append(
                feature[f'{users_data.METADATA}/{users_data.EPISODE_ID}'].int64_list.value[0]
            )
    return sorted(ids)


@pytest.mark.parametrize('name', list(_SELECTIONS))
def test_a_selection_reads_the_episodes_of_the_nested_path(users_plain_dir, name):
    select, held = _SELECTIONS[name]
    fast = select(load(users_plain_dir))
    nested = users_data.read_numpy(select(load(users_plain_dir, whole_episodes=False)))
    # The fast path is kept: the result reads the selected source, not the nested steps.
    source = records.find_record_source(fast)
    assert source is not None and source.selections == held
    assert episodes_lib.has_whole_episodes(fast)
    _assert_same_episodes(users_data.read_numpy(fast), nested)
    whole = list(episodes_lib.to_episode_tensors(fast).as_numpy_iterator())
    _assert_same_episodes(whole, [e[types.STEPS] for e in nested])
    # Bulk readers (validate's record checks) read exactly the selected records.
    assert _bulk_ids(source) == sorted(users_data.episode_ids(nested))


def test_toolkit_functions_on_a_selection_equal_the_nested_path(users_plain_dir):
    fast = load(users_plain_dir).skip(200).shard(2, 1)
    nested = load(users_plain_dir, whole_episodes=False).skip(200).shard(2, 1)
    assert records.find_record_source(fast) is not None
    assert rlds_reverb.validate(fast) == rlds_reverb.validate(nested)
    assert stats.describe_dataset(fast).lengths.tolist() == (
        stats.describe_dataset(nested).lengths.tolist()
    )
    converted = [
        list(rlds_reverb.convert_rlds_to_trajectories(e, batch_size=256).as_numpy_iterator())
        for e in (fast, nested)
    ]
    tree.map_structure(np.testing.assert_array_equal, *converted)


@pytest.mark.parametrize('split', ['train[10:150]', 'train[250:]'])
def test_a_split_slice_and_its_selections_keep_the_fast_path(users_plain_dir, split):
    sliced = load(users_plain_dir, split=split)
    source = records.find_record_source(sliced)
    assert source is not None and source.selections == ()
    info = tfds.builder_from_directory(str(users_plain_dir)).info
    assert sum(take for _, _, take in source.file_instructions) == (info.splits[split].num_examples)
    theirs = tfds.builder_from_directory(str(users_plain_dir)).as_dataset(split=split)
    _assert_same_episodes(
        users_data.read_numpy(sliced.shard(2, 1).take(30)),
        users_data.read_numpy(theirs.shard(2, 1).take(30)),
    )


def _double_rewards(episode: dict) -> dict:
    steps = episode[types.STEPS].map(lambda s: {**s, types.REWARD: 2 * s[types.REWARD]})
    return {**episode, types.STEPS: steps}


def test_a_users_map_falls_back_to_the_nested_steps_correctly(users_plain_dir):
    mapped = load(users_plain_dir).map(_double_rewards)
    assert not episodes_lib.has_whole_episodes(mapped)
    assert episodes_lib.find_source(mapped) is None
    part = mapped.skip(3).take(12)  # tf.data's own take and skip, on the nested steps.
    assert episodes_lib.find_source(part) is None
    nested = users_data.read_numpy(load(users_plain_dir, whole_episodes=False).skip(3).take(12))
    got = users_data.read_numpy(part)
    assert users_data.episode_ids(got) == users_data.episode_ids(nested)
    for g, n in zip(got, nested, strict=True):
        np.testing.assert_array_equal(
            g[types.STEPS][types.REWARD], 2 * n[types.STEPS][types.REWARD]
        )
    assert rlds_reverb.validate(part) == rlds_reverb.validate(
        load(users_plain_dir, whole_episodes=False).skip(3).take(12)
    )
    trajectories = rlds_reverb.convert_rlds_to_trajectories(part, batch_size=10_000)
    rewards = np.concatenate([t.reward for t in trajectories.as_numpy_iterator()])
    assert rewards.size == sum(len(n[types.STEPS][types.REWARD]) for n in nested)


def test_selections_of_other_sources_stay_whole(users_plain_dir):
    # TFDS' as_dataset (a read_config): the selection comes before the decoding.
    read = load(users_plain_dir, read_config=tfds.ReadConfig(interleave_block_length=16))
    part = read.skip(40).take(25)
    assert isinstance(episodes_lib.find_source(part), sources.DatasetSource)
    nested = load(users_plain_dir, whole_episodes=False).skip(40).take(25)
    _assert_same_episodes(users_data.read_numpy(part), users_data.read_numpy(nested))
    # An adder's output: its whole-episode tensors, selected.
    n_step = load(users_plain_dir).take(60).apply(adders.n_step(3, 0.9)).shard(5, 2)
    assert isinstance(episodes_lib.find_source(n_step), sources.DatasetSource)
    expected = load(users_plain_dir, whole_episodes=False).take(60).apply(adders.n_step(3, 0.9))
    _assert_same_episodes(
        users_data.read_numpy(n_step), users_data.read_numpy(expected.shard(5, 2))
    )


def test_a_dataset_source_decodes_only_the_selected_episodes():
    def _decode(x):  # Fails on episodes 5 and later: selected away, never decoded.
        check = tf.debugging.assert_less(x, tf.constant(5, tf.int64))
        with tf.control_dependencies([check]):
            return {types.STEPS: {types.REWARD: tf.fill([2], tf.cast(x, tf.float32))}}

    source = sources.DatasetSource(tf.data.Dataset.range(10), _decode)
    kept = source.select(Take(5)).select(Shard(2, 1)).read()
    assert [e[types.STEPS][types.REWARD][0] for e in kept.as_numpy_iterator()] == [1.0, 3.0]
    with pytest.raises(tf.errors.InvalidArgumentError):
        list(source.select(Skip(3)).read())


@dataclasses.dataclass(frozen=True)
class _ArraySource(sources.EpisodeSource):
    """A reader of episodes held in memory (as an HDF5 reader would hold file offsets):
    a selection narrows its list of episode indices, so nothing unselected is read."""

    episodes: tuple
    indices: tuple

    def read(self) -> tf.data.Dataset:
        chosen = [{types.STEPS: self.episodes[i]} for i in self.indices]
        return tf.data.Dataset.from_generator(
            lambda: iter(chosen),
            output_signature=tf.nest.map_structure(
                lambda x: tf.TensorSpec([None, *x.shape[1:]], tf.as_dtype(x.dtype)), chosen[0]
            ),
        )

    def select(self, selection: sources.Selection) -> _ArraySource:
        picked = selection.apply(tf.data.Dataset.from_tensor_slices(list(self.indices)))
        return dataclasses.replace(self, indices=tuple(int(i) for i in picked))


def test_another_source_kind_plugs_in():
    episodes = tuple(builders.episode(n) for n in (3, 5, 2, 4, 6))
    loaded = episodes_lib.from_source(_ArraySource(episodes, tuple(range(5))))
    part = loaded.skip(1).shard(2, 0)  # Episodes 1 and 3.
    assert episodes_lib.find_source(part).indices == (1, 3)
    assert rlds_reverb.validate(part).steps == 5 + 4
    trajectories = rlds_reverb.convert_rlds_to_trajectories(part, batch_size=100)
    assert [t.reward.shape[0] for t in trajectories.as_numpy_iterator()] == [9]


def test_what_load_returns_is_a_real_dataset_and_selections_raise_as_tf_data(cartpole_dir):
    episodes = load(cartpole_dir)
    assert isinstance(episodes, tf.data.Dataset)
    assert episodes.take(2).element_spec == episodes.element_spec
    options = tf.data.Options()
    options.deterministic = True
    assert len(list(episodes.with_options(options).take(2))) == 2

    @tf.function
    def _count(dataset):  # Inside a function it is a plain dataset: read as RLDS.
        return dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1)

    assert int(_count(episodes.skip(10))) == int(_count(episodes)) - 10
    with pytest.raises(tf.errors.InvalidArgumentError, match='Index must be between'):
        episodes.shard(2, 5)
    with pytest.raises(TypeError):
        episodes.take('3')


def test_a_resumed_push_writes_the_remaining_episodes_of_the_nested_path(users_plain_dir, tmp_path):
    episodes, kind, name = load(users_plain_dir), items.TwoStep(), 'resumed'
    table = reverb_tables.make_fifo_table(
        name, tables.signature_for(kind, episodes), max_size=100_000
    )
    checkpointer = reverb.checkpointers.DefaultCheckpointer(str(tmp_path))
    server = reverb.Server([table], port=None, checkpointer=checkpointer)
    try:
        client = reverb.Client(f'localhost:{server.port}')
        # Episodes 270..299 in chunks of 12: skip(270).take(12), skip(282).take(12), ...
        stats = resume.push_resumable(
            episodes, client, name, item=kind, start_episode=270, checkpoint_every=12
        )
        remaining = users_data.read_numpy(load(users_plain_dir, whole_episodes=False).skip(270))
        expected = refs.reference_items(kind, remaining)
        assert stats.episodes == len(remaining) == 30
        actual = [sample.data for sample in reverb_tables.read_items(client, name)]
        refs.assert_same_items(actual, expected, where=name)
    finally:
        server.stop()


def test_rlds_view_spec_matches_its_trace_and_is_traced_only_when_read_by_step(cartpole_dir):
    episodes = load(cartpole_dir)
    assert episodes._rlds is None  # noqa: SLF001  (the toolkit reads the whole episodes)
    next(iter(rlds_reverb.convert_rlds_to_trajectories(episodes).batch(8)))
    assert episodes._rlds is None  # noqa: SLF001
    steps = next(iter(episodes))[types.STEPS]  # Read by step: the view is built now.
    assert episodes.element_spec == episodes._rlds.element_spec  # noqa: SLF001
    assert episodes.element_spec[types.STEPS].element_spec == steps.element_spec


def test_the_record_parser_gives_what_tfds_parser_gives(users_dir):
    """`load`'s parser skips TFDS' reshapes that change nothing: the same values, dtypes and
    static shapes as TFDS' `ExampleParser` on records with images, strings and metadata."""
    builder = tfds.builder_from_directory(str(users_dir))
    example_specs = builder.info.features.get_serialized_info()
    ours = records._make_record_parser(example_specs)  # noqa: SLF001
    theirs = tfds.core.example_parser.ExampleParser(example_specs).parse_example
    source = records.find_record_source(load(users_dir))
    serialized = next(records.read_serialized_batches(source, batch_records=8))
    for record in serialized:
        got, want = ours(tf.constant(record)), theirs(tf.constant(record))
        assert tree.map_structure(lambda x: (x.dtype, x.shape), got) == tree.map_structure(
            lambda x: (x.dtype, x.shape), want
        )
        tree.map_structure(np.testing.assert_array_equal, got, want)
    traced = tf.function(ours).get_concrete_function(tf.TensorSpec([], tf.string))
    assert tree.map_structure(lambda x: x.shape.as_list(), traced.structured_outputs) == (
        tree.map_structure(
            lambda x: x.shape.as_list(),
            tf.function(theirs)
            .get_concrete_function(tf.TensorSpec([], tf.string))
            .structured_outputs,
        )
    )


def test_ragged_features_are_parsed_by_tfds():
    specs = {'nested': tfds.features.Sequence(tfds.features.Sequence(np.int64))}
    example_specs = tfds.features.FeaturesDict(specs).get_serialized_info()
    parse = records._make_record_parser(example_specs)  # noqa: SLF001
    assert getattr(parse, '__func__', None) is tfds.core.example_parser.ExampleParser.parse_example
