"""Opens an RLDS dataset from a TFDS directory, a TFDS dataset name, or a `tf.data.Dataset`.

Whatever the source, `load` returns an RLDS dataset (see `rlds_reverb.core.types`) whose steps
hold every required field: a missing `discount` is filled with 1.0 (with a warning, as
docs/semantics.md §1 says); any other missing field is an error that names it.

Sources, in the order they are tried:

* a `tf.data.Dataset` of RLDS episodes: checked and returned (with `discount` filled in);
* a path (`str` or `os.PathLike`) to an existing directory: either a TFDS dataset directory
  (holding `dataset_info.json`, e.g. `~/tensorflow_datasets/name/1.0.0`), or a parent of
  version directories (`name/` holding `1.0.0/`, or `name/config/1.0.0/`; the latest version
  is used when there are several);
* a TFDS dataset name (`'name'`, `'name/config'`, `'name:1.0.0'`) found in `data_dir`
  (or in TFDS' default data directory); nothing is ever downloaded.

Corrupt files. Before reading, `load` checks that every shard of the split exists and, for
TFRecord shards, that their total size is what the split's records need; on a mismatch it
scans the shards and names the truncated or corrupt file. A shard corrupted without a size
change (flipped bytes) only shows when read: TF raises `tf.errors.DataLossError`
("corrupted record at ...") while iterating, which does not name the file; run
`load(..., check_files='full')` to scan every shard up front and name it. The full check
also decodes every record and names the shard, record and field of an episode whose step
fields do not parse (wrong dtype or size) or lack a field the others have.
"""

from __future__ import annotations

import itertools
import logging
import os
import pathlib
import re
import warnings
from typing import Any, Literal

import tensorflow as tf
import tensorflow_datasets as tfds
import tree
from tensorflow_datasets.core import example_parser

from rlds_reverb.core import types
from rlds_reverb.core.errors import SourceError, SourceNotFoundError, SpecMismatchError
from rlds_reverb.core.specs import get_step_spec
from rlds_reverb.data import tfds_writer

_LOGGER = logging.getLogger(__name__)
_DATASET_INFO = 'dataset_info.json'
_FEATURES = 'features.json'
_LISTED_ENTRIES = 8
# A string source that does not exist and starts so is a path, not a TFDS name.
_PATH_PREFIXES = ('/', '.', '~')
# Bytes TFRecord adds around each record: length (8), length CRC (4), data CRC (4).
_TFRECORD_OVERHEAD = 16

Source = tf.data.Dataset | str | os.PathLike
CheckFiles = bool | Literal['full']


def load(
    source: Source,
    *,
    split: str = 'train',
    data_dir: str | os.PathLike | None = None,
    shuffle_files: bool = False,
    read_config: tfds.ReadConfig | None = None,
    check_files: CheckFiles = True,
) -> tf.data.Dataset:
    """Opens an RLDS dataset and checks that its steps hold every required field.

    Args:
      source: A `tf.data.Dataset` of RLDS episodes, a TFDS dataset directory (or the parent
        of its version directories), or a TFDS dataset name found in `data_dir`.
      split: The TFDS split, with TFDS' slicing syntax (`'train[:10%]'`); ignored for a
        `tf.data.Dataset`.
      data_dir: Where to look up a TFDS dataset name; TFDS' default when None.
      shuffle_files: Whether TFDS shuffles the order of the shards.
      read_config: TFDS read options (interleave, seeds...), passed to `as_dataset`.
      check_files: `True` checks that the split's shards exist with the right total size
        (cheap); `'full'` also reads every shard once and decodes every record, naming a
        record whose step fields do not parse or differ in step count (a field missing
        from one episode); `False` checks nothing.

    Returns:
      An RLDS dataset: episodes holding a `steps` dataset with every required field.

    Raises:
      SourceNotFoundError: If the path does not exist or no dataset has that name.
      SourceError: If the source is not an RLDS dataset (not a TFDS directory, no `steps`),
        the split is unknown, or a shard is missing, truncated or corrupt.
      SpecMismatchError: If a required step field other than `discount` is missing.
      TypeError: If `source` is neither a dataset, a path nor a string.
      ValueError: If `check_files` is not True, False or 'full'.

    Example:
      >>> episodes = load('~/tensorflow_datasets/cartpole_v1/1.0.0')
      >>> episodes = load('cartpole_v1', data_dir='/tmp/data', split='train[:10]')
    """
    if check_files not in (True, False, 'full'):
        raise ValueError(
            f"check_files={check_files!r} is not valid; expected True, False or 'full'."
        )
    if isinstance(source, tf.data.Dataset):
        return _check_episodes(source, where='the given tf.data.Dataset')
    builder, where = _open_builder(source, data_dir=data_dir)
    _check_rlds_features(builder, where=where)
    split_names = _check_split(builder, split, where=where)
    if check_files:
        for name in split_names:
            _check_shards(builder, name, where=where, full=check_files == 'full')
    try:
        episodes = builder.as_dataset(
            split=split, shuffle_files=shuffle_files, read_config=read_config
        )
    except (ValueError, KeyError, AssertionError, tf.errors.OpError) as e:
        raise SourceError(f'Could not read split {split!r} of {where}: {e}') from e
    return _check_episodes(episodes, where=where)


def _open_builder(source: Any, *, data_dir: Any) -> tuple[tfds.core.DatasetBuilder, str]:
    """Returns the TFDS builder of a path or name source and a description for messages."""
    if not isinstance(source, str | os.PathLike):
        raise TypeError(
            f'source must be a tf.data.Dataset, a path or a TFDS dataset name; got '
            f'{type(source).__name__}.'
        )
    path = pathlib.Path(source).expanduser()
    if path.exists():
        directory = find_dataset_directory(path)
        return _builder_from_directory(directory), f'the dataset at {directory}'
    if isinstance(source, os.PathLike) or source.startswith(_PATH_PREFIXES):
        raise SourceNotFoundError(
            f'No RLDS dataset at {path.absolute()}: the path does not exist. Expected a TFDS '
            f'dataset directory (holding {_DATASET_INFO}), or a TFDS dataset name with data_dir.'
            + tfds_writer.describe_interrupted_write(path)
        )
    return _builder_from_name(source, data_dir=data_dir), f'TFDS dataset {source!r}'


def _list_entries(path: pathlib.Path) -> str:
    """Returns a few entries of a directory, for error messages."""
    try:
        names = sorted(p.name + ('/' if p.is_dir() else '') for p in path.iterdir())
    except OSError as e:
        return f'<unreadable: {e}>'
    if not names:
        return 'an empty directory'
    more = f', ... ({len(names) - _LISTED_ENTRIES} more)' if len(names) > _LISTED_ENTRIES else ''
    return ', '.join(names[:_LISTED_ENTRIES]) + more


def _version_key(directory: pathlib.Path) -> tuple[int, ...]:
    return tuple(int(part) for part in directory.name.split('.'))


def find_dataset_directory(path: str | os.PathLike) -> pathlib.Path:
    """Returns the TFDS dataset directory at or under `path` (one or two levels down).

    Args:
      path: A TFDS dataset directory, or a parent of version directories (`name/1.0.0/`) or
        of config directories (`name/config/1.0.0/`).

    Returns:
      The directory holding `dataset_info.json`; the latest version when there are several
      versions of one dataset.

    Raises:
      SourceNotFoundError: If `path` does not exist.
      SourceError: If `path` is a file, holds no dataset, or holds several datasets.

    Example:
      >>> find_dataset_directory('~/tensorflow_datasets/cartpole_v1')  # .../cartpole_v1/1.0.0
    """
    path = pathlib.Path(path).expanduser().absolute()
    if not path.exists():
        raise SourceNotFoundError(
            f'No RLDS dataset at {path}: the path does not exist.'
            + tfds_writer.describe_interrupted_write(path)
        )
    if not path.is_dir():
        raise SourceError(
            f'{path} is a file; expected a TFDS dataset directory holding {_DATASET_INFO} '
            f'and {_FEATURES} (for example {path.parent}).'
        )
    if (path / _DATASET_INFO).is_file():
        return path
    found = [
        info.parent
        for pattern in (f'*/{_DATASET_INFO}', f'*/*/{_DATASET_INFO}')
        for info in path.glob(pattern)
        if tfds.core.Version.is_valid(info.parent.name)
        and not any(part.startswith('.') for part in info.relative_to(path).parts)
    ]
    parents = {d.parent for d in found}
    if len(parents) == 1:
        chosen = max(found, key=_version_key)
        if len(found) > 1:
            _LOGGER.info('Using the latest version %s of %s.', chosen.name, path)
        return chosen
    if len(parents) > 1:
        names = ', '.join(sorted(str(d.relative_to(path)) for d in found))
        raise SourceError(f'{path} holds several TFDS datasets ({names}); pass one of them.')
    raise SourceError(
        f'{path} is not an RLDS dataset directory: expected a TFDS dataset directory holding '
        f'{_DATASET_INFO} and {_FEATURES} (or the parent of a version directory such as '
        f'1.0.0/), but found {_list_entries(path)}.'
    )


def _builder_from_directory(directory: pathlib.Path) -> tfds.core.DatasetBuilder:
    try:
        return tfds.builder_from_directory(os.fspath(directory))
    except Exception as e:  # TFDS raises many types for unreadable metadata.
        raise SourceError(
            f'{directory} is not a readable TFDS dataset directory ({type(e).__name__}: {e}); '
            f'found {_list_entries(directory)}.'
        ) from e


def _builder_from_name(name: str, *, data_dir: Any) -> tfds.core.DatasetBuilder:
    """Returns the builder of a prepared TFDS dataset; never downloads or prepares."""
    where = f'data_dir={os.fspath(data_dir)!r}' if data_dir else "TFDS' default data_dir"
    try:
        builder = tfds.builder(name, data_dir=os.fspath(data_dir) if data_dir else None)
    except tfds.core.DatasetNotFoundError as e:
        raise SourceNotFoundError(_name_not_found(name, data_dir)) from e
    except Exception as e:  # TFDS raises many types for unreadable metadata.
        raise SourceError(f'Could not open TFDS dataset {name!r} in {where}: {e}') from e
    if not builder.is_prepared():
        raise SourceNotFoundError(
            f'TFDS dataset {name!r} is known but not prepared in {where} (looked for '
            f'{builder.data_path}). rlds_reverb.load never downloads: build it first (for '
            f'example `tfds build {name} --data_dir=...`) or pass its directory.'
        )
    return builder


def _name_not_found(name: str, data_dir: Any) -> str:
    """Returns the message for a TFDS name found nowhere, listing what the data dir holds."""
    root = pathlib.Path(data_dir or tfds.core.constants.DATA_DIR).expanduser()
    looked = root / name.split(':')[0]
    present = (
        f' {root} holds: {_list_entries(root)}.' if root.is_dir() else f' {root} does not exist.'
    )
    return (
        f'No TFDS dataset named {name!r} in {root} (looked for {looked}/<version>/'
        f'{_DATASET_INFO}), and no path {name!r} exists.{present}'
    )


def _check_rlds_features(builder: tfds.core.DatasetBuilder, *, where: str) -> None:
    """Raises `SourceError` unless the dataset's features hold a nested `steps` dataset."""
    features = builder.info.features
    steps = features[types.STEPS] if types.STEPS in (features or {}) else None
    if not isinstance(steps, tfds.features.Dataset):
        found = (
            sorted(features.keys())
            if isinstance(features, tfds.features.FeaturesDict)
            else features
        )
        raise SourceError(
            f'{where} is a TFDS dataset but not an RLDS dataset: expected a '
            f"'{types.STEPS}' feature of type tfds.features.Dataset, found features {found}."
        )


def _check_split(builder: tfds.core.DatasetBuilder, split: str, *, where: str) -> list[str]:
    """Returns the split names `split` reads (slices and `+` allowed); raises if unknown."""
    available = sorted(builder.info.splits.keys())
    names = [re.split(r'[\[(]', part, maxsplit=1)[0].strip() for part in split.split('+')]
    unknown = [n for n in names if n not in available and n != 'all']
    if unknown or not names:
        raise SourceError(f'Unknown split {split!r} for {where}: available splits are {available}.')
    return available if 'all' in names else names


def _check_shards(builder: tfds.core.DatasetBuilder, split: str, *, where: str, full: bool) -> None:
    """Raises `SourceError` naming a missing, truncated or corrupt shard of `split`."""
    info = builder.info.splits[split]
    paths = [pathlib.Path(os.fspath(p)) for p in info.filepaths]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise SourceError(
            f'{where}: split {split!r} is incomplete, {len(missing)} of {len(paths)} shard '
            f'file(s) are missing: {missing[:_LISTED_ENTRIES]}. Regenerate or re-download it.'
        )
    file_format = builder.info.file_format
    if file_format is not None and file_format != tfds.core.FileFormat.TFRECORD:
        return
    expected = info.num_bytes + _TFRECORD_OVERHEAD * sum(info.shard_lengths)
    if full or (info.num_bytes and sum(p.stat().st_size for p in paths) != expected):
        _scan_shards(paths, info.shard_lengths, where=where, split=split)
    if full:
        parser = example_parser.ExampleParser(builder.info.features.get_serialized_info())
        for path in paths:
            _check_records(path, parser, where=where, split=split)


def _check_records(
    path: pathlib.Path, parser: example_parser.ExampleParser, *, where: str, split: str
) -> None:
    """Raises `SourceError` naming the first record of a shard that does not decode whole.

    A record decodes whole when every step field parses with its feature's dtype and shape
    and all step fields have the same number of steps (a field missing from one episode
    parses as zero steps).
    """

    def _step_counts(record: tf.Tensor) -> dict:
        steps = parser.parse_example(record).get(types.STEPS, {})
        return {name: tf.shape(t)[0] for name, t in tree.flatten_with_path(steps)}

    iterator = tf.data.TFRecordDataset(os.fspath(path)).map(_step_counts).as_numpy_iterator()
    for index in itertools.count():
        try:
            counts = next(iterator)
        except StopIteration:
            return
        except tf.errors.OpError as e:
            reason = e.message.strip().splitlines()[0].split('}}')[-1].strip()
            problem = f'it does not parse ({reason})'
        else:
            problem = _describe_uneven_counts(counts)
        if problem:
            raise SourceError(
                f'{where}: record {index} of shard {path} (split {split!r}) is not a valid '
                f'episode: {problem}. Regenerate the dataset or drop the record.'
            )


def _describe_uneven_counts(counts: dict) -> str | None:
    """Returns which step fields have a step count different from the most common one."""
    values = list(counts.values())
    expected = max(set(values), key=values.count)
    odd = [
        f"field '{'.'.join(map(str, name))}' "
        + ('is missing' if count == 0 else f'has {count} steps')
        for name, count in counts.items()
        if count != expected
    ]
    return f'{"; ".join(odd)} (the other step fields have {expected} steps)' if odd else None


def _scan_shards(
    paths: list[pathlib.Path], shard_lengths: list[int], *, where: str, split: str
) -> None:
    """Reads every record of every shard; raises `SourceError` naming the first bad one."""
    for path, length in zip(paths, shard_lengths, strict=True):
        records = tf.data.TFRecordDataset(os.fspath(path))
        try:
            count = int(records.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
        except tf.errors.DataLossError as e:
            raise SourceError(
                f'{where}: shard {path} of split {split!r} is truncated or corrupt '
                f'({e.message.strip()}). Regenerate or re-download it.'
            ) from e
        if count != length:
            raise SourceError(
                f'{where}: shard {path} of split {split!r} holds {count} records; '
                f'{_DATASET_INFO} says {length}. Regenerate or re-download it.'
            )
    _LOGGER.debug('All %d shards of %s read cleanly.', len(paths), where)


def _fill_discount(step: types.Step) -> types.Step:
    """Returns `step` with a float32 discount of 1.0 per reward leaf."""
    discount = tf.nest.map_structure(
        lambda r: tf.ones_like(r, dtype=tf.float32), step[types.REWARD]
    )
    return {**step, types.DISCOUNT: discount}


def _with_discount(episodes: tf.data.Dataset, *, where: str) -> tf.data.Dataset:
    """Returns the episodes with `discount` filled in where the steps lack it (warning once)."""
    episode_spec = episodes.element_spec
    steps_spec = episode_spec.get(types.STEPS) if isinstance(episode_spec, dict) else None
    step_spec = steps_spec.element_spec if isinstance(steps_spec, tf.data.DatasetSpec) else None
    if not isinstance(step_spec, dict) or types.DISCOUNT in step_spec:
        return episodes  # Complete, or not RLDS at all: get_step_spec says which.
    if types.REWARD not in step_spec:
        return episodes  # get_step_spec names every missing field.
    warnings.warn(
        f"The steps of {where} have no '{types.DISCOUNT}' field; using 1.0 on every step "
        '(termination is read from the is_terminal/is_last flags).',
        UserWarning,
        stacklevel=4,  # The caller of `load`.
    )
    return episodes.map(
        lambda episode: {**episode, types.STEPS: episode[types.STEPS].map(_fill_discount)}
    )


def _check_episodes(episodes: tf.data.Dataset, *, where: str) -> tf.data.Dataset:
    """Returns the episodes with `discount` filled, after checking the step fields."""
    episodes = _with_discount(episodes, where=where)
    try:
        get_step_spec(episodes)
    except SpecMismatchError as e:
        raise SpecMismatchError(f'{where}: {e}') from e
    except SourceError as e:
        raise SourceError(f'{where}: {e}') from e
    return episodes
