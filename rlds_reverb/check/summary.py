"""What `rlds-reverb info` prints, and how it is found from the record files alone.

`describe_dataset_files` answers without TensorFlow (`rlds_reverb.read.raw_records` and the
record codec, `rlds_reverb.storage.codec`) for a TFDS directory in the default layout, in a
fraction of the time TensorFlow takes to import; `stats.describe_dataset` reads any RLDS
dataset through TF. Both give the same `DatasetStats`
(tests/check/test_info_files.py compares them).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

import numpy as np
import tree

from rlds_reverb.core import types
from rlds_reverb.read import raw_records
from rlds_reverb.storage import codec

__all__ = ['DatasetStats', 'describe_dataset_files', 'summarize_episodes']


def _describe_spec(spec) -> str:
    if isinstance(spec, raw_records.FieldSpec):
        return str(spec)
    return f'{spec.dtype.name}{list(spec.shape)}'


@dataclasses.dataclass
class DatasetStats:
    """What `describe_dataset` found."""

    episodes: int
    steps: int
    terminated: int
    truncated: int
    unfinished: int
    lengths: np.ndarray
    returns: np.ndarray
    step_spec: dict  # tf.TensorSpec leaves, or raw_records.FieldSpec ones.
    # The step fields holding encoded frames (image features): path -> 'jpeg 256x320x3'.
    frame_fields: dict[str, str] = dataclasses.field(default_factory=dict)

    def format(self) -> str:
        """Returns a human-readable summary."""
        lines = [
            f'episodes: {self.episodes}',
            f'steps: {self.steps}',
            f'terminated: {self.terminated}  truncated: {self.truncated}'
            + (f'  without is_last: {self.unfinished}' if self.unfinished else ''),
        ]
        if self.episodes:
            lines.append(
                f'episode length: mean {self.lengths.mean():.1f}, min {self.lengths.min()}, '
                f'max {self.lengths.max()}'
            )
            lines.append(
                f'return: mean {self.returns.mean():.3f}, std {self.returns.std():.3f}, '
                f'min {self.returns.min():.3f}, max {self.returns.max():.3f}'
            )
        lines.append('step spec:')
        for path, spec in tree.flatten_with_path(self.step_spec):
            name = '.'.join(map(str, path))
            lines.append(f'  {name}: {_describe_spec(spec)}')
        if self.frame_fields:
            lines.append('frame fields (push them encoded with --encoded-frames PATH or all):')
            lines.extend(f'  {path}: {fmt}' for path, fmt in sorted(self.frame_fields.items()))
        return '\n'.join(lines)


def summarize_episodes(
    lengths: Sequence[int],
    terminal: Sequence[bool],
    finished: Sequence[bool],
    returns: Sequence[float],
    *,
    step_spec: dict,
) -> DatasetStats:
    """Returns the `DatasetStats` of episodes given by their lengths, endings and returns.

    Args:
      lengths: Each episode's steps.
      terminal: Whether each episode's `is_last` step is terminal.
      finished: Whether each episode has an `is_last` step.
      returns: Each episode's return.
      step_spec: The step fields' specs.

    Example:
      >>> summarize_episodes([3], [True], [True], [1.0], step_spec=spec).terminated
      1
    """
    lengths_array = np.asarray(lengths, np.int64)
    terminal_array = np.asarray(terminal, bool)
    finished_array = np.asarray(finished, bool)
    return DatasetStats(
        episodes=len(lengths_array),
        steps=int(lengths_array.sum()),
        terminated=int(terminal_array.sum()),
        truncated=int((finished_array & ~terminal_array).sum()),
        unfinished=int((~finished_array).sum()),
        lengths=lengths_array,
        returns=np.asarray(returns, np.float64),
        step_spec=step_spec,
    )


def _sum_leaves(fields: dict[str, np.ndarray], keys: list[str]) -> float:
    # As TF's path: each reward leaf summed in float64, then the leaves added.
    return float(sum(fields[key].astype(np.float64).sum() for key in keys))


def describe_dataset_files(
    directory: os.PathLike | str,
    *,
    split: str,
    progress: Callable[[int], None] | None = None,
) -> DatasetStats | None:
    """Summarizes a TFDS dataset directory from its record files, without TensorFlow.

    Args:
      directory: A TFDS dataset (version) directory.
      split: A split name.
      progress: Optional `fn(episodes_read)`, called after each shard.

    Returns:
      The `DatasetStats` (as `stats.describe_dataset(rlds_reverb.load(directory))` gives),
      or None when the files cannot be read so (`raw_records` says when); then read the
      dataset with `load`, which names any problem.

    Example:
      >>> stats = describe_dataset_files('/data/cartpole_v1/1.0.0', split='train')
    """
    step_spec = raw_records.read_step_spec(directory, steps=types.STEPS)
    files = raw_records.find_split_files(directory, split)
    if step_spec is None or files is None:
        return None
    names = {'/'.join(map(str, path)): spec for path, spec in tree.flatten_with_path(step_spec)}
    flags = [types.IS_LAST, types.IS_TERMINAL]
    rewards = sorted(n for n in names if n == types.REWARD or n.startswith(f'{types.REWARD}/'))
    if any(names.get(f) != raw_records.FieldSpec('bool', ()) for f in flags) or not rewards:
        return None
    if any(None in names[n].shape or names[n].dtype_name == 'string' for n in rewards):
        return None
    keys = {name: f'{types.STEPS}/{name}' for name in [*flags, *rewards]}
    wanted = frozenset(keys.values())
    lengths, terminal, finished, returns = [], [], [], []
    try:
        for path, expected in zip(files.paths, files.counts, strict=True):
            count = 0
            for record in codec.iter_records(path):
                fields = codec.decode_example(record, wanted)
                if set(fields) != wanted:
                    return None
                is_last = fields[keys[types.IS_LAST]] != 0
                is_terminal = fields[keys[types.IS_TERMINAL]] != 0
                length = len(is_last)
                sizes = [int(np.prod(names[n].shape, dtype=np.int64)) * length for n in rewards]
                if len(is_terminal) != length or sizes != [len(fields[keys[n]]) for n in rewards]:
                    return None
                lengths.append(length)
                terminal.append(bool((is_last & is_terminal).any()))
                finished.append(bool(is_last.any()))
                returns.append(_sum_leaves(fields, [keys[n] for n in rewards]))
                count += 1
            if count != expected:
                return None
            if progress is not None:
                progress(len(lengths))
    except (OSError, ValueError):
        return None
    found = summarize_episodes(lengths, terminal, finished, returns, step_spec=step_spec)
    formats = raw_records.read_frame_formats(directory, steps=types.STEPS) or {}
    found.frame_fields = {path: fmt.describe() for path, fmt in formats.items()}
    return found
