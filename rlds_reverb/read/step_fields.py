"""Step fields: the ones `step_fields=` keeps, `discount` filled in, every required one there.

The common tail of every reader (`readers.finish_episodes` uses it): `select_step_fields`
prunes one step (or its spec, or its TFDS features) to the chosen fields, keeping RLDS' own;
a missing `discount` is filled with 1.0 per reward leaf, with a warning (docs/semantics.md
§1); any other missing required field is an error that names it and the source.
"""

from __future__ import annotations

import inspect
import pathlib
import warnings
from collections.abc import Mapping, Sequence

import tensorflow as tf
import tensorflow_datasets as tfds

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import SourceError, SpecMismatchError
from rlds_reverb.core.specs import get_step_spec

__all__ = [
    'check_episodes',
    'check_step_spec',
    'fill_discount',
    'lacks_discount',
    'select_in_steps',
    'select_step_fields',
    'warn_caller',
    'warn_no_discount',
]

_PATH_SEPARATOR = '/'
# The step fields every selection keeps: RLDS' own, which every transform reads.
_ALWAYS_KEPT = tuple(f for f in types.REQUIRED_STEP_FIELDS if f != types.OBSERVATION)
# Frames in this package are not the caller a warning points at.
_PACKAGE_DIR = str(pathlib.Path(__file__).resolve().parents[1])
Paths = Sequence[tuple[str, ...]] | None


def warn_caller(message: str) -> None:
    """Warns (`UserWarning`) at the first frame outside the package: the caller of `load`."""
    level, frame = 2, inspect.currentframe()
    frame = frame.f_back if frame is not None else None  # The function that warns.
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)


def _list_paths(tree: Mapping, prefix: tuple[str, ...] = ()) -> list[str]:
    """Returns every `/` path of a nested mapping (sub-dicts and their leaves)."""
    found = []
    for key, value in tree.items():
        found.append(_PATH_SEPARATOR.join((*prefix, key)))
        if isinstance(value, Mapping | tfds.features.FeaturesDict):
            found += _list_paths(value, (*prefix, key))
    return found


def select_step_fields(tree: Mapping, paths: Paths, *, where: str) -> dict:
    """Returns the nested mapping `tree` (one step, or its features) pruned to `paths`.

    RLDS' own fields are always kept, and `observation` whole unless paths inside it are
    named.

    Args:
      tree: One step, its spec, its TFDS features or their serialized info.
      paths: The kept fields as key paths (`LoadOptions.step_paths`); None keeps all.
      where: The source, for messages.

    Raises:
      SpecMismatchError: If a path names a field `tree` does not have.

    Example:
      >>> select_step_fields(step, [('observation', 'image')], where='my data')
    """
    if paths is None:
        return dict(tree)
    wanted = [(field,) for field in _ALWAYS_KEPT if field in tree]
    if not any(path[0] == types.OBSERVATION for path in paths):
        wanted.append((types.OBSERVATION,))
    selected: dict = {}
    for path in [*wanted, *paths]:
        node, out = tree, selected
        for depth, key in enumerate(path):
            if not isinstance(node, Mapping | tfds.features.FeaturesDict) or key not in node:
                raise SpecMismatchError(
                    f'{where}: step_fields names {_PATH_SEPARATOR.join(path)!r}, which the '
                    f'steps do not have. Step fields: {_list_paths(tree)}.'
                )
            node = node[key]
            if depth == len(path) - 1:
                out[key] = node
            else:
                out = out.setdefault(key, {})
    return selected


def select_in_steps(episodes: tf.data.Dataset, paths: Paths, *, where: str) -> tf.data.Dataset:
    """Returns RLDS episodes with their nested steps pruned to `paths` (unchanged for None).

    Raises:
      SpecMismatchError: If a path names a field the steps do not have.
    """
    if paths is None:
        return episodes
    steps_spec = episodes.element_spec.get(types.STEPS)
    if not isinstance(steps_spec, tf.data.DatasetSpec):
        return episodes  # Not RLDS: check_episodes says why.
    select_step_fields(steps_spec.element_spec, paths, where=where)  # Names a wrong path.
    return episodes.map(
        lambda e: {
            **e,
            types.STEPS: e[types.STEPS].map(
                lambda step: select_step_fields(step, paths, where=where)
            ),
        }
    )


def fill_discount(step: types.Step) -> types.Step:
    """Returns `step` (one step, or whole-episode steps) with a float32 discount of 1.0 per
    reward leaf."""
    discount = tf.nest.map_structure(
        lambda r: tf.ones_like(r, dtype=tf.float32), step[types.REWARD]
    )
    return {**step, types.DISCOUNT: discount}


def warn_no_discount(where: str) -> None:
    """Warns, at the caller of `load`, that the steps of `where` get a discount of 1.0."""
    warn_caller(
        f"The steps of {where} have no '{types.DISCOUNT}' field; using 1.0 on every step "
        '(the is_terminal flag decides termination: every transition into a terminal step '
        'gets discount 0).'
    )


def lacks_discount(step_spec: object) -> bool:
    """Returns whether steps of this spec get a filled discount (a reward, no discount)."""
    return (
        isinstance(step_spec, Mapping)
        and types.DISCOUNT not in step_spec
        and types.REWARD in step_spec
    )


def _with_discount(episodes: tf.data.Dataset, *, where: str) -> tf.data.Dataset:
    """Returns RLDS episodes with `discount` filled in where the steps lack it (warning once)."""
    episode_spec = episodes.element_spec
    steps_spec = episode_spec.get(types.STEPS) if isinstance(episode_spec, dict) else None
    step_spec = steps_spec.element_spec if isinstance(steps_spec, tf.data.DatasetSpec) else None
    if not lacks_discount(step_spec):
        return episodes  # Complete, or not RLDS at all: get_step_spec says which.
    warn_no_discount(where)
    fill = episodes_lib.without_autograph(fill_discount)
    return episodes.map(
        episodes_lib.without_autograph(
            lambda episode: {**episode, types.STEPS: episode[types.STEPS].map(fill)}
        )
    )


def check_episodes(episodes: tf.data.Dataset, *, where: str) -> tf.data.Dataset:
    """Returns RLDS episodes with `discount` filled, after checking the step fields.

    Raises:
      SourceError: If `episodes` is not an RLDS dataset (no `steps` dataset).
      SpecMismatchError: If a required step field other than `discount` is missing.
    """
    episodes = _with_discount(episodes, where=where)
    check_step_spec(episodes, where=where)
    return episodes


def check_step_spec(episodes: tf.data.Dataset, *, where: str) -> None:
    """Raises unless the episodes' steps hold every required field (naming `where`).

    Raises:
      SourceError: If `episodes` is not an RLDS dataset (no `steps` dataset).
      SpecMismatchError: If a required step field is missing.
    """
    try:
        get_step_spec(episodes)
    except SpecMismatchError as e:
        raise SpecMismatchError(f'{where}: {e}') from e
    except SourceError as e:
        raise SourceError(f'{where}: {e}') from e
