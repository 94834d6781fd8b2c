"""Lesson 11's block-size trade as tables: the sweep's memory and bookkeeping, and interleaved timings.

``sweep_table`` turns ``block_size_sweep``'s points into one row per block size; ``timing_table``
summarises repeated timings of one call per block size by their median and middle half, and
``timing_verdict`` says in words whether their differences stand out of this run's own noise.
``decode_kernels`` names the decode kernels this machine runs for a dtype, and ``time_kernels``
times each of them on every block size's inputs, interleaved, in CPU time.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import torch


def sweep_table(sweep: Mapping[int, Any]) -> pd.DataFrame:
    """One row per block size: % of busy memory without a token, % in empty tails, table entries, allocations."""
    rows = [
        {
            "block size": size,
            "no token (%)": round(100 * p.waste, 1),
            "empty tails (%)": round(100 * p.tail_waste, 1),
            "entries per table": round(p.mean_table_len, 1),
            "allocations": p.num_allocations,
        }
        for size, p in sweep.items()
    ]
    return pd.DataFrame(rows).set_index("block size")


def timing_table(seconds: Mapping[int, Sequence[float]]) -> pd.DataFrame:
    """Median and middle half (25th to 75th percentile) of each block size's timings, in milliseconds."""
    rows = []
    for size, times in seconds.items():
        q1, median, q3 = statistics.quantiles([1e3 * t for t in times], n=4)
        rows.append(
            {
                "block size": size,
                "median (ms)": round(median, 3),
                "25th pct (ms)": round(q1, 3),
                "75th pct (ms)": round(q3, 3),
            }
        )
    return pd.DataFrame(rows).set_index("block size")


def timing_verdict(timing: pd.DataFrame) -> str:
    """Slowest and fastest median, and whether the middle halves of all block sizes overlap (no trend beyond noise)."""
    slow, fast = timing["median (ms)"].idxmax(), timing["median (ms)"].idxmin()
    spread = timing["median (ms)"].max() / timing["median (ms)"].min()
    overlap = timing["25th pct (ms)"].max() <= timing["75th pct (ms)"].min()
    head = f"slowest: blocks of {slow} ({spread:.2f}x the fastest, blocks of {fast})"
    if overlap:
        return head + "; the middle halves of all block sizes' timings overlap: no difference beyond this run's noise."
    return head + "; some middle halves do not overlap: a difference beyond this run's noise."


def closest_option(factors: Mapping[str, float], ratio: float) -> str:
    """The option whose factor is nearest to ``ratio`` on a log scale (a prediction's measured answer)."""
    return min(factors, key=lambda option: abs(math.log(factors[option] / ratio)))


def decode_kernels(dtype: torch.dtype) -> tuple[dict[str, Callable[..., torch.Tensor]], str]:
    """The engine's CPU decode kernels that run here for ``dtype`` (name -> function), and why the in-place one is
    or is not among them: the gather reference always, the in-place kernel where numba runs it (lesson 10)."""
    from kvcourse.kernels.attention.cpu_paged import cpu_paged_decode, in_place_runs
    from kvcourse.kernels.attention.paged import paged_decode_attention

    kernels: dict[str, Callable[..., torch.Tensor]] = {"gather": paged_decode_attention}
    ok, why = in_place_runs(dtype)
    if ok:
        kernels["in place"] = cpu_paged_decode
    return kernels, why


def time_kernels(
    kernels: Mapping[str, Callable[..., Any]],
    inputs: Mapping[int, tuple],
    rounds: int,
) -> dict[str, pd.DataFrame]:
    """kernel name -> ``timing_table`` of its CPU time per call on each block size's inputs.

    Rounds are interleaved (every kernel on every block size, then again), so a busy moment of the
    machine hits them all alike; ``time.process_time`` counts this process's CPU time only. They run
    on one thread: with several, CPU time would also count threads spinning while they wait for work.
    """
    from kvcourse.kernels.engine.threads import thread_policy

    times: dict[str, dict[int, list[float]]] = {name: {bs: [] for bs in inputs} for name in kernels}
    with thread_policy(1):
        for _ in range(rounds):
            for bs, args in inputs.items():
                for name, kernel in kernels.items():
                    start = time.process_time()
                    kernel(*args)
                    times[name][bs].append(time.process_time() - start)
    return {name: timing_table(by_size) for name, by_size in times.items()}
