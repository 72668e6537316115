"""Shard and record integrity of a TFDS split: what `load(..., check_files=...)` checks.

Before reading, `load` checks that every shard of the split exists and, for TFRecord
shards, that their total size is what the split's records need; on a mismatch it scans the
shards and names the truncated or corrupt file. A shard corrupted without a size change
(flipped bytes) only shows when read: TF raises `tf.errors.DataLossError` ("corrupted record
at ...") while iterating, which does not name the file; `check_files='full'` scans every
shard up front and names it, and also decodes every record, naming the shard, record and
field of an episode whose step fields do not parse (wrong dtype or size) or lack a field the
others have.

Interrupted recordings. TFDS' sequential writer (envlogger's TFDS backend) lists a shard in
`dataset_info.json` only once it is finished; a recording killed before `close()` leaves
its open shard unlisted. The listed shards are read, with a warning naming that file and
the complete episodes it holds (an error if no shard is listed); docs/envlogger.md says how
to recover them.
"""

from __future__ import annotations

import itertools
import logging
import os
import pathlib
import re
from typing import Any

import tensorflow as tf
import tensorflow_datasets as tfds
import tree

from rlds_reverb.core import compat, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core.errors import SourceError
from rlds_reverb.read import step_fields
from rlds_reverb.storage import codec

__all__ = ['check_shards', 'check_split']

_LOGGER = logging.getLogger(__name__)
_DATASET_INFO = 'dataset_info.json'
_LISTED_ENTRIES = 8


def check_split(builder: tfds.core.DatasetBuilder, split: str, *, where: str) -> list[str]:
    """Returns the split names `split` reads (slices and `+` allowed).

    Raises:
      SourceError: If a split it names is not one of the dataset's.
    """
    available = sorted(builder.info.splits.keys())
    names = [re.split(r'[\[(]', part, maxsplit=1)[0].strip() for part in split.split('+')]
    unknown = [n for n in names if n not in available and n != 'all']
    if unknown or not names:
        raise SourceError(f'Unknown split {split!r} for {where}: available splits are {available}.')
    return available if 'all' in names else names


def check_shards(builder: tfds.core.DatasetBuilder, split: str, *, where: str, full: bool) -> None:
    """Raises `SourceError` naming a missing, truncated or corrupt shard of `split`.

    Args:
      builder: The dataset's builder.
      split: One split name (no slice).
      where: The dataset, for messages.
      full: Also read every shard and decode every record (`check_files='full'`).

    Raises:
      SourceError: If a shard is missing, truncated or corrupt (or, `full`, a record does
        not decode whole), or the only shard is one a recording left unlisted.
    """
    info = builder.info.splits[split]
    paths = [pathlib.Path(os.fspath(p)) for p in info.filepaths]
    _check_unlisted_shard(info, where=where, split=split)
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        raise SourceError(
            f'{where}: split {split!r} is incomplete, {len(missing)} of {len(paths)} shard '
            f'file(s) are missing: {missing[:_LISTED_ENTRIES]}. Regenerate or re-download it.'
        )
    file_format = builder.info.file_format
    if file_format is not None and file_format != tfds.core.FileFormat.TFRECORD:
        return
    expected = info.num_bytes + codec.RECORD_OVERHEAD_BYTES * sum(info.shard_lengths)
    if full or (info.num_bytes and sum(p.stat().st_size for p in paths) != expected):
        _scan_shards(paths, info.shard_lengths, where=where, split=split)
    if full:
        parser = compat.make_example_parser(builder.info.features.get_serialized_info())
        for path in paths:
            _check_records(path, parser, where=where, split=split)


def _find_unlisted_shard(info: tfds.core.SplitInfo) -> pathlib.Path | None:
    """Returns the shard file after the split's listed ones, if one exists.

    TFDS' sequential writer (envlogger's TFDS backend) rewrites `dataset_info.json` only when
    a shard is finished, so a recording stopped before `close()` leaves its open shard
    there, unlisted (envlogger's `rlds_utils.maybe_recover_last_shard` looks for it so too).
    """
    template = info.filename_template
    if template is None:
        return None
    path = template.sharded_filepath(shard_index=info.num_shards, num_shards=info.num_shards + 1)
    path = pathlib.Path(os.fspath(path))
    return path if path.is_file() else None


def _describe_unfinished_shard(path: pathlib.Path) -> str:
    """Returns how many whole records the shard holds and whether its last one is cut."""
    scan = codec.scan_records(path)
    cut = ' and an incomplete last record' if scan.end != scan.size else ''
    return f'{scan.records} complete episode(s){cut}'


def _check_unlisted_shard(info: tfds.core.SplitInfo, *, where: str, split: str) -> None:
    """Names a shard a recording left unfinished: a warning, or an error if it is all there is.

    Raises:
      SourceError: If `dataset_info.json` lists no shard of the split but an unfinished one
        exists.
    """
    path = _find_unlisted_shard(info)
    if path is None:
        return
    problem = (
        f'{where}: split {split!r} lists {info.num_shards} shard(s) in {_DATASET_INFO}, but '
        f'{path} also exists, unlisted: the open shard of a recording stopped before it was '
        'closed (envlogger or tfds.core.SequentialWriter killed). It holds '
        f'{_describe_unfinished_shard(path)}'
    )
    advice = (
        'To read its complete episodes, keep its complete records and list it with '
        "envlogger's rlds_utils.maybe_recover_last_shard (docs/envlogger.md, Recovery)."
    )
    if not info.num_shards:
        raise SourceError(f'{problem}, and nothing else is there to read. {advice}')
    step_fields.warn_caller(
        f'{problem}, which are NOT read: only the {info.num_examples} episode(s) of the listed '
        f'shards are. {advice}'
    )


def _check_records(path: pathlib.Path, parser: Any, *, where: str, split: str) -> None:
    """Raises `SourceError` naming the first record of a shard that does not decode whole.

    A record decodes whole when every step field parses with its feature's dtype and shape
    and all step fields have the same number of steps (a field missing from one episode
    parses as zero steps).
    """

    @episodes_lib.without_autograph
    def _step_counts(record: tf.Tensor) -> dict:
        steps = parser.parse_example(record).get(types.STEPS, {})
        return {name: tf.shape(t)[0] for name, t in tree.flatten_with_path(steps)}

    iterator = tf.data.TFRecordDataset(os.fspath(path)).map(_step_counts).as_numpy_iterator()
    for index in itertools.count():
        try:
            counts = next(iterator)
        except StopIteration:
            return
        except tf.errors.OpError as e:
            reason = e.message.strip().splitlines()[0].split('}}')[-1].strip()
            problem: str | None = f'it does not parse ({reason})'
        else:
            problem = _describe_uneven_counts(counts)
        if problem:
            raise SourceError(
                f'{where}: record {index} of shard {path} (split {split!r}) is not a valid '
                f'episode: {problem}. Regenerate the dataset or drop the record.'
            )


def _describe_uneven_counts(counts: dict) -> str | None:
    """Returns which step fields have a step count different from the most common one."""
    values = list(counts.values())
    expected = max(set(values), key=values.count)
    odd = [
        f"field '{'.'.join(map(str, name))}' "
        + ('is missing' if count == 0 else f'has {count} steps')
        for name, count in counts.items()
        if count != expected
    ]
    return f'{"; ".join(odd)} (the other step fields have {expected} steps)' if odd else None


def _scan_shards(
    paths: list[pathlib.Path], shard_lengths: list[int], *, where: str, split: str
) -> None:
    """Reads every record of every shard (checksums verified); raises `SourceError` naming
    the first bad one."""
    for path, length in zip(paths, shard_lengths, strict=True):
        try:
            count = sum(1 for _ in codec.iter_records(path, verify=True))
        except tf.errors.DataLossError as e:
            raise SourceError(
                f'{where}: shard {path} of split {split!r} is truncated or corrupt '
                f'({e.message.strip()}). Regenerate or re-download it.'
            ) from e
        if count != length:
            raise SourceError(
                f'{where}: shard {path} of split {split!r} holds {count} records; '
                f'{_DATASET_INFO} says {length}. Regenerate or re-download it.'
            )
    _LOGGER.debug('All %d shards of %s read cleanly.', len(paths), where)
