"""`ExportOptions`: every option of an export of a Reverb table, defined once with its default and check.

`export_table(directory, table, server=... | checkpoint=..., options=ExportOptions(...))`
takes one value; its keyword form, `export_table(..., item=..., on_invalid='skip')`, names
the same fields, which override those of `options`
(`rlds_reverb.learn.options.merge_overrides`), and `rlds-reverb export` builds one from
its flags. The value is frozen: `dataclasses.replace(options, ...)` makes a changed copy,
and a caller's value is never changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rlds_reverb.core import checks, timeouts, types

if TYPE_CHECKING:  # TensorFlow is imported when an item is checked: the CLI reads defaults here.
    from rlds_reverb.transform import items as items_lib

__all__ = [
    'DEFAULT_BATCH_ITEMS',
    'DEFAULT_MAX_COPY_BYTES',
    'ExportOptions',
    'describe_default',
]

DEFAULT_BATCH_ITEMS = 64
# Checkpoints with a chunks file up to this size are restored whole (one pass, no parsing
# of chunks); larger ones in parts (`rlds_reverb.export.table_copy`).
DEFAULT_MAX_COPY_BYTES = 256 * 2**20


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportOptions:
    """How a Reverb table is exported as an RLDS dataset: one value for every export.

    Attributes:
      episode_fields: Item fields that are episode metadata (carried with
        `push(..., episode_fields=...)`): written as episode-level fields, not steps.
      item: For a table of step windows pushed without ids, the `items.Sequence` or
        `items.Episode(overflow='split')` they were pushed with: its windows are then placed
        from the insertion order (one writer, `rlds_reverb.export.reverb_export`). Ignored
        when the items carry ids or are two-step items.
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

    Raises:
      ValueError: Naming the first invalid option and what is expected (`item` neither a
        `Sequence` nor an `Episode`, or a `Sequence` whose windows cannot be placed
        without ids: `end='last'` or `'continue'`).

    Example:
      >>> options = ExportOptions(item=items.Sequence(8, period=4), on_invalid='skip')
      >>> export_table('/data/out/1.0.0', 'windows', checkpoint='/ckpt', options=options)
    """

    episode_fields: Sequence[str] = ()
    item: items_lib.ItemKind | None = None
    on_invalid: types.ValidationMode | str = types.ValidationMode.RAISE
    name: str = 'reverb_export'
    version: str = '1.0.0'
    episodes_per_shard: int = 100
    batch_items: int = DEFAULT_BATCH_ITEMS
    part_rows: int = 200_000
    max_copy_bytes: int = DEFAULT_MAX_COPY_BYTES
    timeout_ms: int = timeouts.EXPORT_MS

    def __post_init__(self) -> None:
        # Normalized once here, so the export sees a member and a tuple, never strings.
        set_field = object.__setattr__
        mode = types.as_enum(types.ValidationMode, self.on_invalid, argument='on_invalid')
        if mode is types.ValidationMode.REPORT:
            raise ValueError("on_invalid='report' is not an export mode; use 'raise' or 'skip'.")
        set_field(self, 'on_invalid', mode)
        fields: Any = self.episode_fields
        set_field(self, 'episode_fields', (fields,) if isinstance(fields, str) else tuple(fields))
        self.period  # noqa: B018 (checks the item)
        for name in ('episodes_per_shard', 'batch_items', 'part_rows'):
            checks.check_int_at_least(getattr(self, name), 1, argument=name)
        checks.check_int_at_least(self.max_copy_bytes, 0, argument='max_copy_bytes')
        checks.check_int_at_least(self.timeout_ms, -1, argument='timeout_ms')

    @property
    def period(self) -> int | None:
        """The steps between the starts of an episode's windows of `item` (None without it).

        Raises:
          ValueError: If `item` cannot be placed without ids (`chains.find_window_period`).
        """
        if self.item is None:
            return None
        from rlds_reverb.export.chains import find_window_period

        return find_window_period(self.item)


def describe_default(name: str) -> str:
    """Returns the default of an `ExportOptions` field as the command line's help shows it.

    Example:
      >>> describe_default('name')
      "'reverb_export'"
    """
    field = {f.name: f for f in dataclasses.fields(ExportOptions)}[name]
    default = field.default
    return repr(default.value if isinstance(default, types.ValidationMode) else default)
