"""Lesson 16's simulator, its view: chapter 003's ways to shrink the cache as switches over one memory budget.

The config and the model (what one user's cache costs with each technique on, and how many users fit)
are shrink_model.py; ``KVHeads``, ``ShrinkConfig``, ``Shrink`` and ``TECHNIQUES`` are importable from here
too. The view's left panel shows the users that fit at each stage, nothing on first; its right panel the
users that fit against the context per user, with nothing on and now; its status line gives the three
numbers the lesson compares: bytes per token, users at the context, and the longest context for one user.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import numpy as np

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import (
    bytes_per_value_dropdown,
    dropdown_control,
    float_control,
    int_control,
    model_dropdown,
)
from kvcourse.simulators.labels import ModelFact, format_bytes, log_axes
from kvcourse.simulators.shrink_model import (
    KV_HEAD_CHOICES,
    LESSON_09_FILLED,
    MAX_TOKENS,
    KVHeads,
    Shrink,
    ShrinkConfig,
)
from kvcourse.simulators.shrink_model import TECHNIQUES as TECHNIQUES


class ShrinkView(SimulatorView):
    """Chapter 003's techniques as switches: bytes per token, users that fit, the longest context (lesson 16)."""

    def __init__(
        self,
        model: str = "smollm2-135m",
        *,
        kv_budget_gb: float = 1.0,
        context_tokens: int = 512,
        bytes_per_value: int = 2,
        kv_heads: KVHeads = KVHeads.MHA,
        int8: bool = False,
        paging: bool = False,
        prefix: bool = False,
        prefix_tokens: int = 0,
        window: bool = False,
        window_tokens: int = 4096,
        reservation_filled: float = LESSON_09_FILLED,
    ) -> None:
        self.reservation_filled = reservation_filled
        tick = dict(indent=False, layout=widgets.Layout(width="auto", margin="2px 6px 2px 12px"))
        controls = {
            "model": model_dropdown(model, ModelFact.KV_HEADS, width="300px"),
            "bytes_per_value": bytes_per_value_dropdown(bytes_per_value, (4, 2), "Values in", width="300px"),
            "kv_budget_gb": float_control("KV memory (GB)", kv_budget_gb),
            "context_tokens": int_control("Context per user (tokens)", context_tokens, width="250px"),
            "kv_heads": dropdown_control("Key/value heads", KV_HEAD_CHOICES, KVHeads(kv_heads), width="330px"),
            "int8": widgets.Checkbox(value=int8, description="int8 keys and values (scales counted)", **tick),
            "paging": widgets.Checkbox(value=paging, description="paging", **tick),
            "prefix": widgets.Checkbox(value=prefix, description="prefix caching", **tick),
            "prefix_tokens": int_control("Shared prefix (tokens)", prefix_tokens),
            "window": widgets.Checkbox(value=window, description="sliding window", **tick),
            "window_tokens": int_control("Window (tokens)", window_tokens, width="190px"),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.4), step_label="Next technique")

    def build(self, values: dict[str, Any]) -> Shrink:
        return Shrink(ShrinkConfig(**values, reservation_filled=self.reservation_filled))

    def advance(self, model: Shrink) -> None:
        model.step()
        with self.hold():  # the controls follow the model: one redraw, by step()
            for name in ("kv_heads", "int8", "paging", "prefix", "window"):
                self.controls[name].value = getattr(model.config, name)

    def draw(self, model: Shrink) -> str:
        self._draw_stages(self.axes[0], model)
        self._draw_curve(self.axes[1], model)
        return self._summary(model)

    @staticmethod
    def _draw_stages(ax: Any, m: Shrink) -> None:
        stages = m.stages()
        users = [max(s.users_fit, 0) for _, s in stages]
        y = np.arange(len(stages))[::-1]
        ax.barh(y, [max(u, 0.8) for u in users], color=["0.6"] + ["C0"] * (len(stages) - 1), height=0.6)
        for yi, u, (label, s) in zip(y, users, stages, strict=True):
            ax.text(
                0.02,
                yi + 0.38,
                f"{label}: {format_bytes(s.bytes_per_token)} per token",
                fontsize=8,
                transform=ax.get_yaxis_transform(),
                va="bottom",
            )
            ax.text(max(u, 0.8), yi, f" {u:,}", va="center", fontsize=9)
        ax.set_xscale("log")
        ax.set_yticks([])
        ax.set_ylim(-0.6, len(stages))
        ax.set_xlim(0.5, max(users + [2]) * 8)
        ax.set_xlabel(f"users that fit at {m.config.context_tokens:,} tokens each (log scale)")
        num_on = len(stages) - 1
        if num_on == 0:
            ax.set_title(f"nothing on: {users[0]:,} users fit; press Next technique")
        else:
            gain = f"{users[-1] / users[0]:,.1f}x the users" if users[0] else f"{users[-1]:,} users instead of none"
            ax.set_title(f"{num_on} technique{'s' if num_on > 1 else ''} on: {gain}")

    @staticmethod
    def _draw_curve(ax: Any, m: Shrink) -> None:
        c = m.config
        top = max(64 * c.context_tokens, 16 * c.window_tokens if c.window else 0, 4 * (m.longest_context or 0))
        top = min(max(top, 1024), MAX_TOKENS * 10)
        exact = [c.context_tokens, c.window_tokens, m.longest_context or 1, Shrink(c.nothing_on).longest_context or 1]
        contexts = np.unique(np.concatenate([np.geomspace(1, top, 200).round().astype(int), exact]))
        contexts = contexts[(contexts >= 1) & (contexts <= top)]
        for label, model, colour in (("nothing on", Shrink(c.nothing_on), "0.5"), ("now", m, "C0")):
            users = np.array([model.users_at(int(n)) for n in contexts])
            keep = users >= 1
            ax.step(contexts[keep], users[keep], where="post", color=colour, label=label)
        if m.users_fit >= 1:
            ax.plot(
                [c.context_tokens],
                [m.users_fit],
                "o",
                color="C3",
                ms=7,
                label=f"{m.users_fit:,} users at {c.context_tokens:,} tokens",
            )
        if m.longest_context:
            ax.axvline(m.longest_context, color="C3", ls=":", label=f"one user at most: {m.longest_context:,} tokens")
        if c.window:
            ax.axvline(c.window_tokens, color="C2", ls="--", label=f"window: {c.window_tokens:,} tokens kept")
        log_axes(ax)
        ax.set_xlim(0.7, top * 1.6)
        ax.set_xlabel("context per user (tokens, log scale)")
        ax.set_ylabel("users that fit at once (log scale)")
        ax.set_title("a window flattens the curve; the rest lift it" if c.window else "each technique lifts the curve")
        max_context = c.base_shape.max_position_embeddings
        if max_context < top:
            ax.axvline(max_context, color="0.3", ls="-.", lw=1, label=f"the model reads at most {max_context:,}")
        ax.legend(loc="lower left", fontsize=8)

    @staticmethod
    def _summary(m: Shrink) -> str:
        c, base = m.config, Shrink(m.config.nothing_on)
        window = (
            f"unlimited (it keeps the last {c.window_tokens:,})"
            if c.window and m.longest_context is None
            else f"{m.longest_context:,} tokens"
        )
        if m.longest_context and m.longest_context > c.base_shape.max_position_embeddings:
            window += f" of memory (the model reads at most {c.base_shape.max_position_embeddings:,})"
        text = (
            f"{format_bytes(m.budget_bytes)} for caches. Bytes per token: <b>{format_bytes(m.bytes_per_token)}</b> "
            f"(nothing on: {format_bytes(base.bytes_per_token)}). Users at {c.context_tokens:,} tokens: "
            f"<b>{m.users_fit:,}</b> (nothing on: {base.users_fit:,}). Longest context for one user: "
            f"<b>{window}</b> (nothing on: {base.longest_context:,})."
        )
        nxt = m.next_technique
        return text + (f" Next technique: {nxt}." if nxt else " Every technique is on.")
