"""This machine's two floors under a forward pass, measured once: peak FLOP/s and memory bandwidth (lesson 01).

A pass cannot finish before its arithmetic is done at the chip's peak rate (the *compute floor*), nor
before its bytes have streamed from memory at the memory's rate (the *memory floor*). The longer of the
two binds. Their ratio, peak FLOP/s over bytes/s, is the *ridge*: a pass that does fewer FLOPs per byte it
reads than the ridge waits on memory, one that does more waits on arithmetic. Lesson 01 draws the roofline
once for one token; lesson 14 reuses it for a batch, which reads the weights once for all its sequences.

The two rates are measured in well under a second on purpose: one large matrix product (the best of a
few) and one large copy (the best of a few), so they are a lower bound on what the machine can do, not a
benchmark. Nothing here imports the model, the engine, the simulators or the course.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

__all__ = ["Roofline", "best_seconds", "copy_bandwidth", "last_level_cache_bytes", "measure", "peak_flops"]
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")  # Linux's description of the first core's caches

Bound = Literal["compute", "memory"]


def best_seconds(work: Callable[[], object], repeats: int = 3, device: str | torch.device = "cpu") -> float:
    """The fastest of ``repeats`` timed calls of ``work`` after one untimed warm-up call (lesson 01)."""
    device = torch.device(device)
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    work()
    best = math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        work()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def peak_flops(
    dtype: torch.dtype = torch.float32, size: int = 1024, repeats: int = 3, device: str | torch.device = "cpu"
) -> float:
    """FLOP/s of one ``size`` x ``size`` matrix product in ``dtype``, the best of ``repeats`` (2·size³ FLOPs)."""
    if size < 1:
        raise ValueError(f"size must be a positive number of rows, got {size}")
    if not dtype.is_floating_point:
        raise ValueError(f"peak FLOP/s are measured in a floating-point dtype, got {dtype}")
    device = torch.device(device)
    a = torch.randn(size, size, device=device).to(dtype)  # (size, size)
    b = torch.randn(size, size, device=device).to(dtype)  # (size, size)
    out = torch.empty(size, size, dtype=dtype, device=device)
    seconds = best_seconds(lambda: torch.matmul(a, b, out=out), repeats, device)
    return 2 * size**3 / seconds


def copy_bandwidth(nbytes: int = 128 * 2**20, repeats: int = 3, device: str | torch.device = "cpu") -> float:
    """Bytes/s of copying one ``nbytes`` tensor into another, the best of ``repeats``.

    Counted as STREAM's copy counts it: ``nbytes`` read plus ``nbytes`` written per copy. ``nbytes`` should
    be far larger than the last-level cache (the default, 128 MiB, is four times a 32 MiB L3), or the copy
    measures the cache instead of memory.
    """
    if nbytes < 1:
        raise ValueError(f"nbytes must be a positive number of bytes, got {nbytes}")
    device = torch.device(device)
    source = torch.ones(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    seconds = best_seconds(lambda: target.copy_(source), repeats, device)
    return 2 * nbytes / seconds


@dataclass(frozen=True)
class Roofline:
    """A machine's peak arithmetic rate and memory bandwidth, and the floors they put under a pass (lesson 01)."""

    flops_per_second: float
    bytes_per_second: float

    def __post_init__(self) -> None:
        for name in ("flops_per_second", "bytes_per_second"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive, finite rate, got {value!r}")

    @property
    def ridge_flops_per_byte(self) -> float:
        """FLOPs per byte read at which the compute floor equals the memory floor."""
        return self.flops_per_second / self.bytes_per_second

    def compute_seconds(self, flops: float) -> float:
        """The least time ``flops`` of arithmetic take at the peak rate."""
        return _nonnegative("flops", flops) / self.flops_per_second

    def memory_seconds(self, nbytes: float) -> float:
        """The least time reading ``nbytes`` from memory takes at the measured bandwidth."""
        return _nonnegative("bytes", nbytes) / self.bytes_per_second

    def floor_seconds(self, flops: float, nbytes: float) -> float:
        """The least time a pass of ``flops`` that reads ``nbytes`` takes: the longer of its two floors."""
        return max(self.compute_seconds(flops), self.memory_seconds(nbytes))

    def binding(self, flops: float, nbytes: float) -> Bound:
        """Which floor is the higher one for this pass: "compute" or "memory" (a tie counts as compute)."""
        return "compute" if self.compute_seconds(flops) >= self.memory_seconds(nbytes) else "memory"

    def nearer(self, seconds: float, flops: float, nbytes: float) -> Bound:
        """Which floor a measured pass of ``seconds`` lies nearer, on a log scale: the one that sets its time.

        Unlike "the pass is slower than the higher floor", this holds when a pass beats a floor measured a little
        too low (a copy at a busy moment, weights the caches hold), since the floors lie far apart."""
        compute, memory = self.compute_seconds(flops), self.memory_seconds(nbytes)
        _nonnegative("seconds", seconds)
        return "compute" if abs(math.log(seconds / compute)) <= abs(math.log(seconds / memory)) else "memory"

    def pass_note(self, seconds: float, flops: float, nbytes: float) -> str:
        """One sentence on a measured pass against the higher floor: how far above it, or why it is below."""
        floor, bound = self.floor_seconds(flops, nbytes), self.binding(flops, nbytes)
        if seconds >= floor:
            return (
                f"the pass took {seconds / floor:.1f}x the {bound} floor: the floor assumes one large product's "
                "arithmetic and one long copy's reading, while a pass runs many small operations, one after another"
            )
        cache = last_level_cache_bytes()
        held = (
            f"; this CPU's last-level cache ({cache / 2**20:,.0f} MiB) can hold {min(1.0, cache / nbytes):.0%} of the "
            f"{nbytes / 1e6:,.0f} MB the pass reads, and what it holds arrives faster than from memory"
            if cache and bound == "memory"
            else ""
        )
        beat = f"the pass beat the {bound} floor by {1 - seconds / floor:.0%}"
        return f"{beat}: a floor is only as low as the measurement it comes from{held}"

    def ridge_batch(self, flops_per_sequence: float, shared_bytes: float) -> int:
        """The least batch at which the compute floor reaches the memory floor, when every sequence in the
        batch adds ``flops_per_sequence`` of work and all of them share one read of ``shared_bytes``
        (the weights). Reads each sequence adds (its own KV cache) are left out: they only raise the batch.
        """
        if _nonnegative("flops_per_sequence", flops_per_sequence) == 0:
            raise ValueError("flops_per_sequence must be positive: without arithmetic the compute floor never binds")
        return max(
            1,
            math.ceil(
                self.ridge_flops_per_byte * _nonnegative("shared_bytes", shared_bytes) / flops_per_sequence - 1e-9
            ),
        )


def last_level_cache_bytes(caches: Path = CPU_CACHES) -> int | None:
    """The size of the CPU's largest cache as Linux describes it ("480M", "32768K"), or None where it does not."""
    sizes = []
    for entry in caches.glob("index*/size"):
        text = entry.read_text(encoding="ascii").strip().upper()
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text[:-1] if unit > 1 else text
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes, default=None)


def measure(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> Roofline:
    """This machine's roofline, measured now: one matrix product in ``dtype`` and one large copy.

    The peak is the fastest arithmetic numbers of ``dtype`` can get here. For a 16-bit dtype that is its own
    product or float32's on the same numbers widened (exact: every bfloat16 and float16 is a float32), whichever
    is faster. A CPU without 16-bit arithmetic (AVX2 only) converts inside its 16-bit product and runs it far
    below float32's rate, while the model's own products take the faster way (cpu_fast.py); a floor measured
    on the slow one alone would sit above the measured pass."""
    peak = peak_flops(dtype, device=device)
    if dtype.itemsize < 4:
        peak = max(peak, peak_flops(torch.float32, device=device))
    return Roofline(peak, copy_bandwidth(device=device))


def _nonnegative(name: str, value: float) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a non-negative, finite number, got {value!r}")
    return value
