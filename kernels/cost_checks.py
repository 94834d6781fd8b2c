"""The cost model's argument checks: whole counts, a config's counts and positive rates (kernels/costs.py)."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any


def count(name: str, value: Any, *, allow_zero: bool = False) -> int:
    """``value`` as an int if it is a whole number > 0 (>= 0 with ``allow_zero``); else ValueError naming ``name``.

    A float or Fraction that is a whole number counts (4.0 -> 4); a bool, NaN or 2.5 does not.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if not isinstance(value, Integral):
        if isinstance(value, Real) and math.isfinite(value) and float(value).is_integer():
            value = math.trunc(value)  # a whole number already
        else:
            raise ValueError(f"{name} must be a whole number, got {value!r}")
    value = int(value)
    if value < 0 or (value == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be {kind}, got {value}")
    return value


def config_count(config: Any, name: str) -> int:
    """The positive whole number ``config.<name>``; ValueError if the config lacks it (duck-typed configs)."""
    if not hasattr(config, name):
        raise ValueError(f"config has no attribute {name!r}; pass a ModelConfig or a look-alike")
    return count(f"config.{name}", getattr(config, name))


def rate(name: str, value: Any) -> float:
    """A finite number > 0 (FLOPs or bytes per second) as a float; else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)
