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
* a path to a D4RL HDF5 file (`.hdf5`, `.h5`): D4RL's key layout read as TFDS' d4rl
  builder makes episodes of it (`rlds_reverb.read.d4rl`, docs/d4rl.md);
* a Minari dataset directory (`<name>-v<N>/` or its `data/`, holding Minari's
  `metadata.json`, or the `main_data.hdf5` beside it; HDF5 or Arrow files): read by
  `rlds_reverb.read.minari` (docs/minari.md);
* a TFDS dataset name (`'name'`, `'name/config'`, `'name:1.0.0'`) found in `data_dir`
  (or in TFDS' default data directory); nothing is ever downloaded (a community namespace
  such as `'huggingface:name'`, which TFDS fetches, is refused).

Nothing in the files runs: the metadata is JSON, and a feature class it names that TFDS
would import to resolve is refused (`check_feature_classes`); nothing is unpickled.

Reading. A TFDS source is read as whole episodes: TFDS decodes each episode's steps in one
batch (images and other encoded features included) straight into `[T, ...]` tensors,
without the per-step nested dataset, and the toolkit's functions given the returned dataset
use those tensors (`core.episodes.to_whole_episodes`). Users still see an RLDS dataset: an
`EpisodeDataset` carrying its source (`core.sources`); its `.take`, `.skip` and `.shard`
select from the source and stay on this path, while any other transformation (`.map`) is
read through its nested steps, correctly but more slowly. `whole_episodes=False` reads the
nested steps as TFDS gives them. The default read
of TFRecord shards (no `read_config`, no file shuffling) goes straight from the shards to
whole episodes in one map (`rlds_reverb.read.records`: TFDS' own file instructions, order
and parser), which halves the set-up of `as_dataset` and a second decoding map; any other
read goes through TFDS' `as_dataset`, with the same episodes.

Choosing step fields. `step_fields=` names the step fields to keep (TFDS' `/` paths for
nested ones, such as `'observation/image'`): RLDS' own fields (action, reward, discount and
the flags) are always kept, and `observation` whole unless paths inside it are named.
Fields left out are never decoded, which is where images cost.

Corrupt files. Before reading, `load` checks that every shard of the split exists and, for
TFRecord shards, that their total size is what the split's records need; on a mismatch it
scans the shards and names the truncated or corrupt file. A shard corrupted without a size
change (flipped bytes) only shows when read: TF raises `tf.errors.DataLossError`
("corrupted record at ...") while iterating, which does not name the file; run
`load(..., check_files='full')` to scan every shard up front and name it. The full check
also decodes every record and names the shard, record and field of an episode whose step
fields do not parse (wrong dtype or size) or lack a field the others have.

Interrupted recordings. TFDS' sequential writer (envlogger's TFDS backend) lists a shard in
`dataset_info.json` only once it is finished; a recording killed before `close()` leaves
its open shard unlisted. `load` reads the listed shards and warns, naming that file and the
complete episodes it holds (an error if no shard is listed); docs/envlogger.md says how to
recover them.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import pathlib
import re
import struct
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
import tree

from rlds_reverb.core import compat, sources, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core.errors import SourceError, SourceNotFoundError, SpecMismatchError
from rlds_reverb.core.specs import get_step_spec
from rlds_reverb.read import d4rl, minari, records
from rlds_reverb.storage import tfds_writer

__all__ = [
    'CheckFiles',
    'Source',
    'load',
]

_LOGGER = logging.getLogger(__name__)
_DATASET_INFO = 'dataset_info.json'
_FEATURES = 'features.json'
# Where the Feature proto, written as JSON, names the Python class of a feature.
_CLASS_NAME_KEYS = ('pythonClassName', 'python_class_name')
_LISTED_ENTRIES = 8
# A string source that does not exist and starts so is a path, not a TFDS name.
_PATH_PREFIXES = ('/', '.', '~')
# Bytes TFRecord adds around each record: length (8), length CRC (4), data CRC (4).
_TFRECORD_OVERHEAD = 16
# Bytes before a record's data: its length (8) and the length's CRC (4).
_TFRECORD_HEADER = 12

Source = tf.data.Dataset | str | os.PathLike
CheckFiles = bool | Literal['full']
_PATH_SEPARATOR = '/'
# The step fields every selection keeps: RLDS' own, which every transform reads.
_ALWAYS_KEPT = tuple(f for f in types.REQUIRED_STEP_FIELDS if f != types.OBSERVATION)


def load(
    source: Source,
    *,
    split: str = 'train',
    data_dir: str | os.PathLike | None = None,
    shuffle_files: bool = False,
    read_config: tfds.ReadConfig | None = None,
    check_files: CheckFiles = True,
    step_fields: Sequence[str] | None = None,
    whole_episodes: bool = True,
) -> tf.data.Dataset:
    """Opens an RLDS dataset and checks that its steps hold every required field.

    Args:
      source: A `tf.data.Dataset` of RLDS episodes, a TFDS dataset directory (or the parent
        of its version directories), a D4RL HDF5 file, a Minari dataset directory, or a
        TFDS dataset name found in `data_dir`.
      split: The TFDS split, with TFDS' slicing syntax (`'train[:10%]'`); ignored for a
        `tf.data.Dataset`.
      data_dir: Where to look up a TFDS dataset name; TFDS' default when None.
      shuffle_files: Whether TFDS shuffles the order of the shards.
      read_config: TFDS read options (interleave, seeds...), passed to `as_dataset`.
      check_files: `True` checks that the split's shards exist with the right total size
        (cheap), and warns of a shard an interrupted recording left unlisted (not read);
        `'full'` also reads every shard once and decodes every record, naming a
        record whose step fields do not parse or differ in step count (a field missing
        from one episode); `False` checks nothing.
      step_fields: The step fields to keep, as `/` paths (`'observation/image'`,
        `'language_instruction'`); RLDS' own fields are always kept, and `observation` whole
        unless paths inside it are named. None keeps every field.
      whole_episodes: For a TFDS source, read each episode's steps as whole tensors (the
        fast path); False reads TFDS' nested per-step dataset.

    Returns:
      An RLDS dataset: episodes holding a `steps` dataset with every required field.

    Raises:
      SourceNotFoundError: If the path does not exist or no dataset has that name.
      D4rlFileError: If an HDF5 file is not in D4RL's layout, or `split` is not 'train'
        or one slice of it (`shuffle_files` and `read_config` are a `ValueError` there).
      SourceError: If the source is not an RLDS dataset (not a TFDS directory, no `steps`),
        the split is unknown, or a shard is missing, truncated or corrupt, or the only
        shard is one an interrupted recording left unlisted.
      SpecMismatchError: If a required step field other than `discount` is missing.
        A step feature the whole-episode reader cannot decode is named in a `SourceError`.
      SpecMismatchError: If `step_fields` names a field the steps do not have.
      MinariFormatError: If a Minari dataset's metadata.json or data files are empty,
        malformed or incomplete (the message names the file and key); a `SourceError`.
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
    paths = _parse_step_fields(step_fields)
    if minari.find_data_directory(source):  # A Minari dataset (rlds_reverb.read.minari).
        return _load_minari(source, split=split, paths=paths)
    if d4rl.is_d4rl_path(source):  # A D4RL HDF5 file (rlds_reverb.read.d4rl).
        return d4rl.load_d4rl(
            source,
            split=split,
            shuffle_files=shuffle_files,
            read_config=read_config,
            select_steps=lambda spec: select_step_fields(spec, paths, where=os.fspath(source)),
        )
    if isinstance(source, tf.data.Dataset):
        where = 'the given tf.data.Dataset'
        return _check_episodes(_select_in_steps(source, paths, where=where), where=where)
    builder, where = _open_builder(source, data_dir=data_dir)
    _check_rlds_features(builder, where=where)
    split_names = _check_split(builder, split, where=where)
    if check_files:
        for name in split_names:
            _check_shards(builder, name, where=where, full=check_files == 'full')
    if whole_episodes:
        episodes = _read_whole_episodes(
            builder,
            split=split,
            shuffle_files=shuffle_files,
            read_config=read_config,
            paths=paths,
            where=where,
        )
        _check_step_spec(episodes, where=where)
        return episodes
    try:
        episodes = builder.as_dataset(
            split=split, shuffle_files=shuffle_files, read_config=read_config
        )
    except (ValueError, KeyError, AssertionError, tf.errors.OpError) as e:
        raise SourceError(f'Could not read split {split!r} of {where}: {e}') from e
    return _check_episodes(_select_in_steps(episodes, paths, where=where), where=where)


def _load_minari(
    source: str | os.PathLike, *, split: str, paths: list[tuple[str, ...]] | None
) -> tf.data.Dataset:
    """Returns a Minari dataset's episodes (`rlds_reverb.read.minari`)."""
    where = f'the Minari dataset at {minari.find_data_directory(source)}'
    if split != 'train':
        raise SourceError(
            f'{where} has no splits (split={split!r}); read part of it with .take, .skip or '
            '.shard of what load returns.'
        )
    select = None if paths is None else (lambda s: select_step_fields(s, paths, where=where))
    episodes = minari.open_minari(source, select_steps=select)
    _check_step_spec(episodes, where=where)
    return episodes


def _parse_step_fields(step_fields: Sequence[str] | None) -> list[tuple[str, ...]] | None:
    """Returns the selected step fields as key paths, or None for all of them."""
    if step_fields is None:
        return None
    if isinstance(step_fields, str) or not all(isinstance(f, str) for f in step_fields):
        raise TypeError(
            f'step_fields must be a sequence of field paths such as '
            f"['observation/image', 'language_instruction']; got {step_fields!r}."
        )
    return [tuple(field.strip(_PATH_SEPARATOR).split(_PATH_SEPARATOR)) for field in step_fields]


def _list_paths(tree: Mapping, prefix: tuple[str, ...] = ()) -> list[str]:
    """Returns every `/` path of a nested mapping (sub-dicts and their leaves)."""
    found = []
    for key, value in tree.items():
        found.append(_PATH_SEPARATOR.join((*prefix, key)))
        if isinstance(value, Mapping | tfds.features.FeaturesDict):
            found += _list_paths(value, (*prefix, key))
    return found


def select_step_fields(tree: Mapping, paths: list[tuple[str, ...]] | None, *, where: str):
    """Returns the nested mapping `tree` (one step, or its features) pruned to `paths`.

    RLDS' own fields are always kept, and `observation` whole unless paths inside it are
    named.

    Raises:
      SpecMismatchError: If a path names a field `tree` does not have.
    """
    if paths is None:
        return dict(tree)
    wanted = [(field,) for field in _ALWAYS_KEPT if field in tree]
    if not any(path[0] == types.OBSERVATION for path in paths):
        wanted.append((types.OBSERVATION,))
    selected: dict = {}
    for path in [*wanted, *paths]:
        node, out = tree, selected
        for depth, key in enumerate(path):
            if not isinstance(node, Mapping | tfds.features.FeaturesDict) or key not in node:
                raise SpecMismatchError(
                    f'{where}: step_fields names {_PATH_SEPARATOR.join(path)!r}, which the '
                    f'steps do not have. Step fields: {_list_paths(tree)}.'
                )
            node = node[key]
            if depth == len(path) - 1:
                out[key] = node
            else:
                out = out.setdefault(key, {})
    return selected


def _select_in_steps(
    episodes: tf.data.Dataset, paths: list[tuple[str, ...]] | None, *, where: str
) -> tf.data.Dataset:
    """Returns the episodes with their steps pruned to `paths` (unchanged for None)."""
    if paths is None:
        return episodes
    steps_spec = episodes.element_spec.get(types.STEPS)
    if not isinstance(steps_spec, tf.data.DatasetSpec):
        return episodes  # Not RLDS: _check_episodes says why.
    select_step_fields(steps_spec.element_spec, paths, where=where)  # Names a wrong path.
    return episodes.map(
        lambda e: {
            **e,
            types.STEPS: e[types.STEPS].map(
                lambda step: select_step_fields(step, paths, where=where)
            ),
        }
    )


def _read_whole_episodes(
    builder: tfds.core.DatasetBuilder,
    *,
    split: str,
    shuffle_files: bool,
    read_config: tfds.ReadConfig | None,
    paths: list[tuple[str, ...]] | None,
    where: str,
) -> episodes_lib.EpisodeDataset:
    """Returns the split's episodes, read as whole `[T, ...]` tensors from their source.

    The source is the split's TFRecord shards (`records.RecordSource`) for the default read,
    else TFDS' `as_dataset` with `steps` left encoded (a `DatasetSource`). Either way each
    episode's step features are decoded as one batch (`decode_batch_example`: images and
    other encoded features decoded per step inside one op), only for the selected fields,
    and only for the episodes a `take`, `skip` or `shard` keeps.
    """
    step_features = select_step_fields(
        builder.info.features[types.STEPS].feature, paths, where=where
    )
    # A Sequence decodes each field with its own batch decoder (a whole FeaturesDict would
    # decode step by step with tf.map_fn, ~10x slower here).
    decoder = tfds.features.Sequence(tfds.features.FeaturesDict(step_features))

    def _decode_steps(raw: dict) -> dict:
        steps = decoder.decode_example(select_step_fields(raw, paths, where=where))
        steps = _check_step_counts(steps, where=where)
        if types.DISCOUNT not in steps and types.REWARD in steps:
            steps = _fill_discount(steps)
        return steps

    if types.DISCOUNT not in step_features and types.REWARD in step_features:
        _warn_no_discount(where, stacklevel=4)
    serialized_steps = select_step_fields(
        builder.info.features[types.STEPS].get_serialized_info(), paths, where=where
    )
    try:
        if records.can_read_records(builder, shuffle_files=shuffle_files, read_config=read_config):
            try:
                source = records.make_record_source(
                    builder,
                    split=split,
                    serialized_steps=serialized_steps,
                    decode_steps=episodes_lib.without_autograph(_decode_steps),
                )
                return episodes_lib.from_source(source)
            except (ValueError, KeyError, AssertionError, tf.errors.OpError):
                pass  # A split TFDS resolves itself (such as 'all'): as_dataset reads it.
        encoded = _read_encoded_steps(
            builder, split=split, shuffle_files=shuffle_files, read_config=read_config, where=where
        )
        decode = episodes_lib.without_autograph(
            lambda episode: {**episode, types.STEPS: _decode_steps(episode[types.STEPS])}
        )
        return episodes_lib.from_source(sources.DatasetSource(encoded, decode))
    except SourceError:
        raise
    except Exception:  # Tracing failed: find and name the field (traced alone, once each).
        encoded = _read_encoded_steps(
            builder, split=split, shuffle_files=shuffle_files, read_config=read_config, where=where
        )
        encoded_spec = select_step_fields(encoded.element_spec[types.STEPS], paths, where=where)
        _check_decodable(decoder, encoded_spec, where=where)
        raise


def _read_encoded_steps(
    builder: tfds.core.DatasetBuilder,
    *,
    split: str,
    shuffle_files: bool,
    read_config: tfds.ReadConfig | None,
    where: str,
) -> tf.data.Dataset:
    """Returns TFDS' episodes with `steps` left encoded (as parsed, not decoded)."""
    try:
        return builder.as_dataset(
            split=split,
            shuffle_files=shuffle_files,
            read_config=read_config,
            decoders={types.STEPS: tfds.decode.SkipDecoding()},
        )
    except (ValueError, KeyError, AssertionError, tf.errors.OpError) as e:
        raise SourceError(f'Could not read split {split!r} of {where}: {e}') from e


def _check_step_counts(steps: dict, *, where: str) -> dict:
    """Returns `steps`, failing while read if a field's step count differs from the others'.

    A record that lacks a step field (written under other features) decodes it with zero
    steps; the nested reader failed there too, without naming the field. Every traced op
    costs set-up time (about 0.6 ms each with pure-Python protobuf), so one `Assert` checks
    every field from one concatenation of their shapes, and its message lists each field
    with its step count.
    """
    flat = tree.flatten_with_path(steps)
    leaves = [x for _, x in flat]
    not_tensors = [x for x in leaves if not isinstance(x, tf.Tensor | tf.RaggedTensor)]
    if not_tensors:  # Such as a Dataset per step: load names the field (_check_decodable).
        raise TypeError(f'a step field decodes to a {type(not_tensors[0]).__name__}')
    if not all(isinstance(x, tf.Tensor) and x.shape.rank for x in leaves):
        return steps  # Ragged or unknown rank: slicing the steps fails on uneven counts.
    names = tf.constant(['/'.join(map(str, path)) for path, _ in flat])
    # The leading dimension of each leaf, gathered from all their shapes at once.
    starts = np.cumsum([0] + [x.shape.rank for x in leaves[:-1]])
    counts = tf.gather(tf.concat([tf.shape(x) for x in leaves], axis=0), starts)
    check = tf.debugging.Assert(
        tf.equal(tf.reduce_min(counts), tf.reduce_max(counts)),
        [
            f"{where}: an episode's step field has a different number of steps than its "
            f"'{types.IS_FIRST}' flags, so the record is not a valid episode (a field missing "
            "from it?). load(..., check_files='full') names the shard and record. Fields and "
            'their step counts:',
            names,
            counts,
        ],
        summarize=len(leaves),
    )
    # tf.data functions run their stateful ops (the Assert) with every element, so the
    # steps need no control dependency on it (one Identity per field).
    del check
    return steps


def _make_decode_probe(sequence: tfds.features.Sequence, not_tensors: list[str]):
    """Returns a function decoding one field's steps that lists non-tensor outputs."""

    def _probe(raw):
        decoded = sequence.decode_example(raw)
        not_tensors.extend(
            type(leaf).__name__
            for leaf in tf.nest.flatten(decoded)
            if not isinstance(leaf, tf.Tensor)
        )
        return tf.constant(0)

    return _probe


def _check_decodable(decoder: tfds.features.Sequence, encoded_spec: Mapping, *, where: str) -> None:
    """Raises `SourceError` naming the step feature that cannot be decoded as a batch.

    A feature fails when its batch decoder does not trace, or when it decodes to something
    other than tensors (a `tfds.features.Dataset` inside each step decodes to datasets).
    """
    for name, feature in decoder.feature.items():
        spec = encoded_spec[name]
        sequence = tfds.features.Sequence(feature)

        not_tensors: list[str] = []

        advice = (
            'Leave the field out with step_fields=, or read the nested steps with '
            'load(..., whole_episodes=False).'
        )
        try:
            tf.function(_make_decode_probe(sequence, not_tensors)).get_concrete_function(spec)
        except Exception as e:  # TFDS features raise many types for unsupported data.
            raise SourceError(
                f'{where}: step field {name!r} ({type(feature).__name__}) cannot be decoded '
                f'as a whole episode ({type(e).__name__}: {e}). {advice}'
            ) from e
        if not_tensors:
            raise SourceError(
                f'{where}: step field {name!r} ({type(feature).__name__}) decodes to a '
                f'{not_tensors[0]} in each step, not to a tensor, so its steps cannot be held '
                f'as one episode tensor (and no transform of the toolkit takes it). {advice}'
            )


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
    return _open_builder(source, data_dir=data_dir)[0]


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
            f'and {_FEATURES} (for example {path.parent}), a Minari dataset directory holding '
            f'data/metadata.json, or a D4RL .hdf5 file.'
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


def _list_known_feature_classes() -> set[str]:
    """Returns the feature class names TFDS resolves without importing anything.

    The same names TFDS registers: every `FeatureConnector` subclass imported so far (TFDS'
    own, and any the user imported), and their `ALIASES`.
    """
    known, pending = set(), [tfds.features.FeatureConnector]
    while pending:
        cls = pending.pop()
        known.add(f'{cls.__module__}.{cls.__name__}')
        known.update(cls.__dict__.get('ALIASES', ()))
        pending.extend(cls.__subclasses__())
    return known


def _list_feature_classes(node: Any) -> list[str]:
    """Returns every feature class name in a features JSON value (either of TFDS' formats)."""
    found = []
    if isinstance(node, Mapping):
        if isinstance(node.get('type'), str) and 'content' in node:
            found.append(node['type'])  # The legacy {'type': ..., 'content': ...} format.
        for key in _CLASS_NAME_KEYS:  # The Feature proto as JSON.
            if isinstance(node.get(key), str):
                found.append(node[key])
        for value in node.values():
            found += _list_feature_classes(value)
    elif isinstance(node, list):
        for value in node:
            found += _list_feature_classes(value)
    return found


def check_feature_classes(directory: os.PathLike | str) -> None:
    """Refuses a dataset whose metadata names a feature class TFDS would import to find.

    TFDS 4.9.4 resolves each feature's class by the name stored in `features.json` (or in
    `dataset_info.json`); a name it does not know yet makes it import the module named
    there, which runs that module's code. Loading a dataset must not run code it names.

    Args:
      directory: A TFDS dataset directory.

    Raises:
      SourceError: If a feature class is neither TFDS' own nor imported already.

    Example:
      >>> check_feature_classes('/data/cartpole_v1/1.0.0')
    """
    directory = pathlib.Path(directory)
    known = _list_known_feature_classes()
    for name in (_FEATURES, _DATASET_INFO):
        try:
            content = json.loads((directory / name).read_text())
        except (OSError, ValueError):
            continue  # Missing or not JSON: TFDS reports it (it never evaluates the text).
        content = content.get('features') if name == _DATASET_INFO else content
        unknown = sorted(set(_list_feature_classes(content or {})) - known)
        if unknown:
            module = unknown[0].rpartition('.')[0] or unknown[0]
            raise SourceError(
                f'{directory / name} names the feature class(es) {", ".join(unknown)}, which '
                f'are not TFDS features; TFDS would import {module!r} to find them, running '
                'code named by the dataset, so rlds_reverb.load refuses it. If you trust that '
                'code, import the module yourself first, then load again.'
            )


def _builder_from_directory(directory: pathlib.Path) -> tfds.core.DatasetBuilder:
    check_feature_classes(directory)
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
    try:
        builder = tfds.builder(name, data_dir=os.fspath(data_dir) if data_dir else None)
    except tfds.core.DatasetNotFoundError as e:
        raise SourceNotFoundError(_name_not_found(name, data_dir)) from e
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


def _find_prepared(name: str, data_dir: Any) -> pathlib.Path | None:
    """Returns the prepared dataset directory of `name[/config][:version]`, if any."""
    root = pathlib.Path(data_dir or tfds.core.constants.DATA_DIR).expanduser()
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
    _check_unlisted_shard(info, where=where, split=split)
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
        parser = compat.make_example_parser(builder.info.features.get_serialized_info())
        for path in paths:
            _check_records(path, parser, where=where, split=split)


def _find_unlisted_shard(info: tfds.core.SplitInfo) -> pathlib.Path | None:
    """Returns the shard file after the split's listed ones, if one exists.

    TFDS' sequential writer (envlogger's TFDS backend) rewrites `dataset_info.json` only when
    a shard is finished, so a recording stopped before `close()` leaves its open shard
    there, unlisted (envlogger's `rlds_utils.maybe_recover_last_shard` looks for it so too).
    """
    template = info.filename_template
    if template is None:
        return None
    path = template.sharded_filepath(shard_index=info.num_shards, num_shards=info.num_shards + 1)
    path = pathlib.Path(os.fspath(path))
    return path if path.is_file() else None


def _describe_unfinished_shard(path: pathlib.Path) -> str:
    """Returns how many whole records the shard holds and whether its last one is cut.

    Reads the TFRecord framing only (each record's length), seeking past the data.
    """
    size = path.stat().st_size
    whole = position = 0
    with path.open('rb') as file:
        while position + _TFRECORD_HEADER <= size:
            file.seek(position)
            (length,) = struct.unpack('<Q', file.read(8))
            if position + length + _TFRECORD_OVERHEAD > size:
                break
            whole += 1
            position += length + _TFRECORD_OVERHEAD
    cut = ' and an incomplete last record' if position != size else ''
    return f'{whole} complete episode(s){cut}'


def _check_unlisted_shard(info: tfds.core.SplitInfo, *, where: str, split: str) -> None:
    """Names a shard a recording left unfinished: a warning, or an error if it is all there is.

    Raises:
      SourceError: If `dataset_info.json` lists no shard of the split but an unfinished one
        exists.
    """
    path = _find_unlisted_shard(info)
    if path is None:
        return
    problem = (
        f'{where}: split {split!r} lists {info.num_shards} shard(s) in {_DATASET_INFO}, but '
        f'{path} also exists, unlisted: the open shard of a recording stopped before it was '
        'closed (envlogger or tfds.core.SequentialWriter killed). It holds '
        f'{_describe_unfinished_shard(path)}'
    )
    advice = (
        'To read its complete episodes, keep its complete records and list it with '
        "envlogger's rlds_utils.maybe_recover_last_shard (docs/envlogger.md, Recovery)."
    )
    if not info.num_shards:
        raise SourceError(f'{problem}, and nothing else is there to read. {advice}')
    warnings.warn(
        f'{problem}, which are NOT read: only the {info.num_examples} episode(s) of the listed '
        f'shards are. {advice}',
        UserWarning,
        stacklevel=4,  # The caller of `load`.
    )


def _check_records(path: pathlib.Path, parser: Any, *, where: str, split: str) -> None:
    """Raises `SourceError` naming the first record of a shard that does not decode whole.

    A record decodes whole when every step field parses with its feature's dtype and shape
    and all step fields have the same number of steps (a field missing from one episode
    parses as zero steps).
    """

    @episodes_lib.without_autograph
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


@episodes_lib.without_autograph
def _count_one(count: tf.Tensor, _) -> tf.Tensor:
    return count + 1


def _scan_shards(
    paths: list[pathlib.Path], shard_lengths: list[int], *, where: str, split: str
) -> None:
    """Reads every record of every shard; raises `SourceError` naming the first bad one."""
    for path, length in zip(paths, shard_lengths, strict=True):
        records = tf.data.TFRecordDataset(os.fspath(path))
        try:
            count = int(records.reduce(tf.constant(0, tf.int64), _count_one))
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


def _warn_no_discount(where: str, *, stacklevel: int) -> None:
    warnings.warn(
        f"The steps of {where} have no '{types.DISCOUNT}' field; using 1.0 on every step "
        '(the is_terminal flag decides termination: every transition into a terminal step '
        'gets discount 0).',
        UserWarning,
        stacklevel=stacklevel,  # The caller of `load`.
    )


def _with_discount(episodes: tf.data.Dataset, *, where: str) -> tf.data.Dataset:
    """Returns the episodes with `discount` filled in where the steps lack it (warning once)."""
    episode_spec = episodes.element_spec
    steps_spec = episode_spec.get(types.STEPS) if isinstance(episode_spec, dict) else None
    step_spec = steps_spec.element_spec if isinstance(steps_spec, tf.data.DatasetSpec) else None
    if not isinstance(step_spec, dict) or types.DISCOUNT in step_spec:
        return episodes  # Complete, or not RLDS at all: get_step_spec says which.
    if types.REWARD not in step_spec:
        return episodes  # get_step_spec names every missing field.
    _warn_no_discount(where, stacklevel=5)
    fill = episodes_lib.without_autograph(_fill_discount)
    return episodes.map(
        episodes_lib.without_autograph(
            lambda episode: {**episode, types.STEPS: episode[types.STEPS].map(fill)}
        )
    )


def _check_episodes(episodes: tf.data.Dataset, *, where: str) -> tf.data.Dataset:
    """Returns the episodes with `discount` filled, after checking the step fields."""
    episodes = _with_discount(episodes, where=where)
    _check_step_spec(episodes, where=where)
    return episodes


def _check_step_spec(episodes: tf.data.Dataset, *, where: str) -> None:
    """Raises unless the episodes' steps hold every required field (naming `where`)."""
    try:
        get_step_spec(episodes)
    except SpecMismatchError as e:
        raise SpecMismatchError(f'{where}: {e}') from e
    except SourceError as e:
        raise SourceError(f'{where}: {e}') from e
