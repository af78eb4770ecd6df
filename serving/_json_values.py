"""Checks on decoded JSON values that arrive from outside (policy files, endpoint specs, outcome
logs): how deep they nest and whether a number is one a float can hold. One home, so every reader
refuses the same hostile values the same way."""

from __future__ import annotations

import math
from typing import Any


def json_kind(value: object) -> str:
    """What a decoded JSON value is, as an error message names it: "null", or its Python type's name."""
    return "null" if value is None else type(value).__name__


def nests_deeper_than(value: object, limit: int) -> bool:
    """Whether lists and objects nest more than `limit` levels in `value` (walked without recursion,
    so a value nested 100,000 deep is answered, not a RecursionError)."""
    stack: list[tuple[dict[Any, Any] | list[Any], int]] = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def finite_number(value: object) -> float | None:
    """`value` as a finite float, or None: not a number (true and false are not), NaN, infinite, or
    an integer too large for a double (float() of a 400-digit one raises OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
