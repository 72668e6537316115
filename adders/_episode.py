"""The shared mechanics of every transform: accept either dataset form, work per episode.

A transform accepts two forms of episode datasets and returns the form it was given:

- an *RLDS dataset* (see `rlds_reverb.types`): episodes holding a nested `steps` dataset;
  episode-level fields are kept as they are;
- an *episode-tensor dataset*, as `rlds_reverb.episodes.to_episode_tensors` returns: one
  element per episode, the steps as a dict of `[T, ...]` tensors. This form skips the
  per-step slicing of nested datasets and is several times faster; transforms chain on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import tensorflow as tf

from rlds_reverb import episodes, types

StepsFn = Callable[[types.Step], types.Step]


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
            f'(rlds_reverb.episodes.to_episode_tensors); got elements {spec}.'
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


def map_episodes(dataset: tf.data.Dataset, fn: StepsFn) -> tf.data.Dataset:
    """Applies `fn` (whole-episode steps -> whole-episode steps) to every episode.

    Episodes run in parallel (`num_parallel_calls=AUTOTUNE`) and keep their order.
    """
    if is_rlds(dataset):

        def _on_episode(episode: types.Episode) -> types.Episode:
            steps = fn(episodes.batch_steps(episode[types.STEPS]))
            return {**episode, types.STEPS: tf.data.Dataset.from_tensor_slices(steps)}

        return dataset.map(_on_episode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def to_steps_tensors(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Returns the episode-tensor form of an RLDS or episode-tensor dataset."""
    return episodes.to_episode_tensors(dataset) if is_rlds(dataset) else dataset


def episode_end(steps: types.Step) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Returns `(t, last, terminal)`: step indices [T], the last index L, and termination.

    `terminal` is `is_terminal` on the final step (false for an empty episode).
    """
    length = episodes.episode_length(steps)
    t = tf.range(length)
    terminal = tf.reduce_any(steps[types.IS_TERMINAL][length - 1 :])
    return t, length - 1, terminal


def expand_to(mask: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    """Reshapes a `[T]` tensor to `[T, 1, ..., 1]` so that it broadcasts against `like`."""
    return tf.reshape(
        mask, tf.concat([tf.shape(mask), tf.ones([like.shape.rank - 1], tf.int32)], 0)
    )
