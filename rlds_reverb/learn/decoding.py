"""Encoded frames at the learner: what Reverb is asked for, and the decode after sampling.

A table filled from `load(..., encoded_frames=...)` holds camera frames as the dataset's
JPEG or PNG bytes, and its signature names each such field's format (`core.frames`). A
`LearnerDataset` reading it asks Reverb for the bytes and decodes them in its `tf.data`
pipeline, after sampling (`FrameDecoding.apply`):

* **Which fields.** `SamplingOptions.decode_frames` (as `convert_rlds_to_trajectories`'s):
  `'all'` (the default: every encoded field of the table) or some paths; `None` or `()`
  delivers the bytes. The formats come from the table's signature alone.
* **The learner's spec.** `data_spec` may describe a frame field as the learner receives
  it (uint8 `[H, W, C]`, as `agent.collect_data_spec` does: `plan_frame_decoding` then asks
  Reverb for its bytes) or as the table holds it (a `tf.string`). What a batch delivers is
  `LearnerDataset.delivered_item_spec` (with a leading batch axis).
* **How.** Per batch, every frame of the `[B, T]` bytes is decoded in parallel with TFDS'
  own op (`core.frames.decode_frames`, bit for bit what a push of decoded frames samples),
  batches in parallel (`num_parallel_calls`), the order kept (a FIFO table's order). A
  field of `frame_sizes` is resized in the same per-frame map, then a field of
  `frame_crops` cropped, centred or at seeded random positions (`rlds_reverb.transform.frames`,
  whose transforms this applies). An empty string (a camera a step lacks) becomes a zero
  frame; with `frame_masks`, a bool `<field>_present` beside the field says which frames
  were stored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import reverb
import tensorflow as tf
import tree

from rlds_reverb.core import frames, types
from rlds_reverb.core.errors import SpecMismatchError
from rlds_reverb.transform import frames as frame_transforms
from rlds_reverb.transform.image_ops import CropMode, Size

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

# A sample's frames sit in its `data`: `ReplaySample(info, data)` paths start with it.
_DATA = 'data'


@dataclasses.dataclass(frozen=True)
class FrameDecoding:
    """How a learner decodes the encoded frames of its samples.

    Attributes:
      formats: The fields decoded, by `/` path in an item, and their formats.
      sizes: `{path: (height, width)}` the decoded frames are resized to.
      crops: `{path: (height, width)}` of the crops taken after any resize.
      crop_mode: Where the crops are taken.
      seed: Seeds random crops (with each batch's position).
      masks: Whether a `<field>_present` mask goes beside each decoded field.
    """

    formats: dict[str, frames.FrameFormat]
    sizes: dict[str, Size]
    crops: dict[str, Size]
    crop_mode: CropMode
    seed: int
    masks: bool

    def apply(self, samples: tf.data.Dataset) -> tf.data.Dataset:
        """Returns batches of `ReplaySample`s with the frames decoded (resized, cropped).

        Example:
          >>> samples = decoding.apply(samples)
        """
        samples = samples.apply(
            frame_transforms.decode_frames(
                list(_in_sample(self.formats)),
                sizes=_in_sample(self.sizes),
                masks=self.masks,
                frame_formats=_in_sample(self.formats),
            )
        )
        if self.crops:
            samples = samples.apply(
                frame_transforms.crop_frames(
                    _in_sample(self.crops), mode=self.crop_mode, seed=self.seed
                )
            )
        return samples

    def make_delivered_spec(self, item_spec: types.SpecNest, batch_size: int) -> types.SpecNest:
        """Returns the spec of one delivered item: frames decoded, resized, cropped, masked.

        Traced on an empty dataset of the sampled items' spec, through the same transforms
        the samples go through (nothing runs).

        Example:
          >>> decoding.make_delivered_spec(learner.item_spec, 256)
        """
        info = reverb.replay_sample.SampleInfo(
            *(
                tf.TensorSpec([batch_size], dtype)
                for dtype in reverb.replay_sample.SampleInfo.tf_dtypes()
            )
        )
        data = tf.nest.map_structure(
            lambda s: tf.TensorSpec([batch_size, *s.shape], s.dtype), item_spec
        )
        spec = reverb.ReplaySample(info=info, data=data)
        empty = tf.data.Dataset.from_generator(list, output_signature=spec)
        delivered = self.apply(empty).element_spec.data
        return tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), delivered)


def _in_sample(by_path: Mapping[str, Any]) -> dict[str, Any]:
    """Returns `by_path` keyed by the paths' place in a `ReplaySample` (under `data`)."""
    return {f'{_DATA}/{path}': value for path, value in by_path.items()}


def plan_frame_decoding(
    item_spec: types.SpecNest,
    signature: types.SpecNest | None,
    *,
    decode_frames: frames.FrameSelection | None,
    sizes: Mapping[str, Size],
    crops: Mapping[str, Size],
    crop_mode: CropMode,
    seed: int,
    masks: bool,
) -> tuple[types.SpecNest, FrameDecoding | None]:
    """Returns the item spec to ask Reverb for, and how to decode its frames (None: no decode).

    Each encoded field of `signature` that `decode_frames` selects is asked for as bytes:
    the item spec's uint8 `[T, H, W, C]` leaf there becomes `tf.string` `[T]`, named by its
    format (a string leaf stays one). Every encoded field's string leaf is named by its
    format, so that the table's signature check sees the same fields encoded.

    Args:
      item_spec: The items as the learner's `data_spec` gives them (with their time axis).
      signature: A sampled table's signature (None: a table without one holds no
        encoded frames as far as the learner can tell).
      decode_frames: As in `SamplingOptions`.
      sizes: `SamplingOptions.frame_sizes`, checked.
      crops: `SamplingOptions.frame_crops`, checked.
      crop_mode: As in `SamplingOptions.frame_crop_mode`.
      seed: `SamplingOptions.frame_seed`.
      masks: `SamplingOptions.frame_masks`.

    Raises:
      FrameFieldError: If `decode_frames`, `sizes` or `crops` names a field the table does
        not hold encoded (or that is not decoded); the message lists those it does.
      SpecMismatchError: If `data_spec` gives a decoded frame field another shape than the
        learner delivers (its format, resized or cropped).

    Example:
      >>> item_spec, decoding = plan_frame_decoding(spec, info.signature, decode_frames='all',
      ...     sizes={}, crops={}, crop_mode=CropMode.CENTER, seed=0, masks=False)
    """
    table_formats = frames.find_spec_formats(signature) if signature is not None else {}
    chosen = frames.select_formats(table_formats, decode_frames, argument='decode_frames')
    frames.select_formats(chosen, list(sizes), argument='frame_sizes')
    frames.select_formats(chosen, list(crops), argument='frame_crops')
    _check_delivered_shapes(item_spec, chosen, sizes, crops)
    sampled = tree.map_structure_with_path(
        lambda path, leaf: _as_bytes(leaf) if frames.join_path(path) in chosen else leaf,
        item_spec,
    )
    sampled = frames.name_frame_specs(sampled, table_formats)
    if not chosen:
        return sampled, None
    return sampled, FrameDecoding(chosen, dict(sizes), dict(crops), crop_mode, seed, masks)


def _as_bytes(leaf: tf.TensorSpec) -> tf.TensorSpec:
    """Returns the spec of an item's encoded frames for its decoded frames' spec."""
    if leaf.dtype == tf.string or leaf.dtype != tf.uint8 or leaf.shape.rank is None:
        return leaf  # Bytes already, or not frames: the signature check names it.
    if leaf.shape.rank < 3:
        return leaf
    return tf.TensorSpec(leaf.shape[:-3], tf.string)


def _check_delivered_shapes(
    item_spec: types.SpecNest,
    chosen: frames.FrameFormats,
    sizes: Mapping[str, Size],
    crops: Mapping[str, Size],
) -> None:
    """Raises `SpecMismatchError` if a decoded uint8 leaf of `item_spec` is not the frame
    shape the learner delivers."""
    lines = []
    for path, leaf in tree.flatten_with_path(item_spec):
        key = frames.join_path(path)
        fmt = chosen.get(key)
        if fmt is None or leaf.dtype != tf.uint8 or (leaf.shape.rank or 0) < 3:
            continue
        height, width = crops.get(key, sizes.get(key, fmt.shape[:2]))
        delivered = tf.TensorShape([height, width, fmt.shape[2]])
        if not leaf.shape[-3:].is_compatible_with(delivered):
            lines.append(
                f'{key}: data_spec gives frames of shape {leaf.shape[-3:].as_list()}, the '
                f'learner delivers {delivered.as_list()} ({fmt.describe()} frames'
                + (f', resized to {sizes[key]}' if key in sizes else '')
                + (f', cropped to {crops[key]}' if key in crops else '')
                + ')'
            )
    if lines:
        raise SpecMismatchError(
            "The learner's data_spec does not match the frames it delivers: give the "
            'delivered shape in data_spec, or frame_sizes / frame_crops that make it.',
            lines,
        )
