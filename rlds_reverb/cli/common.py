"""What every `rlds-reverb` command shares: exit codes, options, and the one source loader."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tqdm

    from rlds_reverb.read.options import CheckFiles, EncodedFrames

__all__ = [
    'EXIT_ERROR',
    'EXIT_INTERRUPTED',
    'EXIT_INVALID_DATA',
    'EXIT_OK',
]

# Exit codes.
EXIT_OK = 0
EXIT_INVALID_DATA = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

VERBOSE_FLAG = '--verbose'


class ProgressBar:
    """A tqdm bar on stderr counting steps (or `unit`), with the episode count as postfix.

    The bar appears at the first update: a command that fails before any work prints its
    one-line error and no empty bar (tqdm draws one as soon as it is made).
    """

    def __init__(self, *, disable: bool, total: int | None = None, unit: str = ' steps'):
        self._options = {'unit': unit, 'total': total, 'disable': disable}
        self._bar: tqdm.tqdm | None = None
        self._episodes = 0

    def update(self, episodes: int, steps: int) -> None:
        """Adds `episodes` to the postfix and `steps` to the bar."""
        if self._bar is None:
            import tqdm

            self._bar = tqdm.tqdm(**self._options, file=sys.stderr)
        self._episodes += episodes
        self._bar.update(steps)
        self._bar.set_postfix(episodes=self._episodes, refresh=False)

    def close(self) -> None:
        """Closes the bar, if it was drawn."""
        if self._bar is not None:
            self._bar.close()


def add_common_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Adds `--debug` and `--verbose` (accepted before or after the subcommand)."""
    default = argparse.SUPPRESS if suppress else False
    parser.add_argument(
        '--debug', action='store_true', default=default, help='show tracebacks on errors'
    )
    parser.add_argument(
        VERBOSE_FLAG,
        action='store_true',
        default=default,
        help="show the libraries' start-up logs and warnings",
    )


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds SOURCE, `--split` and `--data-dir`: what `load_source` reads."""
    parser.add_argument(
        'source', help='a TFDS dataset directory, or a TFDS dataset name found in --data-dir'
    )
    parser.add_argument('--split', default='train', help="TFDS split (default 'train')")
    parser.add_argument(
        '--data-dir', default=None, help="where to look up a TFDS name (default: TFDS' own)"
    )


def add_option_argument(parser: argparse.ArgumentParser, field: dataclasses.Field) -> None:
    """Adds the flag an options field declares (`core.flags.Flag`), with its default.

    A bool option is a switch, a repeated flag appends (default `[]`), any other flag takes
    one value (an enum's default as its value).
    """
    from rlds_reverb.core import flags  # Loads without TensorFlow.

    flag = flags.find_flag(field)
    if flag is None:
        raise ValueError(f'The option {field.name!r} declares no command-line flag.')
    name, default = flags.name_flag(field), field.default
    metavar = name[2:].replace('-', '_').upper()  # --episode-field: EPISODE_FIELD.
    how: dict = {'dest': field.name, 'help': flag.help}
    if isinstance(default, bool):
        how.update(action='store_true')
    elif flag.repeat:
        how.update(action='append', default=[], metavar=metavar)
    else:
        value = default.value if isinstance(default, enum.Enum) else default
        how.update(type=flag.type, default=value, choices=flag.choices)
        how.update(metavar=None if flag.choices else metavar)
    parser.add_argument(name, **how)


def add_load_option_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds a flag per option of `LoadOptions` that declares one (`--encoded-frames`):
    `load_source` and `read_encoded_frames` read them back."""
    from rlds_reverb.core import flags
    from rlds_reverb.read.options import LoadOptions  # Loads without TensorFlow.

    for field in dataclasses.fields(LoadOptions):
        if flags.find_flag(field) is not None:
            add_option_argument(parser, field)


def load_source(
    args: argparse.Namespace,
    *,
    split: str | None = None,
    check_files: CheckFiles = True,
):
    """Opens the command's SOURCE with `rlds_reverb.load` (the CLI's one loader).

    Args:
      args: The parsed arguments (`source`, `split`, `data_dir`).
      split: A split to read instead of `args.split` (a worker's slice).
      check_files: As for `load`, for sources whose reader checks their files (TFDS
        directories and names); other readers check their files as they read them.

    Returns:
      The RLDS dataset.
    """
    from rlds_reverb.read import loading  # Imported late: TFDS is slow to import.
    from rlds_reverb.read.options import LoadOptions

    accepts = loading.find_reader(args.source).accepts
    options = LoadOptions(
        split=split or args.split,
        data_dir=getattr(args, 'data_dir', None),
        check_files=check_files if 'check_files' in accepts else True,
        encoded_frames=read_encoded_frames(args),
    )
    return loading.load(args.source, options=options)


def read_encoded_frames(args: argparse.Namespace) -> EncodedFrames:
    """Returns the command's `--encoded-frames` as `LoadOptions.encoded_frames` takes it.

    The flag is repeated once per frame field, or given `all`; without it, None.
    """
    given = getattr(args, 'encoded_frames', None) or ()
    return 'all' if 'all' in given else (tuple(given) or None)
