"""Lesson 25's simulator, its view: bits, group size and recent tokens against one sequence's cache, beside the
quality SmolLM2 measured in the engine's formats.

The config and the model are low_bit_model.py (``LowBitConfig``, ``LowBit``, ``MeasuredFormats``, importable from
here too). The left panel is one sequence's cache against the context, for the chosen model and for SmolLM2: the
plain cache (dashed) and the low-bit one with its scales and its newest tokens in full precision (solid), which is
why the solid line starts flat. The right one is SmolLM2's measured perplexity against the bytes per token at the
held-out text's length, one point per engine format, with this setting's bytes as a line.
"""

from __future__ import annotations

from typing import Any

from matplotlib.ticker import FuncFormatter

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import dropdown_control, int_control
from kvcourse.simulators.labels import format_bytes, log_axes
from kvcourse.simulators.low_bit_model import (
    BITS_CHOICES,
    BYTES_PER_VALUE_CHOICES,
    GROUP_CHOICES,
    MEASURED_ON,
    MODEL_CHOICES,
    SMOLLM2_FORMATS,
    LowBit,
    LowBitConfig,
    MeasuredFormats,
    formats_from_sweep,
)

__all__ = ["LowBit", "LowBitConfig", "LowBitView", "MeasuredFormats", "formats_from_sweep"]
SMALLEST_CONTEXT = 16  # where the left panel's context axis starts
LABELS = {"as computed": "own K/V", "int8": "int8", "fp8": "FP8", "fp8, scale 1.0": "FP8, scale 1.0",
          "kivi2": "2-bit"}  # fmt: skip


class LowBitView(SimulatorView):
    """Bits (Step halves them), group, recent tokens, context: the cache, and the quality measured on SmolLM2."""

    stepped = {"bits": "bits"}

    def __init__(
        self,
        model: str = "qwen3-32b",
        *,
        bits: int = 16,
        group: int = 32,
        residual: int = 32,
        context: int = 32_768,
        bytes_per_value: int = 2,
        measured: MeasuredFormats = SMOLLM2_FORMATS,
    ) -> None:
        self.measured = measured
        controls = {
            "model": dropdown_control("Model", [(m, m) for m in MODEL_CHOICES], model, width="260px"),
            "bits": dropdown_control("Bits per value", BITS_CHOICES, bits, width="250px"),
            "group": dropdown_control("Group", GROUP_CHOICES, group, width="260px"),
            "residual": int_control("Recent tokens kept (tokens)", residual, width="270px"),
            "context": int_control("Context (tokens)", context, width="240px"),
            "bytes_per_value": dropdown_control(
                "Recent tokens in", BYTES_PER_VALUE_CHOICES, bytes_per_value, width="300px"
            ),  # fmt: skip
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.2), step_label="Halve the bits")

    def build(self, values: dict[str, Any]) -> LowBit:
        return LowBit(LowBitConfig(**values, measured=self.measured))

    def draw(self, model: LowBit) -> str:
        self._draw_cache(self.axes[0], model)
        self._draw_quality(self.axes[1], model)
        return self._summary(model)

    @staticmethod
    def _draw_cache(ax: Any, m: LowBit) -> None:
        context = m.config.context
        low = min(SMALLEST_CONTEXT, context)
        contexts = sorted({round(low * (context / low) ** (i / 59)) for i in range(60)})
        for colour, name in zip(("C0", "C2"), dict.fromkeys([m.config.model, MEASURED_ON]), strict=False):
            ax.plot(contexts, [m.plain_at(n, name) for n in contexts], "--", color=colour,
                    label=f"{name}, {8 * m.config.bytes_per_value} bits, no scales")  # fmt: skip
            ax.plot(contexts, [m.bytes_at(n, name) for n in contexts], "-", color=colour,
                    label=f"{name}, {m.bits} bits with scales and recent tokens")  # fmt: skip
        log_axes(ax, ybase=4)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: format_bytes(value)))
        ax.set_xlabel("context (tokens, log scale)")
        ax.set_ylabel("one sequence's cache (bytes, log scale)")
        ax.set_title(f"{m.config.model} at {context:,} tokens: {m.share():.0%} of the plain cache")
        ax.legend(loc="upper left", fontsize=8)

    @staticmethod
    def _draw_quality(ax: Any, m: LowBit) -> None:
        measured = m.config.measured
        for i, (name, (per_token, quality)) in enumerate(measured.points.items()):
            ax.plot([per_token], [quality.perplexity], "o", color=f"C{i}", ms=7,
                    label=f"{LABELS.get(name, name)}: {quality.perplexity:.1f}")  # fmt: skip
        here = m.bytes_at(measured.tokens, MEASURED_ON) / measured.tokens
        ax.axvline(here, color="C3", lw=1.5, ls=":", label=f"this setting: {here:,.0f} bytes per token")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"SmolLM2's bytes per token at {measured.tokens:,} tokens (log scale)")
        ax.set_ylabel("perplexity on the held-out text")
        name = m.measured_format
        ax.set_title(f"measured in this format: {LABELS[name]}" if name else "not measured at this setting")
        ax.legend(loc="upper right", fontsize=8)

    @staticmethod
    def _summary(m: LowBit) -> str:
        c = m.config
        if c.bits == 16:
            how = f"in 16 bits (no groups: a group of {c.group} and {c.residual:,} recent tokens apply below 16 bits)"
            per_token = f"{m.per_token():,} bytes per token, no scales"
        else:
            recent = f"at least {c.residual:,} recent tokens in {8 * c.bytes_per_value} bits"
            how = f"in {c.bits} bits, groups of {c.group}, {recent}"
            per_token = f"{m.per_token():,} bytes per token with the scales, plus the recent tokens"
        text = (
            f"One sequence of <b>{c.model}</b> at {c.context:,} tokens {how}: "
            f"<b>{format_bytes(m.bytes_at(c.context))}</b> ({per_token}), against "
            f"{format_bytes(m.plain_at(c.context))} plain ({m.share():.0%})."
        )
        quality = m.quality
        if quality is None:
            return text + (
                " SmolLM2 was not measured at this setting: the engine's 2-bit cache has groups of 32 and keeps 32 "
                "recent tokens; its int8 and FP8 caches are the other points."
            )
        where = "" if c.model == MEASURED_ON else " (measured on SmolLM2, not on this model)"
        return text + (
            f" SmolLM2 measured perplexity <b>{quality.perplexity:.1f}</b> and next-token agreement "
            f"<b>{quality.agreement:.0%}</b> in this format{where}."
        )
