"""What one decode step reads and computes as the context grows, read from the engine (lesson 06).

``decode_growth`` prefills prompts of several lengths into the engine's contiguous cache, then
runs decode steps on all of them in turn (one step each, round after round, so a busy machine
slows every length alike) and records, per length: the bytes of K and V the step's attention
read (the cache's filled slots after the step: every cached token, the new one included), the
query-key pairs it scored (counted by the attention function itself), the weights it streamed,
and the fastest step's time. Bytes and score cells are exact counts, the same on any machine;
the times are this machine's, in this run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pandas as pd
import torch

from kvcourse.kernels import costs
from kvcourse.kernels.attention.backend import StepMetadata
from kvcourse.kernels.attention.backends.contiguous import ContiguousKVBackend
from kvcourse.kernels.model.transformer import Transformer


class _Decoding:
    """One sequence in the engine's contiguous cache, fed one token per step (greedy)."""

    def __init__(self, model: Transformer, prompt: Sequence[int], num_steps: int) -> None:
        self.model = model
        self.cache = ContiguousKVBackend(model.config, len(prompt) + num_steps, model.dtype, model.device)
        self.next_token = self._step(list(prompt))

    def _step(self, token_ids: list[int]) -> int:
        start = self.cache.num_computed_tokens
        ids = torch.tensor(token_ids, dtype=torch.long, device=self.model.device)
        positions = torch.arange(start, start + len(token_ids), device=self.model.device)
        self.cache.begin_step(StepMetadata(start, len(token_ids)))
        last = torch.tensor([len(token_ids) - 1], device=self.model.device)
        logits = self.model(ids, positions, self.cache, logits_index=last)
        self.cache.end_step()
        return int(logits[0].argmax())

    def decode(self) -> tuple[float, int, int]:
        """Feed the last token written: (seconds, score cells computed, K/V bytes attended over)."""
        cells = self.cache.num_score_cells
        start = time.perf_counter()
        self.next_token = self._step([self.next_token])
        seconds = time.perf_counter() - start
        return seconds, self.cache.num_score_cells - cells, self.cache.kv_cache_bytes


def decode_growth(
    model: Transformer, token_ids: Sequence[int], positions: Sequence[int], num_steps: int = 6
) -> pd.DataFrame:
    """One row per position p (a p-token prompt, ``token_ids[:p]``), for the decode steps that follow it.

    ``kv_bytes_read``: the K and V of the p + 1 tokens the first decode step's attention goes over;
    ``attention_flops``: 4 x head_dim x the score cells that step computed (2 FLOPs per multiply-add
    for the scores, as many for the weighted sum of the values); ``weight_bytes_read`` and
    ``step_flops``: the whole step (the weights streamed once; the cost model's FLOPs, lm_head for
    one position); ``ms_fastest`` and ``ms_median``: over ``num_steps`` decode steps, interleaved.
    """
    if not positions or min(positions) < 1 or max(positions) > len(token_ids):
        raise ValueError(f"positions must lie in 1 .. {len(token_ids)} (the tokens given), got {list(positions)}")
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    with torch.inference_mode():
        runs = [_Decoding(model, token_ids[:p], num_steps) for p in positions]
        steps = [[run.decode() for run in runs] for _ in range(num_steps)]  # round after round
    config, rows = model.config, []
    for i, p in enumerate(positions):
        seconds = pd.Series([round_[i][0] for round_ in steps])
        _, cells, kv_bytes = steps[0][i]  # the first decode step after the prompt: position p
        rows.append(
            {
                "position": p,
                "kv_bytes_read": kv_bytes,
                "attention_flops": 4 * config.head_dim * cells,
                "weight_bytes_read": model.weight_bytes_read_per_pass(),
                "step_flops": costs.forward_flops(config, 1, p + 1, num_logits=1),
                "ms_fastest": 1e3 * seconds.min(),
                "ms_median": 1e3 * seconds.median(),
            }
        )
    return pd.DataFrame(rows).set_index("position")


def growth_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """``decode_growth``'s table relative to its first row, with the whole step's bytes (weights + K/V) added."""
    ratios = table.assign(step_bytes_read=table["weight_bytes_read"] + table["kv_bytes_read"])
    return ratios / ratios.iloc[0]


def readable(table: pd.DataFrame) -> pd.DataFrame:
    """``decode_growth``'s table in MB, MFLOP and ms, for showing."""
    return pd.DataFrame(
        {
            "K and V read (MB)": table["kv_bytes_read"] / 1e6,
            "attention (MFLOP)": table["attention_flops"] / 1e6,
            "weights read (MB)": table["weight_bytes_read"] / 1e6,
            "whole step (MFLOP)": table["step_flops"] / 1e6,
            "fastest step (ms)": table["ms_fastest"],
            "median step (ms)": table["ms_median"],
        }
    ).round(1)


def time_verdict(table: pd.DataFrame) -> str:
    """Whether the fastest step's time moved beyond this run's own step-to-step spread, in words."""
    ratio = table["ms_fastest"].iloc[-1] / table["ms_fastest"].iloc[0]
    spread = float((table["ms_median"] / table["ms_fastest"]).max() - 1)  # how far a typical step sat above the fastest
    first, last = table.index[0], table.index[-1]
    moved = f"the fastest step at position {last:,} took {ratio:.2f}x the time of one at {first:,}"
    if abs(ratio - 1) <= spread:
        return f"{moved}: within this run's step-to-step spread ({spread:.0%}), too little to call on this machine"
    trend = "more" if ratio > 1 else "less"
    return f"{moved}: {trend} time, by more than this run's step-to-step spread ({spread:.0%})"
