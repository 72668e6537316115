"""Item kinds: what one Reverb item holds, computed per episode on whole tensors.

An item kind turns one episode's steps (`[T, ...]` tensors, see `rlds_reverb.core.episodes`)
into *rows* (the per-step records appended to a Reverb writer, shared by every item that
references them) and *windows* (`start`, `size` pairs into those rows; one per item). The
writer appends each row once and creates items as references to windows of rows, so
overlapping items share their steps and no observation is stored twice.

| kind | rows | one item | items per episode of T steps |
| --- | --- | --- | --- |
| `TwoStep()` | TF-Agents trajectories | `Trajectory` of `[2, ...]` | T - 1 |
| `NStep(n, gamma)` | steps + n-step fields | dict, no time axis | T - 1 |
| `Sequence(length, period, end)` | steps + `mask` | dict of `[length, ...]` | see below |
| `Episode(max_length)` | steps + `mask` | dict of `[max_length, ...]` | 1 (or chunks) |
| `Chunk(history, horizon)` | steps + masks | one step, `[W, ...]` history, `[H, ...]` chunk | T or T - 1 |

`TwoStep` items are exactly those TF-Agents' `ReverbAddTrajectoryObserver(sequence_length=2,
stride_length=1)` writes when fed `convert_rlds_to_trajectories`: the pairs (t, t + 1) of
each episode; nothing crosses an episode boundary and a single-step episode gives no item.

`NStep` items are the steps with `n_step_length > 0` after `adders.n_step(n, gamma)`
(docs/semantics.md §4; the last step of an episode starts no transition), holding `observation`,
`action`, `n_step_return`, `n_step_discount`, `next_observation`, `n_step_length` and the
extra step fields. Its rows are the steps (without `next_observation`): item t references row
t for its fields and row t + k for `next_observation`, so each observation is stored once
(a frame would otherwise be stored twice).

`Sequence` items are the windows of `adders.sequences(length, period, end=end)` without
`is_burn_in` (docs/semantics.md §6): the step fields plus `mask`, false on padding.

Encoded frames (`load(..., encoded_frames=...)`) are rows of `tf.string` like any step
field: each frame is appended once, items reference it, and `compute_signature` names the
frame fields of the item spec by their format (`rlds_reverb.core.frames`), which is what a
table's signature records.

In every kind, the transition into a terminal step has discount 0 whatever the data says
(two-step and sequence/episode rows: 0 into and on the terminal step; n-step: a transition
whose window reaches the terminal step has `n_step_discount` 0).

`Episode` items are whole episodes padded to `max_length` with null steps (`mask` false).
A longer episode is an error unless `overflow` says to split it into `max_length` chunks
(each padded) or to truncate it to its first `max_length` steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import cast

import tensorflow as tf
import tree

from adders import nstep
from rlds_reverb.core import checks, specs, types
from rlds_reverb.transform import convert, item_rows
from rlds_reverb.transform.chunk_items import Chunk
from rlds_reverb.transform.item_base import ItemKind
from rlds_reverb.transform.item_rows import WindowPattern, compute_sequence_windows

__all__ = [
    'Chunk',
    'Episode',
    'EpisodeOverflow',
    'ItemKind',
    'ItemName',
    'NStep',
    'Sequence',
    'TwoStep',
    'parse_item',
]

# Defined with the vocabulary, so that the command line's parser loads without TensorFlow.
EpisodeOverflow = types.EpisodeOverflow
ItemName = types.ItemName


@dataclasses.dataclass(frozen=True)
class TwoStep(ItemKind):
    """TF-Agents two-step trajectories, one per pair (t, t + 1) of an episode.

    The transition into a terminal step has discount 0 whatever the data says
    (docs/semantics.md §3).

    Args:
      extra_fields: What becomes of extra step fields without a `policy_info_fn`:
        `'policy_info'` (default: carried, so a push keeps every field) or `'drop'` (as
        TF-Agents' `push_rlds_to_reverb`), a `types.ExtraFields`.

    Example:
      >>> rlds_reverb.push(episodes, 'localhost:8000', 'uniform', item=items.TwoStep())
    """

    extra_fields: types.ExtraFields | str = types.ExtraFields.POLICY_INFO

    def __post_init__(self):
        extra_fields = types.as_enum(types.ExtraFields, self.extra_fields, argument='extra_fields')
        object.__setattr__(self, 'extra_fields', extra_fields)

    def compute_rows(self, steps, *, policy_info_fn=None):
        return convert.episode_to_trajectory(
            steps, policy_info_fn=policy_info_fn, extra_fields=self.extra_fields
        )

    def compute_windows(self, steps):
        count = tf.maximum(tf.shape(steps[types.IS_FIRST])[0] - 1, 0)
        return tf.range(count), tf.fill([count], 2)

    def compute_item_spec(self, episodes, *, policy_info_fn=None):
        spec = specs.create_trajectory_data_spec(
            episodes,
            policy_info_fn=policy_info_fn,
            extra_fields=self.extra_fields,
            decode_frames=None,
        )
        return specs.add_outer_dim(spec)

    def map_frame_formats(self, formats, *, policy_info_fn=None):
        # Observations keep their paths; extra step fields carried as `policy_info` move
        # under it (a policy_info_fn's output is its own).
        kept = {p: f for p, f in formats.items() if p.split('/')[0] == types.OBSERVATION}
        if policy_info_fn is None and self.extra_fields is types.ExtraFields.POLICY_INFO:
            moved = {f'{types.POLICY_INFO}/{p}': f for p, f in formats.items() if p not in kept}
            kept.update(moved)
        return kept

    @property
    def max_span(self) -> int:
        return 2

    @property
    def window_pattern(self) -> WindowPattern:
        return WindowPattern(length=2)


def _select_n_step_fields(steps: types.Nest) -> dict:
    """Returns an n-step row's fields: the item's, but `next_observation` (another row's)."""
    fields = (
        types.OBSERVATION,
        types.ACTION,
        types.N_STEP_RETURN,
        types.N_STEP_DISCOUNT,
        types.N_STEP_LENGTH,
    )
    extras = [
        f for f in specs.get_extra_step_fields(steps) if f not in (*fields, types.NEXT_OBSERVATION)
    ]
    return {f: steps[f] for f in (*fields, *extras)}


@dataclasses.dataclass(frozen=True)
class NStep(ItemKind):
    """N-step transitions (docs/semantics.md §4), one item per step that starts one.

    The rows are the episode's steps with their n-step fields; the item of step t (k =
    min(n, L - t) steps ahead) is row t, with `next_observation` the observation of row
    t + k: every observation (every frame) is stored once, and items reference it.

    Args:
      n: Steps per transition, >= 1.
      gamma: The discount factor in [0, 1].

    Example:
      >>> rlds_reverb.push(episodes, client, 'replay', item=items.NStep(3, 0.99),
      ...                  priority=lambda t: tf.abs(t['n_step_return']))
    """

    n: int
    gamma: float
    squeeze = True

    def __post_init__(self):
        checks.check_int_at_least(self.n, 1, argument='n')
        if not 0.0 <= float(self.gamma) <= 1.0:
            raise ValueError(f'gamma={self.gamma!r} is not valid; expected 0 <= gamma <= 1.')

    def compute_rows(self, steps, *, policy_info_fn=None):
        del policy_info_fn  # N-step items carry the extra step fields themselves.
        return _select_n_step_fields(nstep.add_n_step_fields(steps, self.n, float(self.gamma)))

    def compute_windows(self, steps):
        # Item t spans rows t .. t + k, k = min(n, L - t): its next observation is row t + k.
        size = tf.shape(steps[types.IS_FIRST])[0]
        starts = tf.range(tf.maximum(size - 1, 0))
        return starts, tf.minimum(self.n, size - 1 - starts) + 1

    def reference_item(self, columns, first, stop):
        item = {**columns, types.NEXT_OBSERVATION: columns[types.OBSERVATION]}
        return tree.unflatten_as(item, self.make_flat_referencer(columns)(first, stop))

    def make_flat_referencer(self, columns):
        # Every field is row t, but `next_observation`: row t + k (the window's last row).
        item = {**columns, types.NEXT_OBSERVATION: columns[types.OBSERVATION]}
        layout = [
            (column, key == types.NEXT_OBSERVATION)
            for key in sorted(item)  # `tree.flatten`'s order of a dict's fields.
            for column in tree.flatten(item[key])
        ]
        return lambda first, stop: [
            column[stop - 1 if ahead else first] for column, ahead in layout
        ]

    def gather_items(self, rows, starts, sizes):
        items = tf.nest.map_structure(lambda x: tf.gather(x, starts), rows)
        ahead = tf.nest.map_structure(
            lambda x: tf.gather(x, starts + sizes - 1), rows[types.OBSERVATION]
        )
        return {**items, types.NEXT_OBSERVATION: ahead}

    def map_frame_formats(self, formats, *, policy_info_fn=None):
        del policy_info_fn
        return nstep.add_next_frame_formats(dict(formats))

    def compute_item_spec(self, episodes, *, policy_info_fn=None):
        step_spec = specs.get_step_spec(episodes)
        batched = tf.nest.map_structure(
            lambda s: tf.TensorSpec([None, *s.shape], s.dtype), step_spec
        )
        rows = tf.function(self.compute_rows).get_concrete_function(batched)
        spec = tf.nest.map_structure(
            lambda t: tf.TensorSpec(t.shape[1:], t.dtype), rows.structured_outputs
        )
        return {**spec, types.NEXT_OBSERVATION: spec[types.OBSERVATION]}

    @property
    def max_span(self) -> int:
        return self.n + 1


@dataclasses.dataclass(frozen=True)
class Sequence(ItemKind):
    """Windows of `length` steps every `period` steps (docs/semantics.md §6), with `mask`.

    Args:
      length: Steps per window, >= 1.
      period: Steps between window starts, >= 1 (default `length`).
      end: The end-of-episode behaviour, a `types.EndBehavior` or its name.

    Example:
      >>> items.Sequence(40, 20, end='pad')
    """

    length: int
    period: int | None = None
    end: types.EndBehavior | str = types.EndBehavior.TRUNCATE

    def __post_init__(self):
        checks.check_int_at_least(self.length, 1, argument='length')
        period = self.length if self.period is None else self.period
        object.__setattr__(self, 'period', checks.check_int_at_least(period, 1, argument='period'))
        end = types.as_enum(types.EndBehavior, self.end, argument='end')
        object.__setattr__(self, 'end', end)
        object.__setattr__(self, 'crosses_episodes', end is types.EndBehavior.CONTINUE)

    def compute_rows(self, steps, *, policy_info_fn=None):
        del policy_info_fn
        pads = self.end in (types.EndBehavior.PAD, types.EndBehavior.LAST)
        return item_rows.compute_masked_step_rows(steps, self.length - 1 if pads else 0)

    def compute_windows(self, steps):
        size = tf.shape(steps[types.IS_FIRST])[0]
        if self.crosses_episodes:  # Stream windows: the writer places them.
            return tf.zeros([0], tf.int32), tf.zeros([0], tf.int32)
        return compute_sequence_windows(size, self.length, self.window_period, self.end)

    def compute_item_spec(self, episodes, *, policy_info_fn=None):
        fixed = self.end is not types.EndBehavior.TRUNCATE
        return item_rows.compute_masked_step_spec(episodes, self.length if fixed else None)

    @property
    def max_span(self) -> int:
        return self.length

    @property
    def window_period(self) -> int:
        """Steps between window starts (`period`, which defaults to `length`)."""
        return cast(int, self.period)  # Set by __post_init__.

    @property
    def window_pattern(self) -> WindowPattern | None:
        if self.end is not types.EndBehavior.DROP:
            return None  # The other ends shorten, pad or move the tail window.
        return WindowPattern(length=self.length, period=self.window_period)

    @property
    def stream_window(self) -> WindowPattern | None:
        if not self.crosses_episodes:
            return None
        return WindowPattern(length=self.length, period=self.window_period)


@dataclasses.dataclass(frozen=True)
class Episode(ItemKind):
    """Whole episodes, padded to `max_length` steps, with `mask`.

    Args:
      max_length: Steps per item, >= 1.
      overflow: What to do with longer episodes: `EpisodeOverflow` or its name.

    Example:
      >>> items.Episode(1000, overflow='split')
    """

    max_length: int
    overflow: EpisodeOverflow | str = EpisodeOverflow.ERROR

    def __post_init__(self):
        checks.check_int_at_least(self.max_length, 1, argument='max_length')
        overflow = types.as_enum(EpisodeOverflow, self.overflow, argument='overflow')
        object.__setattr__(self, 'overflow', overflow)

    def compute_rows(self, steps, *, policy_info_fn=None):
        del policy_info_fn
        return item_rows.compute_masked_step_rows(steps, self.max_length - 1)

    def compute_windows(self, steps):
        size = tf.shape(steps[types.IS_FIRST])[0]
        if self.overflow is EpisodeOverflow.SPLIT:
            starts = tf.range(0, size, self.max_length)
        else:
            starts = tf.zeros([tf.minimum(size, 1)], tf.int32)
        return starts, tf.fill(tf.shape(starts), self.max_length)

    def compute_item_spec(self, episodes, *, policy_info_fn=None):
        return item_rows.compute_masked_step_spec(episodes, self.max_length)

    def describe_length_problem(self, length):
        if length <= self.max_length or self.overflow is not EpisodeOverflow.ERROR:
            return None
        return (
            f'the episode has {length} steps, more than Episode(max_length={self.max_length}); '
            "raise max_length, or pass overflow='split' or overflow='truncate'"
        )

    @property
    def max_span(self) -> int:
        return self.max_length


def parse_item(
    kind: str,
    *,
    n: int = 1,
    gamma: float = 0.99,
    length: int = 2,
    period: int | None = None,
    end: str = 'truncate',
    max_length: int = 1000,
    overflow: str = 'error',
) -> ItemKind:
    """Returns the item kind named on a command line.

    Args:
      kind: An `ItemName` value: 'two-step', 'n-step', 'sequence' or 'episode'.
      n: N-step: steps per transition.
      gamma: N-step: discount factor.
      length: Sequence: steps per window.
      period: Sequence: steps between window starts (default `length`).
      end: Sequence: end-of-episode behaviour (`types.EndBehavior` value).
      max_length: Episode: steps per item.
      overflow: Episode: what to do with longer episodes (`EpisodeOverflow` value).

    Returns:
      The item kind.

    Raises:
      ValueError: If `kind` names no item kind (lists the valid names), or an option of the
        kind is out of range.

    Example:
      >>> parse_item('n-step', n=3, gamma=0.99)
    """
    makers: dict[ItemName, Callable[[], ItemKind]] = {
        ItemName.TWO_STEP: TwoStep,
        ItemName.N_STEP: lambda: NStep(n, gamma),
        ItemName.SEQUENCE: lambda: Sequence(length, period, end),
        ItemName.EPISODE: lambda: Episode(max_length, overflow),
    }
    names = {name.value: name for name in ItemName}
    if kind not in names:
        raise ValueError(f'item={kind!r} is not valid; expected one of {", ".join(names)}.')
    return makers[names[kind]]()
