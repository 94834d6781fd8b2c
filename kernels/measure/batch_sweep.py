"""Decode steps timed at several batch sizes, as a tidy table beside the cost model (lesson 14).

The lesson times one step of every batch size in turn, for a few rounds. On a shared machine a
step another process interrupts can only be slower, never faster, so the fastest round is the
estimate and the median is shown beside it as the spread. The roofline columns put each
measured step beside the longer of its reads and its arithmetic at this CPU's measured rates.
"""

from __future__ import annotations

import statistics

import pandas as pd

from kvcourse.kernels import costs
from kvcourse.kernels.measure.roofline import Roofline
from kvcourse.kernels.model.config import ModelConfig


def step_table(rounds: list[dict[int, float]], config: ModelConfig, context: int, bytes_per_value: int) -> pd.DataFrame:
    """One row per batch size: the cost model's bytes and FLOPs, the fastest and median step, tokens/s."""
    batches = sorted(rounds[0])
    rows = {}
    for b in batches:
        times = [r[b] for r in rounds]
        rows[b] = {
            "MB read": costs.decode_step_bytes(config, b, context, bytes_per_value) / 1e6,
            "GFLOP": costs.decode_step_flops(config, b, context) / 1e9,
            "fastest ms": min(times) * 1e3,
            "median ms": statistics.median(times) * 1e3,
            "tokens/s": b / min(times),
        }
    table = pd.DataFrame.from_dict(rows, orient="index").round(2)
    table.index.name = "batch"
    return table


def beside_roofline(
    table: pd.DataFrame, machine: Roofline, config: ModelConfig, context: int, bytes_per_value: int
) -> pd.DataFrame:
    """``table`` beside a roofline measured apart from it (lesson 01's ``roofline.measure``).

    Each step's floor is the longer of its bytes at the measured bandwidth and its FLOPs at the measured
    peak rate. The rates come from one copy and one matrix product, not from the sweep, so a measured step
    can come out above its floor (slower than the machine's rates allow) or below it (it beat them).
    """
    out = table.copy()
    seconds = out["fastest ms"] / 1e3
    step_bytes = {b: costs.decode_step_bytes(config, b, context, bytes_per_value) for b in out.index}
    step_flops = {b: costs.decode_step_flops(config, b, context) for b in out.index}
    out["GB/s achieved"] = [step_bytes[b] / 1e9 / s for b, s in seconds.items()]
    out["GFLOP/s achieved"] = [step_flops[b] / 1e9 / s for b, s in seconds.items()]
    out["roofline ms"] = [machine.floor_seconds(step_flops[b], step_bytes[b]) * 1e3 for b in out.index]
    out["binds"] = [machine.binding(step_flops[b], step_bytes[b]) for b in out.index]
    out["measured / roofline"] = out["fastest ms"] / out["roofline ms"]
    return out.round(2)


def cap_table(caps: dict[int, int], tokens_per_second: dict[int, float]) -> pd.DataFrame:
    """For each context length: the most sequences the pool holds, and the sweep's tokens/s at that batch."""
    measured = {c: f"{tokens_per_second[b]:.1f}" if b in tokens_per_second else "not timed" for c, b in caps.items()}
    table = pd.DataFrame(
        {"most sequences at once = tokens per step": caps, "tokens/s measured at that batch": measured}
    )
    table.index.name = "tokens each"
    return table
