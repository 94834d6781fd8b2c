"""Lesson 23's simulator, its view: a latent's rank against its bytes per token and the quality SmolLM2 measured.

The config and the model are latent_rank_model.py (``LatentRankConfig``, ``LatentRank``, ``QualityCurve``,
importable from here too). The left panel is the bytes per token against the rank, beside lesson 16's ways for
the same shape; the right one the next-token agreement against the bytes per token: the lesson's measured
ranks, read between them, and int8 and MQA where they were measured. A change of model keeps the rank's share
of the full rank, so a larger model is read at the same share of SmolLM2's curve.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kvcourse.kernels.model.latent import full_rank
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import model_shape
from kvcourse.simulators.controls import bytes_per_value_dropdown, int_control, model_dropdown
from kvcourse.simulators.labels import ModelFact, format_bytes, log_axes, plain_ticks
from kvcourse.simulators.latent_rank_model import (
    MEASURED_ON,
    SMOLLM2_CURVE,
    LatentRank,
    LatentRankConfig,
    Quality,
    QualityCurve,
    curve_from_table,
    ways_from_table,
)

__all__ = ["LatentRank", "LatentRankConfig", "LatentRankView", "QualityCurve", "curve_from_table", "ways_from_table"]
WAY_COLOURS = {"mha": "0.55", "shipped": "C2", "mqa": "C4", "int8": "C1", "full": "C0"}


class LatentRankView(SimulatorView):
    """A rank box (Step halves it): bytes per token beside lesson 16's ways, and the measured quality (lesson 23)."""

    stepped = {"rank": "rank"}

    def __init__(
        self,
        model: str = MEASURED_ON,
        *,
        rank: int = 192,
        bytes_per_value: int = 2,
        curve: QualityCurve = SMOLLM2_CURVE,
        others: Mapping[str, Quality] | None = None,
    ) -> None:
        self.curve, self.others = curve, dict(others or {})
        self._model_shown = model
        controls = {
            "model": model_dropdown(model, ModelFact.KV_HEADS, width="320px"),
            "rank": int_control("Latent rank (values)", rank, width="240px"),
            "bytes_per_value": bytes_per_value_dropdown(bytes_per_value, (4, 2), "Values in", width="300px"),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 4.2), step_label="Halve the rank")

    def build(self, values: dict[str, Any]) -> LatentRank:
        return LatentRank(LatentRankConfig(**values, curve=self.curve, others=self.others))

    def on_change(self, name: str) -> None:
        if name != "model":
            return
        before, after = full_rank(model_shape(self._model_shown)), full_rank(model_shape(self.controls["model"].value))
        self._model_shown = self.controls["model"].value
        rank = self.controls["rank"].value
        if isinstance(rank, (int, float)) and np.isfinite(rank) and 0 < rank <= before:
            self.controls["rank"].value = max(1, round(rank / before * after))  # the same share of the full rank

    def draw(self, model: LatentRank) -> str:
        self._draw_bytes(self.axes[0], model)
        self._draw_quality(self.axes[1], model)
        return self._summary(model)

    @staticmethod
    def _draw_bytes(ax: Any, m: LatentRank) -> None:
        ranks = np.unique(np.geomspace(1, m.full_rank, 60).round().astype(int))
        ax.plot(ranks, [m.bytes_at(int(r)) for r in ranks], color="C0", label="latent")
        for key, (label, num_bytes) in m.ways().items():
            if key != "full":
                ax.axhline(
                    num_bytes, color=WAY_COLOURS[key], ls="--", lw=1.2, label=f"{label}: {format_bytes(num_bytes)}"
                )
        ax.plot([m.rank], [m.bytes_per_token], "o", color="C3", ms=7, label=f"rank {m.rank:,}")
        log_axes(ax)
        ax.set_xlabel("latent rank (values per token and layer, log scale)")
        ax.set_ylabel("cache bytes per token (log scale)")
        ax.set_title(f"rank {m.rank:,}: {m.bytes_per_token / m.shipped_bytes:.0%} of the cache as shipped")
        ax.legend(loc="lower right", fontsize=8)

    @staticmethod
    def _draw_quality(ax: Any, m: LatentRank) -> None:
        curve = m.config.curve
        between = [float(s) for s in np.linspace(curve.shares[0], curve.shares[-1], 80)]
        for shares, style in ((between, "-"), (curve.shares, "o")):
            points = [(m.bytes_at(max(1, round(s * m.full_rank))), curve.at(s)) for s in shares]
            ax.plot(
                [b for b, _ in points],
                [100 * q.agreement if q else np.nan for _, q in points],
                style,
                color="C0",
                alpha=0.6 if style == "-" else 1.0,
                label=None if style == "-" else f"latent, measured on SmolLM2 at {len(points)} ranks",
            )
        ways = m.ways()
        for key, quality in m.measured_ways().items():
            label, num_bytes = ways[key]
            ax.plot([num_bytes], [100 * quality.agreement], "s", color=WAY_COLOURS[key], ms=7, label=label)
        quality = m.quality
        if quality is not None:
            ax.plot([m.bytes_per_token], [100 * quality.agreement], "o", color="C3", ms=8, label=f"rank {m.rank:,}")
        ax.set_xscale("log", base=2)
        plain_ticks(ax.xaxis)
        ax.set_ylim(0, 105)
        ax.set_xlabel("cache bytes per token (log scale)")
        ax.set_ylabel("next-token agreement (%)")
        ax.set_title(
            f"at {_percent(m.share)} of the full rank: {quality.agreement:.0%} agreement"
            if quality
            else f"{_percent(m.share)} of the full rank: outside the measured ranks"
        )
        ax.legend(loc="lower right", fontsize=8)

    @staticmethod
    def _summary(m: LatentRank) -> str:
        ways = m.ways()
        beside = "; ".join(f"{label} {format_bytes(b)}" for label, b in ways.values())
        text = (
            f"A latent of <b>{m.rank:,}</b> values per token and layer ({_percent(m.share)} of the full rank, "
            f"{m.full_rank:,}): <b>{format_bytes(m.bytes_per_token)}</b> per token. Beside it: {beside}."
        )
        quality = m.quality
        if quality is None:
            return text + " SmolLM2 was not measured at this share of its full rank."
        where = "SmolLM2 measured" if m.config.model == MEASURED_ON else "SmolLM2, at the same share, measured"
        return text + (
            f" {where} perplexity <b>{quality.perplexity:,.1f}</b> and next-token agreement "
            f"<b>{quality.agreement:.0%}</b> (at full rank: {m.config.curve.full.perplexity:,.1f}, 100%)."
        )


def _percent(share: float) -> str:
    """A share as a whole percentage, or "under 1%" where that would read 0%."""
    return f"{share:.0%}" if share >= 0.005 else "under 1%"
