"""D4RL's HDF5 layout, in NumPy: its keys checked, episode boundaries, an episode's steps.

A D4RL file holds one row per transition: `observations`, `actions`, `rewards`,
`terminals` and `timeouts` (`[N, ...]` each), optionally `next_observations`, step
metadata under `infos/` and dataset metadata under `metadata/`. `rlds_reverb.read.d4rl`
reads episodes from it with these helpers; docs/semantics.md ("D4RL files") says what an
episode becomes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from rlds_reverb.core import types
from rlds_reverb.core.errors import D4rlFileError

# Helpers of `rlds_reverb.read.d4rl` only.
__all__: list[str] = []

# D4RL's keys.
OBSERVATIONS = 'observations'
ACTIONS = 'actions'
REWARDS = 'rewards'
_TERMINALS = 'terminals'
_TIMEOUTS = 'timeouts'
NEXT_OBSERVATIONS = 'next_observations'
INFOS_PREFIX = 'infos/'
METADATA_PREFIX = 'metadata/'
_REQUIRED_KEYS = (OBSERVATIONS, ACTIONS, REWARDS, _TERMINALS)
# The step field of D4RL's step metadata (TFDS' name).
INFOS = 'infos'
# Rows read at a time: bounds memory whatever the file's size (~5 MB for HalfCheetah).
ROWS_PER_READ = 65_536
_LISTED_KEYS = 12


def group_blocks(starts: np.ndarray, ends: np.ndarray, indices: np.ndarray) -> Iterator[list]:
    """Yields the selected episodes in groups of consecutive ones read as one block of rows.

    A group holds episodes that follow each other in the file, at most `ROWS_PER_READ`
    rows in all (one longer episode is a group alone).
    """
    group: list[int] = []
    for episode in indices.tolist():
        if group and (episode != group[-1] + 1 or ends[episode] - starts[group[0]] > ROWS_PER_READ):
            yield group
            group = []
        group.append(episode)
    if group:
        yield group


def build_steps(
    rows: dict,
    *,
    infos: tuple[tuple[str, tuple[str, ...]], ...],
    terminal: bool,
    final_observation: np.ndarray | None,
    extra_step: bool,
) -> dict:
    """Returns one episode's steps (whole `[T, ...]` arrays) from its rows of the file.

    Every array is new (`rows` are views of a block): TF may keep a yielded array's buffer,
    and a view would keep the whole block alive with it.
    """
    if not extra_step:
        rows = {key: values.copy() for key, values in rows.items()}
    observation, action = rows[OBSERVATIONS], rows[ACTIONS]
    reward = _flatten_rewards(rows[REWARDS])
    length = len(reward)
    size = length + 1 if extra_step else length
    discount = np.ones([size], reward.dtype)
    is_first = np.zeros([size], bool)
    is_first[0] = True
    is_last = np.zeros([size], bool)
    is_last[-1] = True
    is_terminal = np.zeros([size], bool)
    step_infos: dict = {}
    for key, path in infos:
        set_nested(step_infos, path, rows[key])
    if extra_step:
        if final_observation is None:
            final_observation = np.zeros_like(observation[:1])[0]
        observation = np.concatenate([observation, final_observation[None]])
        action = np.concatenate([action, np.zeros_like(action[:1])])
        reward = np.concatenate([reward, np.zeros_like(reward[:1])])
        discount[-1] = 0
        if terminal:
            discount[-2] = 0
            is_terminal[-1] = True
        step_infos = _pad_nested(step_infos)
    steps = {
        types.OBSERVATION: observation,
        types.ACTION: action,
        types.REWARD: reward,
        types.DISCOUNT: discount,
        types.IS_FIRST: is_first,
        types.IS_LAST: is_last,
        types.IS_TERMINAL: is_terminal,
    }
    if step_infos:
        steps[INFOS] = step_infos
    return steps


def _pad_nested(tree: dict) -> dict:
    """Returns a nest of arrays, each with one row of zeros appended."""
    return {
        key: _pad_nested(value)
        if isinstance(value, dict)
        else np.concatenate([value, np.zeros_like(value[:1])])
        for key, value in tree.items()
    }


def prune(steps: dict, spec: Mapping) -> dict:
    """Returns `steps` restricted to the fields of `spec` (the fields `load` keeps)."""
    return {
        key: prune(value, spec[key]) if isinstance(value, dict) else value
        for key, value in steps.items()
        if key in spec
    }


def _flatten_rewards(rewards: np.ndarray) -> np.ndarray:
    """Returns rewards of shape `[N, 1, ...]` as `[N]` (TFDS squeezes them); else as stored."""
    if rewards.ndim > 1 and int(np.prod(rewards.shape[1:])) == 1:
        return rewards.reshape(len(rewards))
    return rewards


def set_nested(tree: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def list_datasets(file: Any) -> dict[str, Any]:
    """Returns every dataset of an HDF5 file by its `/` path (groups walked)."""
    import h5py

    found = {}

    def _visit(name: str, item: Any) -> None:
        if isinstance(item, h5py.Dataset):
            found[name] = item

    file.visititems(_visit)
    return found


def _describe_keys(names: list[str]) -> str:
    shown = sorted(names)[:_LISTED_KEYS]
    more = f' and {len(names) - len(shown)} more' if len(names) > len(shown) else ''
    return f'{shown}{more}' if names else 'no datasets at all'


def find_boundaries(
    datasets: dict[str, Any], rows: int, *, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns each episode's (start row, end row, ends on a terminal) from the flags.

    Raises:
      D4rlFileError: If the file has neither `timeouts` nor `next_observations`.
    """
    terminals = datasets[_TERMINALS]
    if _TIMEOUTS in datasets:
        timeouts = datasets[_TIMEOUTS]
    elif NEXT_OBSERVATIONS in datasets:
        timeouts = None  # Found where next_observations do not continue (below).
    else:
        raise D4rlFileError(
            f"{where} has no '{_TIMEOUTS}' and no '{NEXT_OBSERVATIONS}', so the end of an "
            f"episode cut by a time limit cannot be told from the next episode's start "
            "(TFDS' d4rl builder refuses such files too). Add a boolean "
            f"'{_TIMEOUTS}' dataset of {rows} rows, true at the last row of each "
            "time-limited episode (D4RL's own `get_dataset` derives it from the environment's "
            'max_episode_steps), for example with h5py: '
            f"`h5py.File(path, 'r+').create_dataset('{_TIMEOUTS}', data=timeouts)`."
        )
    # In blocks of rows, so that memory grows with the episodes, not with the rows.
    ends, terminal = [], []
    for first in range(0, rows, ROWS_PER_READ):
        last = min(first + ROWS_PER_READ, rows)
        ended = _read_flags(terminals, first, last)
        if timeouts is not None:
            done = ended | _read_flags(timeouts, first, last)
        else:
            done = ended | _find_unmarked_resets(
                datasets[OBSERVATIONS], datasets[NEXT_OBSERVATIONS], first, last, rows
            )
        found = np.flatnonzero(done)
        ends.append(found + first + 1)
        terminal.append(ended[found])
    ends_array, terminal_array = np.concatenate(ends), np.concatenate(terminal)
    if not len(ends_array) or ends_array[-1] != rows:  # The last episode, cut by the end.
        ends_array = np.append(ends_array, rows)
        terminal_array = np.append(terminal_array, False)
    starts = np.concatenate([[0], ends_array[:-1]])
    return starts.astype(np.int64), ends_array.astype(np.int64), terminal_array.astype(bool)


def _read_flags(dataset: Any, first: int, last: int) -> np.ndarray:
    """Returns rows `first:last` of a flag column as bools (D4RL stores bools or floats)."""
    return np.asarray(dataset[first:last]).astype(bool).reshape(last - first)


def _find_unmarked_resets(
    observations: Any, next_observations: Any, first: int, last: int, rows: int
) -> np.ndarray:
    """Returns, for rows `first:last`, whether the next row does not continue the row.

    `next_observations[t]` against `observations[t + 1]`; the file's last row ends anyway.
    """
    stop = min(last, rows - 1)
    resets = np.zeros([last - first], bool)
    if stop > first:
        after = next_observations[first:stop]
        following = observations[first + 1 : stop + 1]
        same = (after == following) | (_is_nan(after) & _is_nan(following))
        resets[: stop - first] = ~same.reshape(stop - first, -1).all(axis=1)
    return resets


def _is_nan(values: np.ndarray) -> np.ndarray:
    return np.isnan(values) if values.dtype.kind in 'fc' else np.zeros(values.shape, bool)


def check_layout(datasets: dict[str, Any], *, where: str) -> int:
    """Returns the number of rows; raises unless the file has D4RL's keys of one length.

    Raises:
      D4rlFileError: If a required key is missing, the file has no rows, or a key's
        length differs from `observations`'.
    """
    missing = [key for key in _REQUIRED_KEYS if key not in datasets]
    if missing:
        minari = any(name.startswith('episode_') for name in datasets)
        hint = (
            " It looks like a Minari dataset's file: pass the Minari dataset directory instead."
            if minari
            else ''
        )
        raise D4rlFileError(
            f"{where} is not a D4RL file: it lacks the key(s) {missing} (D4RL's layout: "
            f'{list(_REQUIRED_KEYS)}, `{_TIMEOUTS}`, optional `{NEXT_OBSERVATIONS}`, '
            f'`{INFOS_PREFIX}*` and `{METADATA_PREFIX}*`); it holds '
            f"{_describe_keys(list(datasets))}.{hint} Write the file in D4RL's layout, or "
            'pass a TFDS dataset directory.'
        )
    rows = len(datasets[OBSERVATIONS]) if datasets[OBSERVATIONS].ndim else 0
    if rows == 0:
        raise D4rlFileError(
            f"{where} holds no transitions: '{OBSERVATIONS}' has 0 rows. Pass a D4RL file "
            'with data (a download that stopped part way leaves such files: download it again).'
        )
    step_keys = [
        key
        for key in datasets
        if key in (*_REQUIRED_KEYS, _TIMEOUTS, NEXT_OBSERVATIONS) or key.startswith(INFOS_PREFIX)
    ]
    for key in step_keys:
        length = len(datasets[key]) if datasets[key].ndim else None
        if length != rows:
            raise D4rlFileError(
                f"{where}: key '{key}' has {length if length is not None else 'no'} rows but "
                f"'{OBSERVATIONS}' has {rows}; every per-step key must have one row per "
                'transition. The file is damaged or not written by D4RL: regenerate it, or '
                'cut every key to the same length.'
            )
    return rows


def has_path(tree: Mapping, path: tuple[str, ...]) -> bool:
    for key in path:
        if not isinstance(tree, Mapping) or key not in tree:
            return False
        tree = tree[key]
    return True
