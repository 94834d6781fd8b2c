"""Lesson 27's simulator, its view: tokens, bytes per token, link bandwidth and prefill rate against the seconds to
restore a prompt's K/V and to recompute them, and where the two cross.

The config and the model are tier_model.py (``TierConfig``, ``Tier``, ``MeasuredTier``, importable from here too).
One panel, both axes log scale: the two lines against n, the chosen n marked, the crossover where there is one,
and this machine's measured points (recompute, restore from the device and from the page cache) where given.
"""

from __future__ import annotations

from typing import Any

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import float_control, int_control
from kvcourse.simulators.labels import format_bytes, format_seconds, log_axes
from kvcourse.simulators.tier_model import MeasuredTier, Tier, TierConfig, fitted, measured_from_table

__all__ = ["MeasuredTier", "Tier", "TierConfig", "TierView", "fitted", "measured_from_table"]
SMALLEST = 16  # where the token axis starts


class TierView(SimulatorView):
    """Tokens (Step doubles them), bytes per token, link, prefill rate, a restore's fixed part: seconds each way."""

    stepped = {"tokens": "tokens"}

    def __init__(
        self,
        tokens: int = 2048,
        *,
        bytes_per_token: int = TierConfig.bytes_per_token,
        bandwidth_gbs: float = TierConfig.bandwidth_gbs,
        prefill_tokens_per_s: float = TierConfig.prefill_tokens_per_s,
        fixed_us: float = 0.0,
        measured: MeasuredTier | None = None,
    ) -> None:
        self.measured = measured
        controls = {
            "tokens": int_control("Tokens", tokens, width="200px"),
            "bytes_per_token": int_control("Bytes per token", bytes_per_token, width="230px"),
            "bandwidth_gbs": float_control("Link bandwidth (GB/s)", bandwidth_gbs, width="260px"),
            "prefill_tokens_per_s": float_control("Prefill rate (tokens/s)", prefill_tokens_per_s, width="280px"),
            "fixed_us": float_control("Fixed part of a restore (µs)", fixed_us, width="290px"),
        }
        super().__init__(controls, num_axes=1, figsize=(8.5, 4.4), step_label="Double the tokens")

    def build(self, values: dict[str, Any]) -> Tier:
        return Tier(TierConfig(**values, measured=self.measured))

    def draw(self, model: Tier) -> str:
        ax = self.axes[0]
        measured = model.config.measured
        top = max(model.tokens, SMALLEST, *(measured.tokens if measured else ()))
        ns = sorted({round(SMALLEST * (top / SMALLEST) ** (i / 59)) for i in range(60)} | {model.tokens})
        ax.plot(ns, [model.recompute_s(n) for n in ns], "-", color="C0", label="recompute (prefill)")
        ax.plot(ns, [model.restore_s(n) for n in ns], "-", color="C1", label="restore over the link")
        if measured is not None:
            ax.plot(measured.tokens, measured.recompute_s, "o", color="C0", label="measured here: recompute")
            ax.plot(measured.tokens, measured.device_s, "s", color="C1", label="measured here: restore, device")
            ax.plot(measured.tokens, measured.page_cache_s, "^", color="C2", label="measured here: page cache")
        ax.axvline(model.tokens, color="C3", lw=1.2, ls=":", label=f"{model.tokens:,} tokens")
        cross = model.crossover()
        if cross is not None and cross >= SMALLEST:
            ax.axvline(cross, color="C4", lw=1.2, ls="--", label=f"crossover: {cross:,.0f} tokens")
        log_axes(ax, ybase=10)
        ax.set_xlabel("tokens restored or recomputed (log scale)")
        ax.set_ylabel("seconds (log scale)")
        ax.set_title(self._title(model))
        ax.legend(loc="upper left", fontsize=8)
        return self._summary(model)

    @staticmethod
    def _title(m: Tier) -> str:
        cross = m.crossover()
        if cross is None:
            return "recomputing wins at every n"
        if cross < 1:
            return "restoring wins at every n"
        return f"restoring wins above {cross:,.0f} tokens"

    @staticmethod
    def _summary(m: Tier) -> str:
        c = m.config
        restore, recompute = m.restore_s(), m.recompute_s()
        faster = "restoring" if restore < recompute else "recomputing"
        ratio = max(restore, recompute) / min(restore, recompute)
        return (
            f"<b>{c.tokens:,} tokens</b> of {c.bytes_per_token:,} bytes each "
            f"({format_bytes(c.tokens * c.bytes_per_token)}): "
            f"restore <b>{format_seconds(restore)}</b> over {c.bandwidth_gbs:,.1f} GB/s "
            f"with a fixed {c.fixed_us:,.0f} µs; recompute <b>{format_seconds(recompute)}</b> "
            f"at {c.prefill_tokens_per_s:,.0f} tokens/s. <b>{faster}</b> is "
            f"{ratio:,.1f}x faster here; per token, a prefill takes {m.per_token_ratio():,.2f}x the link's time."
        )
