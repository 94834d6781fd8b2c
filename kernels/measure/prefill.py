"""A prompt's first read, timed in rounds and split by the cost model (lesson 15).

``prefill_table`` turns a few rounds of (prefill seconds, next-step seconds) per prompt length
into one row per length: the fastest round (a step another process interrupts can only come out
slower), the cost model's FLOPs and attention's share of them. ``flops_split`` is the cost model
alone: attention's FLOPs (4 x head_dim per score cell) against everything else.
"""

from __future__ import annotations

import pandas as pd

from kvcourse.kernels import costs
from kvcourse.kernels.model.config import ModelConfig


def attention_flops(config: ModelConfig, n: int) -> int:
    """FLOPs of an n-token prompt's score grid and weighted sum: 4 x head_dim per score cell (lesson 03)."""
    return 4 * config.head_dim * costs.score_cells(config, n, n)


def prefill_table(rounds: list[dict[int, tuple[float, float]]], config: ModelConfig) -> pd.DataFrame:
    """One row per prompt length: fastest prefill and next step over the rounds, the cost model's FLOPs."""
    rows = {}
    for n in sorted(rounds[0]):
        prefill = min(r[n][0] for r in rounds)
        flops = costs.forward_flops(config, n, n, num_logits=1)
        rows[n] = {
            "prefill s": prefill,
            "ms per prompt token": prefill / n * 1e3,
            "GFLOP": flops / 1e9,
            "attention share": f"{attention_flops(config, n) / flops:.0%}",
            "next token ms": min(r[n][1] for r in rounds) * 1e3,
        }
    table = pd.DataFrame.from_dict(rows, orient="index").round(2)
    table.index.name = "prompt tokens"
    return table


def flops_split(config: ModelConfig, lengths: list[int]) -> pd.DataFrame:
    """The cost model's prefill GFLOP for each prompt length: attention, and everything else."""
    attention = {n: attention_flops(config, n) / 1e9 for n in lengths}
    rest = {n: costs.forward_flops(config, n, n, num_logits=1) / 1e9 - attention[n] for n in lengths}
    return pd.DataFrame(
        {"attention (grows with the square)": attention, "everything else (grows like the length)": rest}
    )
