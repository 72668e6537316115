"""The `rlds-reverb` application: parser, the one source loader, the one error guard, quiet start.

Errors this toolkit raises on purpose (and OS, TensorFlow and value errors) are printed as
one clear line and exit non-zero; `--debug` shows the traceback instead.

Started as a program (`run`), the command line hides the start-up noise of its libraries
unless `--verbose` is given: TensorFlow's and Reverb's C++ log lines (CUDA plugin
registration errors on machines without a GPU, server start-up lines), TensorFlow's Python
warnings, the absl warnings of TFDS (`FeatureConnector.dtype is deprecated`, which TFDS's
own decoder triggers on datasets with image features) and Gym's deprecation banner.
Nothing of the command's own output is hidden.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import stat
import sys
from collections.abc import Sequence

from rlds_reverb.cli import (
    convert_command,
    data_commands,
    demo_command,
    export_commands,
    report_command,
    reverb_commands,
    stats_command,
    status_command,
)
from rlds_reverb.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_INVALID_DATA,
    EXIT_OK,
    VERBOSE_FLAG,
    add_common_options,
)

__all__ = [
    'EXIT_ERROR',
    'EXIT_INTERRUPTED',
    'EXIT_INVALID_DATA',
    'EXIT_OK',
    'build_parser',
    'main',
    'run',
]


def silence_startup_noise() -> None:
    """Hides the libraries' start-up noise for the rest of this process.

    Call before TensorFlow is imported. C and C++ code (TensorFlow, XLA, Reverb, gRPC) logs
    straight to file descriptor 2, so that descriptor is pointed at /dev/null, while
    Python's `sys.stderr` (our messages, progress bars, tracebacks) keeps writing to the
    original stream through a duplicate of it.
    """
    os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'
    logging.getLogger('tensorflow').setLevel(logging.ERROR)
    # TFDS warns through absl, whose logger must exist (as absl's class) before its level is
    # set; absl.logging is light (no TensorFlow).
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)
    sys.stderr.flush()
    original = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    encoding = getattr(sys.stderr, 'encoding', None) or 'utf-8'
    sys.stderr = open(  # noqa: SIM115  (the process's stderr from now on)
        original, 'w', buffering=1, encoding=encoding, errors='backslashreplace'
    )
    # Gym prints a deprecation banner on import, taken from gym_notices' table: emptying the
    # table hides it without importing Gym (0.4 s) in commands that never use it.
    with contextlib.suppress(ImportError):
        from gym_notices import notices

        notices.notices = {}


def build_parser() -> argparse.ArgumentParser:
    """Returns the `rlds-reverb` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog='rlds-reverb',
        description='RLDS datasets to TF-Agents trajectories in Reverb tables.',
    )
    add_common_options(parser, suppress=False)
    subparsers = parser.add_subparsers(dest='command', required=True)
    for add_parser in (
        data_commands.add_info_parser,
        data_commands.add_validate_parser,
        reverb_commands.add_push_parser,
        reverb_commands.add_serve_parser,
        demo_command.add_demo_parser,
        export_commands.add_export_parser,
        export_commands.add_record_parser,
        convert_command.add_convert_parser,
        report_command.add_report_parser,
        stats_command.add_stats_parser,
        status_command.add_status_parser,
    ):
        sub = add_parser(subparsers)
        add_common_options(sub, suppress=True)
    return parser


def _is_reported(error: BaseException) -> bool:
    """Whether `error` is one a command reports in one line (else it propagates)."""
    if isinstance(error, OSError | ValueError):
        return True
    # Our errors and TF's exist only once a command imported them (`info` may never do).
    errors = sys.modules.get('rlds_reverb.core.errors')
    tf = sys.modules.get('tensorflow')
    return (errors is not None and isinstance(error, errors.RldsReverbError)) or (
        tf is not None and isinstance(error, tf.errors.OpError)
    )


def _exit_code(error: BaseException) -> int:
    tf = sys.modules.get('tensorflow')
    if tf is not None and isinstance(error, tf.errors.InvalidArgumentError):
        return EXIT_INVALID_DATA
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns the exit code. Leaves process-wide logging alone.

    While the command runs, the umask keeps every file it writes (Reverb's checkpoints
    included) from being world-writable; the caller's umask is back when it returns.

    Args:
      argv: The arguments (without the program name); `sys.argv[1:]` when None.

    Returns:
      `EXIT_OK`, `EXIT_INVALID_DATA` (an invalid episode), `EXIT_ERROR` or
      `EXIT_INTERRUPTED`.
    """
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # Only `push` takes options it does not know (Beam's, with --servers).
        if not getattr(args, 'accepts_unknown_arguments', False):
            parser.parse_args(argv)  # Exits with argparse's usual error.
        args.beam_args = unknown
    # Commands import TensorFlow when they need it: `--help`, usage errors and `info` on a
    # TFDS directory answer without it.
    from rlds_reverb.core import files

    caller_umask = os.umask(files.read_umask() | stat.S_IWOTH)
    try:
        return args.handler(args)
    except Exception as error:
        if args.debug or not _is_reported(error):
            raise
        print(f'rlds-reverb {args.command}: error: {error}', file=sys.stderr)
        return _exit_code(error)
    except KeyboardInterrupt:
        print(f'rlds-reverb {args.command}: interrupted', file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        os.umask(caller_umask)


def run(argv: Sequence[str] | None = None) -> int:
    """The program's entry point: quiets the libraries (unless `--verbose`), then `main`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # `--help` exits here, before the quieting imports Gym (0.4 s); the parser loads no
    # heavy library, so parsing twice costs milliseconds.
    build_parser().parse_known_args(argv)
    if VERBOSE_FLAG not in argv[: argv.index('--') if '--' in argv else None]:
        silence_startup_noise()
    return main(argv)
