"""D4RL-layout HDF5 files for the tests, written with h5py (no D4RL, no download).

`write_d4rl_file` writes D4RL's own keys (`observations`, `actions`, `rewards`,
`terminals`, optional `timeouts` and `next_observations`, `infos/*`, `metadata/*`) for the
episodes of `EPISODES` (terminated, time-limited, both-flag, one-step, and a last episode
cut by the end of the file). Used by `tests/read/test_d4rl.py` and
`tests/export/test_export_sources.py`.
"""

from __future__ import annotations

import pathlib

import h5py
import numpy as np

__all__ = ['ACTION_DIM', 'EPISODES', 'OBS_DIM', 'QPOS_DIM', 'write_d4rl_file']

# (length, how it ends), in file order: 'terminal', 'timeout', 'both' (both flags set) or
# 'cut' (the end of the file, no flag).
EPISODES = (
    (5, 'terminal'),
    (4, 'timeout'),
    (1, 'terminal'),
    (1, 'both'),
    (6, 'timeout'),
    (3, 'terminal'),
    (4, 'cut'),
)
OBS_DIM, ACTION_DIM, QPOS_DIM = 3, 2, 4


def write_d4rl_file(
    path: pathlib.Path,
    *,
    next_observations: bool,
    timeouts: bool = True,
    float_dtype=np.float32,
    rewards_column: bool = False,
    episodes=EPISODES,
    seed: int = 0,
) -> pathlib.Path:
    """Writes a D4RL-layout file; within an episode next_observations[t] == observations[t+1]."""
    rng = np.random.default_rng(seed)
    observations, next_obs, terminals, time_limits = [], [], [], []
    for length, ending in episodes:
        states = rng.normal(size=(length + 1, OBS_DIM)).astype(float_dtype)
        observations.append(states[:-1])
        next_obs.append(states[1:])
        flags = np.zeros([length], bool)
        terminals.append(flags.copy())
        time_limits.append(flags.copy())
        terminals[-1][-1] = ending in ('terminal', 'both')
        time_limits[-1][-1] = ending in ('timeout', 'both')
    rows = sum(length for length, _ in episodes)
    rewards = rng.normal(size=(rows, 1) if rewards_column else (rows,)).astype(float_dtype)
    with h5py.File(path, 'w') as file:
        file['observations'] = np.concatenate(observations)
        file['actions'] = rng.normal(size=(rows, ACTION_DIM)).astype(float_dtype)
        file['rewards'] = rewards
        file['terminals'] = np.concatenate(terminals)
        if timeouts:
            file['timeouts'] = np.concatenate(time_limits)
        if next_observations:
            file['next_observations'] = np.concatenate(next_obs)
        file['infos/qpos'] = rng.normal(size=(rows, QPOS_DIM))
        file['infos/action_log_probs'] = rng.normal(size=(rows,))  # float64, as in D4RL v2
        file['metadata/algorithm'] = b'SAC'
        file['metadata/iteration'] = np.int64(1_000_000)
        file['metadata/policy/fc0/bias'] = rng.normal(size=(5,)).astype(float_dtype)
        file['metadata/policy/nonlinearity'] = b'relu'
    return path
