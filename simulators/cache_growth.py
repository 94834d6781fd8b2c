"""Lesson 06's simulator: the bytes one request's KV cache holds, step by step, per layer and in total.

A request's cache has two phases: the prefill step writes every prompt token's keys and values
at once (a burst), then each decode step appends exactly one token's worth (a steady climb).
It never shrinks while the reply is written; when the request ends, all of it is freed. The
bytes come from the cost model (``costs.kv_bytes_per_token``); tests/simulators/test_sim_cache_growth.py
checks them against the engine's own tensors. ``decode_steps_to_time`` sizes the lesson's timing of
decode steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.ticker import MaxNLocator

from kvcourse.kernel_env import running_headless
from kvcourse.kernels import MODEL_CONFIGS, costs
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput, check_choice, check_int
from kvcourse.simulators.controls import bytes_per_value_dropdown, int_control
from kvcourse.simulators.kv_cache import tokens_processed_with_cache
from kvcourse.simulators.labels import bytes_per_value_choices, format_bytes

DEFAULT_MODEL = MODEL_CONFIGS["smollm2-135m"]
BYTES_PER_VALUE_CHOICES = bytes_per_value_choices(4, 2, 1)
PREFILL, DECODE, ENDED = "prefill", "decode", "request ended"

_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0))


def decode_steps_to_time() -> int:
    """How many decode steps lesson 06 times at each position: 12 for a learner, 4 under the test harness."""
    return 4 if running_headless() else 12


def _unit_for(num_bytes: float) -> tuple[str, float]:
    """The decimal unit that keeps ``num_bytes`` at 1 or more (B for anything smaller than 1 kB)."""
    return next((name, size) for name, size in _UNITS if num_bytes >= size or size == 1.0)


@dataclass(frozen=True)
class CacheGrowthConfig:
    """A prompt, an answer length, the bytes per stored number and the model's shape (lesson 06)."""

    prompt_len: int
    num_new_tokens: int
    bytes_per_value: int = 4
    model_config: Any = field(default=DEFAULT_MODEL, repr=False)

    def __post_init__(self) -> None:
        context = self.model_config.max_position_embeddings
        check_int("Prompt length (tokens)", self.prompt_len, 1, context)
        check_int("Answer length (tokens)", self.num_new_tokens, 1, context)
        if self.prompt_len + self.num_new_tokens > context:
            raise InvalidInput(
                f"Prompt length + answer length = {self.prompt_len + self.num_new_tokens:,} tokens, "
                f"more than the model's context of {context:,} positions."
            )
        check_choice("Bytes per number", self.bytes_per_value, BYTES_PER_VALUE_CHOICES)


class CacheGrowth:
    """One request's KV cache, a forward pass at a time, then freed when the request ends (lesson 06).

    ``step()`` runs the next forward pass (the first is the prefill); after the last one it ends
    the request. After pass k (1-based) the cache holds prompt_len + k - 1 tokens: the token a
    pass writes is fed, and so cached, by the next pass.
    """

    def __init__(self, config: CacheGrowthConfig) -> None:
        self.config = config
        self.num_steps_done = 0
        self.ended = False

    # -- per token -------------------------------------------------------------------------
    @property
    def bytes_per_token(self) -> int:
        """K and V of one token in every layer (costs.kv_bytes_per_token)."""
        return costs.kv_bytes_per_token(self.config.model_config, self.config.bytes_per_value)

    @property
    def num_layers(self) -> int:
        return self.config.model_config.num_layers

    @property
    def bytes_per_token_per_layer(self) -> int:
        """K and V of one token in one layer: 2 x KV heads x head dim x bytes per number."""
        return self.bytes_per_token // self.num_layers

    # -- the whole request ----------------------------------------------------------------
    @property
    def tokens_per_step(self) -> list[int]:
        """Tokens each forward pass feeds, and so adds to the cache: the prompt, then one at a time."""
        return tokens_processed_with_cache(self.config.prompt_len, self.config.num_new_tokens)

    @property
    def tokens_held_curve(self) -> list[int]:
        """Tokens whose K and V the cache holds after each forward pass."""
        return [int(t) for t in np.cumsum(self.tokens_per_step)]

    @property
    def bytes_held_curve(self) -> list[int]:
        """Bytes the cache holds after each forward pass, all layers together."""
        return [t * self.bytes_per_token for t in self.tokens_held_curve]

    @property
    def bytes_per_layer_curve(self) -> list[int]:
        """Bytes one layer's cache holds after each forward pass (every layer holds the same)."""
        return [t * self.bytes_per_token_per_layer for t in self.tokens_held_curve]

    @property
    def prefill_bytes(self) -> int:
        """The burst: every prompt token's K and V, written by the first pass."""
        return self.bytes_held_curve[0]

    @property
    def peak_bytes(self) -> int:
        """The most the cache holds: after the last pass, just before the request ends."""
        return self.bytes_held_curve[-1]

    @property
    def prefill_share(self) -> float:
        """How much of the peak the prompt's burst accounts for."""
        return self.prefill_bytes / self.peak_bytes

    # -- now ------------------------------------------------------------------------------
    @property
    def phase(self) -> str:
        """What the last step was: prefill, decode, or the request ending (before any step: prefill next)."""
        if self.ended:
            return ENDED
        return DECODE if self.num_steps_done > 1 else PREFILL

    @property
    def tokens_held(self) -> int:
        if self.ended or self.num_steps_done == 0:
            return 0
        return self.tokens_held_curve[self.num_steps_done - 1]

    @property
    def bytes_held(self) -> int:
        return self.tokens_held * self.bytes_per_token

    @property
    def bytes_per_layer(self) -> int:
        return self.tokens_held * self.bytes_per_token_per_layer

    @property
    def bytes_added_last_step(self) -> int:
        """What the last forward pass added (0 before any step and after the request ended)."""
        if self.ended or self.num_steps_done == 0:
            return 0
        return self.tokens_per_step[self.num_steps_done - 1] * self.bytes_per_token

    def step(self) -> None:
        """The next forward pass; after the last one, end the request and free its cache."""
        if self.ended:
            raise InvalidInput("the request has ended and its cache is freed; press Reset to start again.")
        if self.num_steps_done < self.config.num_new_tokens:
            self.num_steps_done += 1
        else:
            self.ended = True

    def reset(self) -> None:
        self.num_steps_done = 0
        self.ended = False


class CacheGrowthView(SimulatorView):
    """Step a request through prefill, decode and its end; watch the bytes it holds (lesson 06)."""

    restarts_run = True  # Reset starts the request again; the learner's settings stay

    def __init__(
        self, prompt_len: int = 30, num_new_tokens: int = 24, bytes_per_value: int = 4, model_config: Any = None
    ) -> None:
        self.model_config = model_config if model_config is not None else DEFAULT_MODEL
        controls = {
            "prompt_len": int_control("Prompt length (tokens)", prompt_len),
            "num_new_tokens": int_control("Answer length (tokens)", num_new_tokens),
            "bytes_per_value": bytes_per_value_dropdown(bytes_per_value, (4, 2, 1), "Bytes per number", width=None),
        }
        super().__init__(controls, num_axes=2, figsize=(11, 4.0), step_label="Next step")

    def build(self, values: dict[str, Any]) -> CacheGrowth:
        model = CacheGrowth(
            CacheGrowthConfig(
                values["prompt_len"], values["num_new_tokens"], values["bytes_per_value"], self.model_config
            )
        )
        model.step()  # show the prefill burst straight away
        return model

    def draw(self, model: CacheGrowth) -> str:
        total_ax, layer_ax = self.axes
        n, k = model.config.num_new_tokens, model.num_steps_done
        unit, size = _unit_for(model.peak_bytes)
        steps = np.arange(1, n + 1)
        held = np.array(model.bytes_held_curve) / size
        # The whole request in grey, what has happened in colour; the end of the request drops to zero.
        whole_x, whole_y = np.r_[0, steps, n + 1, n + 1.5], np.r_[0, held, 0, 0]
        total_ax.step(whole_x, whole_y, where="post", color="0.8", lw=2)
        if model.ended:
            xs, ys = whole_x, whole_y
        else:
            xs, ys = np.r_[0, steps[:k], k + 1], np.r_[0, held[:k], held[k - 1] if k else 0]
        total_ax.step(xs, ys, where="post", color="C0", lw=2, label="KV cache, all layers")
        total_ax.axvspan(1, 2, color="C1", alpha=0.15, label="prefill: the whole prompt at once")
        total_ax.axvspan(2, n + 1, color="C2", alpha=0.07, label="decode: one token per step")
        total_ax.axvline(n + 1, color="0.4", ls=":", label="request ends: all of it freed")
        total_ax.set_xlim(0, n + 1.5)
        total_ax.set_ylim(0, held[-1] * 1.15)
        total_ax.set_xlabel("forward pass (step); the request ends after the last one")
        total_ax.set_ylabel(f"bytes held ({unit})")
        total_ax.set_title(
            f"a burst of {format_bytes(model.prefill_bytes)}, then +{format_bytes(model.bytes_per_token)} per token"
        )
        total_ax.legend(loc="upper left", fontsize=8)
        total_ax.xaxis.set_major_locator(MaxNLocator(integer=True))

        layer_unit, layer_size = _unit_for(model.bytes_per_layer_curve[-1])
        layers = np.arange(model.num_layers)
        layer_ax.bar(layers, np.full(model.num_layers, model.bytes_per_layer / layer_size), color="C0")
        layer_ax.set_ylim(0, model.bytes_per_layer_curve[-1] / layer_size * 1.15)
        layer_ax.set_xlabel("layer")
        layer_ax.set_ylabel(f"bytes held in that layer ({layer_unit})")
        layer_ax.set_title(
            f"request ended: all {model.num_layers} layers freed"
            if model.ended
            else f"each of {model.num_layers} layers holds {format_bytes(model.bytes_per_layer)}"
        )
        layer_ax.xaxis.set_major_locator(MaxNLocator(integer=True))

        if model.ended:
            return (
                f"The request has ended: its cache (peak {format_bytes(model.peak_bytes)}, "
                f"{model.tokens_held_curve[-1]:,} tokens) is freed, all at once."
            )
        return (
            f"Step {k} of {n} ({model.phase}): added {format_bytes(model.bytes_added_last_step)}; "
            f"the cache holds K and V for {model.tokens_held:,} tokens: {format_bytes(model.bytes_held)} "
            f"in total, {format_bytes(model.bytes_per_layer)} per layer. The next step reads all of it."
        )
