"""A trace served on the real engine, one engine step at a time (lesson 14).

``serve_trace`` drives the engine through a request trace, so lesson 14 can measure paging
against reservation-style admission on the same pool in a few lines, stepping the two in turn
(``serve_interleaved``) so that a busy shared machine slows both alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kvcourse.kernels.baselines.fragmentation import ReservationReplay
from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.engine.sampling import SamplingParams
from kvcourse.kernels.workload import TraceRequest


@dataclass(frozen=True)
class ServedTrace:
    """A trace served on the real engine: the batch of every step, the answer tokens and the seconds."""

    batch_per_step: list[int]
    num_tokens: int
    seconds: float

    @property
    def num_steps(self) -> int:
        return len(self.batch_per_step)

    @property
    def mean_batch(self) -> float:
        return sum(self.batch_per_step) / max(1, self.num_steps)

    @property
    def max_batch(self) -> int:
        return max(self.batch_per_step, default=0)

    @property
    def tokens_per_second(self) -> float:
        return self.num_tokens / self.seconds if self.seconds > 0 else 0.0


def trace_prompts(trace: list[TraceRequest], token_ids: list[int]) -> list[list[int]]:
    """A prompt of the right length for every request, cut from token_ids (each from its own offset)."""
    if not token_ids:
        raise ValueError("token_ids is empty")
    n = len(token_ids)
    return [[token_ids[(i + j) % n] for j in range(r.num_prompt_tokens)] for i, r in enumerate(trace)]


def reservation_start_steps(trace: list[TraceRequest], num_slots: int) -> list[int]:
    """The step at which a server reserving prompt + answer limit starts each request (lesson 09's replay)."""
    replay = ReservationReplay(trace, num_slots)
    started: list[int | None] = [None] * len(trace)
    while not replay.done:
        step = replay.step_index
        replay.step()
        queued = set(replay.waiting)
        for rid, request in enumerate(trace):
            if started[rid] is None and request.arrival_step <= step and rid not in queued:
                started[rid] = step  # arrived, and no longer waiting: it started in this step
    return [s for s in started if s is not None]


class TraceServer:
    """Feeds a trace to an engine one step at a time: each request at its start step (lesson 14).

    A request starts at its arrival unless ``start_steps`` says otherwise (a reserving server's
    admissions, from ``reservation_start_steps``). Every answer is exactly the trace's length (the
    stop token is ignored). The batch of a step is the number of sequences that got a token in
    it; only the engine's steps are timed.
    """

    def __init__(
        self,
        engine: LLMEngine,
        trace: list[TraceRequest],
        prompts: list[list[int]],
        start_steps: list[int] | None = None,
    ) -> None:
        starts = start_steps if start_steps is not None else [r.arrival_step for r in trace]
        if len(starts) != len(trace) or len(prompts) != len(trace):
            raise ValueError("one prompt and one start step per request")
        self.engine, self.trace, self.prompts, self.starts = engine, trace, prompts, starts
        self._order = sorted(range(len(trace)), key=lambda i: starts[i])
        self._next = 0
        self.request_ids: list[int] = []
        self.batch_per_step: list[int] = []
        self.seconds = 0.0

    @property
    def done(self) -> bool:
        return self._next == len(self._order) and not self.engine.has_unfinished_requests

    def step(self) -> None:
        """Hand over the requests due by this step, then run and time one engine step."""
        engine = self.engine
        while self._next < len(self._order) and self.starts[self._order[self._next]] <= engine.num_steps:
            i = self._order[self._next]
            params = SamplingParams(max_new_tokens=self.trace[i].num_output_tokens, stop_on_eos=False)
            self.request_ids.append(engine.add_request(self.prompts[i], params))
            self._next += 1
        start = time.perf_counter()
        outputs = engine.step()
        self.seconds += time.perf_counter() - start
        self.batch_per_step.append(len(outputs))

    def result(self) -> ServedTrace:
        results = [self.engine.requests[i].output() for i in self.request_ids]
        refused = [r.refusal for r in results if r.refusal]
        if refused:
            raise ValueError(f"the engine refused {len(refused)} requests: {refused[0]}")
        return ServedTrace(list(self.batch_per_step), sum(len(r.tokens) for r in results), self.seconds)


def serve_trace(
    engine: LLMEngine, trace: list[TraceRequest], prompts: list[list[int]], start_steps: list[int] | None = None
) -> ServedTrace:
    """Serve the whole trace on one engine (see TraceServer)."""
    server = TraceServer(engine, trace, prompts, start_steps)
    while not server.done:
        server.step()
    return server.result()


def serve_interleaved(servers: list[TraceServer]) -> list[ServedTrace]:
    """Step several servers in turn, one engine step each, so a busy moment of the machine slows them alike."""
    while not all(server.done for server in servers):
        for server in servers:
            if not server.done:
                server.step()
    return [server.result() for server in servers]
