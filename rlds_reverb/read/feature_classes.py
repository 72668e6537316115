"""Feature-class safety: a dataset's metadata never makes TFDS import (run) code it names.

TFDS 4.9.4 rebuilds a dataset's features from the class names its metadata stores
(`FeatureConnector.cls_from_name`); a name it does not know yet makes it import the module
named there, which runs that module's code. It reads those names in every form an older or
newer TFDS wrote, and `check_feature_classes` looks in all of them:

* the `Feature` proto as JSON (`features.json`, and the `features` of `dataset_info.json`):
  `pythonClassName` (or `python_class_name`) on every feature, nested in `featuresDict`,
  `sequence` (`tfds.features.Sequence` and `Dataset`) and the other content messages;
* the legacy `{"type": <class>, "content": ...}` dicts, whose `content` is a dict of
  sub-features, or a proto as a dict, or a JSON *string* that TFDS parses itself (with
  `proto_cls`);
* `jsonFeature.json`: a JSON string a class decodes, which may hold sub-features again.

A string that holds JSON (an object, array or string) is read as the JSON it holds, at any
depth, so a class name inside a string is found wherever TFDS would parse it. Nothing here
imports TFDS or TensorFlow until the names are compared with the classes TFDS knows, and
`list_feature_classes` never does (the fast `rlds-reverb info` path uses it).
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

__all__ = ['check_feature_classes', 'list_feature_classes']

FEATURES = 'features.json'
DATASET_INFO = 'dataset_info.json'
# Where the Feature proto, written as JSON, names the Python class of a feature.
_CLASS_NAME_KEYS = ('pythonClassName', 'python_class_name')
# The legacy format's keys: {'type': class name, 'content': ...}.
_LEGACY_TYPE, _LEGACY_CONTENT = 'type', 'content'
# How a string that holds JSON TFDS may parse starts (after white space).
_JSON_STARTS = ('{', '[', '"')


def _parse_embedded_json(text: str) -> Any:
    """Returns the JSON value a string holds, or None when it holds none."""
    if not text.lstrip().startswith(_JSON_STARTS):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None  # Not JSON: TFDS fails on it too, without importing anything.


def list_feature_classes(content: Any) -> list[str]:
    """Returns every feature class name in a features JSON value, in every form TFDS reads.

    Pure Python: imports neither TFDS nor TensorFlow.

    Args:
      content: The parsed JSON of `features.json` (or of `dataset_info.json`'s `features`).

    Returns:
      The class names (with repeats), from proto-JSON `pythonClassName` keys, legacy
      `type`/`content` dicts, and JSON held in strings at any depth.

    Example:
      >>> list_feature_classes({'type': 'my.Feature', 'content': {}})
      ['my.Feature']
    """
    found: list[str] = []
    pending = [content]
    while pending:  # Iterative: deep JSON must not exhaust the recursion limit.
        node = pending.pop()
        if isinstance(node, Mapping):
            if isinstance(node.get(_LEGACY_TYPE), str) and _LEGACY_CONTENT in node:
                found.append(node[_LEGACY_TYPE])
            found += [node[key] for key in _CLASS_NAME_KEYS if isinstance(node.get(key), str)]
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, str):
            embedded = _parse_embedded_json(node)
            if embedded is not None:
                pending.append(embedded)
    return found


def _list_known_feature_classes() -> set[str]:
    """Returns the feature class names TFDS resolves without importing anything.

    The same names TFDS registers: every `FeatureConnector` subclass imported so far (TFDS'
    own, and any the user imported), and their `ALIASES`.
    """
    import tensorflow_datasets as tfds  # Only to compare: listing needs no TFDS.

    known, pending = set(), [tfds.features.FeatureConnector]
    while pending:
        cls = pending.pop()
        known.add(f'{cls.__module__}.{cls.__name__}')
        known.update(cls.__dict__.get('ALIASES', ()))
        pending.extend(cls.__subclasses__())
    return known


def _read_features(path: pathlib.Path) -> Any:
    """Returns the features JSON of `features.json` or `dataset_info.json`, or None."""
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None  # Missing or not JSON: TFDS reports it (it never evaluates the text).
    if path.name == DATASET_INFO:
        return content.get('features') if isinstance(content, Mapping) else None
    return content


def check_feature_classes(directory: os.PathLike | str) -> None:
    """Refuses a dataset whose metadata names a feature class TFDS would import to find.

    TFDS 4.9.4 resolves each feature's class by the name stored in `features.json` (or in
    `dataset_info.json`), in any of the forms the module docstring lists; a name it does
    not know yet makes it import the module named there, which runs that module's code.
    Loading a dataset must not run code it names.

    Args:
      directory: A TFDS dataset directory.

    Raises:
      SourceError: If a feature class is neither TFDS' own nor imported already.

    Example:
      >>> check_feature_classes('/data/cartpole_v1/1.0.0')
    """
    from rlds_reverb.core.errors import SourceError  # Imports TensorFlow: listing does not.

    directory = pathlib.Path(directory)
    known: set[str] | None = None
    for name in (FEATURES, DATASET_INFO):
        named = set(list_feature_classes(_read_features(directory / name)))
        if not named:
            continue
        known = _list_known_feature_classes() if known is None else known
        unknown = sorted(named - known)
        if unknown:
            module = unknown[0].rpartition('.')[0] or unknown[0]
            raise SourceError(
                f'{directory / name} names the feature class(es) {", ".join(unknown)}, which '
                f'are not TFDS features; TFDS would import {module!r} to find them, running '
                'code named by the dataset, so rlds_reverb.load refuses it. If you trust that '
                'code, import the module yourself first, then load again.'
            )
