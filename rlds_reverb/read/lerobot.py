"""Reads a LeRobot v3.0 dataset directory as RLDS episodes of whole-episode tensors.

`rlds_reverb.load(path)` reads the folder holding `meta/info.json` with this module's
`LeRobotReader` (formats v2.0 and v2.1 are refused with the command that upgrades them).
What an episode becomes (docs/lerobot.md, docs/semantics.md "LeRobot datasets"): one RLDS
step per frame, in `episode_index` order, frames in `index` order;

* every feature a step field, a dotted name nested (`observation.images.front` is
  `observation/images/front`; `lerobot_meta.to_rlds_path`); shape-[1] features are scalars
  per step; cameras uint8 `[T, H, W, C]` (image mode: the stored PNGs decoded, bit-exact;
  video mode: the frames LeRobot's reader returns, at its timestamps);
* `next.reward` is `reward` (float32 zeros, with a warning, when there is none);
  `next.done` on the last frame is `is_terminal` (an episode that ends without it was
  truncated: time limit, cut recording); `discount` is 1, and 0 on the transition into a
  terminal last step and on that step (dm_env's convention; a `discount` feature, as this
  toolkit's writer stores one, is read instead);
* the task of each frame is the step field `language_instruction`, the float32
  `timestamp` column the step field `timestamp`;
* episode fields `episode_index` (int64) and `fps` (float64); the features' `names`
  (joint names) are in `read_lerobot_metadata(episodes)`.

Reading streams: the metadata is read once (`lerobot_meta`), then each selected episode's
rows come from the parquet row groups that hold them (`lerobot_data.ParquetRows`) and its
video frames from a decoder that moves forward through each file (`lerobot_video`); PNG
frames are decoded in a separate step per camera (a `tf.data` map after the read), skipped
for the cameras `encoded_frames` keeps as their PNG bytes (`lerobot_frames`: image mode
only; video cameras are refused by name). `LeRobotSource` is an `EpisodeSource`: the split
slice (`'train[:10%]'`, or a split info.json names) and `take`, `skip` and `shard` narrow
its list of episodes (`core.sources.IndexSelection`), so unselected episodes are never read.
"""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources, types
from rlds_reverb.core.errors import LeRobotFormatError, SourceError
from rlds_reverb.core.frames import FrameFormat
from rlds_reverb.read import lerobot_data, lerobot_fields, lerobot_meta, lerobot_video
from rlds_reverb.read import step_fields as step_fields_lib
from rlds_reverb.read.lerobot_fields import Layout
from rlds_reverb.read.lerobot_frames import choose_encoded, list_image_formats
from rlds_reverb.read.options import EncodedFrames, LoadOptions

__all__ = [
    'LeRobotMetadata',
    'LeRobotReader',
    'LeRobotSource',
    'open_lerobot',
    'read_lerobot_metadata',
]

SPLIT = 'train'


@dataclasses.dataclass(frozen=True)
class LeRobotMetadata:
    """What a LeRobot dataset says about its episodes beyond the step tensors.

    Fields:
      root: The dataset directory.
      version: Its format (`codebase_version`, 'v3.0').
      fps: Frames per second.
      robot_type: The robot's name (or None).
      names: Per step field (`/` path), the feature's per-dimension names (joint names) as
        info.json gives them; fields without names are left out.
      features: Per step field (`/` path), the LeRobot feature it was read from.
      tasks: The task strings, by task_index.
      feature_names: Every feature of info.json, in its order.
      derived: The required step fields the reader made up (`reward` without
        `next.reward`, `discount` without a `discount` feature): not data of the dataset.
    """

    root: str
    version: str
    fps: float
    robot_type: str | None
    names: Mapping[str, Any]
    features: Mapping[str, str]
    tasks: tuple[str, ...]
    feature_names: tuple[str, ...] = ()
    derived: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class LeRobotSource(sources.EpisodeSource):
    """The episodes of a LeRobot dataset, read from its files one episode at a time.

    Fields:
      layout: The dataset's metadata and the step fields read (`lerobot_fields.Layout`).
      index: Which episodes are read: the split, then the selections of the dataset.
      encoded: The image-mode cameras (`/` paths) handed out as their PNG bytes.
    """

    layout: Layout = dataclasses.field(repr=False)
    index: sources.IndexSelection = sources.IndexSelection(0)
    encoded: frozenset[str] = frozenset()

    def read(self) -> tf.data.Dataset:
        """Returns the selected episodes, each read from the files when iterated."""
        positions = self.index.positions()
        generated = tf.data.Dataset.from_generator(
            lambda: _generate(self.layout, positions),
            output_signature=self.layout.generated_signature(),
        )
        decode = episodes_lib.without_autograph(
            lambda e: _decode_images(self.layout, e, self.encoded)
        )
        return generated.map(decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    def select(self, selection: sources.Selection) -> LeRobotSource:
        return dataclasses.replace(self, index=self.index.select(selection))

    def describe(self) -> LeRobotMetadata:
        """Returns the dataset's `LeRobotMetadata`."""
        info = self.layout.info
        fields = self.layout.fields
        return LeRobotMetadata(
            root=os.fspath(info.root),
            version=info.version,
            fps=info.fps,
            robot_type=info.robot_type,
            names={f.key: f.feature.names for f in fields if f.feature.names is not None},
            features={f.key: f.feature.name for f in fields},
            tasks=self.layout.tasks,
            feature_names=tuple(info.features),
            derived=self.layout.derived,
        )


def _generate(layout: Layout, positions: np.ndarray) -> Iterator[dict]:
    """Yields the episodes at `positions`: numeric fields, PNG bytes, decoded video frames."""
    rows = lerobot_data.ParquetRows(layout.data_paths, layout.columns, where=layout.where)
    episode_rows = layout.open_episode_fields()
    cursors = {
        f.feature.name: lerobot_video.VideoCursor(f.feature.name, f.frame_shape)
        for f in layout.fields
        if f.feature.dtype == lerobot_meta.VIDEO and f.frame_shape is not None
    }
    try:
        for position in positions.tolist():
            yield layout.read_episode(position, rows, episode_rows, cursors)
    finally:
        for cursor in cursors.values():
            cursor.close()


def _decode_png(
    blobs: np.ndarray, shape: np.ndarray, name: bytes, episode: np.ndarray
) -> np.ndarray:
    """Returns PNG (or JPEG) frames decoded to uint8 `[T, H, W, C]` with Pillow."""
    from PIL import Image  # Only image mode needs it.

    height, width, channels = (int(d) for d in shape)
    out = np.empty((len(blobs), height, width, channels), np.uint8)
    mode = 'L' if channels == 1 else 'RGBA' if channels == 4 else 'RGB'
    camera = name.decode()
    for i, blob in enumerate(blobs):
        try:
            with Image.open(io.BytesIO(blob)) as image:
                size = image.size
                array = np.asarray(image if image.mode == mode else image.convert(mode))
        except (OSError, ValueError) as e:
            raise LeRobotFormatError(
                f'column {camera!r}, frame {i} of episode {int(episode)}: not a readable '
                f'image ({e}).'
            ) from e
        if size != (width, height):
            raise LeRobotFormatError(
                f'column {camera!r}, frame {i} of episode {int(episode)} is '
                f'{size[1]}x{size[0]}; info.json says {height}x{width}.'
            )
        out[i] = array.reshape(height, width, channels)
    return out


def _decode_images(layout: Layout, episode: dict, encoded: frozenset[str]) -> dict:
    """Decodes the image-mode cameras of one episode (those not kept `encoded`): one step
    per camera, after the read."""
    steps = episode[types.STEPS]
    for field in layout.fields:
        if field.feature.dtype != lerobot_meta.IMAGE or field.frame_shape is None:
            continue
        if field.key in encoded:  # The stored PNG bytes, unchanged.
            continue
        blobs = _get(steps, field.path)
        frames = tf.numpy_function(
            _decode_png,
            [
                blobs,
                np.asarray(field.frame_shape),
                field.feature.name.encode(),
                episode[types.EPISODE_INDEX],
            ],
            tf.uint8,
            name='decode_lerobot_png',
        )
        frames.set_shape([None, *field.frame_shape])
        steps = _set(steps, field.path, frames)
    return {**episode, types.STEPS: steps}


def _get(nest: Mapping, path: tuple[str, ...]) -> Any:
    for key in path:
        nest = nest[key]
    return nest


def _set(nest: Mapping, path: tuple[str, ...], value: Any) -> dict:
    head, *rest = path
    return {**nest, head: _set(nest[head], tuple(rest), value) if rest else value}


def read_lerobot_metadata(episodes: tf.data.Dataset) -> LeRobotMetadata | None:
    """Returns the `LeRobotMetadata` of episodes `load` read from a LeRobot dataset.

    Args:
      episodes: What `rlds_reverb.load` returned (or its `take`, `skip`, `shard`).

    Returns:
      The metadata, or None when the episodes do not come from a LeRobot dataset.

    Example:
      >>> episodes = rlds_reverb.load('/data/so100_pick')
      >>> names = read_lerobot_metadata(episodes).names['action']  # Joint names.
    """
    source = episodes_lib.find_source(episodes)
    while isinstance(source, sources.MappedSource):
        source = source.inner
    return source.describe() if isinstance(source, LeRobotSource) else None


def _select_split(info: lerobot_meta.Info, split: str) -> sources.IndexSelection:
    """Returns the episodes of `split`: a split info.json names, or one slice of it.

    Raises:
      SourceError: If `split` names no split of the dataset, or is not a valid slice.
    """
    name = split.split('[', 1)[0]
    if name not in info.splits:
        raise SourceError(
            f'The LeRobot dataset {info.root} has no split {name!r} (split={split!r}); its '
            f'splits: {sorted(info.splits)}. Use one of them or a slice such as '
            f"'{SPLIT}[:10%]', or .take, .skip and .shard of what load returns."
        )
    first, last = info.splits[name]
    try:
        within = sources.IndexSelection.from_split(split, last - first, split_name=name)
    except ValueError as e:
        raise SourceError(
            f'The LeRobot dataset {info.root}: split={split!r} does not select from its split '
            f'{name!r} of {last - first} episodes ({e}).'
        ) from e
    base: tuple[sources.Selection, ...] = ()
    if (first, last) != (0, info.total_episodes):
        base = (sources.Skip(first), sources.Take(last - first))
    return sources.IndexSelection(info.total_episodes, (*base, *within.selections))


def open_lerobot(
    directory: str | os.PathLike,
    *,
    split: str = SPLIT,
    step_fields: tuple[tuple[str, ...], ...] | None = None,
    encoded_frames: EncodedFrames = None,
) -> episodes_lib.EpisodeDataset:
    """Returns the episodes of a LeRobot v3.0 dataset as an RLDS dataset.

    Args:
      directory: The dataset directory (holding `meta/info.json`).
      split: `'train'` (every episode), another split info.json names, or one slice of it
        in TFDS' syntax (`'train[:10%]'`, `'train[10:20]'`), counted in episodes.
      step_fields: The step fields to keep, as key paths (`LoadOptions.step_paths`); the
        features of the others are never read (a camera left out is never decoded).
      encoded_frames: The image-mode cameras handed out as their stored PNG bytes
        (`LoadOptions.encoded_frames`: 'all' or `/` paths), never decoded.

    Returns:
      An `EpisodeDataset` whose `take`, `skip` and `shard` narrow the episodes read, and
      whose `frame_formats` are the encoded cameras' (png, info.json's shape).

    Raises:
      LeRobotFormatError: If the dataset is of format v2.x or v1.x (the message says how
        to upgrade it), or a metadata file is missing, malformed or disagrees with
        info.json or another file (the message names the file and the key or column).
      SourceError: If `split` names no split of the dataset or is not a valid slice.
      SpecMismatchError: If `step_fields` names a field the steps do not have.
      FrameFieldError: If `encoded_frames` names a video camera (or is 'all' with one
        among the step fields), or a field that is no image-mode camera.

    Example:
      >>> episodes = open_lerobot('/data/so100_pick', split='train[:10]')
    """
    root = lerobot_meta.find_root(directory)
    if root is None:
        raise SourceError(f'{directory} is not a LeRobot dataset: it has no meta/info.json.')
    layout = lerobot_fields.make_layout(root, step_fields=step_fields)
    for warning in layout.warnings:
        step_fields_lib.warn_caller(warning)
    index = _select_split(layout.info, split)
    where = f'the LeRobot dataset at {root}'
    formats = choose_encoded(layout, encoded_frames, where=where)
    source = LeRobotSource(layout=layout, index=index, encoded=frozenset(formats))
    return episodes_lib.from_source(source, frame_formats=formats)


class LeRobotReader:
    """Reads a LeRobot v3.0 dataset directory (`open_lerobot`); accepts `split`,
    `step_fields` and `encoded_frames` (image-mode cameras)."""

    name = 'lerobot'
    accepts = frozenset({'split', 'step_fields', 'encoded_frames'})

    def recognizes(self, source: Any) -> bool:
        """Returns whether `source` is a directory holding `meta/info.json` (or v1.x's
        `meta_data/info.json`, which `open` refuses, saying how to upgrade it)."""
        return lerobot_meta.find_root(source) is not None

    def open(self, source: Any, options: LoadOptions) -> tf.data.Dataset:
        """Returns the dataset's episodes (`open_lerobot`), steps checked."""
        episodes = open_lerobot(
            source,
            split=options.split,
            step_fields=options.step_paths,
            encoded_frames=options.encoded_frames,
        )
        step_fields_lib.check_step_spec(episodes, where=f'the LeRobot dataset at {source}')
        return episodes

    def list_frame_fields(self, source: Any, options: LoadOptions) -> dict[str, FrameFormat]:
        """Returns the image-mode cameras (PNG bytes) and their formats, from the metadata.

        Raises:
          LeRobotFormatError: If a metadata file is missing, malformed or inconsistent.
        """
        root = lerobot_meta.find_root(source)
        if root is None:
            raise SourceError(f'{source} is not a LeRobot dataset: it has no meta/info.json.')
        return list_image_formats(lerobot_fields.make_layout(root))
