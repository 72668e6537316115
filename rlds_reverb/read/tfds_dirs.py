"""TFDS dataset directories and names: which directory a source means, and its builder.

A path is a TFDS dataset directory (holding `dataset_info.json`), or a parent of version
directories (`name/1.0.0/`, or `name/config/1.0.0/`; the latest version when there are
several). A name (`'name'`, `'name/config'`, `'name:1.0.0'`) is looked up in `data_dir`
(TFDS' default when None): the prepared files first, TFDS' registry only when there are
none; nothing is ever downloaded or prepared, and a community namespace (which TFDS would
fetch) is refused. Every directory TFDS is about to read is first checked for feature
classes it would import (`feature_classes`).
"""

from __future__ import annotations

import logging
import os
import pathlib
from typing import Any

import tensorflow_datasets as tfds

from rlds_reverb.core.errors import SourceError, SourceNotFoundError
from rlds_reverb.read import feature_classes
from rlds_reverb.storage import tfds_writer

__all__ = [
    'find_dataset_directory',
    'open_builder',
    'open_builder_and_describe',
]

_LOGGER = logging.getLogger(__name__)
_DATASET_INFO = feature_classes.DATASET_INFO
_FEATURES = feature_classes.FEATURES
_LISTED_ENTRIES = 8
_PATH_SEPARATOR = '/'
# A string source that does not exist and starts so is a path, not a TFDS name.
_PATH_PREFIXES = ('/', '.', '~')
# Where a dataset's directories sit below its name: versions, or configs then versions.
_DATASET_PATTERNS = (f'*/{_DATASET_INFO}', f'*/*/{_DATASET_INFO}')


def open_builder(
    source: str | os.PathLike, *, data_dir: str | os.PathLike | None = None
) -> tfds.core.DatasetBuilder:
    """Returns the TFDS builder of a dataset directory or name (as `load` finds it).

    Readers that split a dataset by shard (the Beam pipeline) start from it:
    `builder.data_dir` is the directory every worker opens, `builder.info.splits` the shards.

    Raises:
      SourceNotFoundError: If a path does not exist.
      SourceError: If the source is not a prepared TFDS dataset.

    Example:
      >>> builder = open_builder('cartpole_v1', data_dir='~/tensorflow_datasets')
    """
    return open_builder_and_describe(source, data_dir=data_dir)[0]


def open_builder_and_describe(
    source: Any, *, data_dir: Any
) -> tuple[tfds.core.DatasetBuilder, str]:
    """Returns the TFDS builder of a path or name source, and a description for messages.

    Raises:
      TypeError: If `source` is neither a path nor a string.
      SourceNotFoundError: If a path does not exist, or no dataset has that name.
      SourceError: If the source is not a prepared, readable TFDS dataset.
    """
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


def _list_versions(path: pathlib.Path) -> list[pathlib.Path]:
    """Returns the version directories one or two levels below `path` (hidden ones left out)."""
    return [
        info.parent
        for pattern in _DATASET_PATTERNS
        for info in path.glob(pattern)
        if tfds.core.Version.is_valid(info.parent.name)
        and not any(part.startswith('.') for part in info.relative_to(path).parts)
    ]


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
            f'and {_FEATURES} (for example {path.parent}), a Minari dataset directory holding '
            f'data/metadata.json, or a D4RL .hdf5 file.'
        )
    if (path / _DATASET_INFO).is_file():
        return path
    found = _list_versions(path)
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
    feature_classes.check_feature_classes(directory)
    try:
        return tfds.builder_from_directory(os.fspath(directory))
    except Exception as e:  # TFDS raises many types for unreadable metadata.
        raise SourceError(
            f'{directory} is not a readable TFDS dataset directory ({type(e).__name__}: {e}); '
            f'found {_list_entries(directory)}.'
        ) from e


def _builder_from_name(name: str, *, data_dir: Any) -> tfds.core.DatasetBuilder:
    """Returns the builder of a prepared TFDS dataset; never downloads or prepares.

    The prepared files in `data_dir` come first (as `tfds.builder_from_directory` reads
    them), so a dataset whose registered builder cannot open its own files (TFDS 4.9.4's
    Open X-Embodiment builders look for them relative to the working directory) loads
    anyway; TFDS' registry is asked only when no such files exist.
    """
    where = f'data_dir={os.fspath(data_dir)!r}' if data_dir else "TFDS' default data_dir"
    _, _, version = name.partition(':')
    if version and not tfds.core.Version.is_valid(version):
        raise SourceError(
            f'{name!r} names a TFDS community namespace; TFDS would fetch it (and may run its '
            'code), and rlds_reverb.load never downloads. Download it yourself and pass its '
            f'directory (holding {_DATASET_INFO}).'
        )
    prepared = _find_prepared(name, data_dir)
    if prepared is not None:
        return _builder_from_directory(prepared)
    _check_every_dataset_of(name, data_dir)  # TFDS may read one of them by itself.
    try:
        builder = tfds.builder(name, data_dir=os.fspath(data_dir) if data_dir else None)
    except tfds.core.DatasetNotFoundError as e:
        raise SourceNotFoundError(_describe_name_not_found(name, data_dir)) from e
    except Exception as e:  # TFDS raises many types for unreadable metadata.
        raise SourceError(
            f'Could not open TFDS dataset {name!r} in {where}: {e}. If its files are '
            f'elsewhere, pass the dataset directory (holding {_DATASET_INFO}) instead of '
            f'the name.'
        ) from e
    if not builder.is_prepared():
        raise SourceNotFoundError(
            f'TFDS dataset {name!r} is known but not prepared in {where} (looked for '
            f'{builder.data_path}). rlds_reverb.load never downloads: build it first (for '
            f'example `tfds build {name} --data_dir=...`) or pass its directory.'
        )
    return builder


def _data_root(data_dir: Any) -> pathlib.Path:
    return pathlib.Path(data_dir or tfds.core.constants.DATA_DIR).expanduser()


def _find_prepared(name: str, data_dir: Any) -> pathlib.Path | None:
    """Returns the prepared dataset directory of `name[/config][:version]`, if any."""
    root = _data_root(data_dir)
    base, _, version = name.partition(':')
    if not base or base.startswith(_PATH_SEPARATOR) or '..' in base.split(_PATH_SEPARATOR):
        return None
    if version:
        candidate = root / base / version
        return candidate if (candidate / _DATASET_INFO).is_file() else None
    versions = [
        info.parent
        for info in (root / base).glob(f'*/{_DATASET_INFO}')
        if tfds.core.Version.is_valid(info.parent.name)
    ]
    return max(versions, key=_version_key) if versions else None


def _check_every_dataset_of(name: str, data_dir: Any) -> None:
    """Checks the feature classes of every prepared directory TFDS could read for `name`.

    TFDS' `builder(name)` reads a prepared dataset from files by itself (its default config's
    directory, say), and would import the feature classes it names.
    """
    base = name.partition(':')[0].split(_PATH_SEPARATOR)[0]
    if not base or base.startswith('.'):
        return
    directory = _data_root(data_dir) / base
    for pattern in _DATASET_PATTERNS:
        for info in directory.glob(pattern):
            feature_classes.check_feature_classes(info.parent)


def _describe_name_not_found(name: str, data_dir: Any) -> str:
    """Returns the message for a TFDS name found nowhere, listing what the data dir holds."""
    root = _data_root(data_dir)
    looked = root / name.split(':')[0]
    present = (
        f' {root} holds: {_list_entries(root)}.' if root.is_dir() else f' {root} does not exist.'
    )
    return (
        f'No TFDS dataset named {name!r} in {root} (looked for {looked}/<version>/'
        f'{_DATASET_INFO}), and no path {name!r} exists.{present}'
    )
