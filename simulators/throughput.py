"""Lesson 14's simulator, its view: tokens per second against batch size, and the memory cap on the batch.

The config and the model (one decode step's bytes, FLOPs and time at a batch, on the roofline, and the
batch the KV pool allows) are throughput_model.py; ``ThroughputConfig``, ``Throughput``, ``max_batch`` and
``MAX_BATCH`` are importable from here too. The left panel draws tokens per second against the batch,
dotted where the batch needs more KV memory than the pool, with the memory cap and the ridge marked (and
the engine's measured rates, when given); the right panel draws one step's time and what it is made of.
``readable_budget`` rounds a KV budget for its box without changing the pool it gives.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from matplotlib.ticker import LogLocator

from kvcourse.kernels import MODEL_CONFIGS
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput
from kvcourse.simulators.controls import bytes_per_value_dropdown, float_control, int_control, model_dropdown
from kvcourse.simulators.hardware import HARDWARE, ROOFLINE_PRESET, hardware_dropdown, kv_budget_on_card
from kvcourse.simulators.labels import GB, ModelFact, format_bytes, log_axes, plain_ticks, plural
from kvcourse.simulators.throughput_model import DEFAULT_HARDWARE, MAX_BATCH, Throughput, ThroughputConfig
from kvcourse.simulators.throughput_model import max_batch as max_batch


# -- the view -------------------------------------------------------------------------------------
def _rate(tokens_per_second: float) -> str:
    return f"{tokens_per_second:,.0f}" if tokens_per_second >= 10 else f"{tokens_per_second:,.2f}"


def _log_axes(ax: Any) -> None:
    """Batch on a log2 axis (at most 9 labelled powers), the other quantity on a log10 axis, every label a
    plain number; the 2s and 5s between powers of ten are labelled only while the axis spans two decades."""
    log_axes(ax, ybase=10)
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=9))
    low, high = ax.get_ylim()
    if high <= 100 * low:
        ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        plain_ticks(ax.yaxis, minor=True)


def readable_budget(gb: float, blocks: Callable[[float], int]) -> float:
    """``gb`` rounded up to the fewest significant figures that leave the pool the same ``blocks(gb)``
    blocks (0.02359296 -> 0.0236), so the box shows a readable figure that is exactly what is simulated."""
    if not (isinstance(gb, (int, float)) and math.isfinite(gb) and gb > 0):
        return gb
    try:
        exact = blocks(gb)
        for digits in range(2, 8):
            scale = 10.0 ** (math.floor(math.log10(gb)) - digits + 1)
            shown = float(f"{math.ceil(gb / scale - 1e-9) * scale:.{digits}g}")
            if blocks(shown) == exact:
                return shown
    except InvalidInput:
        pass
    return gb


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:,.1f} ms" if ms >= 1 else f"{ms * 1e3:,.0f} µs"


class ThroughputView(SimulatorView):
    """Tokens per second against batch size on the roofline, with the KV pool's cap marked (lesson 14)."""

    stepped = {"batch_size": "batch_size"}  # Step changes this box: it shows the new value

    def __init__(
        self,
        hardware: str | None = None,
        *,
        model: str = "smollm2-135m",
        bytes_per_value: int = 2,
        bandwidth_gbs: float | None = None,
        tflops: float | None = None,
        kv_budget_gb: float | None = None,
        context_tokens: int = 4096,
        batch_size: int = 1,
        overhead_ms: float = 0.0,
        measured: dict[int, float] | None = None,
        measured_label: str = "measured",
    ) -> None:
        figures = {"bandwidth_gbs": bandwidth_gbs, "tflops": tflops}
        hardware, figures = ROOFLINE_PRESET.start(hardware, figures, DEFAULT_HARDWARE, "hardware")
        bandwidth_gbs, tflops = figures["bandwidth_gbs"], figures["tflops"]
        card = HARDWARE.get(hardware, HARDWARE[DEFAULT_HARDWARE])
        model_control = model_dropdown(model, ModelFact.PARAMETERS)
        if kv_budget_gb is None:
            kv_budget_gb = round(kv_budget_on_card(card, MODEL_CONFIGS[model], bytes_per_value), 2)
        kv_budget_gb = readable_budget(
            kv_budget_gb,
            lambda gb: (
                Throughput(
                    ThroughputConfig(model, bytes_per_value, bandwidth_gbs, tflops, gb, context_tokens, 1)
                ).num_blocks
            ),
        )
        self.measured = dict(measured or {})  # batch -> tokens/s measured on the engine, drawn as squares
        self.measured_label = measured_label
        self._measured_on = (model, bytes_per_value, bandwidth_gbs, tflops)  # shown only while these hold
        controls = {
            "hardware": hardware_dropdown(hardware, None),
            "bandwidth_gbs": float_control("Memory bandwidth (GB/s)", bandwidth_gbs),
            "tflops": float_control("Compute (TFLOP/s)", tflops),
            "model": model_control,
            "bytes_per_value": bytes_per_value_dropdown(bytes_per_value),
            "kv_budget_gb": float_control("KV budget (GB)", kv_budget_gb),
            "context_tokens": int_control("Context per sequence (tokens)", context_tokens),
            "batch_size": int_control("Batch (sequences)", batch_size),
            "overhead_ms": float_control("Overhead per step (ms)", overhead_ms),
        }
        super().__init__(controls, num_axes=2, figsize=(11.5, 5.2), step_label="Double the batch")

    def on_change(self, name: str) -> None:
        # A card fills in its bandwidth, its compute and what its memory leaves for caches after the
        # weights (again when the weights change); typing a figure makes the hardware "custom".
        ROOFLINE_PRESET.sync(self.controls, name)
        card = self.controls["hardware"].value
        if name in ("hardware", "model", "bytes_per_value") and card in HARDWARE:
            shape = MODEL_CONFIGS[self.controls["model"].value]
            budget = kv_budget_on_card(HARDWARE[card], shape, self.controls["bytes_per_value"].value)
            self.controls["kv_budget_gb"].value = round(budget, 2)

    def build(self, values: dict[str, Any]) -> Throughput:
        return Throughput(
            ThroughputConfig(
                values["model"],
                values["bytes_per_value"],
                values["bandwidth_gbs"],
                values["tflops"],
                values["kv_budget_gb"],
                values["context_tokens"],
                values["batch_size"],
                values["overhead_ms"],
            )
        )

    def draw(self, model: Throughput) -> str:
        rate_ax, time_ax = self.axes
        batches = self._batches(model)
        self._draw_rate(rate_ax, model, batches)
        self._draw_time(time_ax, model, batches)
        return self._summary(model)

    def _batches(self, m: Throughput) -> np.ndarray:
        marks = [m.batch_size, m.max_batch, m.ridge_batch or 0]
        top = min(MAX_BATCH, max(64, 2 * max(marks)))
        return np.unique(np.geomspace(1, top, 160).round().astype(int))

    def _draw_rate(self, ax: Any, m: Throughput, batches: np.ndarray) -> None:
        rates = np.array([m.tokens_per_second(int(b)) for b in batches])
        fits = batches <= m.max_batch
        ax.plot(batches[fits], rates[fits], color="C0", lw=2, label="roofline: fits in the KV pool")
        ax.plot(batches[~fits], rates[~fits], color="C0", lw=1.5, ls=":", label="needs more KV memory than the pool")
        if m.max_batch >= 1:
            ax.axvline(m.max_batch, color="C3", ls="--", lw=1.5, label=f"memory cap: {m.max_batch:,} sequences")
        if m.ridge_batch is not None and m.ridge_batch <= batches[-1]:
            ax.axvline(m.ridge_batch, color="0.5", ls=":", lw=1.5, label=f"compute-bound from {m.ridge_batch:,}")
        if self.measured and self._measured_on == (
            m.config.model,
            m.config.bytes_per_value,
            m.config.bandwidth_gbs,
            m.config.tflops,
        ):
            xs = sorted(self.measured)
            ax.plot(xs, [self.measured[b] for b in xs], "s", color="C2", ms=6, label=self.measured_label)
        ax.plot(
            [m.batch_size],
            [m.tokens_per_second(m.batch_size)],
            "o",
            color="C1" if m.fits else "C3",
            ms=8,
            label=f"batch {m.batch_size:,}" + ("" if m.fits else ": does not fit"),
        )
        _log_axes(ax)
        ax.set_xlabel("batch (sequences decoding together, log scale)")
        ax.set_ylabel("tokens per second, all users (log scale)")
        if m.max_batch >= 1:
            ax.set_title(
                f"memory caps the batch at {m.max_batch:,}:\nat most {_rate(m.best_tokens_per_second)} tokens/s"
            )
        else:
            ax.set_title("not one sequence of this context fits in the KV pool")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2, fontsize=8, frameon=False)
        ax.grid(alpha=0.3)

    @staticmethod
    def _draw_time(ax: Any, m: Throughput, batches: np.ndarray) -> None:
        ms = 1e3
        weights = np.full(len(batches), m.weight_bytes_per_step / (m.config.bandwidth_gbs * GB) * ms)
        kv = np.array([int(b) * m.kv_bytes_per_sequence for b in batches]) / (m.config.bandwidth_gbs * GB) * ms
        math_ms = np.array([m.compute_seconds(int(b)) for b in batches]) * ms
        step = np.array([m.step_seconds(int(b)) for b in batches]) * ms
        ax.plot(batches, step, color="k", lw=2.2, label="one step = each user's time per token")
        ax.plot(batches, weights, color="C0", ls="--", label="reading the weights (once per step)")
        ax.plot(batches, kv, color="C1", ls="--", label="reading every sequence's K and V")
        ax.plot(batches, math_ms, color="C2", ls="--", label="the arithmetic")
        if m.max_batch >= 1:
            ax.axvline(m.max_batch, color="C3", ls="--", lw=1.5)
        _log_axes(ax)
        ax.set_xlabel("batch (sequences, log scale)")
        ax.set_ylabel("milliseconds per step (log scale)")
        one, now = m.step_seconds(1), m.step_seconds(m.batch_size)
        ax.set_title(f"batch {m.batch_size:,}: each user waits {_ms(now)} per token\n({now / one:,.1f}x batch 1)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=1, fontsize=8, frameon=False)
        ax.grid(alpha=0.3)

    @staticmethod
    def _summary(m: Throughput) -> str:
        c, b = m.config, m.batch_size
        if m.ridge_batch is None:
            bound = (
                "memory-bound, as it is at any batch for this context: each sequence's K and V take longer "
                "to read than its arithmetic takes"
            )
        elif m.is_memory_bound(b):
            bound = f"memory-bound; it turns compute-bound from batch {m.ridge_batch:,}"
        else:
            bound = f"compute-bound, as is every batch from {m.ridge_batch:,}"
        step = (
            f"Batch {b:,}: one step reads {format_bytes(m.weight_bytes_per_step)} of weights + "
            f"{format_bytes(b * m.kv_bytes_per_sequence)} of K and V and does "
            f"{m.step_flops(b) / 1e12:,.3g} TFLOP: {_ms(m.memory_seconds(b))} reading vs "
            f"{_ms(m.compute_seconds(b))} of arithmetic: {bound}. "
        )
        rate = (
            f"<b>{_rate(m.tokens_per_second(b))} tokens/s</b> in all; each user gets a token every "
            f"{_ms(m.step_seconds(b))}. "
        )
        if m.max_batch < 1:
            cap = (
                f"The {format_bytes(c.kv_budget_bytes)} KV budget holds {plural(m.num_blocks, 'block')} of "
                f"{c.block_size} tokens; one sequence of {c.context_tokens:,} tokens needs "
                f"{m.blocks_per_sequence:,}: none fits."
            )
        else:
            cap = (
                f"Memory cap: {m.max_batch:,} sequence{'s' if m.max_batch > 1 else ''} of "
                f"{c.context_tokens:,} tokens fit{'' if m.max_batch > 1 else 's'} in {format_bytes(c.kv_budget_bytes)} "
                f"({plural(m.num_blocks, 'block')} of {c.block_size} tokens), "
                f"{_rate(m.best_tokens_per_second)} tokens/s at most."
            )
            if not m.fits:
                cap += f" <b>Batch {b:,} does not fit</b>: it would need {b - m.max_batch:,} more sequences' room."
        return step + rate + cap
