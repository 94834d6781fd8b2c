"""Predict the timing lab before running it: work per generation and a two-number time model (lesson 17).

Without a cache, step t of a generation re-reads the prompt and the t tokens made so far, so
the tokens processed over n steps form a triangle (about n*n/2); with a cache each step after
the first processes one token (linear). Time is not proportional to tokens, though: every
forward pass also pays a fixed cost (reading all the weights, launching every layer), which a
one-token pass cannot amortise. So the model here is

    seconds = seconds_per_pass x passes + seconds_per_flop x FLOPs,

with FLOPs from kvcourse.kernels.costs and the two constants fitted on two single forward
passes, timed before the sweep.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import torch

from kvcourse.kernels import costs
from kvcourse.kernels.model.config import ModelConfig
from kvcourse.timing_lab.sweep import HF_CACHE, HF_NO_CACHE


@dataclass(frozen=True)
class GenerationWork:
    """What one greedy generation computes: forward passes, token positions and FLOPs (lesson 17)."""

    num_passes: int
    tokens_processed: int
    flops: int


def generation_work(config: ModelConfig, prompt_len: int, num_new_tokens: int, use_cache: bool) -> GenerationWork:
    """Sum the forward passes of a generation; only the last position of each pass needs logits."""
    tokens = flops = 0
    for step in range(num_new_tokens):
        context_len = prompt_len + step  # tokens in the sequence during this pass
        num_new = context_len if not use_cache else (prompt_len if step == 0 else 1)
        tokens += num_new
        flops += costs.forward_flops(config, num_new, context_len, num_logits=1)
    return GenerationWork(num_new_tokens, tokens, flops)


@dataclass(frozen=True)
class PassCostModel:
    """Seconds of one forward pass = seconds_per_pass + seconds_per_flop x its FLOPs (lesson 17)."""

    seconds_per_pass: float
    seconds_per_flop: float

    def __post_init__(self) -> None:
        for name in ("seconds_per_pass", "seconds_per_flop"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    @classmethod
    def fit(cls, flops: list[int], seconds: list[float]) -> PassCostModel:
        """Least-squares line through (FLOPs, seconds) of single passes; negative parts clamp to 0."""
        if len(flops) != len(seconds) or len(set(flops)) < 2:
            raise ValueError("fit needs passes of at least two different sizes, one time each")
        mean_f, mean_s = statistics.fmean(flops), statistics.fmean(seconds)
        slope = sum((f - mean_f) * (s - mean_s) for f, s in zip(flops, seconds, strict=True)) / sum(
            (f - mean_f) ** 2 for f in flops
        )
        slope = max(slope, 0.0)
        return cls(max(mean_s - slope * mean_f, 0.0), slope)

    def predict(self, work: GenerationWork) -> float:
        return self.seconds_per_pass * work.num_passes + self.seconds_per_flop * work.flops


def calibrate(model, num_tokens: tuple[int, ...] = (1, 64), num_repeats: int = 5) -> PassCostModel:
    """Time single uncached forward passes of a few sizes on ``model`` and fit a PassCostModel."""
    config = ModelConfig.from_hf(model.config)
    device = next(model.parameters()).device
    flops, seconds = [], []
    with torch.inference_mode():
        for n in num_tokens:
            ids = torch.zeros((1, n), dtype=torch.long, device=device)  # (1, n): content does not change the time
            model(ids, use_cache=False, logits_to_keep=1)  # warm-up
            times = []
            for _ in range(num_repeats):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                model(ids, use_cache=False, logits_to_keep=1)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - start)
            flops.append(costs.forward_flops(config, n, n, num_logits=1))
            seconds.append(statistics.median(times))
    return PassCostModel.fit(flops, seconds)


def predict_sweep(
    cost_model: PassCostModel, config: ModelConfig, prompt_len: int, lengths: list[int]
) -> dict[str, list[float]]:
    """Predicted seconds for generate() with and without the cache at each length."""
    return {
        name: [cost_model.predict(generation_work(config, prompt_len, n, use_cache)) for n in lengths]
        for name, use_cache in ((HF_CACHE, True), (HF_NO_CACHE, False))
    }
