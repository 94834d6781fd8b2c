"""How much room lab B's traces leave: per drawn trace, the hit rates of LRU, the reference policy and the oracle.

The lesson prints this on a dozen drawn traces before the learner starts, so they know how far above least
recently used a policy can go; the benchmark (benchmarks/bench_eviction_room.py) measures it on 1,000, and a
test checks the same property on a short run, so a change to the trace family cannot quietly take the room away.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from .eviction import rates
from .spec import draw_trace


def room(seeds: Iterable[int]) -> pd.DataFrame:
    """One row per trace drawn from ``seeds``: the hit rates of LRU, the reference and the oracle, in points."""
    rows = []
    for seed in seeds:
        line = rates(draw_trace("eviction", seed))
        rows.append({"seed": seed, **{name: round(100 * rate, 1) for name, rate in line.items()}})
    return pd.DataFrame(rows).set_index("seed")


def room_summary(table: pd.DataFrame) -> dict[str, float]:
    """The table's means and gaps, in points of hit rate, and the share of traces where the reference beats LRU."""
    return {
        "traces": len(table),
        "LRU": round(float(table["LRU"].mean()), 1),
        "reference": round(float(table["reference"].mean()), 1),
        "oracle": round(float(table["oracle"].mean()), 1),
        "oracle over LRU": round(float((table["oracle"] - table["LRU"]).mean()), 1),
        "oracle over reference": round(float((table["oracle"] - table["reference"]).mean()), 1),
        "reference over LRU": round(float((table["reference"] - table["LRU"]).mean()), 1),
        "reference above LRU": round(float((table["reference"] > table["LRU"] + 0.5).mean()), 3),
    }
