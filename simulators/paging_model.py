"""Lesson 11's simulator, config and model: one request trace served twice, by reservation and by paging.

The model drives the engine's own allocators, so it is not a second implementation: a
``ReservationReplay`` (max-length contiguous reservations, first fit, lesson 09) and a
``PagingReplay`` (LLMEngine's own scheduler and KV-cache manager with dummy tokens, blocks on
demand, step for step as LLMEngine would serve the trace; tests/simulators/test_sim_paging.py checks both
against the engine). Both see the same requests arrive at the same steps, in a pool of the same size;
Step plays ``steps_per_click`` engine steps on both; the view (paging.py) draws their utilisation so
far and the two pools slot by slot at the latest step. Lab C (lesson 20) serves the trace on the
learner's scheduling policy (``LearnerPagingSim`` in learner_paging.py builds on this module); the view is
paging.py.

The helpers below serve lesson 11's measurements: ``utilisation_curve`` (a rolling share of busy
memory that holds tokens), ``block_size_sweep`` (the same trace at several block sizes, those of
``block_sizes_to_sweep``) and ``decode_attention_inputs`` (a paged pool shaped like one layer of a
model, for timing the engine's decode kernels at several block sizes, ``timing_rounds`` times each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from kvcourse.kernel_env import running_headless
from kvcourse.kernels import MemoryReport, PagingReplay, ReservationReplay, workload
from kvcourse.kernels.baselines.fragmentation import CATEGORIES
from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.checks import InvalidInput, check_float, check_int

MAX_BLOCK_SIZE = 4096
MAX_POOL_SLOTS = 262_144
MAX_REQUESTS = 1000
MAX_TOKENS = 100_000
MAX_STEPS_PER_CLICK = 100_000
MAX_SEED = 2**31 - 1
WINDOW = 100  # engine steps averaged in the utilisation curves

# Lesson 11's block-size sweep and its kernel timing: the full range for a learner; under the test harness a
# shorter one, chosen here so that the lesson never branches on how it is run.
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SHORT_BLOCK_SIZES = (4, 16, 64, 256)


@dataclass(frozen=True)
class PagingConfig:
    """A block size, a pool and a request trace (lesson 11); the defaults are the lesson's trace and pool."""

    block_size: int = 16
    pool_slots: int = workload.LESSON_POOL_SLOTS
    num_requests: int = workload.LESSON_TRACE.num_requests
    arrivals_per_step: float = workload.LESSON_TRACE.arrivals_per_step
    answer_mean: float = workload.LESSON_TRACE.answer_mean
    answer_limit: int = workload.LESSON_TRACE.answer_limit
    seed: int = workload.LESSON_TRACE.seed
    steps_per_click: int = 200

    def __post_init__(self) -> None:
        check_int("Block size (tokens)", self.block_size, 1, MAX_BLOCK_SIZE)
        check_int("Pool (token slots)", self.pool_slots, 1, MAX_POOL_SLOTS)
        check_int("Requests", self.num_requests, 1, MAX_REQUESTS)
        check_float("Arrivals per step", self.arrivals_per_step, 0.001, 100.0)
        check_float("Mean answer (tokens)", self.answer_mean, 1.0, MAX_TOKENS)
        check_int("Answer limit (tokens)", self.answer_limit, 1, MAX_TOKENS)
        check_int("Seed", self.seed, 0, MAX_SEED)
        check_int("Steps per click", self.steps_per_click, 1, MAX_STEPS_PER_CLICK)
        if self.pool_slots < self.block_size:
            raise InvalidInput(
                f"Pool (token slots) must hold at least one block of {self.block_size} tokens, "
                f"got {self.pool_slots:,} slots."
            )

    @property
    def num_blocks(self) -> int:
        """Whole blocks in the pool; slots beyond the last whole block go unused by paging."""
        return self.pool_slots // self.block_size

    @property
    def trace_config(self) -> workload.TraceConfig:
        """The lesson's trace with this config's settings (prompts as in lesson 09)."""
        t = workload.LESSON_TRACE
        return workload.TraceConfig(
            self.num_requests,
            float(self.arrivals_per_step),
            t.prompt_mean,
            float(self.answer_mean),
            t.sigma,
            self.answer_limit,
            t.max_prompt_len,
            self.seed,
        )


class PagingSim:
    """The same trace on max-length reservations and on paging, stepped together (lesson 11)."""

    def __init__(self, config: PagingConfig | None = None) -> None:
        self.config = config if config is not None else PagingConfig()
        c = self.config
        self.trace = workload.request_trace(c.trace_config)
        longest_reservation = max(r.max_len for r in self.trace)
        if longest_reservation > c.pool_slots:
            raise InvalidInput(
                f"a request reserves {longest_reservation:,} slots (its prompt + the answer limit), more than "
                f"the pool's {c.pool_slots:,}: raise Pool (token slots) or lower Answer limit (tokens)."
            )
        self.reservation = ReservationReplay(self.trace, c.pool_slots)
        self.paging = PagingReplay(self.trace, c.num_blocks, c.block_size)

    @property
    def replays(self) -> tuple[ReservationReplay, PagingReplay]:
        return self.reservation, self.paging

    @property
    def done(self) -> bool:
        return all(replay.done for replay in self.replays)

    @property
    def step_index(self) -> int:
        """Engine steps played so far (the longer of the two replays)."""
        return max(r.step_index for r in self.replays)

    def step(self, num_steps: int | None = None) -> None:
        """Play ``num_steps`` engine steps (default: steps_per_click) on both replays."""
        if self.done:
            raise InvalidInput("both replays have served every request; press Reset to start again.")
        for _ in range(self.config.steps_per_click if num_steps is None else num_steps):
            for replay in self.replays:
                if not replay.done:
                    replay.step()
            if self.done:
                break

    def run(self) -> tuple[MemoryReport, MemoryReport]:
        """Play both replays to the end: (reservation report, paging report)."""
        while not self.done:
            self.step(10_000)
        return self.reports

    def reset(self) -> None:
        """Back to step 0 on the same trace."""
        c = self.config
        self.reservation = ReservationReplay(self.trace, c.pool_slots)
        self.paging = PagingReplay(self.trace, c.num_blocks, c.block_size)

    # -- what the lesson and the view read ------------------------------------------------------
    @property
    def reports(self) -> tuple[MemoryReport, MemoryReport]:
        first, second = self.replays
        return first.report, second.report

    @property
    def more_running(self) -> float:
        """How many times as many requests paging ran at once as reservation, on average so far."""
        reservation, paging = self.reports
        return paging.mean_running / reservation.mean_running if reservation.mean_running else math.nan

    def pool_map(self, replay: ReservationReplay | PagingReplay) -> np.ndarray:
        """The replay's pool at its latest step: one category index (into CATEGORIES) per slot."""
        slots = np.full(self.config.pool_slots, CATEGORIES.index("idle"), dtype=np.int8)
        if replay.step_index == 0 or replay.done:  # before the first request, after the last: empty
            return slots
        for segment in replay.memory_map():
            slots[segment.start : segment.end] = CATEGORIES.index(segment.category)
        return slots


def utilisation_curve(report: MemoryReport, window: int = WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """(steps, utilisation): the share of busy slot-steps that held a token over the last ``window`` steps.

    Steps where nothing was busy (an empty pool, nobody waiting) count as fully used, as in
    ``StepRecord.utilisation``.
    """
    check_int("window", window, 1, 10**9)
    used = np.array([r.used for r in report.history], dtype=float)
    busy = np.array([r.busy for r in report.history], dtype=float)
    kernel = np.ones(window)
    used_sum = np.convolve(used, kernel)[: len(used)]
    busy_sum = np.convolve(busy, kernel)[: len(busy)]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(busy_sum > 0, used_sum / busy_sum, 1.0)
    return np.arange(len(used)), share


@dataclass(frozen=True)
class BlockSizePoint:
    """One block size's replay of a trace on a fixed pool (lesson 11's sweep)."""

    block_size: int
    report: MemoryReport
    num_allocations: int  # blocks the KV-cache manager handed out over the whole trace

    @property
    def waste(self) -> float:
        """Share of the busy memory that held no token (1 - utilisation)."""
        return 1.0 - self.report.utilisation

    @property
    def tail_waste(self) -> float:
        """Share of the busy memory in the empty tails of the sequences' last blocks."""
        return self.report.share("internal")

    @property
    def mean_table_len(self) -> float:
        """Block-table entries per running sequence, averaged over every step."""
        blocks = sum((r.used + r.internal) // self.block_size for r in self.report.history)
        return blocks / max(1, sum(r.running for r in self.report.history))


def block_sizes_to_sweep() -> list[int]:
    """The block sizes lesson 11 sweeps, in tokens: 1 to 256, or four of them under the test harness."""
    return list(SHORT_BLOCK_SIZES if running_headless() else BLOCK_SIZES)


def timing_rounds() -> int:
    """Interleaved repeats of each decode kernel on each block size in lesson 11: 31, or 15 under the test harness."""
    return 15 if running_headless() else 31


def block_size_sweep(
    trace: list[workload.TraceRequest], pool_slots: int, block_sizes: list[int]
) -> list[BlockSizePoint]:
    """Replay ``trace`` with paging (as the engine steps) at each block size, the pool fixed in slots."""
    points = []
    for block_size in block_sizes:
        replay = PagingReplay(trace, pool_slots // block_size, block_size)
        report = replay.run()
        points.append(BlockSizePoint(block_size, report, replay.manager.events.counts().get("allocate", 0)))
    return points


def decode_attention_inputs(
    context_lens: list[int],
    block_size: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """Arguments for ``paged_decode_attention``: one decode query per sequence over a pool whose
    blocks are handed out in a random order, as a busy pool hands them out (lesson 11).

    Returns (q, k_cache, v_cache, block_tables, context_lens, scale); the pool holds exactly the
    blocks the sequences need, and each row of block_tables is padded with block 0.
    """
    generator = torch.Generator().manual_seed(seed)
    per_seq = [ceil_div(n, block_size) for n in context_lens]
    num_blocks = sum(per_seq)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=generator).to(dtype)
    v_cache = torch.randn(shape, generator=generator).to(dtype)
    order = torch.randperm(num_blocks, generator=generator).tolist()
    width, rows, start = max(per_seq), [], 0
    for n in per_seq:
        rows.append(order[start : start + n] + [0] * (width - n))
        start += n
    q = torch.randn((len(context_lens), num_heads, head_dim), generator=generator).to(dtype)
    return q, k_cache, v_cache, torch.tensor(rows), torch.tensor(context_lens), head_dim**-0.5
