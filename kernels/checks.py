"""Two small helpers every layer of the engine shares: ceiling division and the positive-integer check."""

from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    """The smallest integer >= a / b, for b > 0: how many blocks of b hold a tokens."""
    return -(-a // b)


def check_positive_int(name: str, value: object, *, optional: bool = False) -> None:
    """Refuse anything but a whole number >= 1 (a bool is not one), or None where ``optional``."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer{' or None' if optional else ''}, got {value!r}")
