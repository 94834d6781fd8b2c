"""The room lab B's traces leave (issue 43): over drawn traces, how far the oracle and the reference are above LRU.

Per trace of lab B's family (seeds 0 to N - 1), the grader's three hit rates: least recently used's, the reference
policy's (quizzes/labs/solution_eviction.py) and Belady's offline oracle's (course/labs/oracle.py). The targets:
the oracle at least 10 points above LRU on average and at least 5 above the reference, and the reference clearly
above LRU. The lab model is tiny, so 1,000 traces take a few minutes on two processes.
Run: python -m benchmarks.bench_eviction_room [--seeds 1000] [--workers 2]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

import pandas as pd

from benchmarks.common import write_result
from kvcourse.labs.room import room, room_summary


def _chunk(seeds: list[int]) -> pd.DataFrame:
    return room(seeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    seeds = list(range(args.seeds))
    start = time.perf_counter()
    chunks = [seeds[i :: args.workers] for i in range(args.workers)]
    with ProcessPoolExecutor(args.workers) as pool:
        table = pd.concat(list(pool.map(_chunk, chunks))).sort_index()
    summary = room_summary(table)
    elapsed = time.perf_counter() - start
    print(", ".join(f"{k} {v}" for k, v in summary.items()), f"({elapsed:.0f} s)")
    quantiles = {
        name: {f"p{q}": round(float(table[name].quantile(q / 100)), 1) for q in (10, 50, 90)}
        for name in ("LRU", "reference", "oracle")
    }
    gaps = table.assign(oracle_lru=table["oracle"] - table["LRU"], ref_lru=table["reference"] - table["LRU"])
    write_result(
        "eviction_room",
        {
            "summary": summary,
            "quantiles": quantiles,
            "gap_quantiles": {
                name: {f"p{q}": round(float(gaps[name].quantile(q / 100)), 1) for q in (10, 50, 90)}
                for name in ("oracle_lru", "ref_lru")
            },
            "seconds": round(elapsed, 1),
            "targets": {"oracle over LRU": 10, "oracle over reference": 5},
        },
    )


if __name__ == "__main__":
    main()
