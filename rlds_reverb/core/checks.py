"""Argument checks shared by every layer: each names the argument, its value and the rule.

They raise `ValueError` by default; modules whose errors have a more precise type (tables
raise `TableError`, itself a `ValueError`) pass it as `error`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []


def check_int_at_least(
    value: Any, minimum: int, *, argument: str, error: type[Exception] = ValueError
) -> int:
    """Returns `value` as an int after checking it is an integer >= `minimum`.

    Args:
      value: The value given (booleans are refused: `True` is not a count).
      minimum: The smallest valid value.
      argument: The argument's name, for the message.
      error: The exception type to raise.

    Returns:
      `int(value)`.

    Raises:
      ValueError: (or `error`) If `value` is not an integer or is below `minimum`.

    Example:
      >>> check_int_at_least(3, 1, argument='n')
      3
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise error(f'{argument}={value!r} is not valid; expected an integer >= {minimum}.')
    return int(value)


def _is_real(value: Any) -> bool:
    """Whether `value` is a real number; booleans are not (`True` is a switch, not a number).

    A plain bool, not a type guard: `value` stays `Any` for the comparisons that follow.
    """
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


def check_unit_interval(value: Any, *, argument: str, error: type[Exception] = ValueError) -> float:
    """Returns `value` as a float after checking it lies in [0, 1].

    Raises:
      ValueError: (or `error`) If `value` is not a real number in [0, 1].

    Example:
      >>> check_unit_interval(0.99, argument='gamma')
      0.99
    """
    if not _is_real(value) or not 0.0 <= value <= 1.0:
        raise error(f'{argument}={value!r} is not valid; expected a number in [0, 1].')
    return float(value)


def check_number_above(
    value: Any,
    minimum: float,
    *,
    argument: str,
    inclusive: bool = False,
    error: type[Exception] = ValueError,
) -> float:
    """Returns `value` as a float after checking it is finite and > (or >=) `minimum`.

    Raises:
      ValueError: (or `error`) If `value` is not a finite real number above `minimum`.

    Example:
      >>> check_number_above(4.0, 0.0, argument='samples_per_insert')
      4.0
    """
    valid = (
        _is_real(value)
        and math.isfinite(value)
        and (value >= minimum if inclusive else value > minimum)
    )
    if not valid:
        relation = '>=' if inclusive else '>'
        raise error(
            f'{argument}={value!r} is not valid; expected a finite number {relation} {minimum}.'
        )
    return float(value)


def check_bool(value: Any, *, argument: str, error: type[Exception] = ValueError) -> bool:
    """Returns `value` as a bool after checking it is one (a switch, not a count or a string).

    Raises:
      ValueError: (or `error`) If `value` is not `True` or `False` (NumPy's bools pass).

    Example:
      >>> check_bool(True, argument='add_ids')
      True
    """
    if not isinstance(value, bool) and type(value).__name__ != 'bool_':
        raise error(f'{argument}={value!r} is not valid; expected True or False.')
    return bool(value)
