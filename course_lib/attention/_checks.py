"""Argument checks shared by the attention modules, with messages that name the argument."""

from __future__ import annotations

import numbers


def check_int(name: str, value, minimum: int, requirement: str | None = None) -> int:
    """value as an int, or ValueError if it is not an integer >= minimum (bools are refused).

    The message says "{name} must be {requirement}", by default "an integer >= {minimum}".
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        requirement = requirement or f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {requirement}, got {value!r}.")
    return int(value)
