"""Latency per request, with vLLM's definitions: TTFT, TPOT, ITL, end to end, and goodput (serving in 2026).

The engine stamps each request as it arrives, each time a step gives it tokens, and when it finishes,
in engine steps and in seconds (``RequestTimes``). A finished request's ``RequestLatency`` then reads:

- TTFT, time to first token: first token's time minus the arrival (queueing and prefill included);
- TPOT, time per output token: (end to end minus TTFT) / (output tokens minus 1), for two tokens or more;
- ITL, inter-token latencies: the gap before each token after the first (a preempted request's gap
  includes the stall, and a step that gives a request several tokens gives gaps of 0);
- end to end: finish minus arrival.

``latency_summary`` gives p50/p95/p99 of each over many requests (ITL over every gap of every request, as
vLLM's benchmark pools them) and goodput: the requests that met every target given, as a count, a
share, and a rate over the time served (DistServe's measure: what a deployment can promise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

PERCENTILES = (50, 95, 99)


@dataclass
class RequestTimes:
    """What the engine stamped on one request: step numbers and clock readings (seconds)."""

    arrival_step: int
    arrival_s: float
    token_steps: list[int] = field(default_factory=list)  # the step that gave each output token
    token_s: list[float] = field(default_factory=list)  # the clock when that step ended
    finish_step: int | None = None
    finish_s: float | None = None

    def add_tokens(self, count: int, step: int, now: float) -> None:
        """``count`` output tokens (of the request's first sample) came out of step ``step`` at ``now``."""
        self.token_steps += [step] * count
        self.token_s += [now] * count

    def finish(self, step: int, now: float) -> None:
        self.finish_step, self.finish_s = step, now

    def latency(self) -> RequestLatency | None:
        """The request's latencies once it finished with at least one token (None before, or without one)."""
        if self.finish_s is None or self.finish_step is None or not self.token_s:
            return None
        ttft = self.token_s[0] - self.arrival_s
        e2e = self.finish_s - self.arrival_s
        n = len(self.token_s)
        return RequestLatency(
            arrival_step=self.arrival_step,
            first_token_step=self.token_steps[0],
            finish_step=self.finish_step,
            num_output_tokens=n,
            arrival_s=self.arrival_s,
            ttft_s=ttft,
            tpot_s=(e2e - ttft) / (n - 1) if n > 1 else None,
            itl_s=tuple(b - a for a, b in zip(self.token_s, self.token_s[1:], strict=False)),
            e2e_s=e2e,
            itl_steps=tuple(b - a for a, b in zip(self.token_steps, self.token_steps[1:], strict=False)),
        )


@dataclass(frozen=True)
class RequestLatency:
    """A finished request's latencies, in seconds and in engine steps."""

    arrival_step: int
    first_token_step: int
    finish_step: int
    num_output_tokens: int
    arrival_s: float  # on the engine's clock: what the other times count from
    ttft_s: float
    tpot_s: float | None  # None for a single output token: there is no time per further token
    itl_s: tuple[float, ...]  # one gap per token after the first
    e2e_s: float
    itl_steps: tuple[int, ...]

    @property
    def ttft_steps(self) -> int:
        """Steps from arrival to the step that gave the first token (1: it came out of the next step)."""
        return self.first_token_step - self.arrival_step

    @property
    def tpot_steps(self) -> float | None:
        """Steps per output token after the first (TPOT counted in engine steps); None for a single token."""
        n = self.num_output_tokens
        return (self.finish_step - self.first_token_step) / (n - 1) if n > 1 else None

    def meets(self, targets: LatencyTargets) -> bool:
        """Whether every target given holds for this request (a target left None always holds)."""
        checks = (
            (targets.ttft_s, self.ttft_s),
            (targets.tpot_s, self.tpot_s or 0.0),
            (targets.e2e_s, self.e2e_s),
            (targets.itl_s, max(self.itl_s, default=0.0)),
        )
        return all(target is None or value <= target for target, value in checks)


@dataclass(frozen=True)
class LatencyTargets:
    """Service-level targets in seconds; None leaves one out. ``itl_s`` bounds a request's longest gap."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    itl_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s", "e2e_s", "itl_s"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not value > 0 or not math.isfinite(value)):
                raise ValueError(f"the target {name} must be a positive number of seconds or None, got {value!r}")


@dataclass(frozen=True)
class LatencySummary:
    """Percentiles over many finished requests, and goodput against targets (``latency_summary``)."""

    num_requests: int
    ttft_s: dict[int, float]  # percentile -> seconds
    tpot_s: dict[int, float]
    itl_s: dict[int, float]
    e2e_s: dict[int, float]
    duration_s: float  # first arrival to last finish
    num_good: int | None = None  # requests that met every target (None: no targets given)

    @property
    def goodput_share(self) -> float | None:
        return None if self.num_good is None else self.num_good / max(1, self.num_requests)

    @property
    def goodput_per_s(self) -> float | None:
        """Good requests per second of serving (DistServe's goodput)."""
        if self.num_good is None:
            return None
        return self.num_good / self.duration_s if self.duration_s > 0 else math.inf


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation between the nearest ranks (numpy's default); nan if empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile lies in [0, 100], got {q!r}")
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_summary(
    latencies: Sequence[RequestLatency],
    targets: LatencyTargets | None = None,
    percentiles: Sequence[int] = PERCENTILES,
) -> LatencySummary:
    """p50/p95/p99 (or ``percentiles``) of TTFT, TPOT, ITL and end to end, and goodput where ``targets`` are given.

    A request with one output token has no TPOT and no gaps: it counts in TTFT and end to end only."""
    if not latencies:
        raise ValueError("no finished requests to summarize: serve some first (each needs at least one token)")

    def spread(values: list[float]) -> dict[int, float]:
        return {int(q): percentile(values, q) for q in percentiles}

    starts = [lat.arrival_s for lat in latencies]
    ends = [start + lat.e2e_s for start, lat in zip(starts, latencies, strict=True)]
    return LatencySummary(
        num_requests=len(latencies),
        ttft_s=spread([lat.ttft_s for lat in latencies]),
        tpot_s=spread([lat.tpot_s for lat in latencies if lat.tpot_s is not None]),
        itl_s=spread([gap for lat in latencies for gap in lat.itl_s]),
        e2e_s=spread([lat.e2e_s for lat in latencies]),
        duration_s=max(ends) - min(starts),
        num_good=None if targets is None else sum(lat.meets(targets) for lat in latencies),
    )
