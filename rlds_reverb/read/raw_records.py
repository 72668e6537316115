"""TFDS record files read without TensorFlow: for commands that must answer at once.

Importing TensorFlow takes seconds; `rlds-reverb info` needs only a few step fields of each
episode. This module reads a TFDS dataset directory written in the default layout (TFRecord
shards named by `dataset_info.json`, features that TFDS itself defines) with the standard
library and NumPy: which shard files a split has, and the spec of its step fields; the
record codec (`rlds_reverb.storage.codec`) reads the framing and the few `tf.train.Example`
fields asked for.

It answers only when it can answer exactly as `rlds_reverb.load` would: every function here
returns None (and the caller falls back to `load`, which names any problem) for a split
slice, another file format or name template, a feature class or encoding it does not know,
a shard that is missing or whose records do not add up to what `dataset_info.json` says.
Record checksums are not verified (`rlds-reverb validate` reads every record through TF).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

from rlds_reverb.core.frames import FrameFormat, join_path
from rlds_reverb.read import feature_classes

__all__ = [
    'FieldSpec',
    'SplitFiles',
    'find_split_files',
    'read_frame_formats',
    'read_step_spec',
]

_DATASET_INFO = 'dataset_info.json'
_FEATURES = 'features.json'
_FILE_FORMAT = 'tfrecord'
_TEMPLATE = '{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}'
_TFDS_FEATURES = 'tensorflow_datasets.core.features.'
# TFDS feature classes whose spec follows from features.json alone: class -> kind.
_KINDS = {
    f'{_TFDS_FEATURES}features_dict.FeaturesDict': 'dict',
    f'{_TFDS_FEATURES}dataset_feature.Dataset': 'dataset',
    f'{_TFDS_FEATURES}scalar.Scalar': 'tensor',
    f'{_TFDS_FEATURES}tensor_feature.Tensor': 'tensor',
    f'{_TFDS_FEATURES}image_feature.Image': 'image',
    f'{_TFDS_FEATURES}text_feature.Text': 'text',
    f'{_TFDS_FEATURES}class_label_feature.ClassLabel': 'class_label',
}


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """A step field's dtype name and shape (None for an unknown size), as TF would name them."""

    dtype_name: str
    shape: tuple[int | None, ...]

    def __str__(self) -> str:
        return f'{self.dtype_name}{list(self.shape)}'


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """The shard files of one split and the number of records (episodes) each holds."""

    paths: tuple[pathlib.Path, ...]
    counts: tuple[int, ...]


def _read_json(path: pathlib.Path) -> dict | None:
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return content if isinstance(content, dict) else None


def find_split_files(directory: os.PathLike | str, split: str) -> SplitFiles | None:
    """Returns the shard files of `split` named by `dataset_info.json`, or None.

    Args:
      directory: A TFDS dataset (version) directory.
      split: A split name (a slice such as 'train[:10]' gives None).

    Returns:
      The `SplitFiles`, or None if the directory is not in TFDS' default TFRecord layout or a
      shard file is missing.
    """
    directory = pathlib.Path(directory)
    info = _read_json(directory / _DATASET_INFO)
    if info is None or not split.isidentifier():
        return None
    if info.get('fileFormat', _FILE_FORMAT) != _FILE_FORMAT:
        return None
    entry = next((s for s in info.get('splits', []) if s.get('name') == split), None)
    if entry is None or entry.get('filepathTemplate', _TEMPLATE) != _TEMPLATE:
        return None
    try:
        counts = tuple(int(n) for n in entry.get('shardLengths', []))
    except (TypeError, ValueError):
        return None
    name, total = info.get('name'), len(counts)
    if not isinstance(name, str) or not counts:
        return None
    paths = tuple(
        directory / f'{name}-{split}.{_FILE_FORMAT}-{i:05d}-of-{total:05d}' for i in range(total)
    )
    if not all(path.is_file() for path in paths):
        return None
    return SplitFiles(paths, counts)


def _describe_feature(feature: dict):
    """Returns a FieldSpec, a dict of them, ('dataset', dict), or None if unknown."""
    kind = _KINDS.get(feature.get('pythonClassName', ''))
    if kind == 'dict':
        fields = feature.get('featuresDict', {}).get('features', {})
        described = {name: _describe_feature(value) for name, value in fields.items()}
        return None if any(v is None for v in described.values()) else described
    if kind == 'dataset':
        inner = _describe_feature(feature.get('sequence', {}).get('feature', {}))
        return None if not isinstance(inner, dict) else ('dataset', inner)
    if kind in ('tensor', 'image'):
        tensor = feature.get(kind, {})
        if tensor.get('encoding', 'none') != 'none':
            return None  # Stored as compressed bytes: the TF path decodes them.
        dims = tensor.get('shape', {}).get('dimensions', [])
        shape = tuple(None if int(d) < 0 else int(d) for d in dims)
        return FieldSpec(str(tensor.get('dtype')), shape)
    if kind == 'text':
        return FieldSpec('string', ())
    if kind == 'class_label':
        return FieldSpec('int64', ())
    return None


def read_step_spec(directory: os.PathLike | str, *, steps: str) -> dict | None:
    """Returns the step fields' `FieldSpec`s (nested dicts) from `features.json`, or None.

    Args:
      directory: A TFDS dataset (version) directory.
      steps: The name of the steps feature.

    Returns:
      The nested dict of `FieldSpec`s, or None if a feature is not one TFDS defines (or is
      encoded), or the steps are not a sequence of dicts.
    """
    features = _read_json(pathlib.Path(directory) / _FEATURES)
    if features is None or not set(feature_classes.list_feature_classes(features)) <= set(_KINDS):
        return None  # A class named anywhere else (a string content, say): `load` checks it.
    try:
        described = _describe_feature(features)
    except (AttributeError, TypeError, ValueError):
        return None
    if not isinstance(described, dict) or not isinstance(described.get(steps), tuple):
        return None
    return described[steps][1]


def _list_frame_formats(feature: dict, prefix: tuple[str, ...]) -> dict[str, FrameFormat]:
    """Returns the uint8 `Image` features of a features.json dict, as the TF path finds them."""
    found: dict[str, FrameFormat] = {}
    for name, value in feature.get('featuresDict', {}).get('features', {}).items():
        kind = _KINDS.get(value.get('pythonClassName', ''))
        if kind == 'dict':
            found.update(_list_frame_formats(value, (*prefix, name)))
        elif kind == 'image' and value.get('image', {}).get('dtype') == 'uint8':
            image = value['image']
            dims = [int(d) for d in image.get('shape', {}).get('dimensions', [])]
            if len(dims) == 3 and dims[2] > 0:
                shape = tuple(None if d < 0 else d for d in dims)
                codec = image.get('encodingFormat') or 'png'  # TFDS' default encoding.
                found[join_path((*prefix, name))] = FrameFormat(codec, shape)  # type: ignore[arg-type]
    return found


def read_frame_formats(directory: os.PathLike | str, *, steps: str) -> dict | None:
    """Returns the step fields holding encoded frames and their formats, from features.json.

    As `rlds_reverb.list_frame_fields` finds them (uint8 `Image` features), or None when
    the features cannot be read so (then `load` reads them).
    """
    features = _read_json(pathlib.Path(directory) / _FEATURES)
    if features is None or not set(feature_classes.list_feature_classes(features)) <= set(_KINDS):
        return None
    try:
        step_features = features['featuresDict']['features'][steps]['sequence']['feature']
        return dict(sorted(_list_frame_formats(step_features, ()).items()))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
