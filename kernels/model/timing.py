"""Timing a few ways of computing the same thing, side by side, to choose one (products.py, cpu_fast.py).

A fast path is chosen only where it measured faster than the textbook form on this machine:
``time_calls`` runs every candidate in interleaved rounds and keeps each one's best round (the
least disturbed by whatever else the machine does), and ``pick`` takes the fastest only if it
beats the textbook by ``MARGIN``. A candidate far slower than the first one on its first call
(4x) is timed no further: it has lost, and some lose by 15x.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

MARGIN = 1.1  # a form other than the textbook must be this much faster to be chosen


def time_calls(calls: Mapping[str, Callable[[], Any]], rounds: int = 5, budget_s: float = 2e-3) -> dict[str, float]:
    """Seconds per call of each candidate (the first is the reference): interleaved rounds, best of each."""
    first: dict[str, float] = {}
    for name, call in calls.items():
        call()  # warm-up: a first call picks and primes its kernel
        first[name] = _seconds(call, 1)
    reference = next(iter(first.values()))
    kept = [name for name in calls if first[name] <= 4 * reference]
    best = dict(first)
    for _ in range(rounds):
        for name in kept:
            reps = max(1, min(200, int(budget_s / max(first[name], 1e-7))))
            best[name] = min(best[name], _seconds(calls[name], reps))
    return best


def pick(seconds: dict[str, float], textbook: str = "textbook") -> tuple[str, str]:
    """The fastest candidate if it beats ``textbook`` by ``MARGIN``, else ``textbook``; and why, in words."""
    best = min(seconds, key=seconds.__getitem__)
    speedup = seconds[textbook] / seconds[best]
    if best == textbook or speedup < MARGIN:
        others = ", ".join(f"{name} {seconds[textbook] / s:.2f}x" for name, s in seconds.items() if name != textbook)
        return textbook, f"the textbook form is fastest here or within {MARGIN}x ({others}; measured)"
    return best, f"{speedup:.2f}x faster than the textbook form here (measured)"


def _seconds(call: Callable[[], Any], reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        call()
    return (time.perf_counter() - start) / reps
