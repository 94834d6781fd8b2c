"""Lesson 14's model: tokens per second against batch size on the roofline, and the memory cap on the batch.

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

The view that draws it is throughput.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernel_env import running_headless
from kvcourse.kernels import MemoryBudget, ModelConfig, costs, num_blocks_for_budget
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.checks import InvalidInput, check_choice, check_float, check_int, model_shape
from kvcourse.simulators.hardware import BYTES_PER_VALUE_CHOICES, HARDWARE
from kvcourse.simulators.labels import GB

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


def batch_sizes_to_time() -> list[int]:
    """The batch sizes lesson 14 times on the real engine: 1 to 32, or 1, 8 and 32 in a headless run (tests)."""
    return [1, 8, 32] if running_headless() else [1, 2, 4, 8, 16, 32]


def timed_rounds() -> int:
    """Timed decode steps per batch size in lesson 14, one per interleaved round: 7, or 5 in a headless run."""
    return 5 if running_headless() else 7


def stream_size() -> tuple[int, int]:
    """Lesson 14's request stream as (requests, rounds of each policy): (64, 4), or (40, 3) in a headless run."""
    return (40, 3) if running_headless() else (64, 4)
