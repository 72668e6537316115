"""Reads a Minari dataset (HDF5 or Arrow files) as RLDS episodes of whole-episode tensors.

Minari (the Farama Foundation's offline-RL format) keeps a dataset in
`<root>/<namespace>/<name>-v<N>/data/`: `metadata.json` (the observation and action spaces
as gymnasium spaces serialized to JSON, `data_format`, `total_episodes`, `jpeg_encoding`)
and either `main_data.hdf5` (one group `episode_<id>` per episode) or one directory
`<id>/` per episode holding `part-0.arrow` and the episode's `metadata.json`. Minari itself
cannot be installed beside TensorFlow 2.15 (it needs numpy 2), so this module reads the
files with h5py and pyarrow, as `rlds_reverb.load(path)` does for such a directory.

What an episode becomes (docs/semantics.md, "Minari files"): an episode of T environment
steps has T + 1 RLDS steps; step t holds `observations[t]`, `actions[t]` and `rewards[t]`,
the last step the final observation with zero action and reward; `is_terminal` on the last
step when the episode's last `terminations` entry is set (truncation is `is_last` alone);
discount 0 on the transition into a terminal step and on the terminal step, else 1. Dict
spaces are dicts, tuple spaces dicts keyed '0', '1', ... (as Minari's Arrow columns name
them); JPEG-encoded images are decoded to uint8. Episode fields: `episode_id` and `seed`
(-1 when Minari recorded none). `infos` are left out: metadata.json does not describe them
(so no spec is known before reading) and their keys may differ from one episode to the next.

The episodes are read one at a time (`MinariSource`, an `EpisodeSource`): the element spec
comes from metadata.json's spaces, `take`, `skip` and `shard` narrow the list of episode
ids, so unselected episodes are never opened.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources, types
from rlds_reverb.core.errors import MinariFormatError, SourceError

__all__ = [
    'DataFormat',
    'MinariSource',
    'SEED',
    'find_data_directory',
    'open_minari',
]

METADATA = 'metadata.json'
_DATA = 'data'
_HDF5_FILE = 'main_data.hdf5'
_ARROW_SUFFIX = '.arrow'
_ARROW_PARTS = f'*/part-*{_ARROW_SUFFIX}'  # Minari's episode files, one directory each.
_TFDS_INFO = 'dataset_info.json'
# Keys of Minari's metadata.json: any of them marks the file as Minari's.
_DATA_FORMAT = 'data_format'
_OBSERVATION_SPACE = 'observation_space'
_ACTION_SPACE = 'action_space'
_TOTAL_EPISODES = 'total_episodes'
_JPEG_ENCODING = 'jpeg_encoding'
_MINARI_KEYS = frozenset(
    {_DATA_FORMAT, _OBSERVATION_SPACE, _ACTION_SPACE, _TOTAL_EPISODES, 'minari_version'}
)
# Episode fields of the RLDS episodes (besides `steps`): `types.EPISODE_ID` and the seed.
SEED = 'seed'
_NO_SEED = -1
# Minari's names inside an episode (HDF5 group members, Arrow columns).
_OBSERVATIONS = 'observations'
_ACTIONS = 'actions'
_REWARDS = 'rewards'
_TERMINATIONS = 'terminations'
_REWARD_DTYPE = np.float64
# Minari's (and gymnasium's) test for an image space, which Minari stores JPEG-encoded.
_MIN_IMAGE_SIZE = 32


class DataFormat(enum.Enum):
    """Minari's storage formats this module reads."""

    HDF5 = 'hdf5'
    ARROW = 'arrow'


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """One array of a space: where it is in the files, and its per-step dtype and shape."""

    hdf5_path: tuple[str, ...]
    arrow_path: tuple[str, ...]
    dtype: np.dtype
    shape: tuple[int, ...]
    jpeg: bool


def _make_error(file: pathlib.Path, key: str, problem: str) -> MinariFormatError:
    """Returns the error naming a file's wrong key (a dotted path into its JSON)."""
    advice = 'Re-create the dataset with minari (>= 0.5), or fix that key.'
    return MinariFormatError(f'{file}: {key} {problem}. {advice}')


def _require(node: Any, key: str, kind: type | tuple, *, file: pathlib.Path, where: str) -> Any:
    """Returns `node[key]`, raising `MinariFormatError` if it is missing or not a `kind`."""
    if not isinstance(node, Mapping) or key not in node:
        raise _make_error(file, f'{where}.{key}', 'is missing')
    value = node[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise _make_error(
            file, f'{where}.{key}', f'is {value!r}, not a {getattr(kind, "__name__", kind)}'
        )
    return value


def _is_image(dtype: np.dtype, shape: tuple[int, ...], node: Mapping) -> bool:
    """Minari's `is_image_space`: uint8, 2 or 3 dims of at least 32 x 32, bounds 0 and 255."""
    if dtype != np.uint8 or len(shape) not in (2, 3) or min(shape[:2]) < _MIN_IMAGE_SIZE:
        return False
    return bool(np.all(np.asarray(node.get('low')) == 0)) and bool(
        np.all(np.asarray(node.get('high')) == 255)
    )


def _parse_space(
    node: Any,
    *,
    file: pathlib.Path,
    where: str,
    jpeg: bool,
    hdf5_path: tuple[str, ...],
    arrow_path: tuple[str, ...],
) -> Any:
    """Returns a nest of `_Leaf`s for a serialized gymnasium space (dicts for Dict and Tuple)."""
    kind = _require(node, 'type', str, file=file, where=where)
    if kind == 'Dict':
        subspaces = _require(node, 'subspaces', dict, file=file, where=where)
        return {
            key: _parse_space(
                sub,
                file=file,
                where=f'{where}.subspaces.{key}',
                jpeg=jpeg,
                hdf5_path=(*hdf5_path, key),
                arrow_path=(*arrow_path, key),
            )
            for key, sub in subspaces.items()
        }
    if kind == 'Tuple':
        subspaces = _require(node, 'subspaces', list, file=file, where=where)
        return {
            str(index): _parse_space(
                sub,
                file=file,
                where=f'{where}.subspaces[{index}]',
                jpeg=jpeg,
                hdf5_path=(*hdf5_path, f'_index_{index}'),
                arrow_path=(*arrow_path, str(index)),
            )
            for index, sub in enumerate(subspaces)
        }
    try:
        if kind == 'Box':
            dtype = np.dtype(_require(node, 'dtype', str, file=file, where=where))
            shape = tuple(int(d) for d in _require(node, 'shape', list, file=file, where=where))
            image = jpeg and _is_image(dtype, shape, node)
        elif kind == 'Discrete':
            dtype, shape, image = np.dtype(np.int64), (), False
        elif kind == 'MultiDiscrete':
            dtype = np.dtype(_require(node, 'dtype', str, file=file, where=where))
            shape = np.shape(_require(node, 'nvec', list, file=file, where=where))
            image = False
        elif kind == 'MultiBinary':
            size = _require(node, 'n', (int, list), file=file, where=where)
            dtype, shape, image = np.dtype(np.int8), tuple(np.atleast_1d(size)), False
        else:
            raise _make_error(
                file,
                f'{where}.type',
                f'is {kind!r}, which rlds_reverb does not read (Box, Discrete, MultiDiscrete, '
                'MultiBinary, Dict and Tuple spaces are read)',
            )
    except (TypeError, ValueError) as e:
        if isinstance(e, MinariFormatError):
            raise
        raise _make_error(file, where, f'is not a valid {kind} space ({e})') from e
    return _Leaf(hdf5_path, arrow_path, dtype, tuple(int(d) for d in shape), image)


def _read_metadata(file: pathlib.Path) -> dict:
    if not file.is_file():
        raise MinariFormatError(
            f'{file} is missing: a Minari data directory holds it beside its data files (found '
            f'{sorted(p.name for p in file.parent.iterdir())}). Re-create or re-download the '
            'dataset.'
        )
    text = file.read_text()
    if not text.strip():
        raise _make_error(file, 'the file', 'is empty')
    try:
        content = json.loads(text)
    except ValueError as e:
        raise _make_error(file, 'the file', f'is not valid JSON ({e})') from e
    if not isinstance(content, dict):
        raise _make_error(file, 'the file', f'holds a {type(content).__name__}, not a JSON object')
    return content


def _is_minari_metadata(file: pathlib.Path) -> bool:
    """Returns whether `file` is Minari's metadata.json: unreadable as JSON, or with its keys.

    An empty or malformed file counts, so that `load` names its problem.
    """
    try:
        content = json.loads(file.read_text())
    except (OSError, ValueError):
        return True
    return not isinstance(content, dict) or bool(_MINARI_KEYS & content.keys())


def find_data_directory(path: Any) -> pathlib.Path | None:
    """Returns the Minari data directory at `path` (or its `data/`), or None if not Minari's.

    Args:
      path: A Minari dataset directory (`<name>-v<N>/`, holding `data/metadata.json`), its
        `data/` directory (holding `metadata.json`), or the `main_data.hdf5` file in it.

    Returns:
      The directory holding Minari's metadata.json (or Minari's data files, when
      metadata.json is missing), or None when `path` is no such directory (a TFDS dataset
      directory, a file, a path that does not exist).
    """
    if not isinstance(path, str | os.PathLike):
        return None
    path = pathlib.Path(path).expanduser()
    if path.name == _HDF5_FILE and path.is_file() and (path.parent / METADATA).is_file():
        return path.parent.absolute()  # Minari's HDF5 file itself (not D4RL's layout).
    if not path.is_dir() or (path / _TFDS_INFO).exists():
        return None
    for directory in (path, path / _DATA):
        if (directory / METADATA).is_file() and _is_minari_metadata(directory / METADATA):
            return directory.absolute()
    for directory in (path, path / _DATA):  # Minari's data files without metadata.json.
        if (directory / _HDF5_FILE).is_file() or any(directory.glob(_ARROW_PARTS)):
            return directory.absolute()
    return None


@dataclasses.dataclass(frozen=True, eq=False)
class MinariSource(sources.EpisodeSource):
    """The episodes of a Minari dataset, read from its files one episode at a time.

    Fields:
      directory: The data directory (holding metadata.json and the data files).
      data_format: HDF5 or Arrow.
      observations: A nest of `_Leaf`s: the observation space.
      actions: A nest of `_Leaf`s: the action space.
      episode_ids: The selected episodes' ids, in order.
      selections: Selections whose counts are tensors (not known in Python), applied to the
        ids before any episode is read.
      select_steps: Called in graph on the steps (to keep only some fields), or None.
    """

    directory: pathlib.Path
    data_format: DataFormat
    observations: Any = dataclasses.field(repr=False)
    actions: Any = dataclasses.field(repr=False)
    episode_ids: tuple[int, ...] = ()
    selections: tuple[sources.Selection, ...] = ()
    select_steps: Callable[[dict], dict] | None = dataclasses.field(default=None, repr=False)

    def read(self) -> tf.data.Dataset:
        """Returns the selected episodes, each read from its file when iterated."""
        ids = tf.data.Dataset.from_tensor_slices(np.array(self.episode_ids, np.int64))
        for selection in self.selections:
            ids = selection.apply(ids)
        return ids.map(
            episodes_lib.without_autograph(self._read_episode),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )

    def select(self, selection: sources.Selection) -> MinariSource:
        counts = [getattr(selection, f.name) for f in dataclasses.fields(selection)]
        counts = counts[:-1]  # Every field but the name.
        if self.selections or not all(isinstance(c, int) for c in counts):
            return dataclasses.replace(self, selections=(*self.selections, selection))
        ids = self.episode_ids
        if isinstance(selection, sources.Take):
            ids = ids if selection.count < 0 else ids[: selection.count]
        elif isinstance(selection, sources.Skip):
            ids = () if selection.count < 0 else ids[selection.count :]
        else:
            ids = ids[selection.index :: selection.num_shards]
        return dataclasses.replace(self, episode_ids=ids)

    def _read_episode(self, episode_id: tf.Tensor) -> dict:
        observations = tf.nest.flatten(self.observations)
        actions = tf.nest.flatten(self.actions)
        leaves = [*observations, *actions]
        outputs = tf.numpy_function(
            functools.partial(_read_numpy, self),
            [episode_id],
            [tf.string if leaf.jpeg else tf.as_dtype(leaf.dtype) for leaf in leaves]
            + [tf.float64, tf.bool, tf.int64],
            name='read_minari_episode',
        )
        *arrays, rewards, terminated, seed = outputs
        rewards.set_shape([None])
        terminated.set_shape([])
        seed.set_shape([])
        arrays = [_decode(array, leaf) for array, leaf in zip(arrays, leaves, strict=True)]
        length = tf.shape(rewards)[0] + 1  # RLDS steps: T environment steps + the last one.
        index = tf.range(length)
        is_last = tf.equal(index, length - 1)
        # 0 on the transition into a terminal last step and on that step (semantics §1).
        discount = 1.0 - tf.cast(terminated & (index >= length - 2), _REWARD_DTYPE)
        steps = {
            types.OBSERVATION: tf.nest.pack_sequence_as(
                self.observations, arrays[: len(observations)]
            ),
            types.ACTION: tf.nest.pack_sequence_as(
                self.actions, [_pad_one(a) for a in arrays[len(observations) :]]
            ),
            types.REWARD: _pad_one(rewards),
            types.DISCOUNT: discount,
            types.IS_FIRST: tf.equal(index, 0),
            types.IS_LAST: is_last,
            types.IS_TERMINAL: is_last & terminated,
        }
        if self.select_steps is not None:
            steps = self.select_steps(steps)
        return {types.EPISODE_ID: episode_id, SEED: seed, types.STEPS: steps}


def _pad_one(values: tf.Tensor) -> tf.Tensor:
    """Returns `values` with one step of zeros appended (the last step's placeholder)."""
    zeros = tf.zeros(tf.concat([[1], tf.shape(values)[1:]], 0), values.dtype)
    return tf.concat([values, zeros], 0)


def _decode(array: tf.Tensor, leaf: _Leaf) -> tf.Tensor:
    """Returns a leaf's `[T, ...]` tensor: JPEG frames decoded (as Minari does, with PIL)."""
    if not leaf.jpeg:
        array.set_shape([None, *leaf.shape])
        return array
    array.set_shape([None])
    channels = leaf.shape[2] if len(leaf.shape) == 3 else 1
    frames = tf.map_fn(
        lambda frame: tf.io.decode_jpeg(frame, channels=channels, dct_method='INTEGER_ACCURATE'),
        array,
        fn_output_signature=tf.TensorSpec([*leaf.shape[:2], channels], tf.uint8),
    )
    return tf.reshape(frames, [-1, *leaf.shape])


def _read_numpy(source: MinariSource, episode_id: np.ndarray) -> list[np.ndarray]:
    """Reads one episode's arrays (in numpy, called by `tf.numpy_function`)."""
    episode_id = int(episode_id)
    leaves = [*tf.nest.flatten(source.observations), *tf.nest.flatten(source.actions)]
    if source.data_format == DataFormat.HDF5:
        raw, rewards, terminations, seed, where = _read_hdf5(source.directory, episode_id, leaves)
    else:
        raw, rewards, terminations, seed, where = _read_arrow(source.directory, episode_id, leaves)
    steps = len(rewards)
    observations = len(tf.nest.flatten(source.observations))  # T + 1 each; actions T.
    arrays = [
        _check_leaf(values, leaf, steps + (index < observations), where=where)
        for index, (values, leaf) in enumerate(zip(raw, leaves, strict=True))
    ]
    last_terminated = bool(terminations[-1]) if steps else False
    return [*arrays, np.asarray(rewards, _REWARD_DTYPE), np.bool_(last_terminated), seed]


def _check_leaf(values: Any, leaf: _Leaf, steps: int, *, where: str) -> np.ndarray:
    """Returns a leaf's values as the spec says, or raises naming the episode and key."""
    key = '/'.join(leaf.hdf5_path)
    if leaf.jpeg:
        values = np.array(  # Arrow gives bytes; HDF5 uint8 arrays (vlen or rows).
            [v if isinstance(v, bytes) else np.asarray(v, np.uint8).tobytes() for v in values],
            object,
        )
        if len(values) < steps:
            raise _make_error(
                pathlib.Path(where), key, f'holds {len(values)} frames, expected {steps}'
            )
        return values[:steps]
    values = np.asarray(values)
    if values.shape[1:] != leaf.shape or len(values) < steps:
        raise _make_error(
            pathlib.Path(where),
            key,
            f'has shape {values.shape}, expected ({steps}, '
            f'{", ".join(map(str, leaf.shape))}) from metadata.json',
        )
    return values[:steps].astype(leaf.dtype, copy=False)


def _read_hdf5(directory: pathlib.Path, episode_id: int, leaves: list[_Leaf]):
    import h5py  # Imported here: only Minari's HDF5 files need it.

    file = directory / _HDF5_FILE
    group_name = f'episode_{episode_id}'
    with h5py.File(file, 'r') as handle:
        if group_name not in handle:
            raise _make_error(file, group_name, 'is missing (metadata.json counts it)')
        group = handle[group_name]
        where = f'{file} (episode {episode_id})'
        raw = [_find_hdf5_dataset(group, leaf.hdf5_path, where=where)[()] for leaf in leaves]
        rewards = _find_hdf5_dataset(group, (_REWARDS,), where=where)[()]
        terminations = _find_hdf5_dataset(group, (_TERMINATIONS,), where=where)[()]
        seed = group.attrs.get(SEED, _NO_SEED)
    return raw, rewards, terminations, np.int64(seed), where


def _find_hdf5_dataset(group: Any, path: tuple[str, ...], *, where: str) -> Any:
    node = group
    for key in path:
        if key not in node:
            raise MinariFormatError(
                f'{where}: {"/".join(path)} is missing from the episode group. Re-create the '
                'dataset, or check that metadata.json describes its files.'
            )
        node = node[key]
    return node


def _read_arrow(directory: pathlib.Path, episode_id: int, leaves: list[_Leaf]):
    import pyarrow as pa  # Imported here: only Minari's Arrow files need it.

    episode_dir = directory / str(episode_id)
    parts = sorted(episode_dir.glob(f'*{_ARROW_SUFFIX}'))
    if not parts:
        raise _make_error(episode_dir, f'episode {episode_id}', 'has no .arrow file')
    tables = [pa.ipc.open_file(pa.memory_map(os.fspath(p))).read_all() for p in parts]
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    where = f'{parts[0]} (episode {episode_id})'
    steps = table.num_rows - 1
    raw = [_read_arrow_leaf(table, leaf, where=where) for leaf in leaves]
    rewards = _get_arrow_column(table, _REWARDS, where=where).to_numpy(zero_copy_only=False)[:steps]
    terminations = _get_arrow_column(table, _TERMINATIONS, where=where).to_numpy(
        zero_copy_only=False
    )[:steps]
    seed = _NO_SEED
    metadata = episode_dir / METADATA
    if metadata.is_file():
        value = _read_metadata(metadata).get(SEED)
        seed = _NO_SEED if value is None else value
    return raw, rewards, terminations, np.int64(seed), where


def _get_arrow_column(table: Any, name: str, *, where: str) -> Any:
    if name not in table.column_names:
        raise MinariFormatError(
            f'{where}: column {name!r} is missing (columns: {table.column_names}). Re-create '
            'the dataset, or check that metadata.json describes its files.'
        )
    return table.column(name).combine_chunks()


def _read_arrow_leaf(table: Any, leaf: _Leaf, *, where: str) -> Any:
    import pyarrow as pa

    top, *path = leaf.arrow_path
    array = _get_arrow_column(table, top, where=where)
    for key in path:
        if not pa.types.is_struct(array.type) or array.type.get_field_index(key) < 0:
            raise MinariFormatError(
                f'{where}: {"/".join(leaf.arrow_path)} is missing (type {array.type}). '
                'Re-create the dataset, or check that metadata.json describes its files.'
            )
        array = array.field(key)
    if leaf.jpeg:
        return array.to_numpy(zero_copy_only=False)
    if pa.types.is_fixed_size_list(array.type):
        return array.flatten().to_numpy(zero_copy_only=False).reshape(len(array), *leaf.shape)
    return array.to_numpy(zero_copy_only=False)


def _list_episode_ids(
    directory: pathlib.Path, data_format: DataFormat, total: int
) -> tuple[int, ...]:
    """Returns the ids 0 .. total - 1, after checking that each episode's data is there."""
    ids = tuple(range(total))
    if data_format == DataFormat.HDF5:
        import h5py

        file = directory / _HDF5_FILE
        if not file.is_file():
            raise MinariFormatError(
                f'{file} is missing; metadata.json says data_format "hdf5". Found: '
                f'{sorted(p.name for p in directory.iterdir())}.'
            )
        try:
            with h5py.File(file, 'r') as handle:
                names = set(handle.keys())
        except OSError as e:
            raise MinariFormatError(
                f'{file} is not a readable HDF5 file ({e}); it is empty or truncated. '
                'Re-create or re-download the dataset.'
            ) from e
        missing = [i for i in ids if f'episode_{i}' not in names]
        kind = 'group'
    else:
        missing = [i for i in ids if not any((directory / str(i)).glob(f'*{_ARROW_SUFFIX}'))]
        file, kind = directory, 'directory'
    if missing:
        raise MinariFormatError(
            f'{file}: metadata.json says {_TOTAL_EPISODES}={total}, but the episode {kind}(s) '
            f'of id {missing[:8]} are missing. Re-create or re-download the dataset.'
        )
    return ids


def open_minari(
    directory: str | os.PathLike, *, select_steps: Callable[[dict], dict] | None = None
) -> episodes_lib.EpisodeDataset:
    """Returns the episodes of a Minari dataset as an RLDS dataset (whole-episode tensors).

    Args:
      directory: The dataset's directory (`<name>-v<N>/`) or its `data/` directory.
      select_steps: Called in graph on each episode's steps (to keep some fields), or None.

    Returns:
      An `EpisodeDataset` whose `take`, `skip` and `shard` narrow the episodes read.

    Raises:
      SourceError: If `directory` is not a Minari dataset directory.
      MinariFormatError: If metadata.json is empty, not JSON, or lacks or mangles a key
        (named), if its data format is not HDF5 or Arrow, or if the data file or an
        episode's data is missing or unreadable.

    Example:
      >>> episodes = open_minari('~/.minari/datasets/D4RL/door/human-v2')
    """
    data = find_data_directory(directory)
    if data is None:
        raise SourceError(
            f'{directory} is not a Minari dataset directory: expected {METADATA} in it or in '
            f'its {_DATA}/ directory.'
        )
    file = data / METADATA
    metadata = _read_metadata(file)
    name = _require(metadata, _DATA_FORMAT, str, file=file, where='metadata')
    try:
        data_format = DataFormat(name)
    except ValueError as e:
        raise _make_error(
            file, f'metadata.{_DATA_FORMAT}', f'is {name!r}; rlds_reverb reads "hdf5" and "arrow"'
        ) from e
    total = _require(metadata, _TOTAL_EPISODES, int, file=file, where='metadata')
    jpeg = metadata.get(_JPEG_ENCODING, True)  # Minari's default when the key is absent.
    spaces = []
    for key in (_OBSERVATION_SPACE, _ACTION_SPACE):
        text = _require(metadata, key, str, file=file, where='metadata')
        try:
            node = json.loads(text)
        except ValueError as e:
            raise _make_error(file, f'metadata.{key}', f'is not a JSON space ({e})') from e
        top = _OBSERVATIONS if key == _OBSERVATION_SPACE else _ACTIONS
        spaces.append(
            _parse_space(
                node,
                file=file,
                where=f'metadata.{key}',
                jpeg=bool(jpeg),
                hdf5_path=(top,),
                arrow_path=(top,),
            )
        )
    source = MinariSource(
        directory=data,
        data_format=data_format,
        observations=spaces[0],
        actions=spaces[1],
        episode_ids=_list_episode_ids(data, data_format, total),
        select_steps=select_steps,
    )
    return episodes_lib.from_source(source)
