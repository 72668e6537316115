"""Frame fields: which step fields of a TFDS dataset hold encoded frames, and which stay so.

A step field is a frame field when its TFDS feature is an `Image` of uint8 frames
(`tfds.features.Image`, JPEG or PNG: its `encoding_format`, PNG when unset, as TFDS
encodes then). Its `FrameFormat` (`rlds_reverb.core.frames`) comes from the feature alone,
so `list_frame_fields` reads no data. `choose_encoded` turns `LoadOptions.encoded_frames`
into the formats of the fields that stay encoded, naming a path that is no frame field;
`split_fields` and `merge_fields` take those fields out of a step (its features, its
parsed values) and put them back, so the TFDS reader decodes the others and hands these on
as the bytes the records hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow_datasets as tfds

from rlds_reverb.core.frames import FrameFormat, join_path, select_formats
from rlds_reverb.read.options import EncodedFrames

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

_SEPARATOR = '/'


def find_frame_format(feature: Any) -> FrameFormat | None:
    """Returns the format of a TFDS feature's frames, or None if it holds no uint8 frames."""
    if not isinstance(feature, tfds.features.Image) or feature.np_dtype != np.uint8:
        return None
    shape = tuple(feature.shape)
    if len(shape) != 3 or shape[-1] is None:
        return None
    codec = feature.encoding_format or 'png'  # TFDS encodes as PNG when it is unset.
    return FrameFormat(codec, shape)


def list_step_frame_fields(step_features: Mapping, prefix: tuple[str, ...] = ()) -> dict:
    """Returns `{path: FrameFormat}` of every frame field in (nested) step features."""
    found: dict[str, FrameFormat] = {}
    for key, feature in step_features.items():
        path = (*prefix, key)
        if isinstance(feature, Mapping | tfds.features.FeaturesDict):
            found.update(list_step_frame_fields(feature, path))
            continue
        fmt = find_frame_format(feature)
        if fmt is not None:
            found[join_path(path)] = fmt
    return found


def choose_encoded(
    encoded_frames: EncodedFrames, available: Mapping[str, FrameFormat], *, where: str
) -> dict[str, FrameFormat]:
    """Returns the formats of the fields `encoded_frames` keeps encoded.

    Args:
      encoded_frames: `LoadOptions.encoded_frames`: None, 'all' or `/` paths.
      available: The source's frame fields (among the selected step fields).
      where: The source, as messages name it.

    Raises:
      FrameFieldError: If a path is not a frame field of the source; lists those there are.

    Example:
      >>> choose_encoded('all', {'observation/image': jpeg}, where='my data')
      {'observation/image': jpeg}
    """
    chosen = select_formats(available, encoded_frames, argument='encoded_frames', where=where)
    return dict(sorted(chosen.items()))


def split_fields(step: Mapping, paths: Mapping[str, Any]) -> tuple[dict, dict[str, Any]]:
    """Returns `(rest, taken)`: `step` without the leaves at `paths`, and those leaves.

    A dict left empty by taking its leaves is left out of `rest`.
    """
    rest: dict = {}
    taken: dict[str, Any] = {}
    _split_into(step, paths, (), rest, taken)
    return rest, taken


def _split_into(node: Mapping, paths: Mapping[str, Any], prefix: tuple, rest: dict, taken: dict):
    for key, value in node.items():
        path = join_path((*prefix, key))
        if path in paths:
            taken[path] = value
        elif isinstance(value, Mapping | tfds.features.FeaturesDict):
            inner: dict = {}
            _split_into(value, paths, (*prefix, key), inner, taken)
            if inner or not any(p.startswith(path + _SEPARATOR) for p in paths):
                rest[key] = inner if isinstance(value, Mapping) else type(value)(inner)
        else:
            rest[key] = value


def merge_fields(rest: Mapping, taken: Mapping[str, Any]) -> dict:
    """Returns `rest` with each leaf of `taken` put back at its `/` path (`split_fields`)."""
    merged = _copy_dicts(rest)
    for path, value in taken.items():
        *parents, leaf = path.split(_SEPARATOR)
        node = merged
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return merged


def _copy_dicts(node: Mapping) -> dict:
    return {k: _copy_dicts(v) if isinstance(v, Mapping) else v for k, v in node.items()}


def skip_decoding(paths: Mapping[str, Any]) -> dict:
    """Returns TFDS `decoders` for `steps` leaving the fields at `paths` encoded."""
    return merge_fields({}, {path: tfds.decode.SkipDecoding() for path in paths})
