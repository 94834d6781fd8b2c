"""Lesson 24's model: local and global layers, one sequence's cache against the context, and what SmolLM2 measured.

A local layer keeps the keys and values of its last ``window`` tokens, a global one every token's; with
``local_per_global`` local layers before each global one (Gemma 3: 5, gpt-oss: 1), a model of L layers has
L // (ratio + 1) global layers and the rest local (``kvcourse.kernels.attention.backends.sliding``), and one
sequence of n tokens holds global layers x n + local layers x min(n, window) tokens' keys and values
(``kvcourse.kernels.measure.local_global.local_global_layout``, the engine's layout).

Quality cannot be computed from a shape: it is measured. ``WindowCurve`` holds what lesson 24 measured on SmolLM2
with five local layers per global one (perplexity and next-token agreement against the window) and reads it at
any window between the measured ones, on a log scale of the window (perplexity on a log scale too), None outside
them or at another ratio. For another model the simulator reads SmolLM2's curve at the same window in tokens: an
assumption the view states, since nothing here measures a larger model, and SmolLM2 never trained with windows.

The view that draws it is local_global.py.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from kvcourse.kernels import ModelConfig, costs
from kvcourse.kernels.attention.backends.sliding import LOCAL_PER_GLOBAL, local_global_windows
from kvcourse.kernels.measure.local_global import local_global_layout
from kvcourse.simulators.checks import InvalidInput, check_choice, check_int, model_shape
from kvcourse.simulators.labels import bytes_per_value_choices
from kvcourse.simulators.measured_quality import Quality, between

BYTES_PER_VALUE_CHOICES = bytes_per_value_choices(4, 2)
MEASURED_ON = "smollm2-135m"  # the model whose quality the curve holds
MAX_CONTEXT = 1 << 20  # the context box's ceiling: a million tokens
MAX_RATIO = 11


@dataclass(frozen=True)
class WindowCurve:
    """Quality measured on one model, every layer global and at some windows of its local layers."""

    everything: Quality  # every layer global: the model as shipped
    points: Mapping[int, Quality]  # window (tokens) -> what was measured there
    local_per_global: int = LOCAL_PER_GLOBAL  # the pattern it was measured with

    def __post_init__(self) -> None:
        if len(self.points) < 2 or any(w < 1 for w in self.points):
            raise ValueError(f"a curve needs two or more windows of at least 1 token, got {sorted(self.points)}")
        if not all(q.valid for q in (self.everything, *self.points.values())):
            raise ValueError("a perplexity is at least 1 and an agreement between 0 and 1")

    @property
    def windows(self) -> list[int]:
        return sorted(self.points)

    def at(self, window: int) -> Quality | None:
        """The quality at this window, read between the measured windows on a log scale; None outside them."""
        windows = self.windows
        if not windows[0] <= window <= windows[-1]:
            return None
        upper = next(i for i, w in enumerate(windows) if w >= window)
        if windows[upper] == window:
            return self.points[window]
        low, high = self.points[windows[upper - 1]], self.points[windows[upper]]
        t = math.log(window / windows[upper - 1]) / math.log(windows[upper] / windows[upper - 1])
        return between(low, high, t)


# This module's default, measured by benchmarks/bench_local_global.py (float32, the held-out text's 2,938 tokens,
# chapter I of "Alice's Adventures in Wonderland", kernels/measure/texts.py; an Intel Xeon with AVX-512 and AMX;
# benchmarks/results/local_global.json); the lesson passes its own run's curve.
SMOLLM2_CURVE = WindowCurve(
    Quality(17.9929, 1.0),
    {
        1024: Quality(26.5014, 0.7192),
        512: Quality(30.2071, 0.6287),
        256: Quality(35.5287, 0.5756),
        128: Quality(51.9223, 0.482),
        64: Quality(95.1766, 0.3877),
    },
)


@dataclass(frozen=True)
class LocalGlobalConfig:
    """A model's shape, its local layers' window and pattern, the context and the bytes per value."""

    model: str = "llama-3-70b"
    window: int = 1024
    local_per_global: int = LOCAL_PER_GLOBAL
    context: int = 8192
    bytes_per_value: int = 2
    curve: WindowCurve = SMOLLM2_CURVE
    model_config: ModelConfig | None = None  # a shape of one's own; None: the preset's

    def __post_init__(self) -> None:
        model_shape(self.model, self.model_config)  # an unknown preset name is an input error
        check_int("Context (tokens)", self.context, 1, MAX_CONTEXT)
        check_int("Window (tokens)", self.window, 1, MAX_CONTEXT)
        check_int("Local layers per global", self.local_per_global, 1, MAX_RATIO)
        check_choice("Values in (bytes)", self.bytes_per_value, BYTES_PER_VALUE_CHOICES)

    @property
    def shape(self) -> ModelConfig:
        return model_shape(self.model, self.model_config)


class LocalGlobal:
    """One sequence's cache with local and global layers against every layer global; step() halves the window."""

    def __init__(self, config: LocalGlobalConfig) -> None:
        self.start = config
        self.config = config

    def reset(self) -> None:
        self.config = self.start

    @property
    def window(self) -> int:
        return self.config.window

    def step(self) -> int:
        """Halve the window (rounded down, at least 1); return the new window."""
        if self.window == 1:
            raise InvalidInput("the window is 1 token, the smallest there is; press Reset to start again.")
        self.config = dataclasses.replace(self.config, window=self.window // 2)
        return self.window

    def local_layers(self, model: str | None = None) -> int:
        shape = self._shape(model)
        windows = local_global_windows(shape.num_layers, self.window, self.config.local_per_global)
        return sum(w is not None for w in windows)

    def bytes_at(self, context: int, model: str | None = None) -> int:
        """One sequence's cache at ``context`` tokens, its local layers windowed (``model``: another preset)."""
        layout = local_global_layout(self._shape(model), self.window, self.config.bytes_per_value,
                                     self.config.local_per_global)  # fmt: skip
        return layout.bytes_at(context).total

    def all_global_at(self, context: int, model: str | None = None) -> int:
        """One sequence's cache at ``context`` tokens with every layer global, as the model ships."""
        return costs.kv_bytes_per_token(self._shape(model), self.config.bytes_per_value) * context

    def share(self, model: str | None = None) -> float:
        """The cache at the context as a share of every layer global."""
        return self.bytes_at(self.config.context, model) / self.all_global_at(self.config.context, model)

    @property
    def quality(self) -> Quality | None:
        """SmolLM2's measured quality at this window (None outside the measured windows or at another pattern)."""
        curve = self.config.curve
        return curve.at(self.window) if self.config.local_per_global == curve.local_per_global else None

    def _shape(self, model: str | None) -> ModelConfig:
        return self.config.shape if model is None else model_shape(model)


def curve_from_sweep(table: pd.DataFrame) -> WindowCurve:
    """A curve from ``kvcourse.kernels.measure.local_global.window_sweep``'s table (its first row all global)."""
    quality = {
        name: Quality(float(row["perplexity"]), float(row["next-token agreement"])) for name, row in table.iterrows()
    }
    everything = quality.pop("all global")
    return WindowCurve(everything, {int(str(name).split()[-1]): q for name, q in quality.items()})
