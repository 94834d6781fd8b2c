"""Lesson 21's second simulator, its view: split a machine's GPUs between prefill and decode, and watch goodput.

The config and the model (prefill as an M/D/1 queue, decode steps on the roofline, the KV transfer between the
pools, goodput as the highest rate meeting both targets) are disaggregation_model.py; ``DisaggregationConfig``
and ``Disaggregation`` (and ``transfer_table``, the bytes a request sends for models of 2026) are importable
from here too. The left panel draws goodput against the number of prefill GPUs, with colocated serving (every
GPU doing both) as a level line; the right panel draws, at the arrival rate set, each mean latency as a share of
its target, apart and colocated.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import Preset, dropdown_control, float_control, int_control
from kvcourse.simulators.disaggregation_model import (
    DEFAULT_CARD,
    LINKS,
    MODELS,
    Disaggregation,
    DisaggregationConfig,
    Latency,
    transfer_table,
)
from kvcourse.simulators.hardware import HARDWARE
from kvcourse.simulators.labels import format_bytes, plain_ticks

__all__ = ["Disaggregation", "DisaggregationConfig", "DisaggregationView", "transfer_table"]

LINK_PRESET = Preset("link", {name: {"link_gbs": gbs} for name, gbs in LINKS.items()})
OFF_SCALE = 10.0  # a latency past ten times its target is drawn at ten times, marked as growing without bound


def _rate(value: float) -> str:
    return f"{value:,.1f}" if value >= 1 else f"{value:,.2f}"


def _ms(seconds: float) -> str:
    return "grows without bound" if math.isinf(seconds) else f"{seconds * 1e3:,.1f} ms"


def _latency(latency: Latency) -> str:
    return f"TTFT {_ms(latency.ttft_s)}, TPOT {_ms(latency.tpot_s)}"


class DisaggregationView(SimulatorView):
    """Goodput against the split of a machine's GPUs between prefill and decode, colocated beside it (lesson 21)."""

    stepped = {"prefill_gpus": "prefill_gpus"}  # Step moves one GPU to prefill: the box shows the new count

    def __init__(
        self,
        model: str = "llama-3.1-8b",
        *,
        card: str = DEFAULT_CARD,
        num_gpus: int = 8,
        prefill_gpus: int = 4,
        arrival_rate: float = 40.0,
        prompt_tokens: int = 2048,
        answer_tokens: int = 256,
        link: str = "InfiniBand NDR",
        link_gbs: float | None = None,
        ttft_target_s: float = 0.5,
        tpot_target_ms: float = 15.0,
    ) -> None:
        link, figures = LINK_PRESET.start(link, {"link_gbs": link_gbs}, "InfiniBand NDR", "link")
        models = [
            (f"{name} ({Disaggregation(DisaggregationConfig(name)).bytes_per_token:,} B/token)", name)
            for name in MODELS
        ]
        links = LINK_PRESET.options(lambda name: f"{name} ({LINKS[name]:g} GB/s)", "custom: type the bandwidth")
        controls = {
            "model": dropdown_control("Model", models, model),
            "card": dropdown_control("GPU", [(name, name) for name in HARDWARE], card),
            "num_gpus": int_control("GPUs", num_gpus),
            "prefill_gpus": int_control("Prefill GPUs", prefill_gpus),
            "arrival_rate": float_control("Arrival rate (requests/s)", arrival_rate),
            "prompt_tokens": int_control("Prompt (tokens)", prompt_tokens),
            "answer_tokens": int_control("Answer (tokens)", answer_tokens),
            "link": dropdown_control("Link", links, link),
            "link_gbs": float_control("Link bandwidth (GB/s)", figures["link_gbs"]),
            "ttft_target_s": float_control("TTFT target (s)", ttft_target_s),
            "tpot_target_ms": float_control("TPOT target (ms)", tpot_target_ms),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 5.0), step_label="Move a GPU to prefill")

    def on_change(self, name: str) -> None:
        # A link fills in its bandwidth; typing another makes it "custom". Fewer GPUs than the prefill pool
        # holds leave half of them prefilling.
        LINK_PRESET.sync(self.controls, name)
        gpus, prefill = self.controls["num_gpus"].value, self.controls["prefill_gpus"].value
        if name == "num_gpus" and isinstance(gpus, (int, float)) and gpus >= 2 and prefill >= gpus:
            self.controls["prefill_gpus"].value = max(1, int(gpus) // 2)

    def build(self, values: dict[str, Any]) -> Disaggregation:
        fields = [name for name in values if name != "link"]
        return Disaggregation(DisaggregationConfig(**{name: values[name] for name in fields}))

    def draw(self, model: Disaggregation) -> str:
        goodput_ax, latency_ax = self.axes
        best = self._draw_goodput(goodput_ax, model)
        self._draw_latency(latency_ax, model)
        return self._summary(model, best)

    def _draw_goodput(self, ax: Any, m: Disaggregation) -> tuple[int, float]:
        c, splits = m.config, m.splits()
        goodput = np.array([m.split_goodput(p) for p in splits])
        best = int(np.argmax(goodput))
        colocated = m.colocated_goodput
        ax.plot(
            splits,
            goodput,
            color="C0",
            lw=2,
            marker="o" if len(splits) <= 32 else None,
            ms=4,
            label="prefill and decode apart",
        )
        ax.axhline(colocated, color="C1", ls="--", lw=1.5, label=f"colocated: {_rate(colocated)} requests/s")
        now = m.split_goodput()
        ax.plot([m.prefill_gpus], [now], "s", color="C3", ms=9, label=f"{m.prefill_gpus:,} prefill GPUs: {_rate(now)}")
        ax.set_xlabel(f"GPUs prefilling (of {c.num_gpus:,}; the rest decode)")
        ax.set_ylabel("goodput (requests/s meeting both targets)")
        if goodput[best] > 0:
            ax.set_title(
                f"most goodput apart: {splits[best]:,} prefill + {c.num_gpus - splits[best]:,} decode GPUs,\n"
                f"{_rate(goodput[best])} requests/s ({self._against(goodput[best], colocated)})"
            )
        else:
            ax.set_title("no split meets both targets\neven at the lowest arrival rate")
        ax.set_ylim(bottom=0, top=max(1e-3, 1.15 * max(float(goodput.max()), colocated)))
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2, fontsize=8, frameon=False)
        ax.grid(alpha=0.3)
        return splits[best], float(goodput[best])

    @staticmethod
    def _against(apart: float, colocated: float) -> str:
        return "colocated meets neither target" if colocated == 0 else f"{apart / colocated:,.2f}x colocated"

    @staticmethod
    def _draw_latency(ax: Any, m: Disaggregation) -> None:
        c = m.config
        rate = c.arrival_rate
        targets = (c.ttft_target_s, c.tpot_target_ms / 1e3)
        runs = {
            f"apart ({m.prefill_gpus:,} + {c.num_gpus - m.prefill_gpus:,})": m.split(rate),
            "colocated": m.colocated(rate),
        }
        x = np.arange(2)
        for i, (label, latency) in enumerate(runs.items()):
            shares = [latency.ttft_s / targets[0], latency.tpot_s / targets[1]]
            shown = [min(share, OFF_SCALE) for share in shares]
            bars = ax.bar(x + (i - 0.5) * 0.38, shown, 0.36, color=f"C{i}", label=label)
            for bar, share in zip(bars, shares, strict=True):
                if share > OFF_SCALE:
                    bar.set_hatch("//")
                    ax.annotate(
                        "unbounded" if math.isinf(share) else f"{share:,.0f}x",
                        (bar.get_x() + 0.18, OFF_SCALE),
                        ha="center",
                        va="bottom",
                        fontsize=8,
                    )
        ax.axhline(1.0, color="k", lw=1.2, ls=":", label="the target")
        ax.set_yscale("log")
        plain_ticks(ax.yaxis)
        ax.set_ylim(min(0.05, ax.get_ylim()[0]), OFF_SCALE * 2)
        ax.set_xticks(x, ["time to first token", "time per output token"])
        ax.set_ylabel("mean latency / its target (log scale)")
        ax.set_title(f"at {_rate(rate)} requests/s: each latency\nas a share of its target (below 1 meets it)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8, frameon=False)
        ax.grid(alpha=0.3, axis="y")

    @staticmethod
    def _summary(m: Disaggregation, best: tuple[int, float]) -> str:
        c = m.config
        cost = (
            f"{c.model}: {m.bytes_per_token:,} bytes of cache per prompt token (16 bits), so a "
            f"{c.prompt_tokens:,}-token prompt's KV cache is <b>{format_bytes(m.transfer_bytes)}</b>, "
            f"{_ms(m.transfer_seconds)} over "
            f"{c.link_gbs:g} GB/s; its prefill takes {_ms(m.prefill_seconds)} on one {c.card}. "
        )
        apart, colocated = m.split(c.arrival_rate), m.colocated(c.arrival_rate)
        now = (
            f"At {_rate(c.arrival_rate)} requests/s on {c.num_gpus:,} GPUs, answers of {c.answer_tokens:,} tokens: "
            f"apart ({m.prefill_gpus:,} prefill + {c.num_gpus - m.prefill_gpus:,} decode) {_latency(apart)}; "
            f"colocated {_latency(colocated)}; targets {c.ttft_target_s:g} s and {c.tpot_target_ms:g} ms. "
        )
        goodput = (
            f"Goodput: <b>{_rate(m.split_goodput())} requests/s</b> at this split, {_rate(best[1])} at "
            f"{best[0]:,} prefill GPUs, {_rate(m.colocated_goodput)} colocated."
        )
        if m.max_batch < 1:
            goodput += f" One sequence's cache does not fit beside the weights on one {c.card}: nothing decodes."
        return cost + now + goodput
