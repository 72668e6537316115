"""Carry episode-level fields, an episode id and a step index into every step (so every item).

Reverb items are cut from steps; what an RLDS episode holds outside its steps (episode
metadata: an agent id, a task, D4RL's `algorithm`...) never reaches them by default. This
transform copies chosen episode fields into each step of that episode, and can add
`episode_id` (int64, the episode's position in the dataset) and `step_index` (int64, t).
Item kinds then carry them like any extra step field: as item fields (n-step, sequence,
episode items) or in `policy_info` (two-step items). `rlds_reverb.export` uses the ids to
rebuild episodes from two-step and sequence tables (docs/semantics.md §10).
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from rlds_reverb.core import checks, types
from rlds_reverb.core import episodes as episodes_lib

__all__ = [
    'ID_FIELDS',
    'carry_episode_fields',
]

ID_FIELDS: tuple[str, ...] = (types.EPISODE_ID, types.STEP_INDEX)


def check_carry_options(
    step_spec: dict, episode_spec: dict, fields: Sequence[str], *, add_ids: bool
) -> tuple[str, ...]:
    """Returns `fields` as a tuple after checking them against the dataset's spec.

    Raises:
      ValueError: If a field is not an episode-level field of the dataset (the message lists
        those that are), or its name (or an id field's) is already a step field.
    """
    if isinstance(fields, str):
        fields = (fields,)
    fields = tuple(fields)
    available = sorted(k for k in episode_spec if k != types.STEPS)
    for name in fields:
        if name not in available:
            raise ValueError(
                f'episode_fields names {name!r}, which is not an episode-level field of the '
                f'dataset; its episode fields are {available or "(none)"}.'
            )
    added = (*fields, *(ID_FIELDS if add_ids else ()))
    for name in added:
        if name in step_spec:
            raise ValueError(
                f'Cannot add field {name!r} to the steps: they already hold a step field of '
                'that name; rename it in the data, or do not carry it.'
            )
    if len(set(added)) != len(added):
        raise ValueError(f'episode_fields={fields!r} names a field twice.')
    return fields


def carry_episode_fields(
    episodes: tf.data.Dataset,
    fields: Sequence[str] = (),
    *,
    add_ids: bool = False,
    first_id: int = 0,
) -> tf.data.Dataset:
    """Returns the RLDS dataset with episode fields (and ids) copied into every step.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).
      fields: Episode-level fields (outside `steps`) to copy into each step of the episode,
        under the same name.
      add_ids: Also add `episode_id` (int64: the episode's position in `episodes`, from 0)
        and `step_index` (int64: t) to every step.
      first_id: The `episode_id` of the first episode (a part read from the middle of a
        dataset keeps the ids of the whole).

    Returns:
      The RLDS dataset; episode-level fields stay where they were too.

    Raises:
      ValueError: If a field is not an episode-level field, or clashes with a step field,
        or `first_id` is not an integer >= 0.

    Example:
      >>> carried = carry_episode_fields(episodes, ('agent_id',), add_ids=True)
      >>> rlds_reverb.push(carried, address, 'replay', item=items.TwoStep())
    """
    first_id = checks.check_int_at_least(first_id, 0, argument='first_id')
    spec = episodes.element_spec
    step_spec = spec[types.STEPS].element_spec
    fields = check_carry_options(step_spec, spec, fields, add_ids=add_ids)
    if not fields and not add_ids:
        return episodes

    def _carry(episode_id: tf.Tensor, episode: dict) -> dict:
        # Whole-episode tensors: each carried value repeated T times, no per-step map.
        steps = episode[types.STEPS]
        length = episodes_lib.episode_length(steps)

        def _repeat(value: tf.Tensor) -> tf.Tensor:
            return tf.repeat(value[tf.newaxis], length, axis=0)

        added = {name: tf.nest.map_structure(_repeat, episode[name]) for name in fields}
        if add_ids:
            added[types.EPISODE_ID] = tf.fill([length], tf.cast(episode_id, tf.int64) + first_id)
            added[types.STEP_INDEX] = tf.range(length, dtype=tf.int64)
        return {**episode, types.STEPS: {**steps, **added}}

    whole = episodes_lib.to_whole_episodes(episodes).enumerate()
    return episodes_lib.from_whole_episodes(
        whole.map(
            episodes_lib.without_autograph(_carry),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        ),
        frame_formats=episodes_lib.find_frame_formats(episodes),
    )
