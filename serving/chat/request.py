"""What a chat request must hold before anything is sent: numbers JSON can carry.

Python's json module reads NaN, Infinity and -Infinity, and a number too large for a double
(1e999) as infinity, and writes them all back as NaN / Infinity, which is not JSON: a strict
server refuses such a request, a lax one reads something else. So a request holding one is
the caller's error, named with where it is, before any call (the proxy answers it with 400).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

MAX_PATH_CHARS = 200  # of where the number is, in a message


def check_json_numbers(value: Any, where: str = "") -> None:
    """ValueError naming the first number in `value` (nested dicts and lists) that JSON cannot
    carry, e.g. "temperature is NaN" or "messages[0].weight is Infinity"."""
    found = non_json_number(value, where)
    if found is not None:
        path, number = found
        shown = path if len(path) <= MAX_PATH_CHARS else path[:MAX_PATH_CHARS] + "..."
        name = "NaN" if math.isnan(number) else "Infinity" if number > 0 else "-Infinity"
        raise ValueError(
            f"{shown or 'the value'} is {name}: JSON has no NaN or Infinity (a number beyond "
            "±1.8e308 reads as Infinity too); send a finite number"
        )


def non_json_number(value: Any, where: str = "") -> tuple[str, float] | None:
    """(path, number) of the first non-finite float in `value`, or None. Walks with a stack of its
    own, not by recursion, so a body nested as deep as the JSON parser allows is walked too."""
    stack = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return path, item
        elif isinstance(item, Mapping):
            stack.extend(reversed([(f"{path}.{key}" if path else str(key), v) for key, v in item.items()]))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(item)]))
    return None
