"""Save any source `rlds_reverb.load` reads as an RLDS dataset in TFDS format.

`save_as_rlds(source, directory)` opens the source with `load` (a TFDS directory or name, a
`tf.data.Dataset` of RLDS episodes, a D4RL HDF5 file, any source `load` reads), reads
its episodes as whole `[T, ...]` tensors one at a time, and streams them into a TFDS
dataset directory with the project's writer (`storage.tfds_writer.RldsDatasetWriter`). So
TFDS's own tools (`tfds.builder_from_directory`) and the toolkit's fast record path read
the copy, and peak memory stays flat in the number of episodes.

What the copy holds (docs/convert.md):

* the features come from the source's element spec (`storage.features.make_feature`):
  every step field and every episode-level field (metadata, nested dicts included) becomes
  a `tfds.features.Tensor` of its shape and dtype; strings stay strings; images are stored
  as raw uint8 tensors (not re-encoded as PNG: larger files, no decoding when read);
* frames kept encoded (`encoded_frames`, or a source `load(..., encoded_frames=...)`
  returned) are stored as TFDS `Image` features of their format (codec and shape), their
  bytes written unchanged: no decode, no re-encode (`storage.features.make_feature` of a
  spec named by its format, as the Reverb export writes them);
* the episodes in the source's order: the dataset is marked ordered (TFDS'
  `disable_shuffling`), so readers take its shards one after the other
  (`keep_order=False` writes a dataset TFDS may shuffle, whose read order interleaves the
  shards);
* float64 fields keep their dtype but, as in every TFDS dataset stored as `tf.train.Example`,
  their values are stored as float32 (TFDS's own writer does the same).

A failed or interrupted save leaves nothing that looks like a dataset: the writer stages
into a hidden sibling directory and moves it into place only once complete; an error
removes the staging directory and says, on the error, how far the save got and that
`directory` is as it was.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import time
from typing import Any

import tensorflow as tf
import tensorflow_datasets as tfds
import tree

from rlds_reverb.core import checks, frames, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.read import loading
from rlds_reverb.read.options import EncodedFrames
from rlds_reverb.storage import features as features_lib
from rlds_reverb.storage import tfds_writer

__all__ = [
    'SaveStats',
    'save_as_rlds',
]

_DATASET_INFO = 'dataset_info.json'
_DEFAULT_NAME = 'rlds_dataset'
_DEFAULT_VERSION = '1.0.0'
# Episodes read ahead of the writer (overlaps reading and writing; memory stays bounded).
_PREFETCH_EPISODES = 2


@dataclasses.dataclass
class SaveStats:
    """What `save_as_rlds` wrote: episodes, steps, seconds, and the dataset directory."""

    episodes: int = 0
    steps: int = 0
    seconds: float = 0.0
    directory: pathlib.Path | None = None

    @property
    def steps_per_second(self) -> float:
        """Steps written per second, set-up included."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0


def _derive_name(directory: pathlib.Path) -> tuple[str, str]:
    """Returns the TFDS name and version a directory suggests (`name/1.2.0`, or `name`)."""
    version = _DEFAULT_VERSION
    base = directory.name
    if tfds.core.Version.is_valid(base):
        version, base = base, directory.parent.name
    name = re.sub(r'[^a-z0-9_]+', '_', base.lower()).strip('_')
    if not name or not name[0].isalpha():
        name = f'{_DEFAULT_NAME}_{name}'.rstrip('_') if name else _DEFAULT_NAME
    return name, version


def _check_target(
    directory: pathlib.Path, *, overwrite: bool, source_path: pathlib.Path | None
) -> None:
    """Raises unless `directory` may be written: new, empty, or a dataset to overwrite.

    Raises:
      NotADirectoryError: If `directory` is a file.
      FileExistsError: If it is not empty and `overwrite` is false, or `overwrite` would
        remove something other than a TFDS dataset directory.
      ValueError: If `directory` is the source, or holds it.
    """
    real = directory.resolve()
    if source_path is not None and (real == source_path or real in source_path.parents):
        raise ValueError(
            f'The output directory {directory} is (or holds) the source {source_path}; '
            'write the copy elsewhere.'
        )
    if not directory.exists():
        return
    if not directory.is_dir():
        raise NotADirectoryError(f'The output {directory} exists and is not a directory.')
    entries = sorted(p.name for p in directory.iterdir())
    if not entries:
        return
    if not overwrite:
        raise FileExistsError(
            f'The output directory {directory} exists and is not empty (it holds '
            f'{entries[:5]}{" ..." if len(entries) > 5 else ""}); choose a new directory, or '
            'pass overwrite=True (--overwrite) to replace the dataset in it.'
        )
    if not (directory / _DATASET_INFO).is_file():
        raise FileExistsError(
            f'overwrite=True replaces a TFDS dataset directory only, and {directory} holds '
            f'no {_DATASET_INFO} (it holds {entries[:5]}); remove it yourself or choose a '
            'new directory.'
        )


def _describe_path(path: tuple) -> str:
    return '/'.join(str(p) for p in path)


def _step_spec(path: tuple, spec: tf.TensorSpec, *, where: str) -> tf.TensorSpec:
    """Returns the spec of one step of a whole-episode `[T, ...]` field."""
    if spec.shape.rank is None or spec.shape[1:].num_elements() is None:
        raise ValueError(
            f'{where}: step field {_describe_path(path)!r} has shape {spec.shape} (per '
            'episode); TFDS stores a step field with a fixed shape only. Give it one '
            '(for example `.map` with `tf.ensure_shape`) before saving.'
        )
    return tf.TensorSpec(spec.shape[1:], spec.dtype)


def _episode_spec(path: tuple, spec: tf.TensorSpec, *, where: str) -> tf.TensorSpec:
    if spec.shape.rank is None or spec.shape.num_elements() is None:
        raise ValueError(
            f'{where}: episode field {_describe_path(path)!r} has shape {spec.shape}; '
            'TFDS stores an episode field with a fixed shape only. Give it one before saving.'
        )
    return spec


def make_features_from_spec(
    element_spec: dict, *, where: str, frame_formats: frames.FrameFormats | None = None
) -> tfds.features.FeaturesDict:
    """Returns the TFDS features of whole episodes of `element_spec` (steps `[T, ...]`).

    The step fields at `frame_formats`' paths (`tf.string` encoded frames) become TFDS
    `Image` features of their format, which store the bytes as given.

    Raises:
      ValueError: If a field has an unknown shape (besides the step count), or is a tuple
        or list (TFDS stores dicts of tensors).
    """
    steps = tree.map_structure_with_path(
        lambda p, s: _step_spec(p, s, where=where), element_spec[types.STEPS]
    )
    # Named by their formats, encoded frames become `Image` features (`make_feature`).
    steps = frames.name_frame_specs(steps, frame_formats or {})
    episode = {
        key: tree.map_structure_with_path(
            lambda p, s, key=key: _episode_spec((key, *p), s, where=where), value
        )
        for key, value in element_spec.items()
        if key != types.STEPS
    }
    step_features = {
        key: _make_feature(spec, f'step field {key!r}', where=where)
        for key, spec in steps.items()
        if key not in types.FLAG_FIELDS
    }
    episode_features = {
        key: _make_feature(spec, f'episode field {key!r}', where=where)
        for key, spec in episode.items()
    }
    return features_lib.make_rlds_features(step_features, episode_features)


def _make_feature(spec: Any, what: str, *, where: str) -> tfds.features.FeatureConnector:
    try:
        return features_lib.make_feature(spec)
    except ValueError as e:
        raise ValueError(f'{where}: {what}: {e}') from e


def _describe_source(source: Any) -> tuple[str, pathlib.Path | None]:
    """Returns how messages name the source, and its absolute path when it is one."""
    if isinstance(source, tf.data.Dataset):
        return 'the given tf.data.Dataset', None
    if not isinstance(source, str | os.PathLike):
        return repr(source), None  # `load` says what it takes.
    path = pathlib.Path(os.fspath(source)).expanduser()
    if path.exists():
        return str(source), path.resolve()
    return str(source), None


def _count_steps(episode: dict) -> int:
    return len(episode[types.STEPS][types.IS_FIRST])


def save_as_rlds(
    source: loading.Source,
    directory: os.PathLike | str,
    *,
    split: str = 'train',
    data_dir: os.PathLike | str | None = None,
    name: str | None = None,
    version: str | None = None,
    episodes_per_shard: int = 100,
    keep_order: bool = True,
    overwrite: bool = False,
    encoded_frames: EncodedFrames = None,
    progress: types.EpisodeProgressFn | None = None,
) -> SaveStats:
    """Writes every episode of a source `rlds_reverb.load` reads as an RLDS TFDS dataset.

    The copy holds the same episodes in the same order, every step field and every
    episode-level field with its dtype (module docstring: features, float64, images);
    `tfds.builder_from_directory(directory)` and `rlds_reverb.load(directory)` read it
    (the latter on its fast record path). Episodes are read and written one at a time.
    Nothing is validated: invalid episodes are copied as they are (`rlds-reverb validate`
    checks them).

    Args:
      source: A `tf.data.Dataset` of RLDS episodes, a TFDS dataset directory or name, or
        any other source `rlds_reverb.load` reads.
      directory: The dataset directory to write (TFDS lays datasets out as
        `data_dir/name/version`); it must not exist, or be empty, unless `overwrite`.
      split: The source's split (TFDS' slicing syntax works: `'train[:10%]'`); the copy
        always has one split, `'train'`.
      data_dir: Where to look up a TFDS dataset name.
      name: The TFDS name of the copy; by default from `directory` (the parent's name when
        `directory` is a version such as `1.0.0`, else its own), in snake case.
      version: The copy's version; by default `directory`'s name when it is a version, else
        1.0.0.
      episodes_per_shard: Episodes per TFRecord shard.
      keep_order: Mark the copy ordered, so it reads back in the source's order (TFDS then
        refuses `shuffle_files=True` on it); False lets TFDS shuffle its shards.
      overwrite: Replace a TFDS dataset already in `directory` (once the copy is complete).
      encoded_frames: The source's frame fields copied as their encoded bytes, unchanged,
        into TFDS `Image` features of their format (as `load` takes it: 'all' or `/`
        paths); the others are decoded and stored as uint8 tensors. A source that
        `load(..., encoded_frames=...)` returned keeps its encoded frames so without it.
      progress: Optional `fn(episodes, steps)` called after each episode is written.

    Returns:
      `SaveStats`: episodes, steps, seconds, directory.

    Raises:
      FrameFieldError: If `encoded_frames` names a field that is not a frame field of the
        source (`load`).
      FileExistsError: If `directory` is not empty and `overwrite` is false, or would
        replace something other than a TFDS dataset.
      NotADirectoryError: If `directory` is a file.
      SourceNotFoundError: If the source does not exist (`load`).
      SourceError: If the source is not an RLDS dataset (`load`).
      TypeError: If `source` is neither a dataset, a path nor a string (`load`).
      ValueError: If `directory` is (or holds) the source, `episodes_per_shard` < 1, a
        field has an unknown shape or is a tuple, or the source holds no episode.

    Whatever the error (a source failing part way, Ctrl-C), nothing is written: `directory`
    is left as it was, and a note on the error says how many episodes had been read.

    Example:
      >>> rlds_reverb.save_as_rlds('/data/halfcheetah_medium-v2.hdf5', '/data/hc/1.0.0')
      >>> rlds_reverb.load('/data/hc/1.0.0')
      >>> rlds_reverb.save_as_rlds('/data/fractal/0.1.0', '/data/copy/1.0.0', encoded_frames='all')
    """
    started = time.perf_counter()
    checks.check_int_at_least(episodes_per_shard, 1, argument='episodes_per_shard')
    target = pathlib.Path(directory).expanduser().absolute()
    where, source_path = _describe_source(source)
    _check_target(target, overwrite=overwrite, source_path=source_path)
    derived_name, derived_version = _derive_name(target)
    episodes = loading.load(source, split=split, data_dir=data_dir, encoded_frames=encoded_frames)
    whole = episodes_lib.to_whole_episodes(episodes)
    features = make_features_from_spec(
        whole.element_spec, where=where, frame_formats=episodes_lib.find_frame_formats(episodes)
    )
    stats = SaveStats()
    try:
        with tfds_writer.RldsDatasetWriter(
            target,
            features=features,
            name=name or derived_name,
            version=version or derived_version,
            description=f'RLDS episodes saved from {where} by rlds_reverb.save_as_rlds.',
            metadata={'saved_from': where, 'split': split},
            episodes_per_shard=episodes_per_shard,
            disable_shuffling=keep_order,
        ) as writer:
            for episode in whole.prefetch(_PREFETCH_EPISODES).as_numpy_iterator():
                try:
                    writer.add_episode(episode)
                except ValueError as e:
                    raise ValueError(
                        f'{where}: episode {stats.episodes} does not match the dataset spec: '
                        f'{e}'
                    ) from e
                steps = _count_steps(episode)
                stats.episodes += 1
                stats.steps += steps
                if progress is not None:
                    progress(1, steps)
    except BaseException as error:
        error.add_note(
            f'Nothing was written to {target} (it is as it was before): the save stopped '
            f'after {stats.episodes} episode(s) ({stats.steps} steps) of {where}.'
        )
        raise
    stats.directory = writer.target
    stats.seconds = time.perf_counter() - started
    return stats
