"""How big each GPU check runs: the full run (under ~5 minutes on one H200), --quick, and --cpu-proof."""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK_SIZES = (8, 16, 32, 64)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# (heads, kv_heads, head_dim): SmolLM2's 9/3 of 64, Llama-style 32/8 of 128, MHA, MQA, an odd head dim
SMOLLM2, LLAMA = (9, 3, 64), (32, 8, 128)
OTHER_LAYOUTS = ((16, 16, 64), (8, 1, 64), (6, 2, 80))
QUICK_LESSONS = ("00_start_here", "05_the_kv_cache", "10_paged_attention")


@dataclass(frozen=True)
class CheckPlan:
    """Sizes of the five checks. Every block size and dtype runs on ``layouts``; ``block_16_layouts`` at 16 only.

    ``lessons`` None means every notebook under lessons/; ``lesson_budget_s`` stops starting new
    lessons once spent, so the whole run stays within its time.
    """

    name: str
    layouts: tuple[tuple[int, int, int], ...]
    block_16_layouts: tuple[tuple[int, int, int], ...]
    batch: int
    context: int
    num_new_tokens: int
    trace_requests: int
    lessons: tuple[str, ...] | None
    lesson_budget_s: float
    block_sizes: tuple[int, ...] = BLOCK_SIZES
    dtypes: tuple[torch.dtype, ...] = DTYPES

    def __post_init__(self) -> None:
        for field in ("batch", "context", "num_new_tokens", "trace_requests"):
            if not isinstance(getattr(self, field), int) or getattr(self, field) < 1:
                raise ValueError(f"{field} must be a positive integer, got {getattr(self, field)!r}")
        for heads, kv_heads, _ in self.layouts + self.block_16_layouts:
            if heads % kv_heads:
                raise ValueError(f"{heads} query heads do not split into groups over {kv_heads} KV heads")
        if not set(self.block_sizes) <= set(BLOCK_SIZES) or not self.block_sizes:
            raise ValueError(f"block sizes must be some of {BLOCK_SIZES}, got {self.block_sizes}")
        if self.lesson_budget_s <= 0:
            raise ValueError(f"lesson_budget_s must be positive, got {self.lesson_budget_s}")

    @classmethod
    def full(cls) -> CheckPlan:
        return cls(
            "full",
            (SMOLLM2, LLAMA),
            OTHER_LAYOUTS,
            batch=7,
            context=300,
            num_new_tokens=24,
            trace_requests=32,
            lessons=None,
            lesson_budget_s=150.0,
        )

    @classmethod
    def quick(cls) -> CheckPlan:
        return cls(
            "quick",
            (SMOLLM2,),
            (),
            batch=5,
            context=200,
            num_new_tokens=12,
            trace_requests=8,
            lessons=QUICK_LESSONS,
            lesson_budget_s=60.0,
        )

    @classmethod
    def cpu_proof(cls) -> CheckPlan:
        """Small enough for the Triton interpreter: 12 kernel cases in a few seconds on one core."""
        return cls(
            "cpu-proof",
            ((9, 3, 16),),
            (),
            batch=2,
            context=40,
            num_new_tokens=1,
            trace_requests=1,
            lessons=(),
            lesson_budget_s=1.0,
        )

    @property
    def kernel_cases(self) -> list[tuple[tuple[int, int, int], int, torch.dtype]]:
        """(layout, block_size, dtype) of every kernel comparison, in the order they run."""
        cases = [(layout, bs, dt) for layout in self.layouts for bs in self.block_sizes for dt in self.dtypes]
        return cases + [(layout, 16, dt) for layout in self.block_16_layouts for dt in self.dtypes]
