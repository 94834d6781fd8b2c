"""Lesson 07's simulator: the KV cache's size as a chain of multipliers, against the model's weights.

    cache bytes = 2 (K and V) x layers x KV heads x head dim x bytes per value x tokens x users

A preset is a real model from the engine's config table (kvcourse.kernels.MODEL_CONFIGS); the
shape controls start at its values and may be changed. The weights are counted by the cost
model for the changed shape (more layers, more weights), stored at the same bytes per value as
the cache. Every number comes from kvcourse.kernels.costs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvcourse.kernels import MODEL_CONFIGS, ModelConfig, costs
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput, check_int, model_shape
from kvcourse.simulators.controls import Preset, bytes_per_value_dropdown, int_control, model_dropdown
from kvcourse.simulators.labels import GB, ModelFact, bytes_per_value_choices, format_bytes

MAX_LAYERS = 200
MAX_KV_HEADS = 128
MAX_HEAD_DIM = 1024
MAX_TOKENS = 10_000_000
MAX_USERS = 100_000
BYTES_PER_VALUE_CHOICES = bytes_per_value_choices(1, 2, 4)  # smallest first
DEFAULT_MODEL = "smollm2-135m"
# Picking a preset puts its own shape into the shape controls; changing the shape keeps the preset's name.
SHAPE_PRESET = Preset(
    "model",
    {
        name: {"num_layers": c.num_layers, "num_kv_heads": c.num_kv_heads, "head_dim": c.head_dim}
        for name, c in MODEL_CONFIGS.items()
    },
    custom=None,
)


@dataclass(frozen=True)
class KVSizeConfig:
    """A real model's preset, its shape as changed by the learner, and the traffic it serves (lesson 07)."""

    model: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    bytes_per_value: int
    num_tokens: int
    num_users: int

    def __post_init__(self) -> None:
        model_shape(self.model)  # an unknown preset name is an input error
        check_int("Layers", self.num_layers, 1, MAX_LAYERS)
        check_int("KV heads", self.num_kv_heads, 1, MAX_KV_HEADS)
        check_int("Head dim (numbers)", self.head_dim, 1, MAX_HEAD_DIM)
        check_int("Bytes per value", self.bytes_per_value, 1, 8)
        check_int("Tokens per user", self.num_tokens, 0, MAX_TOKENS)
        check_int("Users", self.num_users, 1, MAX_USERS)
        query_heads = self.preset.num_heads
        if query_heads % self.num_kv_heads:
            raise InvalidInput(
                f"KV heads must divide {self.model}'s {query_heads} query heads (each KV head serves the same "
                f"number of query heads: 1 is multi-query, {query_heads} is full multi-head attention), "
                f"got {self.num_kv_heads}."
            )

    @classmethod
    def from_preset(
        cls, model: str, bytes_per_value: int = 2, num_tokens: int = 4000, num_users: int = 1
    ) -> KVSizeConfig:
        """A real model's own shape, as its config.json gives it."""
        preset = model_shape(model)
        return cls(
            model, preset.num_layers, preset.num_kv_heads, preset.head_dim, bytes_per_value, num_tokens, num_users
        )

    @property
    def preset(self) -> ModelConfig:
        return MODEL_CONFIGS[self.model]

    @property
    def model_config(self) -> ModelConfig:
        """The preset with this shape: the cost model counts its cache and its weights."""
        return dataclasses.replace(
            self.preset, num_layers=self.num_layers, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim
        )

    @property
    def is_preset_shape(self) -> bool:
        p = self.preset
        return (self.num_layers, self.num_kv_heads, self.head_dim) == (p.num_layers, p.num_kv_heads, p.head_dim)


class KVSize:
    """The cache of num_users conversations of num_tokens each, beside the weights; step() doubles the tokens."""

    def __init__(self, config: KVSizeConfig) -> None:
        self.config = config
        self.model_config = config.model_config
        self.num_tokens = config.num_tokens

    def step(self) -> None:
        """Double the tokens per user (from 0, go to 1)."""
        doubled = max(1, 2 * self.num_tokens)
        if doubled > MAX_TOKENS:
            raise InvalidInput(f"doubling again would pass {MAX_TOKENS:,} tokens per user; press Reset.")
        self.num_tokens = doubled

    def reset(self) -> None:
        self.num_tokens = self.config.num_tokens

    @property
    def factors(self) -> list[tuple[str, int]]:
        """The chain of multipliers, in the order of the formula."""
        c = self.config
        return [
            ("K and V", 2),
            ("layers", c.num_layers),
            ("KV heads", c.num_kv_heads),
            ("head dim", c.head_dim),
            ("bytes per value", c.bytes_per_value),
            ("tokens", self.num_tokens),
            ("users", c.num_users),
        ]

    @property
    def bytes_per_token(self) -> int:
        """One token of one user: K and V in every layer."""
        return costs.kv_bytes_per_token(self.model_config, self.config.bytes_per_value)

    @property
    def cache_bytes(self) -> int:
        return costs.kv_cache_bytes(
            self.model_config, self.num_tokens, self.config.num_users, self.config.bytes_per_value
        )

    @property
    def weight_bytes(self) -> int:
        return costs.weight_bytes(self.model_config, self.config.bytes_per_value)

    @property
    def cache_to_weights(self) -> float:
        """The cache's bytes divided by the weights' bytes."""
        return self.cache_bytes / self.weight_bytes

    @property
    def crossover_tokens(self) -> int:
        """Tokens per user at which the users' cache first weighs as much as the weights."""
        return costs.kv_crossover_tokens(self.model_config, self.config.num_users, self.config.bytes_per_value)

    @property
    def max_context(self) -> int:
        """The longest sequence the preset model reads (its max_position_embeddings)."""
        return self.model_config.max_position_embeddings


def _ratio(ratio: float) -> str:
    """Cache / weights as "4.03×", or as a percentage while the cache is still small."""
    return f"{ratio:.2f}×" if ratio >= 0.1 else f"{ratio:.2%} of them"


class KVSizeView(SimulatorView):
    """A preset menu of real models, the formula's factors as controls, cache against weights (lesson 07)."""

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        bytes_per_value: int = 2,
        num_tokens: int = 4000,
        num_users: int = 1,
        num_layers: int | None = None,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
    ) -> None:
        model_control = model_dropdown(model, ModelFact.ATTENTION, width="300px")
        widths = [width for _, width in BYTES_PER_VALUE_CHOICES]
        if bytes_per_value not in widths:
            raise ValueError(f"bytes_per_value must be one of {tuple(widths)}, got {bytes_per_value!r}")
        preset = MODEL_CONFIGS[model]
        # Typed boxes, not sliders: a slider's handle has no name a screen reader reads (axe-core, issue 32).
        controls = {
            "model": model_control,
            "num_layers": int_control("Layers", num_layers or preset.num_layers),
            "num_kv_heads": int_control("KV heads", num_kv_heads or preset.num_kv_heads),
            "head_dim": int_control("Head dim (numbers)", head_dim or preset.head_dim),
            "bytes_per_value": bytes_per_value_dropdown(bytes_per_value, [w for _, w in BYTES_PER_VALUE_CHOICES]),
            "num_tokens": int_control("Tokens per user", num_tokens),
            "num_users": int_control("Users", num_users),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.0), step_label="Double the tokens")

    def on_change(self, name: str) -> None:
        SHAPE_PRESET.sync(self.controls, name)

    def advance(self, model: KVSize) -> None:
        # The doubled length goes into the Tokens box too, so the next slider move keeps it.
        model.step()
        with self.hold():
            self.controls["num_tokens"].value = model.num_tokens

    def build(self, values: dict[str, Any]) -> KVSize:
        return KVSize(
            KVSizeConfig(
                values["model"],
                values["num_layers"],
                values["num_kv_heads"],
                values["head_dim"],
                values["bytes_per_value"],
                values["num_tokens"],
                values["num_users"],
            )
        )

    def draw(self, model: KVSize) -> str:
        bar_ax, curve_ax = self.axes
        c = model.config
        weights, cache = model.weight_bytes / GB, model.cache_bytes / GB
        # One bar: the weights, then the cache stacked after them; the tick marks where the cache would equal them.
        bar_ax.barh([0], [weights], height=0.5, color="C0", label="weights")
        bar_ax.barh([0], [cache], height=0.5, left=[weights], color="C3", label="KV cache")
        bar_ax.axvline(2 * weights, color="0.2", ls="--", lw=1.2, label="cache = weights")
        bar_ax.set_yticks([])
        bar_ax.set_ylim(-0.5, 1.2)  # room above the bar for the legend
        bar_ax.set_xlim(0, max(weights + cache, 2 * weights) * 1.05)
        bar_ax.set_xlabel("memory (GB)")
        verdict = "outweighs" if model.cache_bytes > model.weight_bytes else "is lighter than"
        bar_ax.set_title(
            f"the cache {verdict} the weights:\n{format_bytes(model.cache_bytes)} against "
            f"{format_bytes(model.weight_bytes)} ({_ratio(model.cache_to_weights)})"
        )
        bar_ax.legend(loc="upper left", fontsize=8)

        crossover = model.crossover_tokens
        top = max(model.num_tokens, crossover, model.max_context, 2) * 2
        tokens = np.unique(np.geomspace(1, top, 200).round())
        users = f"{c.num_users:,} user" + ("s" if c.num_users > 1 else "")
        curve_ax.plot(tokens, model.bytes_per_token * tokens * c.num_users / GB, color="C3", label=f"KV cache, {users}")
        curve_ax.axhline(weights, color="C0", label="weights")
        curve_ax.axvline(crossover, color="0.2", ls="--", lw=1.2, label=f"crossover: {crossover:,} tokens")
        curve_ax.axvline(model.max_context, color="0.5", ls=":", lw=1.5, label=f"max context: {model.max_context:,}")
        if model.num_tokens > 0:
            curve_ax.plot([model.num_tokens], [cache], "o", color="C3", ms=7)
        curve_ax.set_xscale("log")
        curve_ax.set_yscale("log")
        curve_ax.set_xlabel("tokens per user (log scale)")
        curve_ax.set_ylabel("memory (GB, log scale)")
        within = "within" if crossover <= model.max_context else "beyond"
        curve_ax.set_title(
            f"the cache equals the weights at {crossover:,} tokens per user,\n"
            f"{within} the model's {model.max_context:,}-token context"
        )
        curve_ax.legend(loc="upper left", fontsize=8)

        chain = " × ".join(f"{value:,}" for _, value in model.factors)
        shape = "" if c.is_preset_shape else " (shape changed from the preset)"
        too_long = (
            f" {model.num_tokens:,} tokens is longer than the {model.max_context:,} this model reads."
            if model.num_tokens > model.max_context
            else ""
        )
        return (
            f"{c.model}{shape}: {model.bytes_per_token:,} bytes per token. Cache = {chain} = "
            f"{format_bytes(model.cache_bytes)}, against {format_bytes(model.weight_bytes)} of weights. "
            f"With {users} the cache equals the weights at {crossover:,} tokens each.{too_long}"
        )
