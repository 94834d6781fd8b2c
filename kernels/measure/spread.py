"""The spread of a few timed ratios, and the verdict it allows (lessons 14, 15); a nearest-rank percentile (labs).

On a shared 2-core CPU one timing can be off by tens of per cent, so a lesson times a comparison
in several interleaved rounds and states a trend only as far as the least and greatest ratio agree.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


def percentile(values: list[float], q: float, empty: float = 0.0) -> float:
    """The q-th percentile (0-100), nearest rank: a value that occurred (``empty`` when there is none)."""
    if not values:
        return empty
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return float(ordered[int(rank) - 1])


@dataclass(frozen=True)
class Spread:
    """The least, middle and greatest of a few measured ratios."""

    low: float
    median: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            raise ValueError("no values")
        return cls(min(values), statistics.median(values), max(values))

    def __str__(self) -> str:
        return f"min {self.low:.2f}x, median {self.median:.2f}x, max {self.high:.2f}x"

    def above(self, threshold: float) -> bool | None:
        """True if every ratio is above ``threshold``, False if every one is at or below it, None if they
        straddle it."""
        if self.low > threshold:
            return True
        if self.high <= threshold:
            return False
        return None

    def verdict(self, what: str, threshold: float = 1.0) -> str:
        """A sentence about ``what`` (a ratio above ``threshold``) that the rounds support, and no more."""
        above = self.above(threshold)
        if above is None:
            return f"{what} in some rounds, not in others: on this machine the noise is as large as the effect"
        return f"{what} in every round" if above else f"not {what} in any round"
