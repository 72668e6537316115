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
    'FrameFieldError',
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


def _rebuild(cls: type, args: tuple, keywords: dict[str, Any]) -> BaseException:
    """Makes an error again from its constructor's arguments (what `__reduce__` pickles)."""
    return cls(*args, **keywords)


class RldsReverbError(Exception):
    """Base class of every error this toolkit raises on purpose."""


class SourceError(RldsReverbError, ValueError):
    """A dataset source could not be opened: wrong path, not an RLDS/TFDS dataset, no `steps`.

    Args:
      *args: The message (what is wrong and what to do), as for any exception.
      tf_agents_message: TF-Agents' own message for the same defect, if it has one: the
        TF-Agents drop-in functions raise with it as `str(error)`
        (`specs.use_tf_agents_messages`).
    """

    def __init__(self, *args: object, tf_agents_message: str | None = None):
        self.tf_agents_message = tf_agents_message
        super().__init__(*args)

    def __reduce__(self):
        keywords = {'tf_agents_message': self.tf_agents_message}
        return (_rebuild, (type(self), self.args, keywords), self.__dict__)


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
    """Two specs that must agree do not; the message holds a leaf-by-leaf diff.

    Args:
      message: What was compared.
      differences: One line per leaf that differs (`specs.diff_specs`), listed under the
        message unless `list_differences` is false.
      tf_agents_message: TF-Agents' own message for the same defect, if it has one (as for
        `SourceError`).
      list_differences: Whether `str(error)` lists the differences.
    """

    def __init__(
        self,
        message: str,
        differences: Sequence[str] = (),
        *,
        tf_agents_message: str | None = None,
        list_differences: bool = True,
    ):
        self.message = message
        self.differences = list(differences)
        self.tf_agents_message = tf_agents_message
        self.list_differences = list_differences
        details = ''.join(f'\n  {line}' for line in self.differences) if list_differences else ''
        super().__init__(f'{message}{details}')

    def __reduce__(self):
        keywords = {
            'tf_agents_message': self.tf_agents_message,
            'list_differences': self.list_differences,
        }
        args = (self.message, self.differences)
        return (_rebuild, (type(self), args, keywords), self.__dict__)


class FrameFieldError(RldsReverbError, ValueError):
    """A field named as holding encoded frames does not: an `encoded_frames` path that is
    no image field of the source, a frame field a decode names that the data lacks, or a
    reader that holds no encoded frames asked for them. The message lists the frame
    fields there are."""


class InvalidEpisodeError(RldsReverbError, tf.errors.InvalidArgumentError):
    """An episode broke a validation rule; the message names every problem in it.

    It is a `tf.errors.InvalidArgumentError`, as TF-Agents' converter raises, so existing
    `except` clauses keep working.

    Args:
      episode_index: The episode's index in the dataset.
      problems: Every problem found in it (`check.validation.Problem`s).
      episodes_written: When a push stopped at it: how many episodes before it were fully
        written (also said in a note); None otherwise.
    """

    def __init__(
        self,
        episode_index: int,
        problems: Sequence[Any],
        *,
        episodes_written: int | None = None,
    ):
        self.episode_index = episode_index
        self.problems = list(problems)
        self.episodes_written = episodes_written
        lines = '\n'.join(f'  - {p.describe()}' for p in self.problems)
        message = (
            f'Episode {episode_index} is invalid ({len(self.problems)} problem(s)):\n{lines}\n'
            "Fix the data, or pass on_invalid='skip' to drop invalid episodes whole (never partly)."
        )
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)
        if episodes_written is not None:
            self.add_note(f'{episodes_written} episode(s) before it were fully written.')

    def __reduce__(self):
        keywords = {'episodes_written': self.episodes_written}
        args = (self.episode_index, self.problems)
        return (_rebuild, (type(self), args, keywords), self.__dict__)


class ReverbTimeoutError(RldsReverbError, TimeoutError):
    """A Reverb operation did not finish within its timeout."""


class ReverbConnectionError(RldsReverbError, ConnectionError):
    """A Reverb server could not be reached."""


class CheckpointError(RldsReverbError, RuntimeError):
    """A Reverb server could not write a checkpoint."""


class TableError(RldsReverbError, ValueError):
    """A Reverb table is missing, misconfigured, or too small for what is pushed."""


class PushError(RldsReverbError, RuntimeError):
    """A push stopped part way; the message says exactly how many episodes were fully written.

    Args:
      message: What failed, and what was written.
      episodes_written: The episodes fully written.
      items_written: The items written (per table).
      counts_from_dataset_start: Whether `episodes_written` counts from episode 0 of the
        dataset (a resumable push's errors do), not from where this push started.
    """

    def __init__(
        self,
        message: str,
        *,
        episodes_written: int,
        items_written: int,
        counts_from_dataset_start: bool = False,
    ):
        self.episodes_written = episodes_written
        self.items_written = items_written
        self.counts_from_dataset_start = counts_from_dataset_start
        super().__init__(message)

    def __reduce__(self):
        keywords = {
            'episodes_written': self.episodes_written,
            'items_written': self.items_written,
            'counts_from_dataset_start': self.counts_from_dataset_start,
        }
        return (_rebuild, (type(self), self.args, keywords), self.__dict__)


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
