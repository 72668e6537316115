"""Shared pytest fixtures: real datasets written once per session into temporary directories."""

from __future__ import annotations

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pathlib  # noqa: E402

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from rlds_reverb.data import cartpole  # noqa: E402
from rlds_reverb.data.loading import load  # noqa: E402

# 12 episodes of seed 0: 4 truncated at 500 steps, 8 terminated (returns 19 to 250).
CARTPOLE_ARGS = {'num_episodes': 12, 'seed': 0, 'episodes_per_shard': 5}


@pytest.fixture(scope='session')
def cartpole_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A small CartPole RLDS dataset in TFDS format (3 shards), both endings present."""
    path = cartpole.generate(tmp_path_factory.mktemp('cartpole'), **CARTPOLE_ARGS)
    stats = cartpole.read_stats(path)
    if not (stats['num_terminated'] and stats['num_truncated']):
        raise RuntimeError(f'The CartPole fixture needs both episode endings; got {stats}.')
    return path


@pytest.fixture(scope='session')
def cartpole_episodes(cartpole_dir: pathlib.Path) -> tf.data.Dataset:
    """The CartPole fixture, opened with `rlds_reverb.load`."""
    return load(cartpole_dir)
