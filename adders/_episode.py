"""The shared mechanics of every transform: accept either dataset form, work per episode.

A transform accepts two forms of episode datasets and returns the form it was given:

- an *RLDS dataset* (see `rlds_reverb.core.types`): episodes holding a nested `steps` dataset;
  episode-level fields are kept as they are;
- an *episode-tensor dataset*, as `rlds_reverb.core.episodes.to_episode_tensors` returns: one
  element per episode, the steps as a dict of `[T, ...]` tensors. This form skips the
  per-step slicing of nested datasets and is several times faster; transforms chain on it.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable, Iterable
from typing import NamedTuple

import tensorflow as tf

from rlds_reverb.core import compat, episodes, sources, types
from rlds_reverb.core.frames import FrameFormat


def is_rlds(dataset: tf.data.Dataset) -> bool:
    """Returns whether `dataset` holds RLDS episodes (a nested `steps` dataset)."""
    spec = dataset.element_spec
    return isinstance(spec, dict) and isinstance(spec.get(types.STEPS), tf.data.DatasetSpec)


def get_step_spec(dataset: tf.data.Dataset, *, transform: str) -> dict[str, types.SpecNest]:
    """Returns the spec of one step of an RLDS or episode-tensor dataset.

    Raises:
      ValueError: If the elements are neither RLDS episodes nor dicts of `[T, ...]` tensors.
    """
    if is_rlds(dataset):
        return dataset.element_spec[types.STEPS].element_spec
    spec = dataset.element_spec
    if not isinstance(spec, dict) or types.IS_FIRST not in spec:
        raise ValueError(
            f'{transform} expects an RLDS dataset or a dataset of whole-episode step tensors '
            f'(rlds_reverb.core.episodes.to_episode_tensors); got elements {spec}.'
        )
    return tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), spec)


def require_fields(
    step_spec: dict[str, types.SpecNest], fields: Iterable[str], *, transform: str
) -> None:
    """Checks that the steps hold `fields`.

    Raises:
      ValueError: Naming the missing fields and the ones present.
    """
    missing = [f for f in fields if f not in step_spec]
    if missing:
        raise ValueError(
            f'{transform} needs step field(s) {missing}; the steps hold {sorted(step_spec)}.'
        )


def warn_if_no_discount(step_spec: dict[str, types.SpecNest], *, transform: str) -> None:
    """Warns that a missing `discount` field is taken as 1.0 on every step (docs/semantics.md §1)."""
    if types.DISCOUNT not in step_spec:
        warnings.warn(
            f'{transform}: the steps have no {types.DISCOUNT!r} field; using 1.0 on every step.',
            stacklevel=3,
        )


def refuse_overwrite(
    step_spec: dict[str, types.SpecNest], fields: Iterable[str], *, transform: str
) -> None:
    """Checks that the fields a transform adds are not already step fields.

    Raises:
      ValueError: Naming the fields that would be overwritten.
    """
    clashes = [f for f in fields if f in step_spec]
    if clashes:
        raise ValueError(
            f'{transform} adds step field(s) {clashes}, which the steps already hold; '
            'apply the transform once, or rename the existing fields first.'
        )


class Bounds(NamedTuple):
    """Where each step of a flat stream of whole episodes sits (global indices).

    `t` is `[N]`; the others are `[N]`, or scalars for a single episode (they broadcast
    against `t`: one episode needs no `[N]` copies of its bounds).

    Attributes:
      t: The step's own index.
      first: The index of its episode's first step.
      last: The index of its episode's last step (L).
      terminal: Whether its episode is terminal (`is_terminal` on its last step).
    """

    t: tf.Tensor
    first: tf.Tensor
    last: tf.Tensor
    terminal: tf.Tensor


class Stage(enum.Enum):
    """Where `map_episodes` calls its function.

    OWN_MAP: a `tf.data` map of its own (the default).
    SOURCE_MAP: inside the per-episode map of the input's source (`episodes.find_source`:
      what `load` and the adders return; `sources.StageMappedSource`) when it has one and
      one episode is processed per call, else a map of its own whose calls run their ops
      on one thread (`compat.map_single_threaded`). For a function of many small ops and
      no TF1 control flow: a stage, and the handing of ops between threads, cost about
      as much per episode as short episodes' own work. Not with `autograph`.
    """

    OWN_MAP = 'own_map'
    SOURCE_MAP = 'source_map'


BoundedStepsFn = Callable[[types.Step, Bounds], types.Step]
# The frame formats of a transform's output from its input's (fields it adds).
FramesFn = Callable[[dict[str, FrameFormat]], dict[str, FrameFormat]]


def bounds_from_splits(is_terminal: tf.Tensor, row_splits: tf.Tensor) -> Bounds:
    """Returns the `Bounds` of episodes laid end to end, episode i at [splits[i], splits[i+1])."""
    row_splits = tf.cast(row_splits, tf.int32)
    lengths = row_splits[1:] - row_splits[:-1]
    firsts, lasts = row_splits[:-1], row_splits[1:] - 1
    size = row_splits[-1]
    # Empty episodes read the appended False (they own no step anyway).
    padded = tf.concat([is_terminal, [False]], axis=0)
    terminals = tf.gather(padded, tf.where(lengths > 0, lasts, size))
    return Bounds(
        t=tf.range(size),
        first=tf.repeat(firsts, lengths),
        last=tf.repeat(lasts, lengths),
        terminal=tf.repeat(terminals, lengths),
    )


def episode_bounds(steps: types.Step) -> Bounds:
    """Returns the `Bounds` of one whole episode's `[T, ...]` steps."""
    size = episodes.episode_length(steps)
    # A constant slice (one op; `[size - 1:]` traces five): empty, so False, when T = 0.
    terminal = tf.reduce_any(steps[types.IS_TERMINAL][-1:])
    return Bounds(t=tf.range(size), first=tf.constant(0), last=size - 1, terminal=terminal)


def map_episodes(
    dataset: tf.data.Dataset,
    fn: BoundedStepsFn,
    *,
    episodes_per_call: int = 1,
    autograph: bool = False,
    stage: Stage = Stage.OWN_MAP,
    frames_fn: FramesFn | None = None,
) -> tf.data.Dataset:
    """Applies `fn` to whole episodes, `episodes_per_call` at a time, keeping their order.

    `fn` takes a flat stream of steps (`[N, ...]` tensors: the episodes laid end to end) and
    its `Bounds`, and returns the stream with fields added; it must not mix episodes.
    Several episodes per call amortize TF's per-op cost over more steps. Our functions
    have no Python control flow on tensors, so autograph (slow to trace) is off unless
    asked for, as it must be around user code such as a value function (then only what
    `fn` calls unmarked is converted: mark the toolkit's own functions with
    `episodes.without_autograph`). `stage` says where `fn` runs (`Stage`).

    An RLDS dataset with encoded frames (`episodes.find_frame_formats`) keeps their formats,
    with those of the fields `fn` adds (`frames_fn`: the output's formats from the input's).
    """
    # Unconverted, the whole traced function (fn included) is left as written.
    maybe_convert = (lambda f: f) if autograph else episodes.without_autograph
    get_bounds = episodes.without_autograph(episode_bounds)
    get_split_bounds = episodes.without_autograph(bounds_from_splits)
    flatten = episodes.without_autograph(_flatten_episodes)
    rlds = is_rlds(dataset)
    formats = episodes.find_frame_formats(dataset)
    if frames_fn is not None:
        formats = frames_fn(formats)
    in_source = stage is Stage.SOURCE_MAP and not autograph
    source = episodes.find_source(dataset)
    if in_source and source is not None and episodes_per_call == 1:
        # Inside the source's own per-episode map (its decoding): one stage fewer.
        fused = sources.StageMappedSource(source, lambda e: _put_steps(e, fn, get_bounds))
        return episodes.from_source(fused, frame_formats=formats)
    if rlds:
        dataset = episodes.to_whole_episodes(dataset)

    def _get(element):
        return element[types.STEPS] if rlds else element

    def _put(element, steps):
        return {**element, types.STEPS: steps} if rlds else steps

    def _on_one(element):
        steps = _get(element)
        return _put(element, fn(steps, get_bounds(steps)))

    def _on_batch(element):
        batch = _get(element)
        flat, splits, unflatten = flatten(batch)
        out = fn(flat, get_split_bounds(flat[types.IS_TERMINAL], splits))
        return _put(element, tf.nest.map_structure(unflatten, out))

    def _map(data: tf.data.Dataset, on_element) -> tf.data.Dataset:
        mapper = compat.map_single_threaded if in_source else tf.data.Dataset.map
        return mapper(
            data,
            maybe_convert(on_element),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )

    if episodes_per_call == 1:
        dataset = _map(dataset, _on_one)
    else:
        dataset = _map(dataset.ragged_batch(episodes_per_call), _on_batch)
        # Unbatched ragged leaves have rank-0 ragged specs; a map turns them into tensors.
        dataset = dataset.unbatch()
        if not rlds:
            dataset = dataset.map(episodes.without_autograph(lambda element: element))
    # RLDS out, its tensor form remembered: a next adder or push skips the nested steps.
    return episodes.from_whole_episodes(dataset, frame_formats=formats) if rlds else dataset


def _put_steps(episode: dict, fn: BoundedStepsFn, get_bounds: Callable) -> dict:
    """Returns a whole episode with `fn` applied to its steps (with their `Bounds`)."""
    steps = episode[types.STEPS]
    return {**episode, types.STEPS: fn(steps, get_bounds(steps))}


def _flatten_episodes(batch: types.Step):
    """Returns (flat steps, row splits, unflatten) for a batch of episodes.

    `ragged_batch` gives ragged `[B, None, ...]` leaves, or dense `[B, T, ...]` ones when
    every episode has the same static length; both become `[N, ...]` episodes end to end.
    """
    flag = batch[types.IS_FIRST]
    if isinstance(flag, tf.RaggedTensor):
        splits = flag.row_splits
        flat = tf.nest.map_structure(lambda x: x.values, batch)
        return flat, splits, lambda x: tf.RaggedTensor.from_row_splits(x, splits, validate=False)
    shape = tf.shape(flag)
    splits = tf.range(shape[0] + 1) * shape[1]

    def _merge(x):
        return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))

    def _split(x):
        return tf.reshape(x, tf.concat([shape[:2], tf.shape(x)[1:]], 0))

    return tf.nest.map_structure(_merge, batch), splits, _split


def to_steps_tensors(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Returns the episode-tensor form of an RLDS or episode-tensor dataset."""
    return episodes.to_episode_tensors(dataset) if is_rlds(dataset) else dataset
