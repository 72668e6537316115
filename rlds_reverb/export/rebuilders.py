"""One rebuilder per export kind: items of a table back to the step rows of whole episodes.

`detect_export_kind` reads a table's signature (and the `item=` windows were pushed with)
and says which kind of items it holds; `REBUILDERS` maps each `ExportKind` to its
`Rebuilder`, which turns batches of those items into the rows of whole episodes:

| kind | rows from | ids from | episodes by |
| --- | --- | --- | --- |
| `WHOLE_EPISODES` | the item's steps (`mask`) | none | one per item, checked whole |
| `STEPS_WITH_IDS` | the item's steps (`mask`) | the items | `EpisodeAssembler` |
| `TWO_STEP_WITH_IDS` | both steps of each trajectory | the items' `policy_info` | `EpisodeAssembler` |
| `TWO_STEP_IN_ORDER` | both steps of each trajectory | `TwoStepChain` | `EpisodeAssembler` |
| `WINDOWS_IN_ORDER` | the window's steps (`mask`) | `WindowChain` | `EpisodeAssembler` |

`rlds_reverb.export.reverb_export` says which item kinds can be exported and why.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf
import tree

from rlds_reverb.core import types
from rlds_reverb.core.errors import ExportError
from rlds_reverb.export.assembly import EpisodeAssembler, check_whole_episode
from rlds_reverb.export.chains import ID_FIELDS, TwoStepChain, WindowChain, take_rows
from rlds_reverb.storage import features as features_lib

__all__ = ['ExportKind']

# TF-Agents' StepType values.
_FIRST, _LAST = 0, 2


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


def _is_trajectory(signature: Any) -> bool:
    return all(hasattr(signature, f) for f in ('step_type', 'next_step_type', 'policy_info'))


def detect_export_kind(signature: Any, *, windows: bool = False) -> ExportKind:
    """Returns how items of this table signature are rebuilt into episodes.

    Args:
      signature: The table's signature.
      windows: Whether the caller named the `items.Sequence` or `items.Episode` the items
        were pushed with (`export_table(item=...)`): step items without ids are then
        windows placed by their insertion order, not whole episodes.

    Raises:
      ExportError: For item kinds that cannot be exported; says why and what to push instead.

    Example:
      >>> detect_export_kind(reader.signature)
    """
    if _is_trajectory(signature):
        info = signature.policy_info
        if isinstance(info, dict) and all(f in info for f in ID_FIELDS):
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
    if all(f in signature for f in ID_FIELDS):
        return ExportKind.STEPS_WITH_IDS
    return ExportKind.WINDOWS_IN_ORDER if windows else ExportKind.WHOLE_EPISODES


@dataclasses.dataclass(frozen=True)
class PartialItem:
    """An item of whole-episode items that holds no whole episode, and why."""

    message: str


def _drop_time(spec: Any) -> tf.TensorSpec:
    # The name is kept: it records an encoded frame field's format (`core.frames`), which
    # the export writes back as a TFDS `Image` of that format.
    return tf.TensorSpec(spec.shape[1:], spec.dtype, name=getattr(spec, 'name', None))


def _flatten_time(x: np.ndarray) -> np.ndarray:
    return x.reshape((-1, *x.shape[2:]))


class Rebuilder(abc.ABC):
    """Turns batches of one kind of item into the step rows of whole episodes.

    Attributes:
      kind: The `ExportKind` it rebuilds.
      numbers_rows: Whether the rows' `episode_id` and `step_index` are the export's own
        numbering (so they cannot also be episode metadata).

    Example:
      >>> rebuilder_type = REBUILDERS[kind]
      >>> rebuilder = rebuilder_type('replay', period=None)
      >>> for out in rebuilder.rebuild(batch, first_item=0): ...
    """

    kind: ClassVar[ExportKind]
    numbers_rows: ClassVar[bool] = True

    def __init__(self, table: str, *, period: int | None):
        self.table = table
        self.period = period

    @abc.abstractmethod
    def make_row_spec(self, signature: Any) -> dict:
        """Returns the spec of one rebuilt step row (ids included), without the time axis."""

    @abc.abstractmethod
    def to_rows(self, batch: Any) -> tuple[dict, np.ndarray]:
        """Returns a batch of items as step rows `[N * L, ...]`, and which rows are real steps."""

    @abc.abstractmethod
    def rebuild(self, batch: Any, *, first_item: int) -> list[dict | PartialItem]:
        """Returns the rows of the episodes a batch completes (and its partial items), in order.

        Args:
          batch: A batch of items (leaves `[N, L, ...]`), read in insertion order.
          first_item: The index in the table of the batch's first item.
        """

    def describe_open(self) -> list[str]:
        """Describes the episodes still missing steps once every item was read."""
        return []


class _StepRows(Rebuilder):
    """Items of RLDS steps (`Episode`, `Sequence`): their rows where `mask` is true."""

    def make_row_spec(self, signature: Any) -> dict:
        spec = {k: v for k, v in signature.items() if k != types.MASK}
        return tf.nest.map_structure(_drop_time, spec)

    def to_rows(self, batch: Any) -> tuple[dict, np.ndarray]:
        rows = {
            k: tree.map_structure(_flatten_time, v) for k, v in batch.items() if k != types.MASK
        }
        return rows, _flatten_time(batch[types.MASK])


class _TwoStepRows(Rebuilder):
    """TF-Agents two-step trajectories: both steps of each, flags from the step types."""

    def make_row_spec(self, signature: Any) -> dict:
        spec = {
            types.OBSERVATION: signature.observation,
            types.ACTION: signature.action,
            types.REWARD: signature.reward,
            types.DISCOUNT: signature.discount,
            **features_lib.split_policy_info(signature.policy_info),
        }
        spec.update({f: tf.TensorSpec([2], tf.bool) for f in types.FLAG_FIELDS})
        return tf.nest.map_structure(_drop_time, spec)

    def to_rows(self, batch: Any) -> tuple[dict, np.ndarray]:
        step_type = _flatten_time(batch.step_type)
        discount = _flatten_time(tree.flatten(batch.discount)[0])
        is_last = step_type == _LAST
        # TF-Agents' rule: a LAST step with discount 0 is a termination.
        terminal = is_last & np.all(discount.reshape(len(discount), -1) == 0, axis=1)
        flat = features_lib.split_policy_info(batch.policy_info)
        rows = {
            types.OBSERVATION: tree.map_structure(_flatten_time, batch.observation),
            types.ACTION: tree.map_structure(_flatten_time, batch.action),
            types.REWARD: tree.map_structure(_flatten_time, batch.reward),
            types.DISCOUNT: tree.map_structure(_flatten_time, batch.discount),
            **tree.map_structure(_flatten_time, flat),
            types.IS_FIRST: step_type == _FIRST,
            types.IS_LAST: is_last,
            types.IS_TERMINAL: terminal,
        }
        return rows, np.ones(len(is_last), bool)


class _Assembled(Rebuilder):
    """Rows numbered by episode and step (by the items, or by a chain), then assembled."""

    ids_in_items: ClassVar[bool] = True

    def __init__(self, table: str, *, period: int | None):
        super().__init__(table, period=period)
        self._assembler = EpisodeAssembler(ids_in_items=self.ids_in_items)

    def add_ids(self, rows: dict, valid: np.ndarray, count: int) -> dict:
        """Returns `rows` with `episode_id` and `step_index` (as they are when items carry them)."""
        return rows

    def rebuild(self, batch: Any, *, first_item: int) -> list[dict | PartialItem]:
        rows, valid = self.to_rows(batch)
        rows = self.add_ids(rows, valid, len(tree.flatten(batch)[0]))
        return [episode for _, episode in self._assembler.add(take_rows(rows, valid))]

    def describe_open(self) -> list[str]:
        return self._assembler.describe_open()


REBUILDERS: dict[ExportKind, type[Rebuilder]] = {}


def _register(cls: type[Rebuilder]) -> type[Rebuilder]:
    REBUILDERS[cls.kind] = cls
    return cls


@_register
class WholeEpisodes(_StepRows):
    """`Episode(max_length)` items: each item is one whole episode, checked as such."""

    kind = ExportKind.WHOLE_EPISODES
    numbers_rows = False  # An `episode_id` there is a carried episode field (Minari's).

    def rebuild(self, batch: Any, *, first_item: int) -> list[dict | PartialItem]:
        rows, valid = self.to_rows(batch)
        count = len(tree.flatten(batch)[0])
        span = len(valid) // count
        out: list[dict | PartialItem] = []
        for i in range(count):
            part = slice(i * span, (i + 1) * span)
            item_rows = take_rows(take_rows(rows, part), valid[part])
            problem = check_whole_episode(first_item + i, item_rows)
            out.append(item_rows if problem is None else PartialItem(problem))
        return out


@_register
class StepsWithIds(_StepRows, _Assembled):
    """Step items pushed with `add_ids=True`: every row says its episode and step."""

    kind = ExportKind.STEPS_WITH_IDS


@_register
class TwoStepWithIds(_TwoStepRows, _Assembled):
    """Two-step items pushed with `add_ids=True`: the ids ride in `policy_info`."""

    kind = ExportKind.TWO_STEP_WITH_IDS


@_register
class TwoStepInOrder(_TwoStepRows, _Assembled):
    """Two-step items without ids, numbered by `TwoStepChain` in insertion order."""

    kind = ExportKind.TWO_STEP_IN_ORDER
    ids_in_items = False

    def __init__(self, table: str, *, period: int | None):
        super().__init__(table, period=period)
        self._chain = TwoStepChain(table)

    def make_row_spec(self, signature: Any) -> dict:
        spec = super().make_row_spec(signature)
        return {**spec, **{f: tf.TensorSpec([], tf.int64) for f in ID_FIELDS}}

    def add_ids(self, rows: dict, valid: np.ndarray, count: int) -> dict:
        return self._chain.add_ids(rows)


@_register
class WindowsInOrder(_StepRows, _Assembled):
    """Step windows without ids, placed `period` steps apart by `WindowChain`."""

    kind = ExportKind.WINDOWS_IN_ORDER
    ids_in_items = False

    def __init__(self, table: str, *, period: int | None):
        super().__init__(table, period=period)
        self._chain = WindowChain(table, period=period or 1)

    def make_row_spec(self, signature: Any) -> dict:
        spec = super().make_row_spec(signature)
        return {**spec, **{f: tf.TensorSpec([], tf.int64) for f in ID_FIELDS}}

    def add_ids(self, rows: dict, valid: np.ndarray, count: int) -> dict:
        return self._chain.add_ids(rows, valid, count)
