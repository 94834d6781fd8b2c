"""Lesson 21's simulator, config and model: a stream of requests served under a token budget, against two targets.

Requests arrive at random (exponential gaps at a given rate); a given share of them bring a long prompt, the
rest a short one, and each asks for the same number of answer tokens. The engine's own ``Scheduler`` and
``KVCacheManager`` serve them step by step with dummy tokens and no model, as ``PagingReplay`` does (lesson 11):
running sequences first, one decode token each or the next chunk of a prompt, then waiting prompts while the
step's token budget lasts. The pool and the sequence limit are roomy, so only the budget binds.

Time. The replay has no model to time, so a step is given a duration: a fixed part (reading every weight once,
launching the step) plus a part that grows with the tokens it computes. The unit of time is that fixed part, a
*step-time*; a step that computes n tokens lasts ``1 + n / tokens_per_step_time`` step-times. A datacenter GPU
computes hundreds of tokens in the time it reads its weights (a large ``tokens_per_step_time``); a CPU only a
few. ``fit_step_cost`` reads both figures from two gaps lesson 21 measured on the real engine.

Each request is stamped as the engine stamps it (``RequestTimes`` in kernels/engine/latency.py): its arrival,
the step and the clock that gave each of its tokens, its finish. Its TTFT, ITL and whether it met the targets
come from the engine's own ``RequestTimes.latency`` and ``latency_summary``, in step-times: the definitions
lesson 21 uses. tests/simulators/test_sim_serving_budget.py serves the same stream on ``LLMEngine`` with a tiny
model and a clock that runs the same way, and checks that every request's latencies are the same. The view is
serving_budget.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Seq
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import pandas as pd

from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.engine.latency import LatencySummary, LatencyTargets, RequestLatency, RequestTimes
from kvcourse.kernels.engine.latency import latency_summary as engine_latency_summary
from kvcourse.kernels.engine.sampling import SamplingParams
from kvcourse.kernels.engine.scheduler import Scheduler
from kvcourse.kernels.engine.sequence import Sequence, SequenceStatus
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager
from kvcourse.simulators.checks import InvalidInput, check_float, check_int

DUMMY_TOKEN = 0  # no model reads it, and no EOS set holds it
BLOCK_SIZE = 16
MAX_REQUESTS = 200
MAX_PROMPT_TOKENS = 8192
MAX_ANSWER_TOKENS = 1024
MIN_BUDGET = 8
MAX_BUDGET = 65_536
MAX_RATE = 100.0  # requests per step-time: past this every request is there at once
MAX_TOKENS_PER_STEP_TIME = 1e6
MAX_TARGET = 1e7  # step-times
MAX_STEPS = 40_000  # engine steps one redraw may replay


@dataclass(frozen=True)
class ServingBudgetConfig:
    """The stream (rate, mix, lengths), the token budget, the cost of a step and the two targets (lesson 21)."""

    arrival_rate: float = 0.05  # requests per step-time
    long_percent: int = 10  # share of requests with a long prompt, in percent
    long_prompt_tokens: int = 2000
    token_budget: int = 256  # tokens per step (EngineConfig.max_num_batched_tokens)
    ttft_target: float = 150.0  # step-times
    itl_target: float = 20.0  # step-times: no gap of a request may be longer
    tokens_per_step_time: float = 32.0  # tokens a step computes in the time of its fixed part
    short_prompt_tokens: int = 24
    answer_tokens: int = 32
    num_requests: int = 40
    seed: int = 0

    def __post_init__(self) -> None:
        check_float("Arrival rate (requests per step-time)", self.arrival_rate, 1e-4, MAX_RATE)
        check_int("Long prompts (%)", self.long_percent, 0, 100)
        check_int("Long prompt (tokens)", self.long_prompt_tokens, 1, MAX_PROMPT_TOKENS)
        check_int("Token budget (tokens per step)", self.token_budget, MIN_BUDGET, MAX_BUDGET)
        check_float("TTFT target (step-times)", self.ttft_target, 1e-3, MAX_TARGET)
        check_float("ITL target (step-times)", self.itl_target, 1e-3, MAX_TARGET)
        check_float("Tokens per step-time", self.tokens_per_step_time, 1e-2, MAX_TOKENS_PER_STEP_TIME)
        check_int("Short prompt (tokens)", self.short_prompt_tokens, 1, MAX_PROMPT_TOKENS)
        check_int("Answer (tokens)", self.answer_tokens, 1, MAX_ANSWER_TOKENS)
        check_int("Requests", self.num_requests, 1, MAX_REQUESTS)
        check_int("Seed", self.seed, 0, 2**31 - 1)
        steps = (
            sum(ceil_div(p, self.token_budget) for p in self.prompt_lengths) + self.num_requests * self.answer_tokens
        )
        if steps > MAX_STEPS:
            raise InvalidInput(
                f"this stream could take up to {steps:,} engine steps; at most {MAX_STEPS:,} are replayed: "
                "raise the token budget, or shorten the long prompt."
            )

    @property
    def num_long(self) -> int:
        return round(self.num_requests * self.long_percent / 100)

    @property
    def is_long(self) -> tuple[bool, ...]:
        """Which requests bring a long prompt: ``num_long`` of them, drawn with the seed."""
        chosen = np.random.default_rng(self.seed + 1).permutation(self.num_requests)[: self.num_long]
        picked = set(chosen.tolist())
        return tuple(i in picked for i in range(self.num_requests))

    @property
    def prompt_lengths(self) -> tuple[int, ...]:
        return tuple(self.long_prompt_tokens if long else self.short_prompt_tokens for long in self.is_long)

    @property
    def arrival_times(self) -> tuple[float, ...]:
        """Each request's arrival in step-times: exponential gaps at ``arrival_rate``, the first at 0."""
        gaps = np.random.default_rng(self.seed).exponential(1.0, self.num_requests)
        gaps[0] = 0.0
        return tuple(float(t) for t in np.cumsum(gaps) / self.arrival_rate)

    @property
    def targets(self) -> LatencyTargets:
        """The two targets as the engine's ``LatencyTargets``, in step-times: TTFT, and each request's longest gap."""
        return LatencyTargets(ttft_s=self.ttft_target, itl_s=self.itl_target)

    def step_time(self, num_tokens: int) -> float:
        """How long a step that computes ``num_tokens`` tokens lasts, in step-times."""
        return 1.0 + num_tokens / self.tokens_per_step_time


@dataclass(frozen=True)
class StepCost:
    """A step's duration on a measured machine: ``unit_s`` seconds of fixed part, and ``tokens_per_step_time``."""

    unit_s: float
    tokens_per_step_time: float


def fit_step_cost(plain_gap_s: float, stall_gap_s: float, decodes: int, prompt_tokens: int) -> StepCost:
    """The two figures of a step's cost from two gaps measured on the engine (lesson 21): ``plain_gap_s``, a plain
    step of ``decodes`` decode tokens, and ``stall_gap_s``, a step that also prefilled ``prompt_tokens``."""
    if not (plain_gap_s > 0 and stall_gap_s > 0 and decodes >= 1 and prompt_tokens >= 1):
        raise ValueError("give two positive gaps, at least one decode and at least one prompt token")
    ratio = stall_gap_s / plain_gap_s  # = (T + prompt + decodes) / (T + decodes) for a step of 1 + n / T step-times
    tokens = (prompt_tokens + decodes - ratio * decodes) / (ratio - 1) if ratio > 1 else MAX_TOKENS_PER_STEP_TIME
    tokens = min(max(tokens, 1.0), MAX_TOKENS_PER_STEP_TIME)
    return StepCost(plain_gap_s / (1 + decodes / tokens), tokens)


@dataclass(frozen=True)
class Served:
    """One replay: every request's latency (step-times), the tokens each step computed, and its duration."""

    latencies: tuple[RequestLatency, ...]  # in request order
    step_tokens: tuple[int, ...]
    step_times: tuple[float, ...]


def serve(config: ServingBudgetConfig) -> Served:
    """The stream served by the engine's scheduler under ``config.token_budget``, stamped as the engine stamps."""
    lengths, arrivals = config.prompt_lengths, config.arrival_times
    longest = max(lengths) + config.answer_tokens
    num_blocks = sum(ceil_div(p + config.answer_tokens, BLOCK_SIZE) for p in lengths)
    scheduler = Scheduler(KVCacheManager(num_blocks, BLOCK_SIZE), config.num_requests, config.token_budget, longest)
    params = SamplingParams(max_new_tokens=config.answer_tokens, stop_on_eos=False)
    times: list[RequestTimes] = []
    now, step, step_tokens, step_times = 0.0, 0, [], []
    while len(times) < config.num_requests or scheduler.has_work:
        if not scheduler.has_work:
            now = max(now, arrivals[len(times)])  # an idle engine waits for the next request
        while len(times) < config.num_requests and arrivals[len(times)] <= now:
            rid = len(times)
            tokens = [DUMMY_TOKEN] * lengths[rid]
            scheduler.add(Sequence(rid, tokens, lengths[rid], BLOCK_SIZE, params, request_id=rid, arrival=step))
            times.append(RequestTimes(step, arrivals[rid]))
        batch = scheduler.schedule()
        if batch.refused or batch.preempted:
            raise RuntimeError("a roomy pool refused or preempted a request: the replay would not be the engine's")
        step += 1
        duration = config.step_time(batch.num_tokens)
        now += duration
        step_tokens.append(batch.num_tokens)
        step_times.append(duration)
        for seq in scheduler.update(batch, [[DUMMY_TOKEN] for _ in batch.sampled]):
            rid = seq.seq_id
            times[rid].add_tokens(seq.num_completion_tokens - len(times[rid].token_s), step, now)
            if seq.status is SequenceStatus.FINISHED:
                times[rid].finish(step, now)
    latencies = tuple(t.latency() for t in times)
    if any(lat is None for lat in latencies):
        raise RuntimeError("a request did not finish")
    return Served(tuple(lat for lat in latencies if lat is not None), tuple(step_tokens), tuple(step_times))


@lru_cache(maxsize=64)
def _served(stream: ServingBudgetConfig) -> Served:
    return serve(stream)


class ServingBudget:
    """A stream served under a token budget and judged against two targets; step() halves the budget (lesson 21).

    The replay depends on the stream, the budget and the step's cost, not on the targets: it is cached, so a
    change of target only judges the same requests again."""

    def __init__(self, config: ServingBudgetConfig) -> None:
        self.config = config
        self.token_budget = config.token_budget

    def step(self) -> None:
        """Halve the token budget."""
        if self.token_budget // 2 < MIN_BUDGET:
            raise InvalidInput(f"{MIN_BUDGET} tokens per step is the smallest budget simulated; press Reset.")
        self.token_budget //= 2

    def reset(self) -> None:
        self.token_budget = self.config.token_budget

    @property
    def stream(self) -> ServingBudgetConfig:
        """The config served now: the learner's, at the budget Step has reached, targets left at their defaults."""
        defaults = ServingBudgetConfig()
        return replace(
            self.config,
            token_budget=self.token_budget,
            ttft_target=defaults.ttft_target,
            itl_target=defaults.itl_target,
        )

    @property
    def served(self) -> Served:
        return _served(self.stream)

    @property
    def latencies(self) -> tuple[RequestLatency, ...]:
        return self.served.latencies

    @property
    def is_long(self) -> tuple[bool, ...]:
        return self.config.is_long

    @property
    def summary(self) -> LatencySummary:
        """The engine's ``latency_summary`` of every request, with goodput against the two targets."""
        return engine_latency_summary(self.latencies, self.config.targets)

    @property
    def good(self) -> tuple[bool, ...]:
        """Whether each request met both targets (``RequestLatency.meets``)."""
        return tuple(lat.meets(self.config.targets) for lat in self.latencies)

    @property
    def num_good(self) -> int:
        return int(self.summary.num_good or 0)

    @property
    def goodput_share(self) -> float:
        return float(self.summary.goodput_share or 0.0)

    @property
    def goodput_per_step_time(self) -> float:
        """Good requests per step-time, from the first arrival to the last finish (vLLM's goodput)."""
        rate = self.summary.goodput_per_s
        return 0.0 if rate is None or math.isinf(rate) else float(rate)

    @property
    def num_steps(self) -> int:
        return len(self.served.step_tokens)

    def ttfts(self, long: bool) -> list[float]:
        """The TTFT of every request with a long (or a short) prompt, in step-times."""
        return [lat.ttft_s for lat, is_long in zip(self.latencies, self.is_long, strict=True) if is_long == long]

    def gaps(self, long: bool) -> list[float]:
        """Every inter-token gap of the requests with a long (or a short) prompt, pooled, in step-times."""
        chosen = zip(self.latencies, self.is_long, strict=True)
        return [gap for lat, is_long in chosen if is_long == long for gap in lat.itl_s]


def budget_sweep(config: ServingBudgetConfig, budgets: Seq[int], arrival_rate: float | None = None) -> pd.DataFrame:
    """The same stream (at ``arrival_rate``, if given) served at each budget: one row per budget, with the requests
    that met both targets, goodput per 100 step-times (to 2 decimals), the short-prompt requests' longest gap and
    the long-prompt requests' longest TTFT, in step-times (to 1 decimal)."""
    if arrival_rate is not None:
        config = replace(config, arrival_rate=arrival_rate)
    rows = []
    for budget in budgets:
        sim = ServingBudget(replace(config, token_budget=budget))
        rows.append(
            {
                "budget (tokens)": budget,
                "requests meeting both": sim.num_good,
                "goodput per 100 step-times": round(100 * sim.goodput_per_step_time, 2),
                "short prompts' longest gap": round(max(sim.gaps(long=False), default=math.nan), 1),
                "long prompts' longest TTFT": round(max(sim.ttfts(long=True), default=math.nan), 1),
            }
        )
    return pd.DataFrame(rows).set_index("budget (tokens)")
