"""Rebuilding episodes from step rows: by their ids, or one item per episode.

`EpisodeAssembler` collects rows by `episode_id` and hands out each episode once all its
steps are in (ids the items carry, or the chains of `rlds_reverb.export.chains`);
`check_whole_episode` says why an item of whole-episode items is not one; `to_episode`
turns rebuilt rows into the episode a TFDS writer takes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tree

from rlds_reverb.core import types
from rlds_reverb.core.errors import ExportError
from rlds_reverb.export.chains import ID_FIELDS, take_rows

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []


def _ordinal(n: int) -> str:
    suffix = 'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')
    return f'{n}{suffix}'


class EpisodeAssembler:
    """Collects step rows by episode id; hands out each episode once all its steps are in.

    With `ids_in_items`, the ids are the items' own (`push(..., add_ids=True)`: the
    episode's index in the dataset, its step indices); otherwise `TwoStepChain` or
    `WindowChain` numbered the episodes in the table's insertion order, so messages name
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
            chunk = take_rows(rows, select)
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
        return take_rows(rows, first)  # Sorted by step index, each step once.

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


def check_whole_episode(index: int, rows: dict) -> str | None:
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


def to_episode(rows: dict, episode_fields: Sequence[str]) -> dict:
    """Returns the TFDS episode of rebuilt rows: steps without ids, episode fields lifted."""
    steps = {k: v for k, v in rows.items() if k not in (*ID_FIELDS, *episode_fields)}
    lifted = {k: tree.map_structure(lambda x: x[0], rows[k]) for k in episode_fields}
    return {types.STEPS: steps, **lifted}
