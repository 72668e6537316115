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
import os
import pathlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import reverb
import tensorflow_datasets as tfds
import tree

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.core.errors import ExportError
from rlds_reverb.export import table_copy
from rlds_reverb.export.assembly import to_episode
from rlds_reverb.export.chains import ID_FIELDS
from rlds_reverb.export.options import DEFAULT_BATCH_ITEMS, ExportOptions
from rlds_reverb.export.rebuilders import (
    REBUILDERS,
    ExportKind,
    PartialItem,
    Rebuilder,
    detect_export_kind,
)
from rlds_reverb.learn.options import merge_overrides
from rlds_reverb.storage import features as features_lib
from rlds_reverb.storage import tfds_writer

__all__ = [
    'DEFAULT_BATCH_ITEMS',
    'ExportKind',
    'ExportOptions',
    'ExportStats',
    'ProgressFn',
    'export_table',
]

ProgressFn = types.EpisodeProgressFn  # The 0.1 name.


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


def _make_features(row_spec: dict, episode_fields: Sequence[str]) -> tfds.features.FeaturesDict:
    """Returns the dataset's TFDS features: steps without ids, the lifted episode fields."""
    skip = {*ID_FIELDS, *types.FLAG_FIELDS, *episode_fields}
    steps = {k: v for k, v in row_spec.items() if k not in skip}
    episode = {k: row_spec[k] for k in episode_fields}
    return features_lib.make_rlds_features_from_specs(steps, episode)


def _check_episode_fields(
    episode_fields: Sequence[str], row_spec: dict, rebuilder: Rebuilder
) -> None:
    """Refuses episode fields the items do not hold, or ids the export numbers rows by.

    Raises:
      ExportError: Naming the fields, and the item fields there are.
    """
    if rebuilder.numbers_rows:
        numbered = [f for f in episode_fields if f in ID_FIELDS]
        if numbered:
            raise ExportError(
                f'episode_fields names {numbered}: the export numbers the episodes and '
                f'steps of {rebuilder.kind.value} items by these fields, so they cannot also be '
                'episode metadata; push whole episodes (items.Episode(max_length), no '
                'add_ids) to carry an episode field of that name.'
            )
    unknown = [f for f in episode_fields if f not in row_spec]
    if unknown:
        raise ExportError(
            f'episode_fields names {unknown}, which the items do not hold; their fields '
            f'are {sorted(f for f in row_spec if f not in ID_FIELDS)}.'
        )


def _describe_server(server: str | reverb.Client) -> str:
    return server.server_address if isinstance(server, reverb.Client) else server


def _read_batches(copy: table_copy.TableCopy, batch_items: int, timeout_ms: int) -> Iterator[Any]:
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


@dataclasses.dataclass
class _Export:
    """One export in progress: its options, what it counted, and where it writes."""

    table: str
    options: ExportOptions
    stats: ExportStats
    rebuilder: Rebuilder
    progress: types.EpisodeProgressFn | None

    def write_episode(self, writer: tfds_writer.RldsDatasetWriter, rows: dict) -> None:
        writer.add_episode(to_episode(rows, self.options.episode_fields))
        self.stats.episodes += 1
        self.stats.steps += len(rows[types.IS_FIRST])
        if self.progress is not None:
            self.progress(1, len(rows[types.IS_FIRST]))

    def write_batch(self, writer: tfds_writer.RldsDatasetWriter, batch: Any) -> None:
        """Writes the episodes a batch of items completes; skips or refuses partial items."""
        for out in self.rebuilder.rebuild(batch, first_item=self.stats.items):
            if not isinstance(out, PartialItem):
                self.write_episode(writer, out)
            elif self.options.on_invalid is types.ValidationMode.SKIP:
                self.stats.skipped_episodes += 1
            else:
                raise ExportError(
                    f'Cannot export table {self.table!r}: {out.message}. Nothing was written.'
                )
        self.stats.items += len(tree.flatten(batch)[0])

    def finish(self, num_items: int) -> None:
        """Refuses an export that read fewer items than the table holds, or (raise mode)
        one that left episodes incomplete; counts those as skipped otherwise."""
        table = self.table
        if self.stats.items != num_items:
            raise ExportError(
                f'Read {self.stats.items} of the {num_items} items of table {table!r} '
                'before the copy ran dry; nothing was written.'
            )
        incomplete = self.rebuilder.describe_open()
        if incomplete and self.options.on_invalid is types.ValidationMode.RAISE:
            shown = '; '.join(incomplete[:5]) + (' ...' if len(incomplete) > 5 else '')
            raise ExportError(
                f'Table {table!r} holds only part of {len(incomplete)} episode(s) ({shown}). '
                'Its items lack those steps: evicted (max_size), removed by sampling '
                "(max_times_sampled, a queue) or never written (Sequence(end='drop') "
                "tails). Nothing was written; pass on_invalid='skip' to export the whole "
                'episodes only.'
            )
        self.stats.skipped_episodes += len(incomplete)


def export_table(
    directory: os.PathLike | str,
    table: str,
    *,
    server: str | reverb.Client | None = None,
    server_checkpoint_dir: os.PathLike | str | None = None,
    checkpoint: os.PathLike | str | None = None,
    progress: types.EpisodeProgressFn | None = None,
    options: ExportOptions | None = None,
    **overrides: Any,
) -> ExportStats:
    """Writes the items of a Reverb table back out as an RLDS dataset in TFDS format.

    Every item is read exactly once, oldest first, from a queue copy of the table (the
    table itself is left as it is; see `rlds_reverb.export.table_copy`), part after part,
    rebuilt into episodes (module docstring: which item kinds, and why; one rebuilder per
    kind, `rlds_reverb.export.rebuilders`) and streamed to `directory`.
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
      progress: Optional `fn(episodes, steps)` called after each episode is written.
      options: The export's options (`ExportOptions`: episode fields, item, on_invalid,
        name, sizes, timeout).
      **overrides: Fields of `ExportOptions` given as keywords (`item=...,
        on_invalid='skip'`): without `options` they make the options, with it they
        replace its fields in a copy.

    Returns:
      `ExportStats`.

    Raises:
      ValueError: If not exactly one of `server` and `checkpoint` is given, `server`
        without `server_checkpoint_dir`, or an option is invalid (`ExportOptions`).
      TypeError: If a keyword is not a field of `ExportOptions`.
      ExportError: If the server or checkpoint holds no such table (a server's is checked
        before it is checkpointed), the table's items cannot be rebuilt into episodes
        (says why), an `episode_fields` name is not an item field (or is
        `episode_id`/`step_index` of items the export numbers by them), or (raise mode)
        the table holds part of an episode; nothing is written then.
      CheckpointError: If the live server cannot be checkpointed, or
        `server_checkpoint_dir` is missing or not the directory it checkpoints to.

    Example:
      >>> stats = export_table('/data/replay_rlds/1.0.0', 'replay', server='localhost:8000',
      ...                      server_checkpoint_dir='/ckpt')
      >>> episodes = rlds_reverb.load('/data/replay_rlds/1.0.0')
    """
    started = time.perf_counter()
    options = merge_overrides(ExportOptions, options, overrides, entry_point='export_table')
    stats = ExportStats()
    with table_copy.open_table_reader(
        table,
        server=server,
        server_checkpoint_dir=server_checkpoint_dir,
        checkpoint=checkpoint,
        part_rows=options.part_rows,
        max_copy_bytes=options.max_copy_bytes,
    ) as reader:
        kind = detect_export_kind(reader.signature, windows=options.item is not None)
        export = _Export(
            table, options, stats, REBUILDERS[kind](table, period=options.period), progress
        )
        stats.kind = kind
        row_spec = export.rebuilder.make_row_spec(reader.signature)
        _check_episode_fields(options.episode_fields, row_spec, export.rebuilder)
        # A live server's checkpoint is a private copy, removed after the export.
        if server is not None:
            source = {'server': _describe_server(server)}
        else:
            source = {'checkpoint': str(reader.checkpoint)}
        with tfds_writer.RldsDatasetWriter(
            directory,
            features=_make_features(row_spec, options.episode_fields),
            name=options.name,
            version=options.version,
            metadata={'exported_from': {'table': table, **source, 'items': kind.value}},
            episodes_per_shard=options.episodes_per_shard,
        ) as writer:
            for copy in reader.iterate_parts():
                for batch in _read_batches(copy, options.batch_items, options.timeout_ms):
                    export.write_batch(writer, batch)
            export.finish(reader.num_items)
    stats.directory = writer.target
    stats.seconds = time.perf_counter() - started
    return stats
