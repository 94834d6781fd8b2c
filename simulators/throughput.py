"""Lesson 14's simulator: tokens per second against batch size, and the memory cap on the batch.

One decode step reads the weights once for the whole batch, plus each sequence's own K and V, and
does each sequence's FLOPs (``costs.decode_step_bytes`` and ``costs.decode_step_flops``). On a
card that moves ``bandwidth`` bytes and computes ``flops`` FLOP per second, the step takes about
the longer of the two: the *roofline* bound. Real hardware overlaps reading and computing
imperfectly, so the bound is optimistic, most of all near the ridge where the two are equal.
A fixed overhead per step (launching kernels, Python, sampling) may be added. Throughput is
batch / step time; each user gets one token per step, so the step time is each user's time
per token.

The KV pool caps the batch: ``max_batch`` sequences of the context fit, in whole blocks, as the
engine's pool holds them (tests/simulators/test_sim_throughput.py checks that the engine admits exactly
that many). The cards are ``hardware.HARDWARE``. Serving a trace on the real engine, to measure
paging against reservation-style admission, is ``kvcourse.kernels.serve_trace`` and
``serve_interleaved`` (kernels/measure/serving.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.ticker import LogLocator

from kvcourse.kernels import MODEL_CONFIGS, MemoryBudget, ModelConfig, costs, num_blocks_for_budget
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.checks import InvalidInput, check_choice, check_float, check_int, model_shape
from kvcourse.simulators.controls import bytes_per_value_dropdown, float_control, int_control, model_dropdown
from kvcourse.simulators.hardware import (
    BYTES_PER_VALUE_CHOICES,
    HARDWARE,
    ROOFLINE_PRESET,
    hardware_dropdown,
    kv_budget_on_card,
)
from kvcourse.simulators.labels import GB, ModelFact, format_bytes, log_axes, plain_ticks, plural

DEFAULT_HARDWARE = "H100 SXM"
MAX_BATCH = 1_000_000
MAX_TOKENS = 10_000_000
MAX_BLOCK_SIZE = 1024
MAX_BANDWIDTH_GBS = 1e6
MAX_TFLOPS = 1e5
MAX_GB = 1e5
MAX_OVERHEAD_MS = 1e5


def max_batch(num_blocks: int, context_tokens: int, block_size: int = 16) -> int:
    """Sequences of context_tokens that a pool of num_blocks blocks holds at once (lesson 14)."""
    return num_blocks // ceil_div(context_tokens, block_size)


@dataclass(frozen=True)
class ThroughputConfig:
    """A model on a card of given bandwidth and compute, a KV budget, a context and a batch (lesson 14)."""

    model: str = "smollm2-135m"
    bytes_per_value: int = 2
    bandwidth_gbs: float = HARDWARE[DEFAULT_HARDWARE].bandwidth_gbs
    tflops: float = HARDWARE[DEFAULT_HARDWARE].tflops
    kv_budget_gb: float = 50.0
    context_tokens: int = 4096
    batch_size: int = 1
    overhead_ms: float = 0.0
    block_size: int = 16
    model_config: ModelConfig | None = None  # a shape of one's own (SmolLM2 as loaded); None: the preset's

    def __post_init__(self) -> None:
        model_shape(self.model, self.model_config)  # an unknown preset name is an input error
        check_choice("Bytes per value", self.bytes_per_value, BYTES_PER_VALUE_CHOICES)
        check_float("Memory bandwidth (GB/s)", self.bandwidth_gbs, 1e-3, MAX_BANDWIDTH_GBS)
        check_float("Compute (TFLOP/s)", self.tflops, 1e-6, MAX_TFLOPS)
        check_float("KV budget (GB)", self.kv_budget_gb, 0.0, MAX_GB)
        check_int("Context per sequence (tokens)", self.context_tokens, 1, MAX_TOKENS)
        check_int("Batch (sequences)", self.batch_size, 1, MAX_BATCH)
        check_float("Overhead per step (ms)", self.overhead_ms, 0.0, MAX_OVERHEAD_MS)
        check_int("Block size (tokens)", self.block_size, 1, MAX_BLOCK_SIZE)

    @property
    def shape(self) -> ModelConfig:
        return model_shape(self.model, self.model_config)

    @property
    def kv_budget_bytes(self) -> int:
        return round(self.kv_budget_gb * GB)


class Throughput:
    """Decode steps on the roofline, and the batch the KV pool allows; step() doubles the batch (lesson 14)."""

    def __init__(self, config: ThroughputConfig) -> None:
        self.config = config
        self.batch_size = config.batch_size

    def step(self) -> None:
        """Double the batch."""
        if self.batch_size * 2 > MAX_BATCH:
            raise InvalidInput(f"{MAX_BATCH:,} sequences is the largest batch this simulator counts; press Reset.")
        self.batch_size *= 2

    def reset(self) -> None:
        self.batch_size = self.config.batch_size

    # -- one step at a given batch -------------------------------------------------------------
    @property
    def weight_bytes_per_step(self) -> int:
        """Every weight once per step, whatever the batch (costs.weight_bytes_read_per_pass)."""
        c = self.config
        return costs.weight_bytes_read_per_pass(c.shape, c.bytes_per_value)

    @property
    def kv_bytes_per_sequence(self) -> int:
        """One sequence's K and V at the context, all of which its step reads."""
        c = self.config
        return costs.kv_cache_bytes(c.shape, c.context_tokens, 1, c.bytes_per_value)

    def step_bytes(self, batch: int) -> int:
        c = self.config
        return costs.decode_step_bytes(c.shape, batch, c.context_tokens, c.bytes_per_value)

    def step_flops(self, batch: int) -> int:
        return costs.decode_step_flops(self.config.shape, batch, self.config.context_tokens)

    def memory_seconds(self, batch: int) -> float:
        return self.step_bytes(batch) / (self.config.bandwidth_gbs * GB)

    def compute_seconds(self, batch: int) -> float:
        return self.step_flops(batch) / (self.config.tflops * 1e12)

    def step_seconds(self, batch: int) -> float:
        """The longer of reading and computing, plus the fixed overhead: each user's time per token."""
        return max(self.memory_seconds(batch), self.compute_seconds(batch)) + self.config.overhead_ms / 1e3

    def tokens_per_second(self, batch: int) -> float:
        """Tokens the whole batch writes per second: one per sequence per step."""
        return batch / self.step_seconds(batch)

    def is_memory_bound(self, batch: int) -> bool:
        return self.memory_seconds(batch) > self.compute_seconds(batch)

    @property
    def ridge_batch(self) -> int | None:
        """The smallest batch whose step computes longer than it reads; None: memory-bound at any batch."""
        c = self.config
        return costs.compute_bound_batch(
            c.shape, c.context_tokens, c.tflops * 1e12, c.bandwidth_gbs * GB, c.bytes_per_value
        )

    # -- the memory cap ----------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        """Whole blocks in the KV budget, as the engine sizes its pool (num_blocks_for_budget)."""
        c = self.config
        if c.kv_budget_bytes <= 0:
            return 0
        return num_blocks_for_budget(c.shape, MemoryBudget(c.kv_budget_bytes, 0), c.block_size, c.bytes_per_value)

    @property
    def blocks_per_sequence(self) -> int:
        return ceil_div(self.config.context_tokens, self.config.block_size)

    @property
    def max_batch(self) -> int:
        """The largest batch whose caches fit in the pool at this context."""
        return max_batch(self.num_blocks, self.config.context_tokens, self.config.block_size)

    @property
    def fits(self) -> bool:
        return self.batch_size <= self.max_batch

    @property
    def best_tokens_per_second(self) -> float:
        """The throughput at the memory cap: the most this pool allows at this context."""
        return self.tokens_per_second(self.max_batch) if self.max_batch else 0.0


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
