"""`load`: open an RLDS dataset from any source a registered reader recognizes.

Whatever the source, `load` returns an RLDS dataset (see `rlds_reverb.core.types`) whose steps
hold every required field: a missing `discount` is filled with 1.0 (with a warning, as
docs/semantics.md §1 says); any other missing field is an error that names it.

Readers, in the order `load` asks them (`list_readers`); the first that recognizes the
source opens it (`rlds_reverb.read.readers.Reader`):

1. readers registered with `register_reader`, in the order they were registered;
2. `lerobot`: a LeRobot v3.0 dataset directory (the folder holding `meta/info.json`; older
   formats are refused with LeRobot's upgrade command): `rlds_reverb.read.lerobot`
   (docs/lerobot.md);
3. `minari`: a Minari dataset directory (`<name>-v<N>/` or its `data/`, holding Minari's
   `metadata.json`, or the `main_data.hdf5` beside it; HDF5 or Arrow files):
   `rlds_reverb.read.minari` (docs/minari.md);
4. `d4rl`: a path to a D4RL HDF5 file (`.hdf5`, `.h5`): D4RL's key layout read as TFDS' d4rl
   builder makes episodes of it (`rlds_reverb.read.d4rl`, docs/d4rl.md);
5. `tf.data`: a `tf.data.Dataset` of RLDS episodes: checked and returned (with `discount`
   filled in);
6. `tfds`, last since it takes any path or name: a TFDS dataset directory (holding
   `dataset_info.json`, e.g. `~/tensorflow_datasets/name/1.0.0`; envlogger's recordings are
   such directories), a parent of version directories (`name/` holding `1.0.0/`, or
   `name/config/1.0.0/`; the latest version is used when there are several), or a TFDS
   dataset name (`'name'`, `'name/config'`, `'name:1.0.0'`) found in `data_dir` (or in TFDS'
   default data directory); nothing is ever downloaded (a community namespace such as
   `'huggingface:name'`, which TFDS fetches, is refused): `rlds_reverb.read.tfds_reader`.

Options. `LoadOptions` defines every option (`load(source, split=...)` is
`load(source, options=LoadOptions(split=...))`). Each reader declares the options it accepts;
one it does not accept, given with a value other than its default, is refused by name
(`SourceError`), never ignored.

Frames. A TFDS source's image features (JPEG or PNG frames) and a LeRobot dataset's
image-mode cameras (PNG) can stay encoded: `load(source, encoded_frames='all')` hands them
out as the stored bytes, and `list_frame_fields(source)` lists them from the features (or
info.json) alone (docs/frames.md). LeRobot video cameras are refused by name (their frames
live in an mp4 file); readers of sources that hold no encoded frames (Minari, D4RL,
`tf.data`) do not accept the option.

Nothing in the files runs: metadata is JSON, and a feature class it names that TFDS would
import to resolve is refused (`rlds_reverb.read.feature_classes`); nothing is unpickled.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, TypeAlias

import tensorflow as tf

from rlds_reverb.core.errors import SourceError
from rlds_reverb.core.frames import FrameFormat
from rlds_reverb.read import d4rl, lerobot, minari, readers, tfds_reader
from rlds_reverb.read.options import LoadOptions, make_options
from rlds_reverb.read.tfds_dirs import open_builder

__all__ = [
    'Source',
    'TfDataReader',
    'find_reader',
    'list_frame_fields',
    'list_readers',
    'load',
    'open_builder',
    'register_reader',
    'unregister_reader',
]

Source: TypeAlias = tf.data.Dataset | str | os.PathLike
_OPTION_NAMES = frozenset(field.name for field in dataclasses.fields(LoadOptions))


class TfDataReader:
    """Reads a `tf.data.Dataset` of RLDS episodes: checked, with `discount` filled in.

    A complete dataset is returned as it is; `step_fields` prunes its steps.
    """

    name = 'tf.data'
    accepts = frozenset({'step_fields'})

    def recognizes(self, source: Any) -> bool:
        """Returns whether `source` is a `tf.data.Dataset`."""
        return isinstance(source, tf.data.Dataset)

    def open(self, source: Any, options: LoadOptions) -> tf.data.Dataset:
        """Returns `source` with its steps checked (see `readers.finish_episodes`)."""
        return readers.finish_episodes(source, options, where='the given tf.data.Dataset')


_BUILT_IN: tuple[readers.Reader, ...] = (
    lerobot.LeRobotReader(),
    minari.MinariReader(),
    d4rl.D4rlReader(),
    TfDataReader(),
    tfds_reader.TfdsReader(),
)
_registered: list[readers.Reader] = []


def list_readers() -> tuple[readers.Reader, ...]:
    """Returns the readers in the order `load` asks them: registered ones, then built-in ones.

    Example:
      >>> tuple(reader.name for reader in list_readers())
      ('lerobot', 'minari', 'd4rl', 'tf.data', 'tfds')
    """
    return (*_registered, *_BUILT_IN)


def register_reader(reader: readers.Reader) -> None:
    """Makes `load` (and everything that opens sources with it) read a new kind of source.

    Registered readers are asked before the built-in ones, in the order they were
    registered; the first reader that recognizes a source opens it.

    Args:
      reader: A `rlds_reverb.read.readers.Reader`: `name`, `accepts`, `recognizes(source)`
        and `open(source, options)`.

    Raises:
      TypeError: If `reader` lacks a member of the protocol.
      ValueError: If a reader of that name is already there, or `accepts` names
        something that is not a `LoadOptions` field.

    Example:
      >>> register_reader(NpzReader())
      >>> episodes = rlds_reverb.load('/data/episode_0.npz')
    """
    if not isinstance(reader, readers.Reader):
        members = ('name', 'accepts', 'recognizes', 'open')
        missing = [m for m in members if not hasattr(reader, m)]
        raise TypeError(f'{reader!r} is not a Reader: it lacks {", ".join(missing)}.')
    taken = [r.name for r in list_readers()]
    if reader.name in taken:
        raise ValueError(
            f'A reader named {reader.name!r} is already registered (readers: {taken}); '
            'give yours another name, or unregister_reader() the other one first.'
        )
    unknown = sorted(set(reader.accepts) - _OPTION_NAMES)
    if unknown:
        raise ValueError(
            f'Reader {reader.name!r} accepts {unknown}, which are not options of load; '
            f'its options (LoadOptions) are {sorted(_OPTION_NAMES)}.'
        )
    _registered.append(reader)


def unregister_reader(name: str) -> None:
    """Removes the registered reader named `name`.

    Raises:
      ValueError: If no registered reader has that name (built-in readers stay).

    Example:
      >>> unregister_reader('npz')
    """
    for reader in _registered:
        if reader.name == name:
            _registered.remove(reader)
            return
    raise ValueError(
        f'No registered reader is named {name!r}; registered: '
        f'{[r.name for r in _registered]} (the built-in readers cannot be removed).'
    )


def _describe_source(source: Any) -> str:
    return 'the given tf.data.Dataset' if isinstance(source, tf.data.Dataset) else repr(source)


def find_reader(source: Any) -> readers.Reader:
    """Returns the first reader (`list_readers`) that recognizes `source`.

    Raises:
      TypeError: If no reader does (`source` is not a dataset, a path or a string).

    Example:
      >>> find_reader('/data/halfcheetah_medium-v2.hdf5').name
      'd4rl'
    """
    for reader in list_readers():
        if reader.recognizes(source):
            return reader
    raise TypeError(
        f'source must be a tf.data.Dataset, a path or a TFDS dataset name (or a source a '
        f'registered reader recognizes); got {type(source).__name__}.'
    )


def _refuse_unaccepted(reader: readers.Reader, options: LoadOptions, source: Any) -> None:
    """Raises `SourceError` naming every option `reader` does not accept but was given."""
    refused = [name for name in options.list_changed() if name not in reader.accepts]
    if not refused:
        return
    defaults = LoadOptions()
    given = '; '.join(options.describe(name) for name in refused)
    accepted = ', '.join(sorted(reader.accepts)) or 'no option'
    keep = ', '.join(f'{name}={getattr(defaults, name)!r}' for name in refused)
    raise SourceError(
        f'{_describe_source(source)} is read by the {reader.name} reader, which does not take '
        f'{given}. It accepts {accepted}: leave the others at their defaults ({keep}).'
    )


def load(
    source: Source, *, options: LoadOptions | None = None, **overrides: Any
) -> tf.data.Dataset:
    """Opens an RLDS dataset and checks that its steps hold every required field.

    Args:
      source: A `tf.data.Dataset` of RLDS episodes, a TFDS dataset directory (or the parent
        of its version directories), a D4RL HDF5 file, a Minari dataset directory, a LeRobot
        v3.0 dataset directory, a TFDS
        dataset name found in `data_dir`, or any source a registered reader recognizes
        (the module docstring gives the order readers are asked in).
      options: How to open it (`LoadOptions`); the defaults when None.
      **overrides: Any `LoadOptions` field (`split='train[:10%]'`, `step_fields=[...]`,
        `data_dir=...`, `shuffle_files=`, `read_config=`, `check_files=`,
        `whole_episodes=`, `encoded_frames=`), replacing that field of `options`.

    Returns:
      An RLDS dataset: episodes holding a `steps` dataset with every required field.

    Raises:
      SourceNotFoundError: If the path does not exist or no dataset has that name.
      D4rlFileError: If an HDF5 file is not in D4RL's layout, or `split` is not 'train'
        or one slice of it.
      MinariFormatError: If a Minari dataset's metadata.json or data files are empty,
        malformed or incomplete (the message names the file and key); a `SourceError`.
      LeRobotFormatError: If a LeRobot dataset is of format v2.x or older (the message says
        how to upgrade it), or its metadata or data files are missing, malformed or
        inconsistent (the message names the file and the column); a `SourceError`.
      SourceError: If the source is not an RLDS dataset (not a TFDS directory, no `steps`),
        the split is unknown, a shard is missing, truncated or corrupt, the only shard is
        one an interrupted recording left unlisted, a step feature cannot be decoded whole,
        or an option is given that the source's reader does not accept.
      SpecMismatchError: If a required step field other than `discount` is missing, or
        `step_fields` names a field the steps do not have.
      FrameFieldError: If `encoded_frames` names a field that is not a frame field of the
        source (the message lists those that are).
      TypeError: If `source` is neither a dataset, a path nor a string (nor a source a
        registered reader recognizes), an override is not an option of `load`, or an
        option has the wrong type (`LoadOptions`).
      ValueError: If an option's value is not valid, such as `check_files` not True,
        False or 'full' (`LoadOptions`).

    Example:
      >>> episodes = load('~/tensorflow_datasets/cartpole_v1/1.0.0')
      >>> episodes = load('cartpole_v1', data_dir='/tmp/data', split='train[:10]')
      >>> episodes = load('/data/door-human-v2', options=LoadOptions(split='train[:50%]'))
      >>> episodes = load('/data/fractal/0.1.0', encoded_frames='all')  # JPEG bytes kept
    """
    options = make_options(options, overrides)
    reader = find_reader(source)
    _refuse_unaccepted(reader, options, source)
    return reader.open(source, options)


def list_frame_fields(
    source: Source, *, data_dir: str | os.PathLike | None = None
) -> dict[str, FrameFormat]:
    """Returns the step fields of `source` that hold encoded frames, and their formats.

    From the source's features alone: no episode is read. These are the fields
    `load(source, encoded_frames=...)` can keep encoded. A reader lists them with its
    optional `list_frame_fields(source, options)` method (`readers.Reader`); a source
    whose reader has none holds no encoded frames (`{}`).

    Args:
      source: Any source `load` takes.
      data_dir: Where to look up a TFDS dataset name.

    Returns:
      `{path: FrameFormat}`, such as `{'observation/image': FrameFormat('jpeg', (256, 320,
      3))}`, sorted by path.

    Raises:
      SourceNotFoundError: If the path does not exist or no dataset has that name.
      SourceError: If the source is not an RLDS dataset.
      TypeError: If no reader recognizes `source`.

    Example:
      >>> rlds_reverb.list_frame_fields('/data/fractal/0.1.0')
      {'observation/image': FrameFormat(codec='jpeg', shape=(256, 320, 3))}
    """
    reader = find_reader(source)
    lister = getattr(reader, 'list_frame_fields', None)
    if lister is None:
        return {}
    found = lister(source, LoadOptions(data_dir=data_dir))
    return dict(sorted(found.items()))
