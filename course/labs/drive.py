"""Serve a lab trace on the engine, one step at a time: arrivals, conversation turns, finish steps.

The same driver serves a trace in the learner's notebook, in the grading sandbox and in the grader's
replay, so the engine is asked the same questions in the same order each time. A request is added at
its arrival step; the next turn of a conversation once the turn it continues has finished, with that
turn's prompt and answer in front of its own words. The run stops when every request is done, or at
``max_steps``: what is left then is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcourse.kernels import LLMEngine, SamplingParams
from kvcourse.kernels.engine.latency import RequestLatency
from kvcourse.kernels.engine.request import RequestStatus

from .traces import LabTrace


@dataclass
class Served:
    """A trace served: per trace request its engine request id, arrival and finish steps, answer and status."""

    request_ids: list[int | None]
    arrivals: list[int | None]
    finishes: list[int | None]
    answers: list[list[list[int]]]  # per request, its samples' tokens
    statuses: list[str]  # "finished", "refused: <reason>", "lost"
    num_cached_tokens: list[int]
    num_prompt_tokens: list[int]
    num_steps: int = 0
    blocks_in_use: list[int] = field(default_factory=list)  # after each step, where the manager says
    latencies: list[RequestLatency | None] = field(default_factory=list)  # per request, once finished (latency.py)

    @property
    def num_answer_tokens(self) -> int:
        return sum(
            len(s) for samples, st in zip(self.answers, self.statuses, strict=True) if st == "finished" for s in samples
        )


def max_steps_for(trace: LabTrace) -> int:
    """A bound no sensible policy reaches: every request alone, one token per step, and room to spare."""
    work = sum((len(r.prompt) + r.max_new_tokens) * r.n for r in trace.requests)
    last = max((r.arrival for r in trace.requests), default=0)
    return 4 * work + last + 50


def _params(request) -> SamplingParams:
    return SamplingParams(
        temperature=request.temperature,
        seed=request.seed,
        max_new_tokens=request.max_new_tokens,
        stop_on_eos=False,
        n=request.n,
    )


def serve(engine: LLMEngine, trace: LabTrace, max_steps: int | None = None) -> Served:
    """Drive ``engine`` through ``trace`` (the policy's own errors propagate: the caller names them)."""
    count = len(trace.requests)
    served = Served(
        [None] * count,
        [None] * count,
        [None] * count,
        [[] for _ in range(count)],
        ["lost"] * count,
        [0] * count,
        [0] * count,
    )
    served.latencies = [None] * count
    limit = max_steps if max_steps is not None else max_steps_for(trace)
    pending = list(range(count))
    while True:
        now = engine.num_steps
        for i in list(pending):
            request = trace.requests[i]
            if request.arrival > now:
                continue
            prompt = list(request.prompt)
            if request.follows is not None:
                parent = served.request_ids[request.follows]
                if parent is None or served.finishes[request.follows] is None:
                    if served.statuses[request.follows].startswith("refused"):
                        served.statuses[i] = "refused: the turn it continues was refused"
                        pending.remove(i)
                    continue
                earlier = engine.requests[parent]
                prompt = earlier.prompt_token_ids + served.answers[request.follows][0] + prompt
            served.request_ids[i] = engine.add_request(prompt, _params(request))
            served.arrivals[i], served.num_prompt_tokens[i] = now, len(prompt)
            pending.remove(i)
        _collect(engine, served)
        if (not pending and not engine.has_unfinished_requests) or engine.num_steps >= limit:
            break
        engine.step()
        used = getattr(engine.kv_cache_manager, "num_used_blocks", None)
        served.blocks_in_use.append(used if isinstance(used, int) else -1)
    _collect(engine, served)
    served.num_steps = engine.num_steps
    return served


def _collect(engine: LLMEngine, served: Served) -> None:
    for i, rid in enumerate(served.request_ids):
        if rid is None or served.finishes[i] is not None or served.statuses[i].startswith("refused"):
            continue
        req = engine.requests[rid]
        if req.status is RequestStatus.REFUSED:
            served.statuses[i] = f"refused: {req.refusal}"
        elif req.status is RequestStatus.FINISHED:
            served.finishes[i], served.statuses[i] = engine.num_steps, "finished"
            out = req.output()
            served.answers[i] = [list(s) for s in out.samples]
            served.num_cached_tokens[i] = req.num_cached_tokens
            served.latencies[i] = out.latency
