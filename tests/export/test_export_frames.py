"""Export of a table holding encoded frames: the bytes go back into the RLDS output
unchanged, as TFDS `Image` features of the table's formats.

Robot-like data written by TFDS's own writer (`tests/robot_data.py`), pushed encoded into a
real in-process Reverb server, exported from its checkpoint, and read back both ways.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
import tree

import rlds_reverb
from rlds_reverb import items
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.export import reverb_export
from tests import robot_data as rd
from tests.export.test_export import serve

EPISODES = 10


def _by_episode(episodes: tf.data.Dataset) -> dict[float, dict]:
    """Whole episodes' observations (NumPy) by episode index (`state[0]` of every step)."""
    whole = episodes_lib.to_whole_episodes(episodes).as_numpy_iterator()
    observations = [e[types.STEPS][types.OBSERVATION] for e in whole]
    return {float(o[rd.STATE][0, 0]): o for o in observations}


def _export(tmp_path, robot_dir, item, **options):
    encoded = rlds_reverb.load(robot_dir, encoded_frames='all').take(EPISODES)
    server = serve(tmp_path, item, encoded, **options)
    try:
        address = f'localhost:{server.port}'
        rlds_reverb.push(encoded, address, 'replay', item=item, **options)
        stats = reverb_export.export_table(
            tmp_path / 'out', 'replay', server=address, server_checkpoint_dir=tmp_path / 'ckpt'
        )
    finally:
        server.stop()
    return stats.directory


@pytest.mark.parametrize(
    'item, options',
    [
        (items.Episode(1000), {'episode_fields': [rd.METADATA]}),
        (items.TwoStep(), {'add_ids': True}),
    ],
    ids=['episodes', 'two_step_with_ids'],
)
def test_exported_frames_are_the_stored_bytes(tmp_path, robot_dir, item, options):
    out = _export(tmp_path, robot_dir, item, **options)
    two_step = isinstance(item, items.TwoStep)
    source = rlds_reverb.load(robot_dir, encoded_frames='all').take(EPISODES)
    # The features declare each camera as the same TFDS Image (codec and shape).
    features = tfds.builder_from_directory(str(out)).info.features[types.STEPS]
    for path in rd.FRAME_PATHS:
        feature = features[types.OBSERVATION][path.split('/')[1]]
        assert isinstance(feature, tfds.features.Image)
        assert feature.encoding_format == source.frame_formats[path].codec
        assert feature.shape == source.frame_formats[path].shape
    assert rlds_reverb.list_frame_fields(out) == source.frame_formats
    exported = rlds_reverb.load(out, encoded_frames='all')
    assert exported.frame_formats == source.frame_formats
    got, want = _by_episode(exported), _by_episode(source)
    # Two-step items hold no episode of one step: the export cannot rebuild those.
    assert sorted(got) == sorted(k for k, o in want.items() if len(o[rd.STATE]) > 1 or not two_step)
    want = {k: want[k] for k in got}
    for index, observation in want.items():
        for camera in (rd.IMAGE, rd.WRIST, rd.OVERHEAD):
            stored = got[index][camera]
            assert stored.dtype == object and list(stored) == list(observation[camera])
    # Decoded by TFDS itself, the export gives the source's decoded frames.
    got = _by_episode(rlds_reverb.load(out))
    want = _by_episode(rlds_reverb.load(robot_dir).take(EPISODES))
    for index in got:
        observation = want[index]
        tree.map_structure(np.testing.assert_array_equal, got[index], observation)
        assert got[index][rd.IMAGE].dtype == np.uint8
