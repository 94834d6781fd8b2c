"""Lesson 05's simulator: the same generation with the KV cache off and on, step by step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import numpy as np
from matplotlib.ticker import MaxNLocator

from kvcourse.kernel_env import running_headless
from kvcourse.simulators.base import GenerationSteps, SimulatorView, draw_per_step
from kvcourse.simulators.checks import InvalidInput, check_int
from kvcourse.simulators.controls import int_control
from kvcourse.simulators.labels import plural
from kvcourse.simulators.rereading import tokens_processed_without_cache

MAX_TOKENS = 100_000
ANSWER_LENGTHS = (4, 8, 16, 32)  # new tokens lesson 05 times with and without the cache
SHORT_ANSWER_LENGTHS = (4, 16)  # the same, under the test harness


def answer_lengths_to_time() -> list[int]:
    """The answer lengths lesson 05 times, in new tokens: 4 to 32, or 4 and 16 under the test harness."""
    return list(SHORT_ANSWER_LENGTHS if running_headless() else ANSWER_LENGTHS)


def tokens_processed_with_cache(prompt_len: int, num_new_tokens: int) -> list[int]:
    """Tokens pushed through the model per step with a KV cache: the prompt once, then one (lesson 05)."""
    return [prompt_len] + [1] * (num_new_tokens - 1)


@dataclass(frozen=True)
class KVCacheConfig:
    """A prompt, an answer length, and whether the KV cache is on (lesson 05)."""

    prompt_len: int
    num_new_tokens: int
    use_cache: bool

    def __post_init__(self) -> None:
        check_int("Prompt length (tokens)", self.prompt_len, 1, MAX_TOKENS)
        check_int("New tokens", self.num_new_tokens, 1, MAX_TOKENS)
        if not isinstance(self.use_cache, bool):
            raise InvalidInput(f"use_cache must be True or False, got {self.use_cache!r}")


class KVCacheSim(GenerationSteps):
    """Step through a generation; the cache holds one K/V entry per token processed (lesson 05)."""

    config: KVCacheConfig

    @property
    def tokens_per_step(self) -> list[int]:
        c = self.config
        if c.use_cache:
            return tokens_processed_with_cache(c.prompt_len, c.num_new_tokens)
        return tokens_processed_without_cache(c.prompt_len, c.num_new_tokens)

    @property
    def total_tokens_processed(self) -> int:
        return sum(self.tokens_per_step)

    @property
    def cached_entries(self) -> int:
        """Tokens whose K and V sit in the cache after the steps so far (0 when the cache is off)."""
        if not self.config.use_cache or self.num_steps_done == 0:
            return 0
        return self.config.prompt_len + self.num_steps_done - 1

    @property
    def saving(self) -> float:
        """Tokens processed without the cache divided by tokens processed with it."""
        c = self.config
        return sum(tokens_processed_without_cache(c.prompt_len, c.num_new_tokens)) / sum(
            tokens_processed_with_cache(c.prompt_len, c.num_new_tokens)
        )


class KVCacheView(SimulatorView):
    """Turn the cache on and off and compare the work per step (lesson 05)."""

    def __init__(self, prompt_len: int = 20, num_new_tokens: int = 30, use_cache: bool = True) -> None:
        controls = {
            "prompt_len": int_control("Prompt length (tokens)", prompt_len),
            "num_new_tokens": int_control("New tokens", num_new_tokens),
            "use_cache": widgets.Checkbox(value=use_cache, description="KV cache on"),
        }
        super().__init__(controls, num_axes=2, figsize=(11, 4.0), step_label="Next token")

    def build(self, values: dict[str, Any]) -> KVCacheSim:
        model = KVCacheSim(KVCacheConfig(values["prompt_len"], values["num_new_tokens"], bool(values["use_cache"])))
        model.step()
        return model

    def draw(self, model: KVCacheSim) -> str:
        bar_ax, total_ax = self.axes
        c, k = model.config, model.num_steps_done
        steps = np.arange(1, c.num_new_tokens + 1)
        colour = "C2" if c.use_cache else "C3"
        draw_per_step(bar_ax, model.tokens_per_step, k, colour)
        bar_ax.set_xlabel("generation step")
        bar_ax.set_ylabel("tokens processed in that step")
        bar_ax.set_title(
            "cache ON: the prompt once, then 1 token per step"
            if c.use_cache
            else "cache OFF: the whole sequence every step"
        )
        without = np.cumsum(tokens_processed_without_cache(c.prompt_len, c.num_new_tokens))
        with_cache = np.cumsum(tokens_processed_with_cache(c.prompt_len, c.num_new_tokens))
        total_ax.plot(steps, without, color="C3", label="cache off")
        total_ax.plot(steps, with_cache, color="C2", label="cache on")
        done_curve = with_cache if c.use_cache else without
        total_ax.plot([k], [done_curve[k - 1]], "o", color=colour, ms=8)
        total_ax.set_xlabel("generation step")
        total_ax.set_ylabel("tokens processed so far")
        total_ax.set_title(f"total work: cache saves {model.saving:.1f}×")
        total_ax.legend(loc="upper left")
        for ax in (bar_ax, total_ax):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        cache_note = (
            f"the cache now holds K and V for {model.cached_entries} tokens"
            if c.use_cache
            else "nothing is kept between steps"
        )
        return (
            f"Step {k} of {c.num_new_tokens}: processed {plural(model.tokens_per_step[k - 1], 'token')}; "
            f"{cache_note}. Whole answer: {model.total_tokens_processed:,} tokens processed."
        )
