"""The toolkit's exceptions: one base, and subclasses that keep TF and Python `except`s working."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

__all__ = [
    'CheckpointError',
    'D4rlFileError',
    'DistributedPushError',
    'EmptyTableError',
    'EpisodeTooLongError',
    'ExportError',
    'InvalidEpisodeError',
    'LeRobotExportError',
    'LeRobotFormatError',
    'MinariFormatError',
    'PushError',
    'ResumeError',
    'ReverbConnectionError',
    'ReverbTimeoutError',
    'RldsReverbError',
    'SourceError',
    'SourceNotFoundError',
    'SpecMismatchError',
    'TableError',
    'TableTooSmallError',
]


class RldsReverbError(Exception):
    """Base class of every error this toolkit raises on purpose."""


class SourceError(RldsReverbError, ValueError):
    """A dataset source could not be opened: wrong path, not an RLDS/TFDS dataset, no `steps`."""


class SourceNotFoundError(SourceError, FileNotFoundError):
    """A dataset path does not exist."""


class D4rlFileError(SourceError):
    """A D4RL HDF5 file cannot be read as episodes: a key missing, no rows, uneven lengths."""


class MinariFormatError(SourceError):
    """A Minari dataset's file is missing, empty or malformed; the message names the file and
    the key (or episode) that is wrong."""


class LeRobotFormatError(SourceError):
    """A LeRobot dataset is of a format version not read, or one of its files is missing,
    malformed or disagrees with another; the message names the file and the column (or key)."""


class SpecMismatchError(RldsReverbError, ValueError):
    """Two specs that must agree do not; the message holds a leaf-by-leaf diff."""

    def __init__(self, message: str, differences: Sequence[str] = ()):
        self.differences = list(differences)
        details = ''.join(f'\n  {line}' for line in self.differences)
        super().__init__(f'{message}{details}')


class InvalidEpisodeError(RldsReverbError, tf.errors.InvalidArgumentError):
    """An episode broke a validation rule; the message names every problem in it.

    It is a `tf.errors.InvalidArgumentError`, as TF-Agents' converter raises, so existing
    `except` clauses keep working.
    """

    def __init__(self, episode_index: int, problems: Sequence[Any]):
        self.episode_index = episode_index
        self.problems = list(problems)
        lines = '\n'.join(f'  - {p.describe()}' for p in self.problems)
        message = (
            f'Episode {episode_index} is invalid ({len(self.problems)} problem(s)):\n{lines}\n'
            "Fix the data, or pass on_invalid='skip' to drop invalid episodes whole (never partly)."
        )
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)

    def __reduce__(self):
        return (type(self), (self.episode_index, self.problems))


class ReverbTimeoutError(RldsReverbError, TimeoutError):
    """A Reverb operation did not finish within its timeout."""


class ReverbConnectionError(RldsReverbError, ConnectionError):
    """A Reverb server could not be reached."""


class CheckpointError(RldsReverbError, RuntimeError):
    """A Reverb server could not write a checkpoint."""


class TableError(RldsReverbError, ValueError):
    """A Reverb table is missing, misconfigured, or too small for what is pushed."""


class PushError(RldsReverbError, RuntimeError):
    """A push stopped part way; the message says exactly how many episodes were fully written."""

    def __init__(self, message: str, *, episodes_written: int, items_written: int):
        self.episodes_written = episodes_written
        self.items_written = items_written
        super().__init__(message)


class TableTooSmallError(TableError, PushError):
    """A push would evict items from a table too small for them; nothing was evicted.

    Both a `TableError` (a `ValueError`) and a `PushError` (it says how many episodes were
    fully written before it).
    """


class EpisodeTooLongError(PushError, ValueError):
    """An episode is longer than the item kind allows (for example `Episode(max_length)`)."""


class ResumeError(PushError):
    """A table holds part of an episode, so no episode index resumes it exactly.

    Raised by `rlds_reverb.write.resume` (which keeps the name).
    """


class DistributedPushError(PushError):
    """The Beam pipeline failed; the message names the cause and what each server holds.

    Raised by `rlds_reverb.distribute.pipeline` (which keeps the name).
    """


class EmptyTableError(ReverbTimeoutError):
    """A Reverb table gave no sample within the timeout: it is empty or its rate limiter blocks."""


class ExportError(RldsReverbError, ValueError):
    """A Reverb table cannot be exported as RLDS episodes; says why and what to do."""


class LeRobotExportError(ExportError):
    """Episodes cannot be written as a LeRobot dataset as they are (a field LeRobot cannot
    hold, an invalid episode, frames too small for the video encoder); the message names the
    field or episode and what to do."""
