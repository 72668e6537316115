"""TFDS record files read without TensorFlow: for commands that must answer at once.

Importing TensorFlow takes seconds; `rlds-reverb info` needs only a few step fields of each
episode. This module reads a TFDS dataset directory written in the default layout (TFRecord
shards named by `dataset_info.json`, features that TFDS itself defines) with the standard
library and NumPy: the record framing, and the few `tf.train.Example` fields asked for.

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
import struct
from collections.abc import Iterator

import numpy as np

__all__ = [
    'FieldSpec',
    'SplitFiles',
    'find_split_files',
    'iter_records',
    'read_step_spec',
    'read_example_fields',
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
# Protobuf wire types.
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
# Field numbers: Example.features, Features.feature (map entries), MapEntry key and value,
# Feature's bytes_list, float_list and int64_list, and the lists' `value`.
_FEATURES_FIELD = _ENTRY_FIELD = _KEY_FIELD = _VALUE_LIST_FIELD = 1
_VALUE_FIELD = 2
KIND_BYTES, KIND_FLOAT, KIND_INT64 = 1, 2, 3


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
    if features is None:
        return None
    try:
        described = _describe_feature(features)
    except (AttributeError, TypeError, ValueError):
        return None
    if not isinstance(described, dict) or not isinstance(described.get(steps), tuple):
        return None
    return described[steps][1]


def iter_records(path: pathlib.Path) -> Iterator[bytes]:
    """Yields the records of a TFRecord file (framing checked, checksums not).

    Raises:
      ValueError: If the file ends inside a record.
    """
    data = path.read_bytes()
    view, position, end = memoryview(data), 0, len(data)
    while position < end:
        if position + 12 > end:
            raise ValueError(f'{path} ends inside a record header')
        (length,) = struct.unpack_from('<Q', data, position)
        start = position + 12
        position = start + length + 4
        if position > end:
            raise ValueError(f'{path} ends inside a record')
        yield bytes(view[start : start + length])


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7


def _iter_fields(data: bytes, start: int = 0, end: int | None = None):
    """Yields (field number, wire type, value or (start, end) of a length-delimited field)."""
    position, end = start, len(data) if end is None else end
    while position < end:
        tag, position = _read_varint(data, position)
        number, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            value, position = _read_varint(data, position)
            yield number, wire, value
        elif wire == _LENGTH_DELIMITED:
            length, position = _read_varint(data, position)
            yield number, wire, (position, position + length)
            position += length
        elif wire == _FIXED64:
            yield number, wire, (position, position + 8)
            position += 8
        elif wire == _FIXED32:
            yield number, wire, (position, position + 4)
            position += 4
        else:
            raise ValueError(f'wire type {wire} is not used by tf.train.Example')


def _decode_varints(data: bytes) -> np.ndarray:
    raw = np.frombuffer(data, np.uint8)
    if not (raw & 0x80).any():
        return raw.astype(np.int64)  # Flags and small counts: one byte each.
    values, position = [], 0
    while position < len(data):
        value, position = _read_varint(data, position)
        values.append(value - (1 << 64) if value >= 1 << 63 else value)
    return np.array(values, np.int64)


def _decode_list(data: bytes, kind: int, start: int, end: int) -> np.ndarray:
    """Decodes a FloatList or Int64List (packed or not) from data[start:end]."""
    packed, single = [], []
    for number, wire, value in _iter_fields(data, start, end):
        if number != _VALUE_LIST_FIELD:
            continue
        if wire == _LENGTH_DELIMITED:
            packed.append(data[value[0] : value[1]])
        elif wire == _FIXED32 and kind == KIND_FLOAT:
            single.append(data[value[0] : value[1]])
        elif wire == _VARINT and kind == KIND_INT64:
            single.append(value)
    if kind == KIND_FLOAT:
        return np.frombuffer(b''.join(packed + single), '<f4')
    decoded = [_decode_varints(chunk) for chunk in packed]
    if single:
        decoded.append(np.array(single, np.uint64).astype(np.int64))
    return np.concatenate(decoded) if decoded else np.zeros(0, np.int64)


def read_example_fields(record: bytes, keys: frozenset[str]) -> dict[str, np.ndarray]:
    """Returns the float and int64 lists of `keys` in a serialized `tf.train.Example`.

    Args:
      record: The serialized Example.
      keys: The feature keys wanted (e.g. 'steps/is_last').

    Returns:
      key -> values (float32 or int64) for each wanted key present as a float or int64
      list (a bytes list is left out).

    Raises:
      ValueError: If the record is not a well-formed Example.
    """
    found = {}
    try:
        for number, wire, span in _iter_fields(record):
            if number != _FEATURES_FIELD or wire != _LENGTH_DELIMITED:
                continue
            for entry_number, entry_wire, entry in _iter_fields(record, *span):
                if entry_number != _ENTRY_FIELD or entry_wire != _LENGTH_DELIMITED:
                    continue
                key, value = None, None
                for part_number, _, part in _iter_fields(record, *entry):
                    if part_number == _KEY_FIELD:
                        key = record[part[0] : part[1]].decode()
                    elif part_number == _VALUE_FIELD:
                        value = part
                if key not in keys or value is None:
                    continue
                for kind, _, lst in _iter_fields(record, *value):
                    if kind in (KIND_FLOAT, KIND_INT64):
                        found[key] = _decode_list(record, kind, *lst)
    except (IndexError, UnicodeDecodeError) as e:
        raise ValueError(f'not a tf.train.Example ({e})') from e
    return found
