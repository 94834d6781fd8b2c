"""Lesson 17's simulator: the timing lab's two-number time model, with the KV cache on and off.

The lab (kvcourse.timing_lab.predict) predicts the time of a greedy generation as

    seconds = seconds_per_pass x passes + seconds_per_flop x FLOPs,

with FLOPs from kvcourse.kernels.costs. Both runs make one pass per new token; they differ in
FLOPs only. This simulator evaluates the same model for any prompt, output length and pair of
costs, so a learner can see why the measured speedup stays below the ratio of tokens processed.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from kvcourse.kernels import MODEL_CONFIGS, costs
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput, check_float, check_int
from kvcourse.simulators.controls import float_control, int_control
from kvcourse.simulators.labels import format_seconds

MAX_PROMPT_TOKENS = 100_000
MAX_NEW_TOKENS = 8_192  # the per-step sums below take about 0.2 s at this length
MAX_MS_PER_PASS = 60_000.0
MAX_MS_PER_GFLOP = 1e6
DEFAULT_MODEL = "smollm2-135m"


def _step_flops_uncached(config: Any, prompt_len: int, num_steps: int, use_cache: bool) -> np.ndarray:
    # Step s runs over the whole sequence without a cache, over the prompt then one token with it.
    flops = []
    for step in range(num_steps):
        context_len = prompt_len + step  # tokens in the sequence during this pass
        num_new = context_len if not use_cache else (prompt_len if step == 0 else 1)
        flops.append(costs.forward_flops(config, num_new, context_len, num_logits=1))
    return np.array(flops, dtype=float)  # float: an uncached 8k-token run passes int64's range


_step_flops_cached = lru_cache(maxsize=16)(_step_flops_uncached)


def step_flops(config: Any, prompt_len: int, num_steps: int, use_cache: bool) -> np.ndarray:
    """FLOPs of each forward pass of a generation, as the timing lab counts them (lesson 17)."""
    if isinstance(config, Hashable):  # a frozen ModelConfig: the same sweep is not counted twice
        return _step_flops_cached(config, prompt_len, num_steps, use_cache)
    return _step_flops_uncached(config, prompt_len, num_steps, use_cache)


@dataclass(frozen=True)
class TimingConfig:
    """A prompt, an output length and the two costs of the lab's time model (lesson 17)."""

    prompt_len: int
    num_new_tokens: int
    ms_per_pass: float  # fixed cost of any forward pass (reading every weight, launching every layer)
    ms_per_gflop: float  # cost of each billion FLOPs the pass computes
    model_config: Any = None  # a ModelConfig (or anything kvcourse.kernels.costs reads); None: SmolLM2-135M

    def __post_init__(self) -> None:
        check_int("Prompt length (tokens)", self.prompt_len, 1, MAX_PROMPT_TOKENS)
        check_int("Output length (new tokens)", self.num_new_tokens, 1, MAX_NEW_TOKENS)
        check_float("Fixed cost per pass (ms)", self.ms_per_pass, 0.0, MAX_MS_PER_PASS)
        check_float("Cost per GFLOP (ms)", self.ms_per_gflop, 0.0, MAX_MS_PER_GFLOP)
        if self.ms_per_pass == 0 and self.ms_per_gflop == 0:
            raise InvalidInput(
                "the fixed cost per pass and the cost per GFLOP are both 0 ms, so nothing "
                "would take any time; give at least one of them a positive value."
            )
        if self.model_config is None:
            object.__setattr__(self, "model_config", MODEL_CONFIGS[DEFAULT_MODEL])

    @property
    def seconds_per_pass(self) -> float:
        return self.ms_per_pass / 1e3

    @property
    def seconds_per_flop(self) -> float:
        return self.ms_per_gflop / 1e3 / 1e9


class TimingModel:
    """Predicted generation time with and without the KV cache; ``step()`` doubles the output (lesson 17)."""

    def __init__(self, config: TimingConfig) -> None:
        self.config = config
        self.num_new_tokens = config.num_new_tokens

    def step(self) -> None:
        """Double the output length (the uncached time roughly quadruples, the cached one doubles)."""
        if self.num_new_tokens * 2 > MAX_NEW_TOKENS:
            raise InvalidInput(f"doubling again would pass {MAX_NEW_TOKENS:,} new tokens; press Reset.")
        self.num_new_tokens *= 2

    def reset(self) -> None:
        self.num_new_tokens = self.config.num_new_tokens

    # -- curves over output lengths 1 .. num_new_tokens --------------------------------------------
    def flops_curve(self, use_cache: bool) -> np.ndarray:
        """Total FLOPs of a generation of n new tokens, for n = 1 .. num_new_tokens."""
        c = self.config
        return np.cumsum(step_flops(c.model_config, c.prompt_len, self.num_new_tokens, use_cache))

    def seconds_curve(self, use_cache: bool) -> np.ndarray:
        """Predicted seconds of a generation of n new tokens, for n = 1 .. num_new_tokens."""
        passes = np.arange(1, self.num_new_tokens + 1)  # one forward pass per new token, cache or not
        return self.config.seconds_per_pass * passes + self.config.seconds_per_flop * self.flops_curve(use_cache)

    def work_ratio_curve(self) -> np.ndarray:
        """Tokens processed without the cache / with it, for n = 1 .. num_new_tokens."""
        n = np.arange(1, self.num_new_tokens + 1)
        p = self.config.prompt_len
        return (n * p + n * (n - 1) / 2) / (p + n - 1)  # the same sums as costs.tokens_processed

    # -- numbers at the current length -----------------------------------------------------------
    @property
    def num_passes(self) -> int:
        return self.num_new_tokens

    def flops(self, use_cache: bool) -> float:
        return float(self.flops_curve(use_cache)[-1])

    def seconds(self, use_cache: bool) -> float:
        return float(self.seconds_curve(use_cache)[-1])

    @property
    def seconds_with_cache(self) -> float:
        return self.seconds(True)

    @property
    def seconds_without_cache(self) -> float:
        return self.seconds(False)

    @property
    def speedup(self) -> float:
        """Predicted time without the cache / with it: what the lab measures as the speedup."""
        return self.seconds_without_cache / self.seconds_with_cache

    @property
    def work_ratio(self) -> float:
        """Tokens processed without the cache / with it: the speedup if time were only tokens."""
        p, n = self.config.prompt_len, self.num_new_tokens
        return costs.tokens_processed(p, n, use_cache=False) / costs.tokens_processed(p, n, use_cache=True)

    @property
    def fixed_share_with_cache(self) -> float:
        """Share of the cached run's time spent on the fixed cost per pass."""
        return self.config.seconds_per_pass * self.num_passes / self.seconds_with_cache


class TimingView(SimulatorView):
    """Prompt, output length and the two costs -> predicted time with and without the cache (lesson 17)."""

    stepped = {"num_new_tokens": "num_new_tokens"}  # Step changes this box: it shows the new value

    def __init__(
        self,
        model_config: Any = None,
        *,
        prompt_len: int = 8,
        num_new_tokens: int = 64,
        ms_per_pass: float = 15.0,
        ms_per_gflop: float = 10.0,
    ) -> None:
        self.model_config = model_config  # None: SmolLM2-135M from the engine's config table
        controls = {
            "prompt_len": int_control("Prompt length (tokens)", prompt_len),
            "num_new_tokens": int_control("Output length (new tokens)", num_new_tokens, width="240px"),
            "ms_per_pass": float_control("Fixed cost per pass (ms)", ms_per_pass, width="250px"),
            "ms_per_gflop": float_control("Cost per GFLOP (ms)", ms_per_gflop),
        }
        super().__init__(controls, num_axes=2, figsize=(11, 4.2), step_label="Double the output")

    @classmethod
    def from_cost_model(
        cls, cost_model: Any, model_config: Any = None, *, prompt_len: int = 8, num_new_tokens: int = 64
    ) -> TimingView:
        """Start from the lab's fitted PassCostModel (kvcourse.timing_lab.predict.calibrate)."""
        return cls(
            model_config,
            prompt_len=prompt_len,
            num_new_tokens=num_new_tokens,
            ms_per_pass=cost_model.seconds_per_pass * 1e3,
            ms_per_gflop=cost_model.seconds_per_flop * 1e12,
        )

    def build(self, values: dict[str, Any]) -> TimingModel:
        return TimingModel(
            TimingConfig(
                values["prompt_len"],
                values["num_new_tokens"],
                values["ms_per_pass"],
                values["ms_per_gflop"],
                self.model_config,
            )
        )

    def draw(self, model: TimingModel) -> str:
        time_ax, ratio_ax = self.axes
        n = model.num_new_tokens
        lengths = np.arange(1, n + 1)
        with_cache, without = model.seconds_curve(True), model.seconds_curve(False)
        time_ax.plot(lengths, without, color="C3", label="cache off")
        time_ax.plot(lengths, with_cache, color="C0", label="cache on")
        time_ax.plot([n, n], [with_cache[-1], without[-1]], "o", color="0.3")
        time_ax.set_xlabel("output length (new tokens)")
        time_ax.set_ylabel("predicted time (s)")
        time_ax.set_title(f"cache off: {model.speedup:.1f}× slower at {n:,} new tokens")
        time_ax.legend(loc="upper left")

        speedups = without / with_cache
        ratio_ax.plot(lengths, model.work_ratio_curve(), color="0.5", ls="--", label="tokens processed (off / on)")
        ratio_ax.plot(lengths, speedups, color="C2", label="predicted time (off / on)")
        ratio_ax.set_yscale("log")
        ratio_ax.set_xlabel("output length (new tokens)")
        ratio_ax.set_ylabel("cache off / cache on (×, log scale)")
        if model.speedup < 0.9 * model.work_ratio:
            ratio_ax.set_title(
                f"{model.work_ratio:.1f}× fewer tokens, only {model.speedup:.1f}× less time:\n"
                "every pass pays the fixed cost, cache or not"
            )
        else:
            ratio_ax.set_title(
                f"{model.work_ratio:.1f}× fewer tokens, {model.speedup:.1f}× less time:\n"
                "with little fixed cost per pass, time follows the work"
            )
        ratio_ax.legend(loc="upper left", fontsize=8)
        c = model.config
        return (
            f"{n:,} new tokens after a prompt of {c.prompt_len:,} tokens: {model.num_passes:,} passes either way. "
            f"Predicted {format_seconds(model.seconds_with_cache)} with the cache, "
            f"{format_seconds(model.seconds_without_cache)} without: {model.speedup:.2f}×, while the "
            f"uncached run processes {model.work_ratio:.1f}× the tokens. The fixed "
            f"{c.ms_per_pass:g} ms per pass is {model.fixed_share_with_cache:.0%} of the cached time."
        )
