"""Lesson 24's simulator, its view: a window and a local:global ratio against one sequence's cache, beside the
quality SmolLM2 measured at that window.

The config and the model are local_global_model.py (``LocalGlobalConfig``, ``LocalGlobal``, ``WindowCurve``,
importable from here too). The left panel is one sequence's cache against the context, for the chosen model and
for SmolLM2, every layer global (dashed) and with local layers (solid): the global layers' part grows with the
context, the local layers' part stops at the window. The right one is SmolLM2's measured perplexity against the
window, read between the measured windows (said so), with the model as shipped as a line.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.ticker import FuncFormatter

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import bytes_per_value_dropdown, int_control, model_dropdown
from kvcourse.simulators.labels import ModelFact, format_bytes, log_axes, plain_ticks
from kvcourse.simulators.local_global_model import (
    MEASURED_ON,
    SMOLLM2_CURVE,
    LocalGlobal,
    LocalGlobalConfig,
    Quality,
    WindowCurve,
    curve_from_sweep,
)

__all__ = ["LocalGlobal", "LocalGlobalConfig", "LocalGlobalView", "Quality", "WindowCurve", "curve_from_sweep"]
SMALLEST_CONTEXT = 64  # where the left panel's context axis starts


class LocalGlobalView(SimulatorView):
    """A window box (Step halves it), the local:global ratio, the context: the cache, and the measured quality."""

    stepped = {"window": "window"}

    def __init__(
        self,
        model: str = "llama-3-70b",
        *,
        window: int = 1024,
        local_per_global: int = 5,
        context: int = 8192,
        bytes_per_value: int = 2,
        curve: WindowCurve = SMOLLM2_CURVE,
    ) -> None:
        self.curve = curve
        controls = {
            "model": model_dropdown(model, ModelFact.CONTEXT, width="320px"),
            "window": int_control("Window (tokens)", window, width="220px"),
            "local_per_global": int_control("Local layers per global", local_per_global, width="250px"),
            "context": int_control("Context (tokens)", context, width="240px"),
            "bytes_per_value": bytes_per_value_dropdown(bytes_per_value, (4, 2), "Values in", width="300px"),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.2), step_label="Halve the window")

    def build(self, values: dict[str, Any]) -> LocalGlobal:
        return LocalGlobal(LocalGlobalConfig(**values, curve=self.curve))

    def draw(self, model: LocalGlobal) -> str:
        self._draw_cache(self.axes[0], model)
        self._draw_quality(self.axes[1], model)
        return self._summary(model)

    @staticmethod
    def _draw_cache(ax: Any, m: LocalGlobal) -> None:
        context = m.config.context
        contexts = np.unique(np.geomspace(min(SMALLEST_CONTEXT, context), context, 60).round().astype(int))
        names = dict.fromkeys([m.config.model, MEASURED_ON])  # the chosen model first, SmolLM2 once
        for colour, name in zip(("C0", "C2"), names, strict=False):
            ax.plot(contexts, [m.all_global_at(int(n), name) for n in contexts], "--", color=colour,
                    label=f"{name}, every layer global")  # fmt: skip
            ax.plot(contexts, [m.bytes_at(int(n), name) for n in contexts], "-", color=colour,
                    label=f"{name}, {m.local_layers(name)} local layers")  # fmt: skip
        ax.axvline(m.window, color="0.6", lw=1, ls=":", label=f"window: {m.window:,} tokens")
        log_axes(ax, ybase=4)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: format_bytes(value)))
        ax.set_xlabel("context (tokens, log scale)")
        ax.set_ylabel("one sequence's cache (bytes, log scale)")
        ax.set_title(f"{m.config.model} at {context:,} tokens: {m.share():.0%} of every layer global")
        ax.legend(loc="upper left", fontsize=8)

    @staticmethod
    def _draw_quality(ax: Any, m: LocalGlobal) -> None:
        curve = m.config.curve
        windows = curve.windows
        between = np.unique(np.geomspace(windows[0], windows[-1], 80).round().astype(int))
        read = [curve.at(int(w)) for w in between]
        ax.plot(between, [q.perplexity if q else np.nan for q in read], "-", color="C0", alpha=0.6,
                label="read between the measured windows")  # fmt: skip
        ax.plot(windows, [curve.points[w].perplexity for w in windows], "o", color="C0",
                label=f"measured on SmolLM2, {curve.local_per_global} local layers per global")  # fmt: skip
        ax.axhline(curve.everything.perplexity, color="0.4", ls="--", lw=1.2,
                   label=f"every layer global: {curve.everything.perplexity:.1f}")  # fmt: skip
        quality = m.quality
        if quality is not None:
            ax.plot([m.window], [quality.perplexity], "o", color="C3", ms=8, label=f"window {m.window:,}")
        ax.set_xscale("log", base=2)
        plain_ticks(ax.xaxis)
        ax.set_xlabel("window of the local layers (tokens, log scale)")
        ax.set_ylabel("perplexity on the held-out text")
        ax.set_title(
            f"window {m.window:,}: perplexity {quality.perplexity:.1f} on SmolLM2"
            if quality
            else "not measured at this window or ratio"
        )
        ax.legend(loc="upper right", fontsize=8)

    @staticmethod
    def _summary(m: LocalGlobal) -> str:
        c = m.config
        text = (
            f"One sequence of <b>{c.model}</b> at {c.context:,} tokens: <b>{format_bytes(m.bytes_at(c.context))}</b> "
            f"with {m.local_layers()} local layers of a {m.window:,}-token window, against "
            f"{format_bytes(m.all_global_at(c.context))} with every layer global ({m.share():.0%})."
        )
        quality = m.quality
        if quality is None:
            return text + " SmolLM2 was not measured at this window or at this ratio of local to global layers."
        where = "" if c.model == MEASURED_ON else " (SmolLM2's curve at the same window: an assumption for this model)"
        return text + (
            f" SmolLM2 measured perplexity <b>{quality.perplexity:.1f}</b> and next-token agreement "
            f"<b>{quality.agreement:.0%}</b> at about this window{where}; every layer global: "
            f"{c.curve.everything.perplexity:.1f}. SmolLM2 never trained with windows, so this is an upper bound "
            "on the price."
        )
