"""Helpers for writing wrong answers."""


def mutate(source: str, old: str, new: str) -> str:
    """`source` with one mistake put in: `old` (which must occur once) replaced by `new`."""
    if source.count(old) != 1:
        raise ValueError(f"{old!r} occurs {source.count(old)} times in the answer to mutate, not once")
    return source.replace(old, new)
