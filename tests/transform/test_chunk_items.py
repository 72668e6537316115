"""`items.Chunk` through real Reverb servers: sampled items equal what `adders.chunks` gives.

Each test starts its own in-process server with a table whose signature is
`tables.signature_for(item, episodes)` (the signatures differ by case, so the session
server of `tests/conftest.py` cannot hold them). Items come back through
`reverb.TrajectoryDataset` (a FIFO table: insertion order) and through `LearnerDataset`.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import reverb
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import adders
import rlds_reverb
from rlds_reverb.core import types
from rlds_reverb.learn import sampling
from rlds_reverb.serve import tables
from rlds_reverb.transform import items, plans
from tests import builders, expected
from tests.adders.test_chunks import _SETTINGS, assert_same, streams
from tests.cases import chunk_cases
from tests.reverb_tables import make_fifo_table


@contextlib.contextmanager
def serving(
    item: items.Chunk, dataset: tf.data.Dataset, *, fifo: bool = True, add_ids: bool = False
):
    """Yields the address of a new server with table 'chunks' for `item`s of `dataset`."""
    signature = tables.signature_for(item, dataset, add_ids=add_ids)
    table = (
        make_fifo_table('chunks', signature)
        if fifo
        else tables.uniform('chunks', max_size=1000, signature=signature)
    )
    server = reverb.Server([table], port=None)
    try:
        yield f'localhost:{server.port}'
    finally:
        server.stop()


def read_all(address: str, count: int) -> list[dict]:
    """Every item of the FIFO table, in insertion order, as NumPy nests."""
    # One worker keeps the order; the timeout ends the wait of the worker's next sample.
    samples = reverb.TrajectoryDataset.from_table_signature(
        address, 'chunks', 1, num_workers_per_iterator=1, rate_limiter_timeout_ms=50
    ).take(count)
    return [tf.nest.map_structure(lambda x: x.numpy(), s.data) for s in samples]


def item_steps(item: items.Chunk, episodes: list[dict]) -> list[dict]:
    """The steps `item`s are expected at: the adder's output at each step starting one."""
    out = builders.run_transform(adders.chunks(**_options(item)), episodes, 'tensors')
    rows = []
    for steps in out:
        size = len(steps[types.IS_FIRST])
        count = size if item.final_action is types.FinalAction.RECORDED else size - 1
        rows += [tf.nest.map_structure(lambda x, t=t: x[t], steps) for t in range(count)]
    return rows


def _options(item: items.Chunk) -> dict:
    names = ('history', 'horizon', 'history_fields', 'chunk_fields', 'final_action', 'fill')
    return {name: getattr(item, name) for name in names}


@pytest.mark.parametrize('case', chunk_cases.CASES, ids=lambda c: c['testcase_name'])
def test_chunk_items_equal_cases(case):
    item = items.Chunk(**case['params'])
    episodes = builders.case_episodes(case['episodes'])
    dataset = builders.rlds(episodes)
    with serving(item, dataset) as address:
        stats = rlds_reverb.push(dataset, address, 'chunks', item=item)
        samples = read_all(address, stats.items['chunks'])
    recorded = item.final_action is types.FinalAction.RECORDED
    want = []
    for steps, case_steps in zip(episodes, case['expected'], strict=True):
        count = len(steps[types.IS_FIRST]) - (0 if recorded else 1)
        want += [{k: np.asarray(v)[t] for k, v in case_steps.items()} for t in range(count)]
    assert len(samples) == len(want) == plans.count_items(dataset, item)
    for index, (sample, want_item) in enumerate(zip(samples, want, strict=True)):
        got = item.fill_padding(sample)
        got = {k: np.asarray(got[k]) for k in want_item}
        expected.assert_nest_close(got, want_item, where=f'{case["testcase_name"]} item {index}')


@settings(_SETTINGS, max_examples=10)
@given(
    episodes=streams(),
    history=st.integers(1, 7),
    horizon=st.integers(1, 7),
    final_action=st.sampled_from(['ignored', 'recorded']),
    fill=st.sampled_from(['edge', 'zero']),
)
def test_chunk_items_equal_the_adder(episodes, history, horizon, final_action, fill):
    item = items.Chunk(history, horizon, final_action=final_action, fill=fill)
    dataset = builders.rlds(episodes)
    with serving(item, dataset) as address:
        stats = rlds_reverb.push(dataset, address, 'chunks', item=item)
        samples = read_all(address, stats.items['chunks'])
    want = item_steps(item, episodes)
    zeroed = item_steps(items.Chunk(**{**_options(item), 'fill': 'zero'}), episodes)
    assert len(samples) == len(want)
    for index, (sample, want_item, raw) in enumerate(zip(samples, want, zeroed, strict=True)):
        # Stored: the zero fill; refilled: the item's own fill.
        assert_same(sample, raw, where=f'raw item {index}')
        filled = tf.nest.map_structure(np.asarray, item.fill_padding(sample))
        assert_same(filled, want_item, where=f'item {index}')


def test_chunk_items_reach_a_learner_with_ids_and_priorities():
    episodes = [builders.episode(n, ending=e) for n, e in ((5, 'terminated'), (3, 'truncated'))]
    item = items.Chunk(3, 4, final_action='recorded')
    dataset = builders.rlds(episodes)

    def priority(batch):  # The batch of one episode's items: real actions per chunk.
        return tf.reduce_sum(tf.cast(~batch[types.CHUNK_IS_PAD], tf.float32), -1)

    with serving(item, dataset, fifo=False, add_ids=True) as address:
        signature = tables.signature_for(item, dataset, add_ids=True)
        stats = rlds_reverb.push(
            dataset, address, 'chunks', item=item, add_ids=True, priority=priority
        )
        assert stats.items == {'chunks': 8}
        learner = sampling.LearnerDataset(
            address,
            'chunks',
            data_spec=signature,
            batch_size=16,
            sequence_length=None,
            experience_fn=item.fill_padding,
        )
        batch = next(iter(learner.as_dataset()))
    want = item_steps(item, episodes)
    experience = tf.nest.map_structure(lambda x: x.numpy(), batch.experience)
    for i in range(16):
        sample = tf.nest.map_structure(lambda x, i=i: x[i], experience)
        episode, t = int(sample.pop(types.EPISODE_ID)), int(sample.pop(types.STEP_INDEX))
        want_item = want[t + (0 if episode == 0 else 5)]
        assert_same(sample, want_item, where=f'episode {episode} step {t}')
        real = int((~sample[types.CHUNK_IS_PAD]).sum())
        assert batch.info.priority[i].numpy() == pytest.approx(real)


def test_chunk_items_carry_encoded_frames_as_bytes():
    frames = np.array([b'png-%d' % t for t in range(5)])
    episodes = [builders.episode(observation={'frame': frames}, ending='truncated')]
    item = items.Chunk(3, 2, fill='zero')
    dataset = builders.rlds(episodes)
    with serving(item, dataset) as address:
        stats = rlds_reverb.push(dataset, address, 'chunks', item=item)
        samples = read_all(address, stats.items['chunks'])
    got = [sample[types.OBSERVATION]['frame'].tolist() for sample in samples]
    assert got == [
        [b'', b'', b'png-0'],
        [b'', b'png-0', b'png-1'],
        [b'png-0', b'png-1', b'png-2'],
        [b'png-1', b'png-2', b'png-3'],
    ]


def test_chunk_item_spec_is_the_adders_step_spec():
    dataset = builders.rlds([builders.episode(3)])
    item = items.Chunk(2, 5, history_fields=('observation', 'reward'))
    out = dataset.apply(adders.chunks(**_options(item)))
    step_spec = out.element_spec[types.STEPS].element_spec
    assert tables.signature_for(item, dataset) == step_spec


def test_chunk_items_need_a_trajectory_engine():
    dataset = builders.rlds([builders.episode(3)])
    item = items.Chunk(2, 2)
    structured = pytest.raises(ValueError, match=r"engine='structured' cannot write Chunk")
    with serving(item, dataset) as address, structured:
        rlds_reverb.push(dataset, address, 'chunks', item=item, engine='structured')


@pytest.mark.parametrize(
    'make,match',
    [
        (lambda: items.Chunk(0, 2), r'history=0 is not valid'),
        (lambda: items.Chunk(2, 2, fill='mean'), r"fill='mean' is not valid"),
        (
            lambda: items.Chunk(2, 2, history_fields='action'),
            r"Fields \['action'\] are in both",
        ),
    ],
)
def test_bad_chunk_items_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()
