"""Option checks shared by the bsuite and MinAtar factories."""

from __future__ import annotations


def check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value
