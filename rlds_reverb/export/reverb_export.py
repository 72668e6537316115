"""Export a Reverb table to an RLDS dataset in TFDS format (docs/semantics.md §10).

Items are read exactly once, in insertion order, from queue copies of parts of the table
(`rlds_reverb.export.table_copy`), streamed through `tf.data` in batches, rebuilt into
episodes and written one episode at a time (`storage.tfds_writer.RldsDatasetWriter`), so the
exporting process holds only the episodes still being assembled.

Which tables can be exported, and why:

| items (`rlds_reverb.items`) | exported | because |
| --- | --- | --- |
| `Episode(max_length)` | yes | each item is a whole episode: its steps where `mask` is true |
| `Sequence`, `Episode(overflow='split')`, pushed with `add_ids=True` | yes | every step row says its episode and step; overlapping windows give the same row |
| `TwoStep()`, pushed with `add_ids=True` | yes | the pairs (t, t + 1) cover steps 0..L; flags come from the step types |
| `TwoStep()` without ids, written by one writer in order | yes | read in insertion order, an episode's pairs follow each other: each pair starts where the previous one ended (checked field by field), a FIRST step starts an episode, a LAST one ends it |
| `Sequence`, `Episode(overflow='split')` without ids, one writer in order, given `item=` | yes | read in insertion order, an episode's windows follow each other `period` steps apart: a window whose first step is FIRST starts an episode, the others continue it (overlapping rows checked field by field), and the window holding LAST ends it |
| `Sequence(end='last')` or `end='continue'` without ids | no | the moved last window, or windows across episodes, cannot be placed without ids |
| `NStep` | no | an item holds a sum of rewards, not the steps |

Two-step items and windows without ids rely on the table's insertion order: one writer,
one episode after the other (`push`, the Beam pipeline's writer per server, a TF-Agents observer). Items
of several writers interleaved (`push --workers N` into one table) or removed from the
middle of an episode (sampling with `max_times_sampled`, a prioritized remover) break the
chain, and the export says so (push with `add_ids=True` for such tables). FIFO eviction
(`max_size`) only removes the oldest items: the episode it cut is partial (raise, or
skipped with `on_invalid='skip'`).

Two-step items hold TF-Agents trajectories, which keep everything of a step except the
last step's `is_terminal` and discount: the trajectory's discount there is 0 on
termination, and the exporter reads it back that way (TF-Agents' own rule: a LAST step with
discount 0 is a termination). So a two-step export equals the original exactly when the
last step's discount is 0 on termination and nonzero on truncation, as TF-Agents drivers,
dm_env and `rlds_reverb.export.recorder` write it; single-step episodes give no two-step
item and cannot come back.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import pathlib
import time
from collections.abc import Sequence

import numpy as np
import reverb
import tensorflow as tf
import tensorflow_datasets as tfds
import tree

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import timeouts, types
from rlds_reverb.core.errors import ExportError
from rlds_reverb.export import table_copy
from rlds_reverb.storage import features as features_lib
from rlds_reverb.storage import tfds_writer
from rlds_reverb.transform import items as items_lib

__all__ = [
    'DEFAULT_BATCH_ITEMS',
    'ExportKind',
    'ExportStats',
    'ProgressFn',
    'export_table',
]

ProgressFn = types.EpisodeProgressFn  # The 0.1 name.

# TF-Agents' StepType values.
_FIRST, _LAST = 0, 2
_ID_FIELDS = (types.EPISODE_ID, types.STEP_INDEX)
DEFAULT_BATCH_ITEMS = 64


class ExportKind(enum.Enum):
    """How a table's items are rebuilt into episodes (see the module docstring).

    WHOLE_EPISODES: each item is one whole episode (`items.Episode`).
    STEPS_WITH_IDS: items of RLDS steps with `mask`, each step carrying its ids.
    TWO_STEP_WITH_IDS: TF-Agents two-step trajectories with the ids in `policy_info`.
    TWO_STEP_IN_ORDER: TF-Agents two-step trajectories without ids, in one writer's order.
    WINDOWS_IN_ORDER: windows of RLDS steps with `mask` without ids, in one writer's order,
      placed by the `items.Sequence` or `items.Episode` they were pushed with.
    """

    WHOLE_EPISODES = 'whole-episodes'
    STEPS_WITH_IDS = 'steps-with-ids'
    TWO_STEP_WITH_IDS = 'two-step-with-ids'
    TWO_STEP_IN_ORDER = 'two-step-in-order'
    WINDOWS_IN_ORDER = 'windows-in-order'


_TWO_STEP_KINDS = (ExportKind.TWO_STEP_WITH_IDS, ExportKind.TWO_STEP_IN_ORDER)


@dataclasses.dataclass
class ExportStats:
    """What an export wrote: episodes, steps, items read, skipped episodes, seconds."""

    episodes: int = 0
    steps: int = 0
    items: int = 0
    skipped_episodes: int = 0
    seconds: float = 0.0
    kind: ExportKind | None = None
    directory: pathlib.Path | None = None

    @property
    def steps_per_second(self) -> float:
        """Steps written per second of export."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0


def _is_trajectory(signature) -> bool:
    return all(hasattr(signature, f) for f in ('step_type', 'next_step_type', 'policy_info'))


def detect_export_kind(signature) -> ExportKind:
    """Returns how items of this table signature are rebuilt into episodes.

    Raises:
      ExportError: For item kinds that cannot be exported; says why and what to push instead.
    """
    if _is_trajectory(signature):
        info = signature.policy_info
        if isinstance(info, dict) and all(f in info for f in _ID_FIELDS):
            return ExportKind.TWO_STEP_WITH_IDS
        return ExportKind.TWO_STEP_IN_ORDER
    if not isinstance(signature, dict):
        raise ExportError(
            f'Cannot export items of signature {signature}: not an item kind of rlds_reverb.'
        )
    if types.N_STEP_RETURN in signature:
        raise ExportError(
            'The table holds n-step transitions: an item holds a discounted sum of rewards, '
            'not the steps, so episodes cannot be rebuilt; push the episodes as '
            'items.Episode(max_length), or as sequences or two-step items with add_ids=True.'
        )
    missing = [f for f in (*types.REQUIRED_STEP_FIELDS, types.MASK) if f not in signature]
    if missing:
        raise ExportError(
            f'Cannot export the table: its items lack the field(s) {missing}; export reads '
            'items.Episode, items.Sequence and items.TwoStep items of rlds_reverb.push.'
        )
    if all(f in signature for f in _ID_FIELDS):
        return ExportKind.STEPS_WITH_IDS
    return ExportKind.WHOLE_EPISODES


def _row_spec(signature, kind: ExportKind) -> dict:
    """Returns the spec of one rebuilt step row (ids included), without the time axis."""
    drop_time = lambda s: tf.TensorSpec(s.shape[1:], s.dtype)  # noqa: E731
    if kind in _TWO_STEP_KINDS:
        spec = {
            types.OBSERVATION: signature.observation,
            types.ACTION: signature.action,
            types.REWARD: signature.reward,
            types.DISCOUNT: signature.discount,
            **features_lib.split_policy_info(signature.policy_info),
        }
        spec.update({f: tf.TensorSpec([2], tf.bool) for f in types.FLAG_FIELDS})
        if kind is ExportKind.TWO_STEP_IN_ORDER:
            spec.update({f: tf.TensorSpec([2], tf.int64) for f in _ID_FIELDS})
    else:
        spec = {k: v for k, v in signature.items() if k != types.MASK}
        if kind is ExportKind.WINDOWS_IN_ORDER:
            spec.update({f: tf.TensorSpec([None], tf.int64) for f in _ID_FIELDS})
    return tf.nest.map_structure(drop_time, spec)


def _make_features(row_spec: dict, episode_fields: Sequence[str]) -> tfds.features.FeaturesDict:
    """Returns the dataset's TFDS features: steps without ids, the lifted episode fields."""
    skip = {*_ID_FIELDS, *types.FLAG_FIELDS, *episode_fields}
    steps = {k: v for k, v in row_spec.items() if k not in skip}
    episode = {k: row_spec[k] for k in episode_fields}
    return features_lib.make_rlds_features_from_specs(steps, episode)


def _to_rows(batch, kind: ExportKind) -> tuple[dict, np.ndarray]:
    """Returns a batch of items as step rows `[N * L, ...]`, and which rows are real steps."""
    flat = lambda x: x.reshape((-1, *x.shape[2:]))  # noqa: E731
    if kind in _TWO_STEP_KINDS:
        step_type = batch.step_type
        discount = flat(tree.flatten(batch.discount)[0])
        is_last = flat(step_type) == _LAST
        terminal = is_last & np.all(discount.reshape(len(discount), -1) == 0, axis=1)
        rows = {
            types.OBSERVATION: tree.map_structure(flat, batch.observation),
            types.ACTION: tree.map_structure(flat, batch.action),
            types.REWARD: tree.map_structure(flat, batch.reward),
            types.DISCOUNT: tree.map_structure(flat, batch.discount),
            **tree.map_structure(flat, features_lib.split_policy_info(batch.policy_info)),
            types.IS_FIRST: flat(step_type) == _FIRST,
            types.IS_LAST: is_last,
            types.IS_TERMINAL: terminal,
        }
        return rows, np.ones(len(is_last), bool)
    rows = {k: tree.map_structure(flat, v) for k, v in batch.items() if k != types.MASK}
    return rows, flat(batch[types.MASK])


def _equal_rows(a: dict, b: dict) -> np.ndarray:
    """Returns, per row, whether every field of `a` equals `b`'s (NaN equal to NaN)."""
    equal = None
    for x, y in zip(tree.flatten(a), tree.flatten(b), strict=True):
        same = x == y
        if x.dtype.kind in 'fc':
            same |= np.isnan(x) & np.isnan(y)
        same = same.reshape(len(same), int(np.prod(same.shape[1:]))).all(axis=1)
        equal = same if equal is None else equal & same
    return equal


class _ChainIds:
    """Numbers the episodes and steps of two-step items read in one writer's order.

    Item k holds steps (t, t + 1) of an episode. It continues the previous item when its
    first step is not FIRST, equals the previous item's second step field by field, and the
    previous item did not end its episode (second step LAST); it starts an episode when its
    first step is FIRST. An item that starts mid-episode after an ended one (FIFO eviction
    cut the episode's beginning) opens a partial episode, numbered from step 1 so that the
    assembler reports it incomplete. Anything else means the items are not in one writer's
    order, and rebuilding episodes from them would mix episodes: an `ExportError`.
    """

    def __init__(self, table: str):
        self._table = table
        self._items = 0
        self._last_row: dict | None = None  # The previous item's second step.
        self._episode = -1
        self._step = -1  # The previous item's first step index.

    def add_ids(self, rows: dict) -> dict:
        """Returns `rows` (`[2N, ...]`, items' step pairs) with `episode_id`/`step_index`."""
        first = _take(rows, slice(0, None, 2))
        second = _take(rows, slice(1, None, 2))
        count = len(first[types.IS_FIRST])
        fresh = first[types.IS_FIRST]
        # Whether item k's first step is item k - 1's second step (the previous batch's
        # last item for k = 0), and whether that item left its episode open.
        chained = np.concatenate(
            [
                np.zeros(1, bool)
                if self._last_row is None
                else _equal_rows(_take(first, slice(0, 1)), self._last_row),
                _equal_rows(_take(first, slice(1, None)), _take(second, slice(0, -1))),
            ]
        )[:count]
        open_before = self._last_row is not None and not self._last_row[types.IS_LAST][0]
        was_open = np.concatenate([[open_before], ~second[types.IS_LAST][:-1]])[:count]
        continues = ~fresh & chained & was_open
        # An open episode followed by a FIRST step was cut (the assembler reports it); one
        # followed by another episode's middle means interleaved or removed items.
        broken = ~fresh & ~chained & was_open
        if broken.any():
            k = int(np.flatnonzero(broken)[0])
            raise ExportError(
                f'Cannot export table {self._table!r} as two-step items in insertion order: '
                f'item {self._items + k} does not continue the episode of item '
                f'{self._items + k - 1}, which had not ended. The items are not one episode '
                'after the other (several writers, such as push --workers N, or items removed '
                'by sampling); push with add_ids=True to export such a table. Nothing was '
                'written.'
            )
        starts = ~continues
        positions = np.arange(count)
        last_start = np.maximum.accumulate(np.where(starts, positions, -1))
        episode = self._episode + np.cumsum(starts)
        offset = np.where(fresh, 0, 1)[np.maximum(last_start, 0)]
        step = np.where(last_start < 0, self._step + 1 + positions, positions - last_start + offset)
        if count:
            self._items += count
            self._last_row = _take(second, slice(count - 1, count))
            self._episode, self._step = int(episode[-1]), int(step[-1])
        ids = {
            types.EPISODE_ID: np.stack([episode, episode], axis=1).reshape(-1),
            types.STEP_INDEX: np.stack([step, step + 1], axis=1).reshape(-1),
        }
        return {**rows, **ids}


def _take(rows, index):
    return tree.map_structure(lambda x: x[index], rows)


def find_window_period(item: items_lib.ItemKind) -> int:
    """Returns the steps between the starts of an episode's windows of `item`.

    Raises:
      ValueError: If `item` is not an `items.Sequence` or `items.Episode`, or its windows
        cannot be placed from the insertion order (`end='last'` or `'continue'`).
    """
    if isinstance(item, items_lib.Episode):
        return item.max_length
    if not isinstance(item, items_lib.Sequence):
        raise ValueError(
            f'item={item} is not valid here: item= names the items.Sequence or items.Episode '
            'a table of step windows without ids was pushed with.'
        )
    if item.end in (types.EndBehavior.LAST, types.EndBehavior.CONTINUE):
        raise ValueError(
            f"item={item}: windows of end='{item.end.value}' cannot be placed without ids "
            '(the last window is moved back, or windows cross episodes, by amounts the table '
            'does not hold); push them with add_ids=True to export them.'
        )
    return item.period


class _WindowChain:
    """Numbers the steps of windows (`Sequence`, `Episode` chunks) read in one writer's order.

    An episode's windows start `period` steps apart, its first at step 0 (FIRST). A window
    whose first step is FIRST starts an episode; any other continues the previous window's
    episode `period` steps further on, its rows overlapping that window's checked field by
    field, while that episode has not ended (no LAST yet). One that does not start with
    FIRST after an ended episode (FIFO eviction cut the beginning) opens a partial episode,
    numbered from step 1 so that the assembler reports it incomplete. A window that
    contradicts the previous one means the items are not one writer's windows in order: an
    `ExportError`.
    """

    def __init__(self, table: str, *, period: int):
        self._table = table
        self._period = period
        self._items = 0
        self._previous: dict | None = None  # The previous window's real rows.
        self._start = 0  # Its first step's index.
        self._episode = -1
        self._open = False  # Whether its episode had not ended.

    def add_ids(self, rows: dict, valid: np.ndarray, count: int) -> dict:
        """Returns `rows` (`count` windows laid end to end) with `episode_id`/`step_index`.

        Padding rows (not `valid`) get ids -1.
        """
        span = len(valid) // count if count else 0
        episode_ids = np.full(len(valid), -1, np.int64)
        step_ids = np.full(len(valid), -1, np.int64)
        for k in range(count):
            part = np.flatnonzero(valid[k * span : (k + 1) * span]) + k * span
            if not part.size:
                continue
            window = _take(rows, part)
            self._place(window, k)
            episode_ids[part] = self._episode
            step_ids[part] = self._start + np.arange(part.size)
            self._previous = window
            self._open = not window[types.IS_LAST].any()
        self._items += count
        return {**rows, types.EPISODE_ID: episode_ids, types.STEP_INDEX: step_ids}

    def _place(self, window: dict, k: int) -> None:
        """Sets the episode and first step index of the next window."""
        index = self._items + k
        if window[types.IS_FIRST][1:].any():
            raise ExportError(
                f'Cannot export table {self._table!r} as windows in insertion order: item '
                f'{index} holds the first step of an episode after its own first row '
                "(windows across episodes, end='continue'); push with add_ids=True to export "
                'such a table. Nothing was written.'
            )
        if window[types.IS_FIRST][0]:
            self._episode, self._start = self._episode + 1, 0
            return
        if not self._open:  # The episode's beginning was evicted: a partial episode.
            self._episode, self._start = self._episode + 1, 1
            return
        start = self._start + self._period
        overlap = min(
            len(self._previous[types.IS_FIRST]) - self._period, len(window[types.IS_FIRST])
        )
        if (
            overlap > 0
            and not _equal_rows(
                _take(window, slice(0, overlap)),
                _take(self._previous, slice(self._period, self._period + overlap)),
            ).all()
        ):
            raise ExportError(
                f'Cannot export table {self._table!r} as windows in insertion order: item '
                f'{index} does not continue the episode of item {index - 1} {self._period} '
                "steps on (their common steps differ). The items are not one writer's "
                'windows in order (several writers, items removed by sampling, or an item= '
                'other than the one pushed); push with add_ids=True to export such a table. '
                'Nothing was written.'
            )
        self._start = start


def _ordinal(n: int) -> str:
    suffix = 'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')
    return f'{n}{suffix}'


class _Assembler:
    """Collects step rows by episode id; hands out each episode once all its steps are in.

    With `ids_in_items`, the ids are the items' own (`push(..., add_ids=True)`: the
    episode's index in the dataset, its step indices); otherwise `_ChainIds` or
    `_WindowChain` numbered the episodes in the table's insertion order, so messages name
    them by that order and not by a dataset index they cannot know (evicted episodes leave
    no trace).
    """

    def __init__(self, *, ids_in_items: bool):
        self._ids_in_items = ids_in_items
        self._chunks: dict[int, list] = {}
        self._seen: dict[int, set] = {}
        self._last: dict[int, int] = {}
        self._order: list[int] = []
        self._done: set[int] = set()

    def add(self, rows: dict) -> list[tuple[int, dict]]:
        """Adds rows (with ids); returns the episodes they complete, in completion order."""
        ids = rows[types.EPISODE_ID].astype(np.int64)
        steps = rows[types.STEP_INDEX].astype(np.int64)
        completed = []
        unique, first = np.unique(ids, return_index=True)
        for episode_id in unique[np.argsort(first)]:
            episode_id = int(episode_id)
            select = ids == episode_id
            if episode_id in self._done:
                raise ExportError(
                    f'Episode {episode_id} has items after it was complete: the table holds '
                    'two pushes with the same episode ids (push once per table, or use '
                    'separate tables).'
                )
            if episode_id not in self._chunks:
                self._chunks[episode_id], self._seen[episode_id] = [], set()
                self._order.append(episode_id)
            chunk = _take(rows, select)
            self._chunks[episode_id].append(chunk)
            self._seen[episode_id].update(steps[select].tolist())
            last = np.flatnonzero(chunk[types.IS_LAST])
            if last.size:
                self._last[episode_id] = int(steps[select][last[0]])
            end = self._last.get(episode_id)
            if end is not None and len(self._seen[episode_id]) == end + 1:
                completed.append((episode_id, self._pop(episode_id)))
        return completed

    def _pop(self, episode_id: int) -> dict:
        chunks = self._chunks.pop(episode_id)
        self._seen.pop(episode_id)
        self._last.pop(episode_id, None)
        self._order.remove(episode_id)
        self._done.add(episode_id)
        rows = tree.map_structure(lambda *xs: np.concatenate(xs), *chunks)
        _, first = np.unique(rows[types.STEP_INDEX], return_index=True)
        return _take(rows, first)  # Sorted by step index, each step once.

    def describe_open(self) -> list[str]:
        """Describes the episodes still missing steps."""
        out = []
        for episode_id in self._order:
            seen = sorted(self._seen[episode_id])
            end = self._last.get(episode_id)
            if self._ids_in_items:
                expected = f'steps 0..{end}' if end is not None else 'no last step (is_last)'
                out.append(
                    f'episode {episode_id} (its episode_id): {len(seen)} step(s) found '
                    f'({seen[0]}..{seen[-1]}), {expected}'
                )
                continue
            # Chained ids: a partial episode's steps are numbered from 1, not its own.
            missing = []
            if seen[0] > 0:
                missing.append('its beginning (its first step is not is_first)')
            if end is None:
                missing.append('its end (no is_last)')
            elif seen[0] == 0 and len(seen) != end + 1:
                missing.append('steps in its middle')
            out.append(
                f'the {_ordinal(episode_id + 1)} episode in the table\'s insertion order (the '
                'items hold no episode ids, so its index in the dataset is unknown): '
                f'{len(seen)} step(s) found, missing {" and ".join(missing)}'
            )
        return out


def _check_whole_episode(index: int, rows: dict) -> str | None:
    """Returns why one item's rows are not a whole episode, or None."""
    if not len(rows[types.IS_FIRST]):
        return f'item {index} holds no step'
    if not rows[types.IS_FIRST][0] or not rows[types.IS_LAST][-1]:
        return (
            f'item {index} holds a part of an episode (its first step is_first='
            f'{bool(rows[types.IS_FIRST][0])}, its last is_last={bool(rows[types.IS_LAST][-1])}): '
            'to export sequence windows or Episode chunks, pass the item kind they were pushed '
            'with (export_table(..., item=items.Sequence(...)), rlds-reverb export --item ...) '
            'or push them with add_ids=True'
        )
    return None


def _to_episode(rows: dict, episode_fields: Sequence[str]) -> dict:
    """Returns the TFDS episode of rebuilt rows: steps without ids, episode fields lifted."""
    steps = {k: v for k, v in rows.items() if k not in (*_ID_FIELDS, *episode_fields)}
    lifted = {k: tree.map_structure(lambda x: x[0], rows[k]) for k in episode_fields}
    return {types.STEPS: steps, **lifted}


def _describe_server(server: str | reverb.Client) -> str:
    return server.server_address if isinstance(server, reverb.Client) else server


def _read_batches(copy: table_copy.TableCopy, batch_items: int, timeout_ms: int):
    dataset = reverb.TrajectoryDataset.from_table_signature(
        copy.address,
        copy.table,
        max_in_flight_samples_per_worker=2 * batch_items,
        num_workers_per_iterator=1,  # One stream keeps the queue's order.
        rate_limiter_timeout_ms=timeout_ms,
    )
    data = dataset.take(copy.num_items).map(
        episodes_lib.without_autograph(lambda sample: sample.data)
    )
    return data.padded_batch(batch_items).prefetch(2).as_numpy_iterator()


def export_table(
    directory: os.PathLike | str,
    table: str,
    *,
    server: str | reverb.Client | None = None,
    server_checkpoint_dir: os.PathLike | str | None = None,
    checkpoint: os.PathLike | str | None = None,
    episode_fields: Sequence[str] = (),
    item: items_lib.ItemKind | None = None,
    on_invalid: types.ValidationMode | str = types.ValidationMode.RAISE,
    name: str = 'reverb_export',
    version: str = '1.0.0',
    episodes_per_shard: int = 100,
    batch_items: int = DEFAULT_BATCH_ITEMS,
    part_rows: int = 200_000,
    max_copy_bytes: int = table_copy.DEFAULT_MAX_COPY_BYTES,
    timeout_ms: int = timeouts.EXPORT_MS,
    progress: types.EpisodeProgressFn | None = None,
) -> ExportStats:
    """Writes the items of a Reverb table back out as an RLDS dataset in TFDS format.

    Every item is read exactly once, oldest first, from a queue copy of the table (the
    table itself is left as it is; see `rlds_reverb.export.table_copy`), part after part,
    rebuilt into
    episodes (module docstring: which item kinds, and why) and streamed to `directory`.
    `tfds.builder_from_directory(directory)` and `rlds_reverb.load(directory)` read it.

    Args:
      directory: The dataset (version) directory to write; replaced once complete.
      table: The table name.
      server: A live server ('host:port' or a client); its checkpoint directory must be
        readable and writable here. Exactly one of `server` and `checkpoint`.
      server_checkpoint_dir: With `server`, required: the directory the server checkpoints
        to (its `DefaultCheckpointer` path, `rlds-reverb serve --checkpoint-dir`). The
        server is checkpointed into a private copy, and this directory is left as it was
        (Reverb deletes its other entries when it checkpoints; the export puts them back).
      checkpoint: A Reverb checkpoint directory (the latest checkpoint in it is used).
      episode_fields: Item fields that are episode metadata (carried with
        `push(..., episode_fields=...)`): written as episode-level fields, not steps.
      item: For a table of step windows pushed without ids, the `items.Sequence` or
        `items.Episode(overflow='split')` they were pushed with: its windows are then placed
        from the insertion order (one writer, module docstring). Ignored when the items
        carry ids or are two-step items.
      on_invalid: `'raise'` (the default: an episode the table holds only part of is an
        error, and nothing is written) or `'skip'` (write the whole ones, count the rest).
      name: The TFDS dataset name.
      version: The dataset version.
      episodes_per_shard: Episodes per TFRecord shard.
      batch_items: Items read per batch.
      part_rows: About how many rows (steps) of the table are restored for reading at a
        time when the table is read in parts (`table_copy.open_table_reader`).
      max_copy_bytes: Checkpoints whose chunks file is larger are read in parts of
        `part_rows` rows; smaller ones whole (the bound on the copies' memory).
      timeout_ms: The most a read of the copy may wait.
      progress: Optional `fn(episodes, steps)` called after each episode is written.

    Returns:
      `ExportStats`.

    Raises:
      ValueError: If not exactly one of `server` and `checkpoint` is given, `server`
        without `server_checkpoint_dir`, or an option is invalid (`item` neither a `Sequence` nor an `Episode`, or a `Sequence` whose
        windows cannot be placed without ids: `end='last'` or `'continue'`).
      ExportError: If the server or checkpoint holds no such table (a server's is checked
        before it is checkpointed), the table's items cannot be rebuilt into episodes
        (says why), an
        `episode_fields` name is not an item field (or is `episode_id`/`step_index` of items
        the export numbers by them), or (raise mode) the table holds part of
        an episode; nothing is written then.
      CheckpointError: If the live server cannot be checkpointed, or
        `server_checkpoint_dir` is missing or not the directory it checkpoints to.

    Example:
      >>> stats = export_table('/data/replay_rlds/1.0.0', 'replay', server='localhost:8000',
      ...                      server_checkpoint_dir='/ckpt')
      >>> episodes = rlds_reverb.load('/data/replay_rlds/1.0.0')
    """
    started = time.perf_counter()
    mode = types.as_enum(types.ValidationMode, on_invalid, argument='on_invalid')
    if mode is types.ValidationMode.REPORT:
        raise ValueError("on_invalid='report' is not an export mode; use 'raise' or 'skip'.")
    if isinstance(episode_fields, str):
        episode_fields = (episode_fields,)
    episode_fields = tuple(episode_fields)
    period = None if item is None else find_window_period(item)
    stats = ExportStats()
    with table_copy.open_table_reader(
        table,
        server=server,
        server_checkpoint_dir=server_checkpoint_dir,
        checkpoint=checkpoint,
        part_rows=part_rows,
        max_copy_bytes=max_copy_bytes,
    ) as reader:
        kind = detect_export_kind(reader.signature)
        if kind is ExportKind.WHOLE_EPISODES and period is not None:
            kind = ExportKind.WINDOWS_IN_ORDER
        stats.kind = kind
        row_spec = _row_spec(reader.signature, kind)
        # Whole-episode items hold no ids of the export's: an `episode_id` there is a carried
        # episode field (Minari's), written back like any other.
        if kind is not ExportKind.WHOLE_EPISODES:
            numbered = [f for f in episode_fields if f in _ID_FIELDS]
            if numbered:
                raise ExportError(
                    f'episode_fields names {numbered}: the export numbers the episodes and '
                    f'steps of {kind.value} items by these fields, so they cannot also be '
                    'episode metadata; push whole episodes (items.Episode(max_length), no '
                    'add_ids) to carry an episode field of that name.'
                )
        unknown = [f for f in episode_fields if f not in row_spec]
        if unknown:
            raise ExportError(
                f'episode_fields names {unknown}, which the items do not hold; their fields '
                f'are {sorted(f for f in row_spec if f not in _ID_FIELDS)}.'
            )
        features = _make_features(row_spec, episode_fields)
        # A live server's checkpoint is a private copy, removed after the export.
        if server is not None:
            source = {'server': _describe_server(server)}
        else:
            source = {'checkpoint': str(reader.checkpoint)}
        metadata = {'exported_from': {'table': table, **source, 'items': kind.value}}
        assembler = _Assembler(
            ids_in_items=kind in (ExportKind.STEPS_WITH_IDS, ExportKind.TWO_STEP_WITH_IDS)
        )
        chain = _ChainIds(table)
        windows = _WindowChain(table, period=period or 1)
        with tfds_writer.RldsDatasetWriter(
            directory,
            features=features,
            name=name,
            version=version,
            metadata=metadata,
            episodes_per_shard=episodes_per_shard,
        ) as writer:

            def _write(rows: dict) -> None:
                writer.add_episode(_to_episode(rows, episode_fields))
                stats.episodes += 1
                stats.steps += len(rows[types.IS_FIRST])
                if progress is not None:
                    progress(1, len(rows[types.IS_FIRST]))

            for copy in reader.iterate_parts():
                for batch in _read_batches(copy, batch_items, timeout_ms):
                    rows, valid = _to_rows(batch, kind)
                    count = len(tree.flatten(batch)[0])
                    if kind is ExportKind.WHOLE_EPISODES:
                        span = len(valid) // count
                        for i in range(count):
                            part = slice(i * span, (i + 1) * span)
                            item_rows = _take(_take(rows, part), valid[part])
                            problem = _check_whole_episode(stats.items + i, item_rows)
                            if problem is None:
                                _write(item_rows)
                            elif mode is types.ValidationMode.SKIP:
                                stats.skipped_episodes += 1
                            else:
                                raise ExportError(
                                    f'Cannot export table {table!r}: {problem}. '
                                    'Nothing was written.'
                                )
                    else:
                        if kind is ExportKind.TWO_STEP_IN_ORDER:
                            rows = chain.add_ids(rows)
                        elif kind is ExportKind.WINDOWS_IN_ORDER:
                            rows = windows.add_ids(rows, valid, count)
                        for _, episode_rows in assembler.add(_take(rows, valid)):
                            _write(episode_rows)
                    stats.items += count
            if stats.items != reader.num_items:
                raise ExportError(
                    f'Read {stats.items} of the {reader.num_items} items of table {table!r} '
                    'before the copy ran dry; nothing was written.'
                )
            incomplete = assembler.describe_open()
            if incomplete and mode is types.ValidationMode.RAISE:
                shown = '; '.join(incomplete[:5]) + (' ...' if len(incomplete) > 5 else '')
                raise ExportError(
                    f'Table {table!r} holds only part of {len(incomplete)} episode(s) ({shown}). '
                    'Its items lack those steps: evicted (max_size), removed by sampling '
                    "(max_times_sampled, a queue) or never written (Sequence(end='drop') "
                    "tails). Nothing was written; pass on_invalid='skip' to export the whole "
                    'episodes only.'
                )
            stats.skipped_episodes += len(incomplete)
    stats.directory = writer.target
    stats.seconds = time.perf_counter() - started
    return stats
