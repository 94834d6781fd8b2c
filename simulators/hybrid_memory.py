"""Lesson 22's simulator, its view: a model of 2026 on one or more cards, what each GPU holds, and whether it fits.

The config and the arithmetic (weights split over the GPUs, KV heads split or replicated, a latent held whole on
every GPU, the largest context that fits) are hybrid_memory_model.py; ``HybridMemoryConfig``, ``HybridMemory`` and
``fit_table`` are importable from here too. The left panel is one GPU's memory as a stacked bar: the weights' share,
then the users' caches in their three parts (growing, bounded by windows, fixed state), against the card. The right
panel draws the same parts against the context per user, on a log axis, with the card's memory and the largest
context that fits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import dropdown_control, int_control
from kvcourse.simulators.hardware import CARDS
from kvcourse.simulators.hybrid_memory_model import (
    CACHE_BYTES_PER_VALUE,
    DEFAULT_CARD,
    MODELS,
    TP_DEGREES,
    HybridMemory,
    HybridMemoryConfig,
    crossover_table,
    fit_table,
    parts_table,
    per_gpu_table,
)
from kvcourse.simulators.labels import GB, format_bytes, plain_ticks

__all__ = [
    "HybridMemory",
    "HybridMemoryConfig",
    "HybridMemoryView",
    "crossover_table",
    "fit_table",
    "parts_table",
    "per_gpu_table",
]

PARTS = (("weights", "C0"), ("growing", "C3"), ("bounded", "C1"), ("state", "C2"))
PART_LABELS = {
    "weights": "weights (this GPU's share)",
    "growing": "cache: grows with every token",
    "bounded": "cache: windows (bounded)",
    "state": "cache: fixed state",
}
KIND_WORDS = {"full": "full", "latent": "latent", "window": "window", "chunked": "chunked", "linear": "linear"}


def _kinds(name: str) -> str:
    layout = HybridMemory(HybridMemoryConfig(name)).layout
    return ", ".join(f"{g.num_layers} {KIND_WORDS[g.kind]}" for g in layout.groups)


def _share(share: float) -> str:
    return "all" if share == 1 else f"1/{round(1 / share)}"


class HybridMemoryView(SimulatorView):
    """One GPU's memory under tensor parallelism: weights and the cache's three parts, against the card (lesson 22)."""

    stepped = {"context_tokens": "context_tokens"}  # Step doubles the context: the box shows the new length

    def __init__(
        self,
        model: str = "gemma-3-27b",
        *,
        card: str = DEFAULT_CARD,
        tp: int = 1,
        context_tokens: int = 32_768,
        num_users: int = 8,
        cache_bytes_per_value: int = 2,
    ) -> None:
        cards = [(f"{name} (sold as {c.memory_gib:g} GB: {c.memory_gib:g} GiB)", name) for name, c in CARDS.items()]
        controls = {
            "model": dropdown_control("Model", [(f"{name} ({_kinds(name)})", name) for name in MODELS], model),
            "card": dropdown_control("GPU", cards, card),
            "tp": dropdown_control("GPUs (tensor parallel)", [(str(tp), tp) for tp in TP_DEGREES], tp),
            "context_tokens": int_control("Context per user (tokens)", context_tokens),
            "num_users": int_control("Users", num_users),
            "cache_bytes_per_value": dropdown_control(
                "Cache bytes per value", list(CACHE_BYTES_PER_VALUE.items()), cache_bytes_per_value
            ),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.6), step_label="Double the context")

    def build(self, values: dict[str, Any]) -> HybridMemory:
        return HybridMemory(HybridMemoryConfig(**values))

    def advance(self, model: HybridMemory) -> None:
        model.step()

    def draw(self, model: HybridMemory) -> str:
        bar_ax, curve_ax = self.axes
        self._draw_bar(bar_ax, model)
        self._draw_curve(curve_ax, model)
        return self._summary(model)

    @staticmethod
    def _draw_bar(ax: Any, m: HybridMemory) -> None:
        c, gpu = m.config, m.gpu
        card = c.card_bytes / GB
        left = 0.0
        for part, colour in PARTS:
            width = getattr(gpu, part) / GB
            ax.barh([0], [width], left=[left], height=0.5, color=colour, label=PART_LABELS[part])
            left += width
        ax.axvline(card, color="k", ls="--", lw=1.5, label=f"the card: {card:,.1f} GB")
        ax.set_xlim(0, max(left, card) * 1.08)
        ax.set_ylim(-0.5, 0.6)
        ax.set_yticks([])
        ax.set_xlabel("memory on one GPU (GB)")
        verdict = "fits" if m.fits else "does not fit"
        ax.set_title(
            f"{c.num_users:,} users at {m.context_tokens:,} tokens {verdict}:\n"
            f"{gpu.total / GB:,.1f} GB per GPU of {card:,.1f} GB"
        )
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8, frameon=False)

    @staticmethod
    def _draw_curve(ax: Any, m: HybridMemory) -> None:
        c = m.config
        largest = m.largest_context
        top = max(m.context_tokens, largest, 1024) * 4
        tokens = np.unique(np.geomspace(1, top, 160).round().astype(int))
        gpus = [m.gpu_at(int(n)) for n in tokens]
        stacks = [[getattr(g, part) / GB for g in gpus] for part, _ in PARTS]
        ax.stackplot(tokens, *stacks, colors=[colour for _, colour in PARTS], alpha=0.85)
        ax.axhline(c.card_bytes / GB, color="k", ls="--", lw=1.5)
        if largest > 0:
            ax.axvline(largest, color="0.3", ls=":", lw=1.5)
        now = m.gpu.total / GB
        ax.plot([max(m.context_tokens, 1)], [now], "o", color="k", ms=6)
        ax.set_xscale("log")
        plain_ticks(ax.xaxis)
        ax.set_xlim(1, top)
        ax.set_ylim(0, max(now, c.card_bytes / GB, stacks[0][-1]) * 1.1)
        ax.set_xlabel("context per user (tokens, log scale)")
        ax.set_ylabel("memory on one GPU (GB)")
        if not m.weights_fit:
            title = "the weights' share alone\nis larger than the card"
        elif largest == 0:
            title = "the users' fixed states leave\nno room for a single token"
        else:
            title = f"the card is full at {largest:,} tokens per user\n(dotted line; dashed: the card)"
        ax.set_title(title)
        ax.grid(alpha=0.3)

    @staticmethod
    def _summary(m: HybridMemory) -> str:
        c, gpu = m.config, m.gpu
        layout = m.layout
        held = "; ".join(f"{kind} layers: {_share(share)}" for kind, share in m.shares.items())
        bpv = c.cache_bytes_per_value
        head = (
            f"{c.model} ({_kinds(c.model)}), cache in {bpv} byte{'s' if bpv > 1 else ''} per value: "
            f"{layout.per_token_bytes:,} bytes per token in the growing part. "
            f"On {c.tp} × {c.card} each GPU holds of each user's cache: {held}. "
        )
        parts = (
            f"Per GPU: weights {format_bytes(gpu.weights)}, cache {format_bytes(gpu.growing)} growing + "
            f"{format_bytes(gpu.bounded)} bounded + {format_bytes(gpu.state)} state = "
            f"<b>{format_bytes(gpu.total)}</b> of {format_bytes(c.card_bytes)}. "
        )
        largest = m.largest_context
        if not m.weights_fit:
            tail = "The weights alone do not fit: add GPUs."
        else:
            tail = (
                f"Largest context for {c.num_users:,} users: <b>{largest:,} tokens each</b>; one user's cache on a "
                f"GPU passes the weights on it at {m.cache_passes_weights:,} tokens."
            )
        return head + parts + tail
