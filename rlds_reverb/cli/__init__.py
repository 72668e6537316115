"""The `rlds-reverb` command line: info, validate, push, serve, demo.

`main(argv)` runs one command and returns its exit code (usable in-process); the program
(`rlds-reverb`, `python -m rlds_reverb.cli`) starts through `run`, which also quiets the
libraries' start-up logs unless `--verbose` is given. Importing this package is cheap: it
imports TensorFlow only when a command runs.
"""

from rlds_reverb.cli.app import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_INVALID_DATA,
    EXIT_OK,
    build_parser,
    main,
    run,
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
