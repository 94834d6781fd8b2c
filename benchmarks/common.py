"""Helpers every benchmark shares: thread setup, the machine header, interleaved rounds, writing results."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def bench_threads() -> int:
    """Threads the benchmarks use: 2 (the course's reference machine) unless KVCOURSE_BENCH_THREADS says otherwise."""
    return int(os.environ.get("KVCOURSE_BENCH_THREADS", "2"))


def set_threads(num_threads: int | None = None) -> None:
    """Pin torch (and BLAS) to ``num_threads`` so figures compare across machines."""
    import torch

    num_threads = num_threads or bench_threads()
    torch.set_num_threads(num_threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))


def cpu_facts() -> dict:
    """The CPU's model name and whether it computes bfloat16 natively (else torch emulates it via float32)."""
    from kvcourse.models import cpu_has_native_bf16

    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    names = [line.partition(":")[2].strip() for line in lines if line.startswith("model name")]
    return {
        "cpu_model": names[0] if names else platform.processor() or platform.machine(),
        "bf16_native": cpu_has_native_bf16(),
    }


def bf16_note() -> str:
    """What a bfloat16 figure means on this CPU: its matrix products' speed against float32's, measured now."""
    import torch

    from kvcourse.kernels.model.products import relative_speed

    timed = ", ".join(f"{ratio:.2f}x for {rows}" for rows, ratio in relative_speed(torch.bfloat16).items())
    return (
        f"bf16's fastest matrix product here takes, of float32's time: {timed} "
        "(a 1536x576 weight, measured now; below 1x bf16 is the faster dtype for that many rows)"
    )


def machine_header() -> dict:
    """Library versions and machine facts written beside every figure."""
    import torch
    import transformers

    return {
        **cpu_facts(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def interleaved(
    measures: dict[str, Callable[[], float]], rounds: int, warmup: int = 1, log: Callable[[str], None] | None = print
) -> dict[str, list[float]]:
    """Run every measure ``warmup`` times untimed, then ``rounds`` rounds round-robin; each returns seconds.

    The starting side rotates every round, so a noisy stretch of the machine falls on every
    side in turn; compare medians, or better the per-round ratios (see ``paired_ratio``).
    """
    for measure in measures.values():
        for _ in range(warmup):
            measure()
    names = list(measures)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            samples[name].append(measures[name]())
        if log:
            log(f"  round {r + 1}/{rounds}: " + ", ".join(f"{n} {samples[n][-1] * 1e3:.2f} ms" for n in names))
    return samples


def summary(values: list[float], scale: float = 1.0) -> dict:
    """Median, min, max and spread ((max - min) / median) of a list of samples, times ``scale``."""
    med = statistics.median(values)
    return {
        "median": med * scale,
        "min": min(values) * scale,
        "max": max(values) * scale,
        "spread": (max(values) - min(values)) / med if med else 0.0,
        "n": len(values),
    }


def paired_ratio(num: list[float], den: list[float]) -> dict:
    """num / den measured side by side: the ratio of the medians and the spread of the per-round ratios."""
    per_round = [a / b for a, b in zip(num, den, strict=True)]
    return {"ratio_of_medians": statistics.median(num) / statistics.median(den), "per_round": summary(per_round)}


def write_result(name: str, payload: dict) -> Path:
    """Write ``payload`` (plus the machine header) to benchmarks/results/NAME.json."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine_header(), **payload}, indent=2))
    return path
