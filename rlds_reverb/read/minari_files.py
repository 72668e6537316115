"""Minari's files, read in NumPy: metadata.json and its spaces, one episode's arrays.

Minari (the Farama Foundation's offline-RL format) keeps a dataset in
`<root>/<namespace>/<name>-v<N>/data/`: `metadata.json` (the observation and action spaces
as gymnasium spaces serialized to JSON, `data_format`, `total_episodes`, `jpeg_encoding`)
and either `main_data.hdf5` (one group `episode_<id>` per episode) or one directory
`<id>/` per episode holding `part-0.arrow` and the episode's `metadata.json`. Minari itself
cannot be installed beside TensorFlow 2.15 (it needs numpy 2), so this module reads the
files with h5py and pyarrow; `rlds_reverb.read.minari` makes RLDS episodes of them. Every
problem is a `MinariFormatError` naming the file and the key (or episode).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlds_reverb.core.errors import MinariFormatError

# Helpers of `rlds_reverb.read.minari`, which exports the public ones.
__all__: list[str] = []

METADATA = 'metadata.json'
_DATA = 'data'
_HDF5_FILE = 'main_data.hdf5'
_ARROW_SUFFIX = '.arrow'
_ARROW_PARTS = f'*/part-*{_ARROW_SUFFIX}'  # Minari's episode files, one directory each.
_TFDS_INFO = 'dataset_info.json'
# Keys of Minari's metadata.json: any of them marks the file as Minari's.
DATA_FORMAT = 'data_format'
OBSERVATION_SPACE = 'observation_space'
ACTION_SPACE = 'action_space'
TOTAL_EPISODES = 'total_episodes'
JPEG_ENCODING = 'jpeg_encoding'
_MINARI_KEYS = frozenset(
    {DATA_FORMAT, OBSERVATION_SPACE, ACTION_SPACE, TOTAL_EPISODES, 'minari_version'}
)
# Episode fields of the RLDS episodes (besides `steps`): `types.EPISODE_ID` and the seed.
SEED = 'seed'
_NO_SEED = -1
# Minari's names inside an episode (HDF5 group members, Arrow columns).
OBSERVATIONS = 'observations'
ACTIONS = 'actions'
_REWARDS = 'rewards'
_TERMINATIONS = 'terminations'
REWARD_DTYPE = np.float64
# Minari's (and gymnasium's) test for an image space, which Minari stores JPEG-encoded.
_MIN_IMAGE_SIZE = 32
# The space kinds read as one array (Dict and Tuple nest them).
_LEAF_KINDS = 'Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple'


class DataFormat(enum.Enum):
    """Minari's storage formats this module reads."""

    HDF5 = 'hdf5'
    ARROW = 'arrow'


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One array of a space: where it is in the files, and its per-step dtype and shape."""

    hdf5_path: tuple[str, ...]
    arrow_path: tuple[str, ...]
    dtype: np.dtype
    shape: tuple[int, ...]
    jpeg: bool


def make_error(file: pathlib.Path, key: str, problem: str) -> MinariFormatError:
    """Returns the error naming a file's wrong key (a dotted path into its JSON)."""
    advice = 'Re-create the dataset with minari (>= 0.5), or fix that key.'
    return MinariFormatError(f'{file}: {key} {problem}. {advice}')


def require(node: Any, key: str, kind: type | tuple, *, file: pathlib.Path, where: str) -> Any:
    """Returns `node[key]`, raising `MinariFormatError` if it is missing or not a `kind`."""
    if not isinstance(node, Mapping) or key not in node:
        raise make_error(file, f'{where}.{key}', 'is missing')
    value = node[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise make_error(
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


def parse_space(
    node: Any,
    *,
    file: pathlib.Path,
    where: str,
    jpeg: bool,
    hdf5_path: tuple[str, ...],
    arrow_path: tuple[str, ...],
) -> Any:
    """Returns a nest of `Leaf`s for a serialized gymnasium space (dicts for Dict and Tuple)."""
    kind = require(node, 'type', str, file=file, where=where)
    if kind not in ('Dict', 'Tuple'):
        paths = (hdf5_path, arrow_path)
        return _parse_leaf(node, kind, file=file, where=where, jpeg=jpeg, paths=paths)
    if kind == 'Dict':
        subspaces = require(node, 'subspaces', dict, file=file, where=where)
        keys = [(key, f'{where}.subspaces.{key}', key, key) for key in subspaces]
        values = list(subspaces.values())
    else:
        subspaces = require(node, 'subspaces', list, file=file, where=where)
        keys = [
            (str(index), f'{where}.subspaces[{index}]', f'_index_{index}', str(index))
            for index in range(len(subspaces))
        ]
        values = list(subspaces)
    return {
        key: parse_space(
            sub,
            file=file,
            where=sub_where,
            jpeg=jpeg,
            hdf5_path=(*hdf5_path, hdf5_key),
            arrow_path=(*arrow_path, arrow_key),
        )
        for (key, sub_where, hdf5_key, arrow_key), sub in zip(keys, values, strict=True)
    }


def _parse_leaf(
    node: Any,
    kind: str,
    *,
    file: pathlib.Path,
    where: str,
    jpeg: bool,
    paths: tuple[tuple[str, ...], tuple[str, ...]],
) -> Leaf:
    """Returns the `Leaf` of a Box, Discrete, MultiDiscrete or MultiBinary space."""
    try:
        if kind == 'Box':
            dtype = np.dtype(require(node, 'dtype', str, file=file, where=where))
            shape = tuple(int(d) for d in require(node, 'shape', list, file=file, where=where))
            image = jpeg and _is_image(dtype, shape, node)
        elif kind == 'Discrete':
            dtype, shape, image = np.dtype(np.int64), (), False
        elif kind == 'MultiDiscrete':
            dtype = np.dtype(require(node, 'dtype', str, file=file, where=where))
            shape = np.shape(require(node, 'nvec', list, file=file, where=where))
            image = False
        elif kind == 'MultiBinary':
            size = require(node, 'n', (int, list), file=file, where=where)
            dtype, shape, image = np.dtype(np.int8), tuple(np.atleast_1d(size)), False
        else:
            raise make_error(
                file,
                f'{where}.type',
                f'is {kind!r}, which rlds_reverb does not read ({_LEAF_KINDS} spaces are read)',
            )
    except (TypeError, ValueError) as e:
        if isinstance(e, MinariFormatError):
            raise
        raise make_error(file, where, f'is not a valid {kind} space ({e})') from e
    return Leaf(*paths, dtype, tuple(int(d) for d in shape), image)


def read_metadata(file: pathlib.Path) -> dict:
    if not file.is_file():
        raise MinariFormatError(
            f'{file} is missing: a Minari data directory holds it beside its data files (found '
            f'{sorted(p.name for p in file.parent.iterdir())}). Re-create or re-download the '
            'dataset.'
        )
    text = file.read_text()
    if not text.strip():
        raise make_error(file, 'the file', 'is empty')
    try:
        content = json.loads(text)
    except ValueError as e:
        raise make_error(file, 'the file', f'is not valid JSON ({e})') from e
    if not isinstance(content, dict):
        raise make_error(file, 'the file', f'holds a {type(content).__name__}, not a JSON object')
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


def read_episode_arrays(
    directory: pathlib.Path,
    data_format: DataFormat,
    observations: Any,
    actions: Any,
    episode_id: int,
) -> list[np.ndarray]:
    """Reads one episode's arrays: the observation then the action leaves (flattened nests,
    JPEG frames as bytes), the rewards (float64), whether its last step terminated, its seed.

    Raises:
      MinariFormatError: If the episode's data is missing or does not match metadata.json.
    """
    observation_leaves = flatten_leaves(observations)
    leaves = [*observation_leaves, *flatten_leaves(actions)]
    if data_format == DataFormat.HDF5:
        raw, rewards, terminations, seed, where = _read_hdf5(directory, episode_id, leaves)
    else:
        raw, rewards, terminations, seed, where = _read_arrow(directory, episode_id, leaves)
    steps = len(rewards)
    arrays = [  # Observations have T + 1 rows each; actions T.
        _check_leaf(values, leaf, steps + (index < len(observation_leaves)), where=where)
        for index, (values, leaf) in enumerate(zip(raw, leaves, strict=True))
    ]
    last_terminated = bool(terminations[-1]) if steps else False
    return [*arrays, np.asarray(rewards, REWARD_DTYPE), np.asarray(last_terminated), seed]


def flatten_leaves(space: Any) -> list[Leaf]:
    """Returns a space's leaves in `tf.nest` order (dicts by sorted key)."""
    if isinstance(space, Leaf):
        return [space]
    return [leaf for key in sorted(space) for leaf in flatten_leaves(space[key])]


def _check_leaf(values: Any, leaf: Leaf, steps: int, *, where: str) -> np.ndarray:
    """Returns a leaf's values as the spec says, or raises naming the episode and key."""
    key = '/'.join(leaf.hdf5_path)
    if leaf.jpeg:
        values = np.array(  # Arrow gives bytes; HDF5 uint8 arrays (vlen or rows).
            [v if isinstance(v, bytes) else np.asarray(v, np.uint8).tobytes() for v in values],
            object,
        )
        if len(values) < steps:
            raise make_error(
                pathlib.Path(where), key, f'holds {len(values)} frames, expected {steps}'
            )
        return values[:steps]
    values = np.asarray(values)
    if values.shape[1:] != leaf.shape or len(values) < steps:
        raise make_error(
            pathlib.Path(where),
            key,
            f'has shape {values.shape}, expected ({steps}, '
            f'{", ".join(map(str, leaf.shape))}) from metadata.json',
        )
    return values[:steps].astype(leaf.dtype, copy=False)


def _read_hdf5(directory: pathlib.Path, episode_id: int, leaves: list[Leaf]):
    import h5py  # Imported here: only Minari's HDF5 files need it.

    file = directory / _HDF5_FILE
    group_name = f'episode_{episode_id}'
    with h5py.File(file, 'r') as handle:
        if group_name not in handle:
            raise make_error(file, group_name, 'is missing (metadata.json counts it)')
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


def _read_arrow(directory: pathlib.Path, episode_id: int, leaves: list[Leaf]):
    import pyarrow as pa  # Imported here: only Minari's Arrow files need it.

    episode_dir = directory / str(episode_id)
    parts = sorted(episode_dir.glob(f'*{_ARROW_SUFFIX}'))
    if not parts:
        raise make_error(episode_dir, f'episode {episode_id}', 'has no .arrow file')
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
        value = read_metadata(metadata).get(SEED)
        seed = _NO_SEED if value is None else value
    return raw, rewards, terminations, np.int64(seed), where


def _get_arrow_column(table: Any, name: str, *, where: str) -> Any:
    if name not in table.column_names:
        raise MinariFormatError(
            f'{where}: column {name!r} is missing (columns: {table.column_names}). Re-create '
            'the dataset, or check that metadata.json describes its files.'
        )
    return table.column(name).combine_chunks()


def _read_arrow_leaf(table: Any, leaf: Leaf, *, where: str) -> Any:
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
            f'{file}: metadata.json says {TOTAL_EPISODES}={total}, but the episode {kind}(s) '
            f'of id {missing[:8]} are missing. Re-create or re-download the dataset.'
        )
    return ids


@dataclasses.dataclass(frozen=True)
class Description:
    """What a Minari dataset's metadata.json says, checked against its files."""

    directory: pathlib.Path
    data_format: DataFormat
    observations: Any  # A nest of `Leaf`s: the observation space.
    actions: Any  # A nest of `Leaf`s: the action space.
    total: int  # Episodes, each one's data checked to be there.


def read_description(data: pathlib.Path) -> Description:
    """Returns what the data directory's metadata.json says (its spaces parsed).

    Raises:
      MinariFormatError: If metadata.json is empty, not JSON, or lacks or mangles a key
        (named), if its data format is not HDF5 or Arrow, or if the data file or an
        episode's data is missing or unreadable.
    """
    file = data / METADATA
    metadata = read_metadata(file)
    name = require(metadata, DATA_FORMAT, str, file=file, where='metadata')
    try:
        data_format = DataFormat(name)
    except ValueError as e:
        raise make_error(
            file, f'metadata.{DATA_FORMAT}', f'is {name!r}; rlds_reverb reads "hdf5" and "arrow"'
        ) from e
    total = require(metadata, TOTAL_EPISODES, int, file=file, where='metadata')
    jpeg = bool(metadata.get(JPEG_ENCODING, True))  # Minari's default when the key is absent.
    spaces = []
    for key, top in ((OBSERVATION_SPACE, OBSERVATIONS), (ACTION_SPACE, ACTIONS)):
        text = require(metadata, key, str, file=file, where='metadata')
        try:
            node = json.loads(text)
        except ValueError as e:
            raise make_error(file, f'metadata.{key}', f'is not a JSON space ({e})') from e
        where = f'metadata.{key}'
        spaces.append(
            parse_space(
                node, file=file, where=where, jpeg=jpeg, hdf5_path=(top,), arrow_path=(top,)
            )
        )
    _list_episode_ids(data, data_format, total)  # Every episode's data is there.
    return Description(data, data_format, spaces[0], spaces[1], total)
