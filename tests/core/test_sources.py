"""One selection for every index-based reader: split slices, `take`, `skip`, `shard`.

`IndexSelection.positions()` (NumPy) and `.apply(dataset)` (tf.data's own operations) keep
the same episodes for every chain, counts known in Python or held in tensors; a split
slice follows TFDS' syntax and rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources
from rlds_reverb.core.sources import IndexSelection, Shard, Skip, Take

_CHAINS = {
    'none': (),
    'take': (Take(4),),
    'take_all': (Take(-1),),
    'take_more': (Take(50),),
    'skip': (Skip(3),),
    'skip_all': (Skip(-1),),
    'skip_more': (Skip(50),),
    'shard': (Shard(3, 2),),
    'chain': (Skip(1), Take(8), Shard(2, 1), Skip(1)),
    'shard_of_shard': (Shard(2, 0), Shard(3, 1)),
    'tensor': (Skip(1), Take(tf.Variable(5, dtype=tf.int64)), Shard(2, 0)),
}


@pytest.mark.parametrize('name', list(_CHAINS))
@pytest.mark.parametrize('count', [0, 1, 11])
def test_positions_are_what_tf_data_keeps(name, count):
    index = IndexSelection(count, _CHAINS[name])
    expected = list(index.apply(tf.data.Dataset.range(count)).as_numpy_iterator())
    assert index.positions().tolist() == expected
    assert list(index.as_dataset().as_numpy_iterator()) == expected
    assert index.is_static == (name != 'tensor')


def test_a_tensor_count_is_applied_by_tf_data_in_graph():
    index = IndexSelection(10)

    @tf.function
    def count_kept(skip: tf.Tensor) -> tf.Tensor:
        kept = index.select(Skip(skip)).as_dataset()
        return kept.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)

    assert int(count_kept(tf.constant(7, tf.int64))) == 3


def test_invalid_shards_raise_tf_datas_error():
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
        IndexSelection(5, (Shard(0, 0),)).positions()


@pytest.mark.parametrize(
    ('split', 'count', 'expected'),
    [('train', 7, range(7)), ('train[2:5]', 7, range(2, 5)), ('train[-2:]', 7, range(5, 7)),
     ('train[:50%]', 7, range(4)), ('train[3:3]', 7, []), ('train[10%:]', 0, []),
     ('train[25%:75%]', 10, range(2, 8))],
)  # fmt: skip
def test_a_split_slice_is_a_selection_with_tfds_rounding(split, count, expected):
    index = IndexSelection.from_split(split, count)
    assert index.positions().tolist() == list(expected)
    # TFDS' own reading of the slice over one shard of `count` records agrees.
    info = tfds.core.SplitInfo(name='train', shard_lengths=[count], num_bytes=0)
    (absolute,) = tfds.core.ReadInstruction.from_spec(split).to_absolute({'train': info})
    first = absolute.from_ or 0
    last = count if absolute.to is None else absolute.to
    assert list(expected) == list(range(first, max(first, last)))


@pytest.mark.parametrize(
    ('split', 'message'),
    [('test', 'test'), ('train[:20]', ''), ('train[:2]+train[4:]', 'joins 2 slices'),
     ('train[', '')],
)  # fmt: skip
def test_another_split_or_several_slices_are_refused(split, message):
    with pytest.raises(ValueError, match=message):
        IndexSelection.from_split(split, 7)


def test_a_mapped_source_selects_from_its_inner_source():
    whole = tf.data.Dataset.range(6).map(lambda i: {'steps': {'x': tf.fill([2], i)}})
    inner = sources.DatasetSource(whole)
    mapped = sources.MappedSource(inner, lambda e: {'steps': {'x': e['steps']['x'] * 10}})
    selected = episodes_lib.from_source(mapped).skip(2).shard(2, 1)
    source = episodes_lib.find_source(selected)
    assert isinstance(source, sources.MappedSource)
    got = [e['steps']['x'].tolist() for e in selected.whole_episodes.as_numpy_iterator()]
    assert got == [[30, 30], [50, 50]]
    assert np.array_equal(
        [s['x'] for e in selected for s in e['steps'].as_numpy_iterator()], [30, 30, 50, 50]
    )


def _read_x(dataset: tf.data.Dataset) -> list[list[int]]:
    return [e['steps']['x'].tolist() for e in dataset.as_numpy_iterator()]


def test_read_mapped_gives_reads_episodes_changed_by_fn():
    whole = tf.data.Dataset.range(4).map(lambda i: {'steps': {'x': tf.fill([2], i)}})

    def _add_one(e):
        return {'steps': {'x': e['steps']['x'] + 1}}

    def _double(e):
        return {'steps': {'x': e['steps']['x'] * 2}}

    plain = sources.DatasetSource(whole)
    decoded = sources.DatasetSource(whole, decode=_double)
    mapped = sources.MappedSource(decoded, _add_one)
    for source in (plain, decoded, mapped):
        assert _read_x(source.read_mapped(_add_one)) == _read_x(source.read().map(_add_one))
    assert _read_x(mapped.read_mapped(_double)) == [[2, 2], [6, 6], [10, 10], [14, 14]]


def test_a_stage_mapped_source_maps_in_its_inner_sources_map_and_selects_from_it():
    whole = tf.data.Dataset.range(6).map(lambda i: {'steps': {'x': tf.fill([2], i)}})
    inner = sources.DatasetSource(whole, decode=lambda e: {'steps': {'x': e['steps']['x'] + 1}})
    staged = sources.StageMappedSource(inner, lambda e: {'steps': {'x': e['steps']['x'] * 10}})
    # Selections go to the inner source; the decode and fn run in one map (one stage).
    selected = episodes_lib.from_source(staged).skip(2).shard(2, 1)
    source = episodes_lib.find_source(selected)
    assert isinstance(source, sources.StageMappedSource)
    assert isinstance(source.inner, sources.DatasetSource)
    assert _read_x(selected.whole_episodes) == [[40, 40], [60, 60]]
    assert np.array_equal(
        [s['x'] for e in selected for s in e['steps'].as_numpy_iterator()], [40, 40, 60, 60]
    )
    again = sources.StageMappedSource(staged, lambda e: {'steps': {'x': e['steps']['x'] - 1}})
    assert _read_x(again.read()) == [[9, 9], [19, 19], [29, 29], [39, 39], [49, 49], [59, 59]]
    assert _read_x(again.read()) == _read_x(staged.read().map(again.fn))
