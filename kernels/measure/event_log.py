"""A real engine's event log read back: each request's path, and the pool over time (lessons 08, 15).

``request_stories`` and ``occupancy`` let a lesson show what happened at the memory wall (waits,
preemptions, refusals) in a few lines.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.memory.events import EventKind


@dataclass(frozen=True)
class RequestStory:
    """One request's path through the engine, read from its event log (lesson 08)."""

    request_id: int
    prompt_tokens: int
    admitted: tuple[int, ...]  # the steps at which it got blocks (again after each preemption)
    preempted: tuple[int, ...]  # the steps at which it lost them
    finished: int | None  # the step it ended in; None if refused
    finish_reason: str  # "stop", "length", or "refused"
    refusal: str | None
    tokens: tuple[int, ...]
    recomputed_tokens: int  # tokens whose K and V were thrown away by preemptions and computed again

    @property
    def waited_steps(self) -> int:
        """Steps spent in the queue before its first admission."""
        return self.admitted[0] if self.admitted else 0


def request_stories(engine: LLMEngine) -> list[RequestStory]:
    """Every request the engine was given, from its event log (one sample per request).

    A preempted sequence had its prompt and every token it had written so far in the pool, all but
    the last one computed: prompt + written - 1 tokens are recomputed when it returns. A sequence
    writes one token per step from each admission on (each prompt computed in one step, as in
    lesson 08, where prompts are far below the step's token budget).
    """
    by_seq: dict[int, dict[EventKind, list[int]]] = {}
    for event in engine.events.events:
        if event.seq_id is not None:
            by_seq.setdefault(event.seq_id, {}).setdefault(event.kind, []).append(event.step)
    stories = []
    for rid, request in engine.requests.items():
        out = request.output()
        steps = by_seq.get(request.seqs[0].seq_id, {}) if request.seqs else {}
        admitted, preempted = steps.get(EventKind.ADMIT, []), steps.get(EventKind.PREEMPT, [])
        prompt = len(request.prompt_token_ids)
        # Tokens written by each preemption: one per step since each admission, counted over all of them.
        written = list(
            itertools.accumulate(p - a for a, p in zip(admitted, preempted, strict=False))
        )  # the last admission may run to the end
        recomputed = sum(prompt + w - 1 for w in written)
        finished = steps.get(EventKind.FINISH, [None])[-1]
        reason = "refused" if out.refusal else (out.finish_reasons[0] if out.finish_reasons else "")
        stories.append(
            RequestStory(
                rid,
                prompt,
                tuple(admitted),
                tuple(preempted),
                finished,
                reason,
                out.refusal,
                tuple(out.tokens),
                recomputed,
            )
        )
    return stories


def occupancy(engine: LLMEngine) -> tuple[list[int], list[int], list[int]]:
    """Blocks held, requests running and requests waiting at the end of every step, from the event log.

    Without forks or prefix caching (lesson 08) every FREE returns one block to the pool.
    """
    num_steps = engine.num_steps
    blocks, running, done = [0] * num_steps, [0] * num_steps, [0] * num_steps
    moves = {
        EventKind.ALLOCATE: (blocks, 1),
        EventKind.FREE: (blocks, -1),
        EventKind.ADMIT: (running, 1),
        EventKind.PREEMPT: (running, -1),
        EventKind.FINISH: (running, -1),
    }
    for event in engine.events.events:
        if event.kind in moves:
            series, sign = moves[event.kind]
            series[event.step] += sign
        if event.kind is EventKind.FINISH:
            done[event.step] += 1
    served = sum(1 for r in engine.requests.values() if r.refusal is None)
    blocks, running, done = (list(itertools.accumulate(x)) for x in (blocks, running, done))
    waiting = [served - r - d for r, d in zip(running, done, strict=True)]
    return blocks, running, waiting
