"""Argument checks shared by the transforms: each names the argument and its valid range."""

from __future__ import annotations

import numbers
from typing import Any


def check_int_at_least(value: Any, minimum: int, *, argument: str) -> int:
    """Returns `value` as an int after checking it is an integer >= `minimum`.

    Raises:
      ValueError: If `value` is not an integer or is below `minimum`.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f'{argument}={value!r} is not valid; expected an integer >= {minimum}.')
    return int(value)


def check_unit_interval(value: Any, *, argument: str) -> float:
    """Returns `value` as a float after checking it lies in [0, 1].

    Raises:
      ValueError: If `value` is not a real number in [0, 1].
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
        raise ValueError(f'{argument}={value!r} is not valid; expected a number in [0, 1].')
    return float(value)
