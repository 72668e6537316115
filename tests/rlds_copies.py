"""Checks of RLDS copies (`save_as_rlds`, `rlds-reverb convert`): exact, episode by episode.

`assert_same_episodes` compares NumPy episodes (`users_data.read_with_tfds`,
`users_data.read_numpy`) in order: every field path, dtype, shape and value (strings
included, no tolerance); `read_both_ways` reads a copy with TFDS's own reader and with
`rlds_reverb.load`, checking that `load` takes its fast record path.
"""

from __future__ import annotations

import pathlib

import numpy as np
import tree

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.read import records
from rlds_reverb.read.loading import load
from tests import users_data


def assert_same_episodes(
    expected: list[dict], actual: list[dict], *, float64_as_stored: bool = False
) -> None:
    """Every episode, field, value and dtype equal, in order.

    `float64_as_stored` compares float64 values as TFDS stores them (`tf.train.Example`
    holds float32): the expected value cast to float32 and back, still exactly.
    """
    assert len(actual) == len(expected)
    for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
        want_flat, got_flat = tree.flatten_with_path(want), dict(tree.flatten_with_path(got))
        assert sorted(got_flat) == sorted(p for p, _ in want_flat), index
        for path, value in want_flat:
            got_value, value = np.asarray(got_flat[path]), np.asarray(value)
            assert got_value.dtype == value.dtype, (index, path, got_value.dtype, value.dtype)
            assert got_value.shape == value.shape, (index, path)
            if float64_as_stored and value.dtype == np.float64:
                value = value.astype(np.float32).astype(np.float64)
            np.testing.assert_array_equal(got_value, value, err_msg=f'episode {index}, {path}')


def read_both_ways(directory: pathlib.Path) -> tuple[list[dict], list[dict]]:
    """The copy read by TFDS's own reader, and by `load` (asserting its record path)."""
    loaded = load(directory)
    assert isinstance(episodes_lib.find_source(loaded), records.RecordSource)
    return users_data.read_with_tfds(directory), users_data.read_numpy(loaded)
