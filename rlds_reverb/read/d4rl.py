"""Reads D4RL's own HDF5 files (`halfcheetah_medium-v2.hdf5`) as RLDS episodes.

A D4RL file holds one row per transition: `observations`, `actions`, `rewards`,
`terminals` and `timeouts` (`[N, ...]` each), optionally `next_observations`, step
metadata under `infos/` and dataset metadata under `metadata/`. The episodes are the ones
TFDS 4.9.4's d4rl builder (`tensorflow_datasets/d4rl/dataset_utils.py`) makes of the same
file, without preparing a TFDS dataset first (docs/semantics.md, "D4RL files"):

* an episode ends at a row with `terminals` or `timeouts` set, or at the end of the file;
* it gains one last step when it ends on a terminal or the file has `next_observations`:
  that step's observation is the episode's last `next_observations` row (zeros without
  them), its action, reward and `infos` zeros, its discount 0, `is_last` set and
  `is_terminal` as the episode's last `terminals`; a terminal episode's transition into
  it gets discount 0 too;
* otherwise (time limit, end of file, no `next_observations`) the episode's last row is
  its last step, with `is_last` set and `is_terminal` not;
* `discount` is 1 elsewhere, in the rewards' dtype; `rewards` of shape `[N, 1]` are `[N]`;
  `infos/*` are step fields under `infos`, `metadata/*` episode-level fields (the same on
  every episode), nested at each `/`.

One deliberate difference: TFDS gives every episode the file's last `next_observations`
row as its final observation (it indexes the whole column); this reader uses the
episode's own. A file without `timeouts` (TFDS refuses those) is read when it has
`next_observations`: an episode also ends where `next_observations[t]` is not
`observations[t + 1]` (a reset that was not marked).

Reading streams: the episode boundaries come once from `terminals` and `timeouts` (two
boolean columns), then the selected episodes are read in blocks of consecutive rows with
h5py slices, each episode built as whole `[T, ...]` arrays. `D4rlSource` is an
`EpisodeSource`: `take`, `skip` and `shard` narrow its list of episodes, so unselected
episodes are never read.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources, types
from rlds_reverb.core.errors import D4rlFileError

# Helpers of the package's other modules only (`load` reads D4RL files): nothing public.
__all__: list[str] = []

# D4RL's keys.
_OBSERVATIONS = 'observations'
_ACTIONS = 'actions'
_REWARDS = 'rewards'
_TERMINALS = 'terminals'
_TIMEOUTS = 'timeouts'
_NEXT_OBSERVATIONS = 'next_observations'
_INFOS_PREFIX = 'infos/'
_METADATA_PREFIX = 'metadata/'
_REQUIRED_KEYS = (_OBSERVATIONS, _ACTIONS, _REWARDS, _TERMINALS)
# The step field of D4RL's step metadata (TFDS' name).
INFOS = 'infos'
SUFFIXES = ('.hdf5', '.h5')
# The only split of a D4RL file (TFDS' name).
SPLIT = 'train'
# Rows read at a time: bounds memory whatever the file's size (~5 MB for HalfCheetah).
_ROWS_PER_READ = 65_536
_LISTED_KEYS = 12


def is_d4rl_path(source: Any) -> bool:
    """Returns whether `source` is a path to an existing HDF5 file (`.hdf5` or `.h5`)."""
    if not isinstance(source, str | os.PathLike):
        return False
    path = pathlib.Path(source).expanduser()
    return path.suffix.lower() in SUFFIXES and path.is_file()


@dataclasses.dataclass(frozen=True, eq=False)
class D4rlSource(sources.EpisodeSource):
    """The episodes of a D4RL HDF5 file: what `load` reads from it.

    Fields:
      path: The file.
      starts: Each episode's first row (ascending).
      ends: Each episode's end row (exclusive).
      terminal: Whether each episode ends on a terminal (`terminals` at its last row).
      has_next_observations: Whether the file has `next_observations` (every episode
        then gains a last step holding its last one).
      step_spec: The spec of one step (fields `load` keeps), with no time dimension.
      infos: (`infos/...` key, path in `infos`) of the kept step metadata.
      metadata: The episode-level fields, read once (small: names, policy weights).
      selections: What `take`, `skip` and `shard` kept of the episodes, in order.
    """

    path: str
    starts: np.ndarray = dataclasses.field(repr=False)
    ends: np.ndarray = dataclasses.field(repr=False)
    terminal: np.ndarray = dataclasses.field(repr=False)
    has_next_observations: bool
    step_spec: dict = dataclasses.field(repr=False)
    infos: tuple[tuple[str, tuple[str, ...]], ...] = ()
    metadata: dict = dataclasses.field(default_factory=dict, repr=False)
    selections: tuple[sources.Selection, ...] = ()

    def read(self) -> tf.data.Dataset:
        """Returns the selected episodes as whole-episode tensors, read from the file."""
        indices = self.list_episodes()
        signature = {
            **tf.nest.map_structure(_spec_of, self.metadata),
            types.STEPS: tf.nest.map_structure(
                lambda s: tf.TensorSpec([None, *s.shape], s.dtype), self.step_spec
            ),
        }
        return tf.data.Dataset.from_generator(
            lambda: self._generate(indices), output_signature=signature
        ).prefetch(1)

    def select(self, selection: sources.Selection) -> D4rlSource:
        return dataclasses.replace(self, selections=(*self.selections, selection))

    def list_episodes(self) -> np.ndarray:
        """Returns the selected episodes' numbers in the file, in order."""
        count = len(self.starts)
        if not self.selections:
            return np.arange(count)
        numbers = tf.data.Dataset.range(count)
        for selection in self.selections:  # tf.data's own take, skip and shard.
            numbers = selection.apply(numbers)
        batches = numbers.batch(_ROWS_PER_READ).as_numpy_iterator()
        return np.concatenate([np.zeros([0], np.int64), *batches])

    def _generate(self, indices: np.ndarray) -> Iterator[dict]:
        """Yields the episodes `indices` names, reading consecutive ones in one block."""
        import h5py  # Only when a D4RL file is read.

        steps = self.step_spec
        with h5py.File(self.path, 'r') as file:
            columns = {
                key: file[key]
                for key in (_OBSERVATIONS, _ACTIONS, _REWARDS) + tuple(key for key, _ in self.infos)
            }
            next_observations = file[_NEXT_OBSERVATIONS] if self.has_next_observations else None
            for block in _group_blocks(self.starts, self.ends, indices):
                first, last = int(self.starts[block[0]]), int(self.ends[block[-1]])
                rows = {key: column[first:last] for key, column in columns.items()}
                finals = (
                    next_observations[np.asarray(self.ends[block] - 1)]
                    if next_observations is not None
                    else None
                )
                for position, episode in enumerate(block):
                    start = int(self.starts[episode]) - first
                    end = int(self.ends[episode]) - first
                    final = None if finals is None else finals[position]
                    whole = _build_steps(
                        {key: values[start:end] for key, values in rows.items()},
                        infos=self.infos,
                        terminal=bool(self.terminal[episode]),
                        final_observation=final,
                        extra_step=bool(self.terminal[episode]) or finals is not None,
                    )
                    yield {**self.metadata, types.STEPS: _prune(whole, steps)}
                del rows, finals, whole  # Before the next block is read: one block at a time.


def _group_blocks(starts: np.ndarray, ends: np.ndarray, indices: np.ndarray) -> Iterator[list]:
    """Yields the selected episodes in groups of consecutive ones read as one block of rows.

    A group holds episodes that follow each other in the file, at most `_ROWS_PER_READ`
    rows in all (one longer episode is a group alone).
    """
    group: list[int] = []
    for episode in indices.tolist():
        if group and (
            episode != group[-1] + 1 or ends[episode] - starts[group[0]] > _ROWS_PER_READ
        ):
            yield group
            group = []
        group.append(episode)
    if group:
        yield group


def _build_steps(
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
    observation, action = rows[_OBSERVATIONS], rows[_ACTIONS]
    reward = _flatten_rewards(rows[_REWARDS])
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
        _set_nested(step_infos, path, rows[key])
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
        step_infos = tf.nest.map_structure(
            lambda x: np.concatenate([x, np.zeros_like(x[:1])]), step_infos
        )
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


def _prune(steps: dict, spec: Mapping) -> dict:
    """Returns `steps` restricted to the fields of `spec` (the fields `load` keeps)."""
    return {
        key: _prune(value, spec[key]) if isinstance(value, dict) else value
        for key, value in steps.items()
        if key in spec
    }


def _flatten_rewards(rewards: np.ndarray) -> np.ndarray:
    """Returns rewards of shape `[N, 1, ...]` as `[N]` (TFDS squeezes them); else as stored."""
    if rewards.ndim > 1 and int(np.prod(rewards.shape[1:])) == 1:
        return rewards.reshape(len(rewards))
    return rewards


def _set_nested(tree: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _tf_dtype(dtype: np.dtype) -> tf.DType:
    """Returns the TF dtype of a NumPy dtype; strings and objects (h5py's) are `tf.string`."""
    return tf.string if dtype.kind in 'OSU' else tf.as_dtype(dtype)


def _spec_of(value: Any) -> tf.TensorSpec:
    array = np.asarray(value)
    return tf.TensorSpec(array.shape, _tf_dtype(array.dtype))


def _list_datasets(file: Any) -> dict[str, Any]:
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


def _find_boundaries(
    datasets: dict[str, Any], rows: int, *, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns each episode's (start row, end row, ends on a terminal) from the flags.

    Raises:
      D4rlFileError: If the file has neither `timeouts` nor `next_observations`.
    """
    terminals = datasets[_TERMINALS]
    if _TIMEOUTS in datasets:
        timeouts = datasets[_TIMEOUTS]
    elif _NEXT_OBSERVATIONS in datasets:
        timeouts = None  # Found where next_observations do not continue (below).
    else:
        raise D4rlFileError(
            f"{where} has no '{_TIMEOUTS}' and no '{_NEXT_OBSERVATIONS}', so the end of an "
            f"episode cut by a time limit cannot be told from the next episode's start "
            "(TFDS' d4rl builder refuses such files too). Add a boolean "
            f"'{_TIMEOUTS}' dataset of {rows} rows, true at the last row of each "
            "time-limited episode (D4RL's own `get_dataset` derives it from the environment's "
            'max_episode_steps), for example with h5py: '
            f"`h5py.File(path, 'r+').create_dataset('{_TIMEOUTS}', data=timeouts)`."
        )
    # In blocks of rows, so that memory grows with the episodes, not with the rows.
    ends, terminal = [], []
    for first in range(0, rows, _ROWS_PER_READ):
        last = min(first + _ROWS_PER_READ, rows)
        ended = _read_flags(terminals, first, last)
        if timeouts is not None:
            done = ended | _read_flags(timeouts, first, last)
        else:
            done = ended | _find_unmarked_resets(
                datasets[_OBSERVATIONS], datasets[_NEXT_OBSERVATIONS], first, last, rows
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


def _check_layout(datasets: dict[str, Any], *, where: str) -> int:
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
            f'{list(_REQUIRED_KEYS)}, `{_TIMEOUTS}`, optional `{_NEXT_OBSERVATIONS}`, '
            f'`{_INFOS_PREFIX}*` and `{_METADATA_PREFIX}*`); it holds '
            f"{_describe_keys(list(datasets))}.{hint} Write the file in D4RL's layout, or "
            'pass a TFDS dataset directory.'
        )
    rows = len(datasets[_OBSERVATIONS]) if datasets[_OBSERVATIONS].ndim else 0
    if rows == 0:
        raise D4rlFileError(
            f"{where} holds no transitions: '{_OBSERVATIONS}' has 0 rows. Pass a D4RL file "
            'with data (a download that stopped part way leaves such files: download it again).'
        )
    step_keys = [
        key
        for key in datasets
        if key in (*_REQUIRED_KEYS, _TIMEOUTS, _NEXT_OBSERVATIONS) or key.startswith(_INFOS_PREFIX)
    ]
    for key in step_keys:
        length = len(datasets[key]) if datasets[key].ndim else None
        if length != rows:
            raise D4rlFileError(
                f"{where}: key '{key}' has {length if length is not None else 'no'} rows but "
                f"'{_OBSERVATIONS}' has {rows}; every per-step key must have one row per "
                'transition. The file is damaged or not written by D4RL: regenerate it, or '
                'cut every key to the same length.'
            )
    return rows


def make_d4rl_source(path: str | os.PathLike, *, select_steps: Any = None) -> D4rlSource:
    """Returns the source of a D4RL HDF5 file's episodes (boundaries found once, now).

    Args:
      path: The `.hdf5` or `.h5` file.
      select_steps: Called with the full step spec (a nest of `tf.TensorSpec`) to prune
        it to the fields `load` keeps; None keeps all.

    Returns:
      The file's `D4rlSource`.

    Raises:
      D4rlFileError: If the file is not in D4RL's layout: a required key missing, no rows,
        a per-step key of another length, neither `timeouts` nor `next_observations`; or
        h5py cannot open it.
    """
    import h5py

    path = os.fspath(pathlib.Path(path).expanduser())
    where = f'D4RL file {path}'
    try:
        file = h5py.File(path, 'r')
    except OSError as e:
        raise D4rlFileError(
            f'{where} is not a readable HDF5 file ({e}). Download it again, or pass a TFDS '
            'dataset directory.'
        ) from e
    with file:
        datasets = _list_datasets(file)
        rows = _check_layout(datasets, where=where)
        starts, ends, terminal = _find_boundaries(datasets, rows, where=where)
        reward = datasets[_REWARDS]
        reward_shape = reward.shape[1:] if int(np.prod(reward.shape[1:])) != 1 else ()
        reward_dtype = _tf_dtype(reward.dtype)
        flag = tf.TensorSpec([], tf.bool)
        step_spec: dict = {
            types.OBSERVATION: _row_spec(datasets[_OBSERVATIONS]),
            types.ACTION: _row_spec(datasets[_ACTIONS]),
            types.REWARD: tf.TensorSpec(reward_shape, reward_dtype),
            types.DISCOUNT: tf.TensorSpec([], reward_dtype),
            types.IS_FIRST: flag,
            types.IS_LAST: flag,
            types.IS_TERMINAL: flag,
        }
        infos = tuple(
            (key, tuple(key[len(_INFOS_PREFIX) :].split('/')))
            for key in sorted(datasets)
            if key.startswith(_INFOS_PREFIX)
        )
        for key, info_path in infos:
            _set_nested(step_spec.setdefault(INFOS, {}), info_path, _row_spec(datasets[key]))
        metadata: dict = {}
        for key in sorted(datasets):
            if key.startswith(_METADATA_PREFIX):
                value = datasets[key][()]
                _set_nested(metadata, tuple(key[len(_METADATA_PREFIX) :].split('/')), value)
    if select_steps is not None:
        step_spec = select_steps(step_spec)
    kept = step_spec.get(INFOS, {})
    infos = tuple((key, p) for key, p in infos if _has_path(kept, p))
    return D4rlSource(
        path=path,
        starts=starts,
        ends=ends,
        terminal=terminal,
        has_next_observations=_NEXT_OBSERVATIONS in datasets,
        step_spec=step_spec,
        infos=infos,
        metadata=metadata,
    )


def _has_path(tree: Mapping, path: tuple[str, ...]) -> bool:
    for key in path:
        if not isinstance(tree, Mapping) or key not in tree:
            return False
        tree = tree[key]
    return True


def _row_spec(dataset: Any) -> tf.TensorSpec:
    return tf.TensorSpec(dataset.shape[1:], _tf_dtype(dataset.dtype))


def load_d4rl(
    path: str | os.PathLike,
    *,
    split: str = SPLIT,
    shuffle_files: bool = False,
    read_config: Any = None,
    select_steps: Any = None,
) -> episodes_lib.EpisodeDataset:
    """Returns the RLDS episodes of a D4RL HDF5 file (what `rlds_reverb.load` reads).

    Args:
      path: The `.hdf5` or `.h5` file.
      split: `'train'`, the only split of a D4RL file, or one slice of it in TFDS'
        syntax (`'train[:10%]'`, `'train[100:200]'`), counted in episodes.
      shuffle_files: Must be False: a D4RL file is one file, read in order.
      read_config: Must be None: TFDS' read options do not apply to a D4RL file.
      select_steps: Prunes the step spec to the kept fields (see `make_d4rl_source`).

    Returns:
      An `EpisodeDataset` on the file's `D4rlSource`.

    Raises:
      D4rlFileError: If the file is not in D4RL's layout (see `make_d4rl_source`), or
        `split` is neither `'train'` nor one slice of it.
      ValueError: If `shuffle_files` or `read_config` is given (TFDS' options).
    """
    if shuffle_files or read_config is not None:
        raise ValueError(
            f'D4RL file {os.fspath(path)}: shuffle_files and read_config are TFDS read '
            'options and do not apply to a D4RL file, which is read in order; shuffle the '
            'episodes with .shuffle() on what load returns instead.'
        )
    source = make_d4rl_source(path, select_steps=select_steps)
    for selection in _resolve_split(split, len(source.starts), where=f'D4RL file {source.path}'):
        source = source.select(selection)
    return episodes_lib.from_source(source)


def _resolve_split(split: str, episodes: int, *, where: str) -> list[sources.Selection]:
    """Returns the selections of TFDS' slicing syntax on the one split (`'train[10:20%]'`).

    Raises:
      D4rlFileError: If `split` names another split, is not valid, or joins several slices.
    """
    import tensorflow_datasets as tfds  # Already imported by `load`.

    try:
        instructions = tfds.core.ReadInstruction.from_spec(split).to_absolute(
            {SPLIT: tfds.core.SplitInfo(name=SPLIT, shard_lengths=[episodes], num_bytes=0)}
        )
    except (ValueError, AssertionError, TypeError) as e:
        raise D4rlFileError(
            f"{where} has one split, '{SPLIT}' ({episodes} episodes); split={split!r} does "
            f"not select from it ({e}). Use '{SPLIT}', a slice such as '{SPLIT}[:10%]', or "
            '.take(), .skip() and .shard() on what load returns.'
        ) from e
    if len(instructions) != 1:
        raise D4rlFileError(
            f'{where}: split={split!r} joins {len(instructions)} slices; a D4RL file reads '
            'one slice of its split. Load each slice and concatenate the datasets instead.'
        )
    first = instructions[0].from_ or 0
    last = episodes if instructions[0].to is None else instructions[0].to
    if (first, last) == (0, episodes):
        return []
    return [sources.Skip(first), sources.Take(max(last - first, 0))]
