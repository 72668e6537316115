"""How the command line gives an option: the `Flag` a field of an options value declares.

`LoadOptions` (`rlds_reverb.read.options`) and `PushOptions` (`rlds_reverb.write.options`)
are frozen dataclasses; a field the command line gives carries a `Flag` in its metadata
(`make_flag`), and `rlds-reverb push` and `serve` build their flags, and the options value,
from the fields alone (`rlds_reverb.cli.reverb_commands`). This module loads without
TensorFlow: the command line's parser reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ['Flag', 'find_flag', 'make_flag', 'name_flag']

_FLAG = 'flag'


@dataclasses.dataclass(frozen=True)
class Flag:
    """How the command line gives an option: `rlds-reverb push`, and `serve` unless push-only.

    A bool option is a switch; a repeated flag gives one value of a sequence option each
    time; any other flag takes one value, parsed by `type`, among `choices` if given.

    Attributes:
      help: The flag's help.
      name: The flag; default: `--` and the option's name with dashes.
      type: Parses the flag's value (`int`, `float`); None keeps the text.
      choices: The values the flag takes, if only some.
      repeat: Whether the flag is given once per value of a sequence option.
      push_only: Whether only `push` takes it (`serve` seeds a new server and checkpoints it
        once, at the end).
    """

    help: str
    name: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    repeat: bool = False
    push_only: bool = False


def make_flag(help: str, **how: Any) -> dict[str, Flag]:
    """Returns a dataclass field's metadata: how the command line gives the option.

    Example:
      >>> dataclasses.field(default=1, metadata=make_flag('the priority', type=float))
    """
    return {_FLAG: Flag(help, **how)}


def find_flag(field: dataclasses.Field) -> Flag | None:
    """Returns how the command line gives the option `field`, None if it does not.

    Example:
      >>> [find_flag(f) for f in dataclasses.fields(PushOptions)]
    """
    return field.metadata.get(_FLAG)


def name_flag(field: dataclasses.Field) -> str:
    """Returns the command line's flag of the option `field` (`--timeout-ms`).

    Example:
      >>> name_flag(PushOptions.fields()['timeout_ms'])
      '--timeout-ms'
    """
    flag = find_flag(field)
    return (flag and flag.name) or '--' + field.name.replace('_', '-')
