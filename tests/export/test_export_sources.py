"""Minari and D4RL sources -> push -> export: the exported RLDS dataset equals the source.

For the Minari datasets minari 0.5.4 wrote (`tests/fixtures/minari/`: HDF5 and Arrow, a
Dict observation with a JPEG-encoded uint8 image, a Tuple observation) and for D4RL-layout
HDF5 files (`tests/d4rl_files.py`, with and without `next_observations`), the episodes
`rlds_reverb.load` reads are pushed as whole episodes (`items.Episode`) with every
episode-level field carried (Minari's `episode_id` and `seed`; D4RL's `metadata/*`) into a
real in-process Reverb server with a checkpointer, exported with `rlds_reverb.export_table`
and read back with TFDS's own reader and with `load`: every field, dtype and value equal,
episode by episode. float64 fields (Minari's rewards and discounts, D4RL's `infos`) come
back as float64 at float32 precision, as TFDS's tf.train.Example stores floats; everything
else (uint8 image frames included) exactly.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import reverb
from reverb.platform import checkpointers_lib

import rlds_reverb
from rlds_reverb.core import types
from rlds_reverb.core.errors import ExportError
from rlds_reverb.export import reverb_export
from rlds_reverb.read.loading import load
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from tests import builders, users_data
from tests.d4rl_files import EPISODES, write_d4rl_file
from tests.rlds_copies import assert_same_episodes, read_both_ways

_MINARI = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'minari'
_EXPECTED = json.loads((_MINARI / 'expected.json').read_text())
_MINARI_NAMES = sorted(_EXPECTED)  # image-arrow, image-hdf5, tuple-arrow, tuple-hdf5
_D4RL_NAMES = ('d4rl', 'd4rl-next-observations')


def _source(name: str, tmp_path: pathlib.Path) -> pathlib.Path:
    """The source's path: a committed Minari dataset, or a D4RL file written here."""
    if name in _EXPECTED:
        return _MINARI / 'datasets' / _EXPECTED[name]['dataset_id']
    path = tmp_path / 'halfcheetah_medium-v2.hdf5'
    return write_d4rl_file(path, next_observations=name == 'd4rl-next-observations')


def _serve(tmp_path: pathlib.Path, item, episodes, *, episode_fields) -> reverb.Server:
    signature = tables.signature_for(item, episodes, episode_fields=episode_fields)
    (tmp_path / 'ckpt').mkdir()
    checkpointer = checkpointers_lib.DefaultCheckpointer(str(tmp_path / 'ckpt'))
    table = tables.uniform('replay', max_size=1000, signature=signature)
    return reverb.Server([table], port=None, checkpointer=checkpointer)


def _push_and_export(tmp_path: pathlib.Path, item, episodes, *, episode_fields, **options):
    """Pushes `episodes` as `item`s into a fresh server, exports its table to tmp/out."""
    server = _serve(tmp_path, item, episodes, episode_fields=episode_fields)
    try:
        address = f'localhost:{server.port}'
        pushed = rlds_reverb.push(
            episodes, address, 'replay', item=item, episode_fields=episode_fields
        )
        stats = rlds_reverb.export_table(
            tmp_path / 'out',
            'replay',
            server=address,
            server_checkpoint_dir=tmp_path / 'ckpt',
            episode_fields=episode_fields,
            **options,
        )
    finally:
        server.stop()
    return pushed, stats


def _assert_exported_equal(expected: list[dict], actual: list[dict]) -> None:
    """Every episode, field path, dtype and shape equal; values exact, float64 as float32."""
    assert_same_episodes(expected, actual, float64_as_stored=True)


@pytest.mark.parametrize('name', [*_MINARI_NAMES, *_D4RL_NAMES])
def test_a_source_pushed_as_episodes_exports_the_same_episodes(name, tmp_path):
    source = _source(name, tmp_path)
    episodes = load(source)
    fields = tuple(sorted(k for k in episodes.element_spec if k != types.STEPS))
    expected = users_data.read_numpy(episodes)
    if name in _EXPECTED:
        assert fields == (types.EPISODE_ID, 'seed')
        assert len(expected) == len(_EXPECTED[name]['episodes']) == 6
        image = [e[types.STEPS][types.OBSERVATION].get('image') for e in expected]
        assert name.startswith('tuple') or all(x.dtype == np.uint8 for x in image)
    else:
        assert fields == ('algorithm', 'iteration', 'policy')
        assert len(expected) == len(EPISODES)
    item = items.Episode(64)
    assert max(len(e[types.STEPS][types.IS_FIRST]) for e in expected) <= item.max_length
    pushed, stats = _push_and_export(
        tmp_path, item, episodes, episode_fields=fields, episodes_per_shard=4
    )
    assert stats.kind is reverb_export.ExportKind.WHOLE_EPISODES
    assert (stats.episodes, stats.steps, stats.skipped_episodes) == (
        len(expected),
        pushed.steps,
        0,
    )
    assert load(tmp_path / 'out').element_spec == episodes.element_spec
    by_tfds, by_load = read_both_ways(tmp_path / 'out')
    _assert_exported_equal(expected, by_tfds)
    _assert_exported_equal(expected, by_load)


# Before, export refused episode_fields=('episode_id',) for every item kind, so a source's
# own `episode_id` episode field (Minari's) pushed as whole episodes could not come back.
def test_an_episode_id_field_of_whole_episode_items_comes_back(tmp_path):
    # Terminal discounts as items carry them (0 into and at the end).
    data = [
        builders.episode(3, discount=[1.0, 0.0, 0.0]),
        builders.episode(5, ending=builders.TRUNCATED),
    ]
    episodes = builders.rlds(data).map(
        lambda e: {**e, types.EPISODE_ID: np.int64(7)}  # An id of the source's own.
    )
    _push_and_export(tmp_path, items.Episode(8), episodes, episode_fields=(types.EPISODE_ID,))
    exported = users_data.read_with_tfds(tmp_path / 'out')
    assert [int(e[types.EPISODE_ID]) for e in exported] == [7, 7]
    _assert_exported_equal(users_data.read_numpy(episodes), exported)


def test_an_episode_id_field_of_items_numbered_by_the_export_is_refused(tmp_path):
    # Two-step items without ids are numbered by the export: a carried episode_id cannot
    # also be episode metadata, and the error says why (not that the items lack it).
    episodes = builders.rlds([builders.episode(3, discount=[1.0, 0.0, 0.0])]).map(
        lambda e: {**e, types.EPISODE_ID: np.int64(7)}
    )
    with pytest.raises(ExportError, match=r"\['episode_id'\]: the export numbers"):
        _push_and_export(tmp_path, items.TwoStep(), episodes, episode_fields=(types.EPISODE_ID,))
    assert not (tmp_path / 'out').exists()
