"""The TFDS catalogue's RLDS layouts end to end: load, info, validate, convert, push, sample.

The datasets are written to disk in the exact feature structures of D4RL MuJoCo, RL
Unplugged control suite and two Open X-Embodiment builders (`tests/catalog.py`), with small
content that follows each builder's conventions at episode ends.
"""

from __future__ import annotations

import numpy as np
import pytest
import reverb
import tensorflow as tf

import adders
import rlds_reverb
from rlds_reverb import items
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import SourceError, SpecMismatchError
from rlds_reverb.serve import tables
from rlds_reverb.transform import plans
from tests import catalog

pytestmark = pytest.mark.slow
_LAYOUTS = sorted(catalog.LAYOUTS)
_ITEMS = {
    'two_step': items.TwoStep(),
    'n_step': items.NStep(3, 0.9),
    'sequence': items.Sequence(2),
}


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp('catalog')
    for name in _LAYOUTS:
        catalog.write_layout(name, root)
    return root


def _lengths(episodes: tf.data.Dataset) -> list[int]:
    tensors = episodes_lib.to_episode_tensors(episodes)
    return [int(episodes_lib.episode_length(steps)) for steps in tensors]


@pytest.mark.parametrize('name', _LAYOUTS)
def test_layout_loads_by_name_and_validates(data_dir, name, run_cli):
    episodes = rlds_reverb.load(name, data_dir=data_dir)
    assert episodes_lib.has_whole_episodes(episodes)
    assert _lengths(episodes) == catalog.step_counts(name)
    report = rlds_reverb.validate(episodes, on_invalid='report')
    assert report.ok, report
    assert (report.valid, report.terminated, report.truncated) == (3, 2, 1)
    code, out, err = run_cli('info', name, '--data-dir', data_dir)
    assert code == 0, err
    assert 'episodes: 3' in out


@pytest.mark.parametrize('name', _LAYOUTS)
def test_layout_converts_to_one_trajectory_per_step(data_dir, name):
    episodes = rlds_reverb.load(name, data_dir=data_dir)
    count = sum(1 for _ in rlds_reverb.convert_rlds_to_trajectories(episodes))
    assert count == sum(catalog.step_counts(name))


@pytest.mark.parametrize('kind', sorted(_ITEMS))
@pytest.mark.parametrize('name', _LAYOUTS)
def test_layout_pushes_and_samples_with_exact_counts(data_dir, name, kind):
    episodes = rlds_reverb.load(name, data_dir=data_dir)
    item = _ITEMS[kind]
    signature = item.compute_item_spec(episodes, policy_info_fn=None)
    table = tables.make_table('uniform', 'catalog', signature=signature, max_size=1000)
    server = reverb.Server([table])
    try:
        address = f'localhost:{server.port}'
        stats = rlds_reverb.push(episodes, address, 'catalog', item=item)
        size = reverb.Client(address).server_info()['catalog'].current_size
        assert stats.items == {'catalog': size}
        if kind == 'two_step':  # One item per transition: T - 1 per episode.
            assert size == sum(t - 1 for t in catalog.step_counts(name))
        assert size == plans.count_items(episodes, item)
        dataset = reverb.TrajectoryDataset.from_table_signature(
            address, 'catalog', max_in_flight_samples_per_worker=2
        )
        sample = next(iter(dataset.take(1)))
        got = tf.nest.map_structure(lambda x: x.dtype, sample.data)
        assert got == tf.nest.map_structure(lambda s: s.dtype, signature)
    finally:
        server.stop()


def test_open_x_embodiment_images_stay_uint8_and_instructions_travel(data_dir):
    name = 'austin_buds_dataset_converted_externally_to_rlds'
    episodes = rlds_reverb.load(
        name,
        data_dir=data_dir,
        step_fields=['observation/image', 'language_instruction'],
    )
    spec = episodes_lib.to_episode_tensors(episodes).element_spec
    assert sorted(spec[types.OBSERVATION]) == ['image']
    assert spec[types.OBSERVATION]['image'].dtype == tf.uint8
    assert spec['language_instruction'].dtype == tf.string
    assert 'language_embedding' not in spec
    signature = items.TwoStep().compute_item_spec(episodes, policy_info_fn=None)
    table = tables.make_table('uniform', 'oxe', signature=signature, max_size=100)
    server = reverb.Server([table])
    try:
        address = f'localhost:{server.port}'
        rlds_reverb.push(episodes, address, 'oxe', item=items.TwoStep())
        dataset = reverb.TrajectoryDataset.from_table_signature(
            address, 'oxe', max_in_flight_samples_per_worker=2
        )
        sample = next(iter(dataset.take(1))).data
        leaves = tf.nest.flatten(sample)
        assert any(x.dtype == tf.uint8 and x.shape[-3:] == (128, 128, 3) for x in leaves)
        texts = [x for x in leaves if x.dtype == tf.string]
        assert texts and all(t.numpy().tolist()[0].startswith(b'text ') for t in texts)
    finally:
        server.stop()


def test_step_fields_naming_a_missing_field_is_refused(data_dir):
    name = 'austin_buds_dataset_converted_externally_to_rlds'
    with pytest.raises(SpecMismatchError, match=r"step_fields names 'observation/depth'.*image"):
        rlds_reverb.load(name, data_dir=data_dir, step_fields=['observation/depth'])


def test_d4rl_terminal_extra_step_ends_returns(data_dir):
    episodes = rlds_reverb.load('d4rl_mujoco_halfcheetah', data_dir=data_dir)
    out = list(episodes_lib.to_episode_tensors(episodes.apply(adders.n_step(3, 0.9))))
    # Episode 1: 4 real steps, then D4RL's extra terminal step (discount 0 before it).
    steps = out[1]
    np.testing.assert_array_equal(steps[types.IS_TERMINAL], [0, 0, 0, 0, 1])
    assert float(steps[types.N_STEP_DISCOUNT][3]) == 0.0
    # Episode 2 ends on a time limit: no extra step, the last transition bootstraps.
    np.testing.assert_array_equal(out[2][types.IS_TERMINAL], [0, 0, 0])


def test_unknown_name_error_suggests_the_directory(tmp_path):
    with pytest.raises(SourceError, match='pass the dataset directory'):
        rlds_reverb.load('fractal20220817_data', data_dir=tmp_path)
