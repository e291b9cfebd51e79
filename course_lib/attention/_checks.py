"""Argument checks shared by the attention modules, with messages that name the argument."""

from __future__ import annotations

import numbers


def check_int(name: str, value, minimum: int) -> int:
    """value as an int, or ValueError if it is not an integer >= minimum (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)
