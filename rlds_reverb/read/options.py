"""`LoadOptions`: every option of `rlds_reverb.load`, defined once with its default and check.

`load(source, options=..., **overrides)` builds one `LoadOptions` and hands it to the
reader that recognizes the source (`rlds_reverb.read.readers`). Each reader declares which
options it accepts; an option it does not accept, given with a value other than its
default, is refused by name (`loading.load`), never ignored. The value is frozen:
`dataclasses.replace(options, ...)` makes a changed copy, and a caller's value is never
changed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from rlds_reverb.core import checks, flags

if TYPE_CHECKING:
    import tensorflow_datasets as tfds

__all__ = ['ALL_FRAMES', 'CheckFiles', 'EncodedFrames', 'LoadOptions', 'StepPaths', 'make_options']

CheckFiles = bool | Literal['full']
# `encoded_frames='all'`: every frame field of the source stays encoded.
ALL_FRAMES = 'all'
# Which frame fields stay encoded: none (None), all of them, or these `/` paths.
EncodedFrames = Literal['all'] | Sequence[str] | None
# Step fields chosen with `step_fields`, as key paths ('observation/image' is
# ('observation', 'image')); None keeps every field.
StepPaths = tuple[tuple[str, ...], ...] | None
_CHECK_FILES = (True, False, 'full')
_PATH_SEPARATOR = '/'
# What each option is, for the message that refuses it (`LoadOptions.describe`).
_TFDS_READ_OPTIONS = (
    'shuffle_files and read_config are TFDS read options; shuffle the episodes with '
    '.shuffle() on what load returns instead'
)
_NOTES = {
    'split': "the split, with TFDS' slicing syntax ('train[:10%]')",
    'data_dir': 'where a TFDS dataset name is looked up',
    'shuffle_files': _TFDS_READ_OPTIONS,
    'read_config': _TFDS_READ_OPTIONS,
    'check_files': "checks of a TFDS split's shard files",
    'step_fields': 'the step fields to keep',
    'whole_episodes': "False reads TFDS' nested per-step datasets",
    'encoded_frames': 'the frame fields kept as their encoded bytes',
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadOptions:
    """How `rlds_reverb.load` opens a source: one value for every reader.

    Every reader accepts some of these (`Reader.accepts`); the others must stay at their
    defaults for its sources (docs/datasets.md, "Readers").

    Attributes:
      split: The split, with TFDS' slicing syntax (`'train[:10%]'`, `'train[10:20]'`);
        a D4RL file or a Minari dataset has one split, `'train'`, sliced the same way.
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
      encoded_frames: The frame fields (image features: JPEG or PNG frames) that stay as
        the bytes the source stores, `tf.string` per step, unchanged (no decode, no
        re-encode): None (default) decodes every frame; `'all'` keeps every frame field
        encoded; or their `/` paths (`['observation/image']`). `list_frame_fields(source)`
        lists them; the returned dataset's `frame_formats` says how each is encoded
        (docs/frames.md). On the command line: `--encoded-frames` (`push`, `serve`,
        `convert`).

    Raises:
      ValueError: If `check_files` is not True, False or 'full', or `shuffle_files` or
        `whole_episodes` is not a bool.
      TypeError: If `split` is not a string, `step_fields` is not a sequence of strings,
        `encoded_frames` is neither None, 'all' nor a sequence of strings, or
        `read_config` is not a `tfds.ReadConfig`.

    Example:
      >>> options = LoadOptions(split='train[:10%]', step_fields=['observation/image'])
      >>> episodes = rlds_reverb.load('/data/fractal/0.1.0', options=options)
    """

    split: str = 'train'
    data_dir: str | os.PathLike | None = None
    shuffle_files: bool = False
    read_config: tfds.ReadConfig | None = None
    check_files: CheckFiles = True
    step_fields: Sequence[str] | None = None
    whole_episodes: bool = True
    encoded_frames: EncodedFrames = dataclasses.field(
        default=None,
        metadata=flags.make_flag(
            "a frame field (`observation/image`) kept as its encoded bytes, or 'all'; "
            'repeat for several',
            repeat=True,
        ),
    )

    def __post_init__(self) -> None:
        if not isinstance(self.split, str):
            raise TypeError(f"split must be a string such as 'train[:10%]'; got {self.split!r}.")
        if self.check_files not in _CHECK_FILES:
            raise ValueError(
                f"check_files={self.check_files!r} is not valid; expected True, False or 'full'."
            )
        for name in ('shuffle_files', 'whole_episodes'):
            checks.check_bool(getattr(self, name), argument=name)
        if self.read_config is not None:
            import tensorflow_datasets as tfds  # Only when one is given: TFDS is slow to import.

            if not isinstance(self.read_config, tfds.ReadConfig):
                raise TypeError(f'read_config must be a tfds.ReadConfig; got {self.read_config!r}.')
        if self.step_fields is not None:
            object.__setattr__(self, 'step_fields', _check_step_fields(self.step_fields))
        object.__setattr__(self, 'encoded_frames', _check_encoded_frames(self.encoded_frames))

    @property
    def step_paths(self) -> StepPaths:
        """The selected step fields as key paths, or None for all of them."""
        if self.step_fields is None:
            return None
        return tuple(
            tuple(field.strip(_PATH_SEPARATOR).split(_PATH_SEPARATOR)) for field in self.step_fields
        )

    def list_changed(self) -> list[str]:
        """Returns the names of the options whose value is not their default, in order."""
        return [
            f.name for f in dataclasses.fields(self) if not _is_default(f, getattr(self, f.name))
        ]

    def describe(self, name: str) -> str:
        """Returns `name=value (what the option is)`, for messages naming an option."""
        return f'{name}={getattr(self, name)!r} ({_NOTES[name]})'


def _check_step_fields(step_fields: Any) -> tuple[str, ...]:
    if isinstance(step_fields, str) or not all(isinstance(f, str) for f in step_fields):
        raise TypeError(
            f'step_fields must be a sequence of field paths such as '
            f"['observation/image', 'language_instruction']; got {step_fields!r}."
        )
    return tuple(step_fields)


def _check_encoded_frames(encoded_frames: Any) -> EncodedFrames:
    """Returns None, 'all' or a tuple of paths (an empty sequence or ['all'] normalized)."""
    if encoded_frames is None or encoded_frames == ALL_FRAMES:
        return encoded_frames
    if isinstance(encoded_frames, str) or not all(isinstance(f, str) for f in encoded_frames):
        raise TypeError(
            f"encoded_frames must be None, 'all' or a sequence of frame field paths such as "
            f"['observation/image']; got {encoded_frames!r}."
        )
    paths = tuple(encoded_frames)
    if ALL_FRAMES in paths:
        return ALL_FRAMES
    return paths or None


def _is_default(field: dataclasses.Field, value: Any) -> bool:
    return value is field.default or (type(value) is type(field.default) and value == field.default)


def make_options(options: LoadOptions | None, overrides: dict[str, Any]) -> LoadOptions:
    """Returns the options of a `load` call: `options` (or the defaults) with `overrides`.

    Raises:
      TypeError: If an override is not an option of `load`, or `options` is not a
        `LoadOptions`.
      ValueError: If an option's value is not valid (as `LoadOptions` checks).

    Example:
      >>> make_options(None, {'split': 'train[:10]'}).split
      'train[:10]'
    """
    if options is None:
        options = LoadOptions()
    elif not isinstance(options, LoadOptions):
        raise TypeError(f'options must be a LoadOptions; got {type(options).__name__}.')
    names = {f.name for f in dataclasses.fields(LoadOptions)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise TypeError(
            f'load() got an unexpected keyword argument {unknown[0]!r}; its options '
            f'(LoadOptions) are {", ".join(sorted(names))}.'
        )
    return dataclasses.replace(options, **overrides) if overrides else options
