"""Fast pushes of RLDS episodes into Reverb tables, and TF-Agents' drop-in `push_rlds_to_reverb`.

Each episode is validated and turned into an `EpisodePlan` (rows, item windows, priorities)
as whole tensors in a parallel, prefetched `tf.data` map (`rlds_reverb.transform.plans`);
Python then only appends rows to a Reverb writer (`rlds_reverb.write.engines`). An episode
is written whole: its items are created, then the writer's `end_episode` waits until the
server confirms them. If anything fails part way, `PushError` says exactly how many
episodes were fully written. The options are one `PushOptions` (`rlds_reverb.write.options`)
and the loop is the one every write runs (`rlds_reverb.write.loop`).
"""

from __future__ import annotations

import warnings
from typing import Any

import reverb
import tensorflow as tf

from rlds_reverb.core import specs, types
from rlds_reverb.core.errors import SpecMismatchError
from rlds_reverb.core.specs import PolicyInfoFn
from rlds_reverb.transform import convert
from rlds_reverb.transform import items as items_lib
from rlds_reverb.write import loop, observers
from rlds_reverb.write import options as options_lib
from rlds_reverb.write.loop import ProgressFn, PushStats
from rlds_reverb.write.options import (
    DEFAULT_MAX_IN_FLIGHT_ITEMS,
    DEFAULT_TIMEOUT_MS,
    PushOptions,
)

__all__ = [
    'DEFAULT_MAX_IN_FLIGHT_ITEMS',
    'DEFAULT_TIMEOUT_MS',
    'ProgressFn',
    'PushOptions',
    'PushStats',
    'push',
    'push_rlds_to_reverb',
]


def push(
    episodes: tf.data.Dataset,
    server: str | reverb.Client,
    table: str | list[str],
    *,
    options: PushOptions | None = None,
    progress: ProgressFn | None = None,
    **overrides: Any,
) -> PushStats:
    """Validates RLDS episodes and writes them into Reverb table(s) as items, fast.

    Args:
      episodes: An RLDS dataset (see `rlds_reverb.core.types`).
      server: A 'host:port' address or a `reverb.Client`.
      table: The table name, or several names (each gets every item).
      options: The write options as one value: `PushOptions` (item kind, priority,
        `on_invalid`, timeouts, episode fields and ids, resuming, checkpoints), where every
        option is described.
      progress: Optional `fn(episodes, steps)` called after each episode is written.
      **overrides: Options of `PushOptions` by name, without `options`
        (`item=items.NStep(3, 0.99), on_invalid='skip'`).

    Returns:
      `PushStats`; `items[table]` is exactly the number of items the table gained.

    Raises:
      TypeError: If a keyword is not an option of `PushOptions` (lists those that are).
      ValueError: If an option is invalid (or given both in `options` and as a keyword), or
        the dataset holds no RLDS steps, or an `episode_fields` name is not an episode-level
        field (or is already a step field).
      ReverbConnectionError: If nothing answers at the server's address, or the server
        does not answer within `timeout_ms`; names the address.
      TableError: If a table does not exist (lists those that do).
      SpecMismatchError: If a table signature differs from the items (leaf-by-leaf diff).
      TableTooSmallError: If the items would not fit without eviction.
      InvalidEpisodeError: In `'raise'` mode, at the first invalid episode.
      EpisodeTooLongError: If an episode exceeds `items.Episode(max_length)`.
      PushError: If writing fails part way, also when the server dies; says how many
        episodes and items were fully written. The writer is closed first.

    Example:
      >>> stats = rlds_reverb.push(episodes, 'localhost:8000', 'replay',
      ...                          item=items.NStep(3, 0.99), on_invalid='skip')
    """
    options = options_lib.merge_options(options, **overrides)
    table_names = [table] if isinstance(table, str) else list(table)
    return loop.push_episodes(episodes, server, table_names, options, progress=progress)


# TF-Agents' message when the table signature does not match the data (`str(e)` of ours).
_TF_AGENTS_SIGNATURE_MESSAGE = 'Replay buffer table signature spec should match RLDS data spec.'


def _describe_signature_mismatch(signature, expected) -> SpecMismatchError:
    """Returns the error for a table signature that matches neither accepted spec.

    `str(error)` is TF-Agents' sentence (`specs.use_tf_agents_messages` words it so); the
    leaf-by-leaf diff (or, for a table without a signature, what to do) is a note and
    `error.differences`.
    """
    if signature is None:
        return SpecMismatchError(
            "The observer's table has no signature; push_rlds_to_reverb needs one, as "
            "TF-Agents' does: create the table with signature="
            'tables.signature_for(items.TwoStep(), episodes), or call rlds_reverb.push.',
            tf_agents_message=_TF_AGENTS_SIGNATURE_MESSAGE,
        )
    return SpecMismatchError(
        'Specs differ (table signature vs data):',
        specs.diff_specs(signature, expected),
        tf_agents_message=_TF_AGENTS_SIGNATURE_MESSAGE,
    )


def _choose_policy_info_fn(
    signature, rlds_data: tf.data.Dataset, policy_info_fn: PolicyInfoFn, extra_fields
) -> PolicyInfoFn:
    """Returns the policy info function to write with: the table signature decides.

    Without `policy_info_fn`, the signature must match the data's spec. With it: a signature
    holding its policy info gets it; a signature matching the spec without policy info (as
    TF-Agents checks it) gets items without it, and a `UserWarning` says so, since writing
    it would make the table unreadable (docs/semantics.md §3).
    """
    # Encoded frames are written as they are (the fast path pushes their bytes).
    with specs.use_tf_agents_messages():
        without = specs.add_outer_dim(
            specs.create_trajectory_data_spec(
                rlds_data, extra_fields=extra_fields, decode_frames=()
            )
        )
    if policy_info_fn is None:
        if signature is None or specs.diff_specs(signature, without):
            raise _describe_signature_mismatch(signature, without)
        return None
    with_info = specs.add_outer_dim(
        specs.create_trajectory_data_spec(
            rlds_data, policy_info_fn=policy_info_fn, extra_fields=extra_fields, decode_frames=()
        )
    )
    if signature is not None and not specs.diff_specs(signature, with_info):
        return policy_info_fn
    if signature is not None and not specs.diff_specs(signature, without):
        warnings.warn(
            "push_rlds_to_reverb: the observer's table signature declares no policy_info, so "
            "policy_info_fn's output is not written (TF-Agents writes it anyway, and the "
            'table can then not be read by its signature). To keep it, create the table with '
            'signature=tables.signature_for(items.TwoStep(), episodes, policy_info_fn=fn).',
            UserWarning,
            stacklevel=3,
        )
        return None
    raise _describe_signature_mismatch(signature, with_info)


def push_rlds_to_reverb(
    rlds_data: tf.data.Dataset,
    reverb_observer,
    policy_info_fn: PolicyInfoFn = None,
    *,
    extra_fields: types.ExtraFields | str = types.ExtraFields.DROP,
) -> int:
    """Pushes RLDS data to Reverb as TF-Agents trajectories (drop-in for TF-Agents').

    Same signature, items and return value as `tf_agents.replay_buffers.rlds_to_reverb.
    push_rlds_to_reverb`. When the observer writes plain two-step items (a
    `ReverbAddTrajectoryObserver` with `sequence_length=2`, `stride_length=1`, no padding),
    the fast `push` path writes to its client and tables; otherwise each trajectory is
    passed to the observer, as TF-Agents does.

    Episodes read with their frames encoded (`load(..., encoded_frames=...)`) are pushed
    as bytes: the table's signature must declare them so (`tables.signature_for`).

    The table signature decides what is written, so the table stays readable: with a
    `policy_info_fn`, a signature that declares its policy info gets it, and a signature
    without policy info (TF-Agents' check) gets items without it, with a `UserWarning`
    (TF-Agents writes it there, and its items no longer match the signature).

    Args:
      rlds_data: An RLDS dataset (see `rlds_reverb.core.types`).
      reverb_observer: A Reverb observer (TF-Agents' or `rlds_reverb.observers`').
      policy_info_fn: Optional `fn(current_step, next_step) -> policy_info`.
      extra_fields: Without `policy_info_fn`: `'drop'` the extra step fields (default, as
        TF-Agents) or write them as `'policy_info'` (`types.ExtraFields`; the table
        signature must then declare them).

    Returns:
      The number of trajectories (steps) pushed.

    Raises:
      ValueError: If no RLDS steps exist in `rlds_data`, or the observer's table signature
        does not match the data (a `SpecMismatchError`: `str(e)` is TF-Agents' sentence, the
        leaf-by-leaf diff is a note and `e.differences`), or `extra_fields` is not valid.
      InvalidArgumentError: If an episode is invalid (`InvalidEpisodeError`).

    Example:
      >>> observer = reverb_utils.ReverbAddTrajectoryObserver(client, 'replay', 2)
      >>> steps = rlds_reverb.push_rlds_to_reverb(episodes, observer)
    """
    extra_fields = types.as_enum(types.ExtraFields, extra_fields, argument='extra_fields')
    with specs.use_tf_agents_messages():
        policy_info_fn = _choose_policy_info_fn(
            reverb_observer.get_table_signature(), rlds_data, policy_info_fn, extra_fields
        )
    fast = observers.describe_two_step_writes(reverb_observer)
    if fast is not None:
        stats = push(
            rlds_data,
            reverb_observer.py_client,
            fast.table_names,
            item=items_lib.TwoStep(extra_fields=extra_fields),
            priority=fast.priority,
            policy_info_fn=policy_info_fn,
            allow_eviction=True,  # TF-Agents does not check table sizes.
        )
        return stats.steps
    steps = 0
    trajectories = convert.convert_rlds_to_trajectories(
        rlds_data, policy_info_fn, extra_fields=extra_fields, decode_frames=()
    )
    for entry in trajectories:
        reverb_observer(entry)
        steps += 1
    return steps
