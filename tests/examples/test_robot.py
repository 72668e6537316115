"""Robot-like datasets (rlds_reverb.examples.robot), written by TFDS's own writer and read back."""

from __future__ import annotations

import numpy as np
import pytest
import tree

import rlds_reverb
from rlds_reverb.core import types
from rlds_reverb.examples import robot


@pytest.fixture(scope='module')
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp('robot')
    return {
        layout: robot.write_robot_dataset(
            root / layout.value, num_episodes=12, max_length=20, layout=layout, seed=3
        )
        for layout in robot.RobotLayout
    }


def test_episodes_read_back_as_made_with_both_endings(written):
    episodes = list(rlds_reverb.load(written[robot.RobotLayout.STATE]).whole_episodes)
    assert len(episodes) == 12
    endings = set()
    for episode in episodes:
        index = int(episode[robot.METADATA][robot.EPISODE_ID])
        steps = tree.map_structure(lambda x: x.numpy(), episode[types.STEPS])
        made = robot.make_robot_episode(index, len(steps[types.REWARD]), seed=3)[types.STEPS]
        np.testing.assert_array_equal(steps[types.ACTION], made[types.ACTION])
        state = steps[types.OBSERVATION][robot.STATE]
        np.testing.assert_array_equal(state, made[types.OBSERVATION][robot.STATE])
        assert steps[types.OBSERVATION][robot.IMAGE].shape[1:] == robot.IMAGE_SHAPE
        endings.add(bool(steps[types.IS_TERMINAL][-1]))
    assert endings == {True, False}
    formats = rlds_reverb.list_frame_fields(written[robot.RobotLayout.STATE])
    assert {f.codec for f in formats.values()} == {'jpeg'}


def test_the_proprio_layout_renames_and_retypes(written):
    spec = rlds_reverb.load(written[robot.RobotLayout.PROPRIO]).element_spec[types.STEPS]
    steps = spec.element_spec
    assert robot.PROPRIO in steps[types.OBSERVATION]
    assert robot.STATE not in steps[types.OBSERVATION]
    assert steps[types.ACTION].dtype.name == 'float64'


@pytest.mark.parametrize(
    ('kwargs', 'match'),
    [
        ({'num_episodes': 0}, 'num_episodes=0 and max_length=60 must both be >= 1'),
        ({'layout': 'octo'}, "layout='octo' is not valid"),
    ],
)
def test_bad_arguments_are_refused(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        robot.write_robot_dataset(tmp_path, **kwargs)
