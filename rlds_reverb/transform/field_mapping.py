"""Field mappings: one dataset's step fields brought to a common spec (renames, drops, casts).

A `FieldMapping` is declared per dataset of a mixture (`rlds_reverb.transform.mixture`).
Step fields are named by their `/` path (`'observation/state'`, `'action'`), as frame
fields are (`core.frames`). A mapping applies, in this order:

1. `drop`: the fields left out (paths in the dataset's own names);
2. `rename`: `{old path: new path}` (a field moves, possibly into another dict);
3. `cast`: `{path: dtype}` (paths in the *new* names, the common spec's): numeric and
   bool fields only (`tf.cast`); a string field is never cast.

Every path a mapping names must exist where it is applied; a mistake is refused with the
field named and the fields there listed (`SpecMismatchError`), before any data is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from rlds_reverb.core.errors import SpecMismatchError
from rlds_reverb.core.frames import FrameFormat

__all__ = ['FieldMapping', 'flatten_fields', 'nest_fields']


def flatten_fields(nest: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
    """Returns `{'observation/state': leaf, ...}`: the leaves of nested dicts by `/` path.

    Example:
      >>> flatten_fields({'observation': {'state': 1}, 'reward': 2})
      {'observation/state': 1, 'reward': 2}
    """
    flat: dict[str, Any] = {}
    for key, value in nest.items():
        path = f'{prefix}{key}'
        if isinstance(value, Mapping):
            flat.update(flatten_fields(value, f'{path}/'))
        else:
            flat[path] = value
    return flat


def nest_fields(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Returns nested dicts from `{'/' path: leaf}`: the inverse of `flatten_fields`.

    Example:
      >>> nest_fields({'observation/state': 1, 'reward': 2})
      {'observation': {'state': 1}, 'reward': 2}
    """
    nest: dict[str, Any] = {}
    for path, value in sorted(flat.items()):
        *parents, name = path.split('/')
        node = nest
        for parent in parents:
            node = node.setdefault(parent, {})
        node[name] = value
    return nest


def _refuse_unknown(path: str, what: str, where: Mapping[str, Any], dataset: str) -> None:
    if path not in where:
        raise SpecMismatchError(
            f'The field mapping of dataset {dataset!r} names {what} field {path!r}, which it '
            f'does not hold; its step fields there are: {", ".join(sorted(where))}.'
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class FieldMapping:
    """How one dataset's step fields become the common spec: drop, then rename, then cast.

    Attributes:
      drop: Step fields left out, by `/` path in the dataset's own names.
      rename: `{old path: new path}`.
      cast: `{path: dtype}` in the new names (a `tf.DType` or its name, `'float32'`).

    Example:
      >>> FieldMapping(
      ...     drop=('observation/depth',),
      ...     rename={'observation/proprio': 'observation/state'},
      ...     cast={'action/gripper': 'float32'},
      ... )
    """

    drop: Sequence[str] = ()
    rename: Mapping[str, str] = dataclasses.field(default_factory=dict)
    cast: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        # Frozen copies: a caller's dict changed later never changes the mapping.
        object.__setattr__(self, 'drop', tuple(self.drop))
        object.__setattr__(self, 'rename', dict(self.rename))
        object.__setattr__(self, 'cast', {p: tf.as_dtype(d) for p, d in self.cast.items()})

    def map_spec(self, step_spec: Mapping[str, Any], *, dataset: str) -> dict[str, Any]:
        """Returns the step spec after the mapping (checking every path it names).

        Args:
          step_spec: The dataset's step spec (nested dicts of `tf.TensorSpec`).
          dataset: The dataset's name, for messages.

        Returns:
          The mapped step spec, nested dicts of `tf.TensorSpec`.

        Raises:
          SpecMismatchError: If a path is not there, a rename would overwrite a field, or a
            cast names a string field or a dtype that is not numeric or bool.
        """
        flat = self._move(flatten_fields(step_spec), dataset=dataset)
        for path, dtype in self.cast.items():
            _refuse_unknown(path, 'the cast', flat, dataset)
            if tf.string in (flat[path].dtype, dtype):
                raise SpecMismatchError(
                    f'Dataset {dataset!r}: field {path!r} ({flat[path].dtype.name}) cannot be '
                    f'cast to {dtype.name}: casts are for numeric and bool fields only; '
                    'drop the field or bring it to the common spec before mixing.'
                )
            flat[path] = tf.TensorSpec(flat[path].shape, dtype)
        return nest_fields(flat)

    def map_steps(self, steps: Mapping[str, Any]) -> dict[str, Any]:
        """Returns step tensors (any leading dims) mapped; paths were checked by `map_spec`."""
        flat = self._move(flatten_fields(steps), dataset='')
        for path, dtype in self.cast.items():
            flat[path] = tf.cast(flat[path], dtype)
        return nest_fields(flat)

    def map_frame_formats(self, formats: Mapping[str, FrameFormat]) -> dict[str, FrameFormat]:
        """Returns encoded frame fields' formats under their new paths (dropped ones gone)."""
        kept = {path: f for path, f in formats.items() if path not in self.drop}
        return {self.rename.get(path, path): f for path, f in kept.items()}

    def _move(self, flat: dict[str, Any], *, dataset: str) -> dict[str, Any]:
        for path in self.drop:
            _refuse_unknown(path, 'the dropped', flat, dataset)
        kept = {path: leaf for path, leaf in flat.items() if path not in self.drop}
        moved = {}
        for old, new in self.rename.items():
            _refuse_unknown(old, 'the renamed', kept, dataset)
            moved[new] = kept.pop(old)
        for new in moved:
            if new in kept:
                raise SpecMismatchError(
                    f'The field mapping of dataset {dataset!r} renames a field to {new!r}, '
                    'which it already holds; drop or rename that one too.'
                )
        return {**kept, **moved}
