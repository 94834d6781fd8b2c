"""Who is admitted next, and who gives way when blocks run out: the scheduling policy (lessons 08, 14, lab C).

The scheduler keeps the mechanics: the token budget of a step, the sequence limit, the ask/do pairs
with the KV-cache manager, recompute preemption. The policy makes the two choices, seeing each
sequence as a ``SeqView`` (plain numbers, nothing it could change):
- ``choose_admission(waiting, free_blocks)``: the index of the waiting sequence to admit next, None
  to admit no one more this step, or ``Refuse(index, reason)`` to turn a request away for good (the
  reason reaches its output). The scheduler asks again after each admission while the budget and the
  sequence limit allow; a choice that does not fit in the free blocks ends this step's admissions.
- ``choose_victim(running, needy)``: the ``seq_id`` of the running sequence to preempt because
  ``needy`` cannot get a block for its next token (``needy`` itself is allowed: it waits then).
A choice the scheduler cannot honour raises ``SchedulingPolicyError`` with the reason.

``FCFSPolicy`` is the engine's own: first come, first served (nobody overtakes the head of the queue),
and the newest running sequence gives way, as in vLLM. ``LongestPrefixFirst`` admits by cached prefix (issue 46).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SeqView:
    """One sequence as the scheduling policy sees it (a snapshot)."""

    seq_id: int
    request_id: int | None
    arrival: int  # the engine step at which its request was added
    num_prompt_tokens: int
    num_tokens: int  # prompt and answer so far
    num_computed_tokens: int  # tokens whose K/V are in the pool now
    max_new_tokens: int
    num_samples: int  # n: a request is admitted with room for all its samples
    num_blocks_held: int
    num_blocks_needed: int  # waiting: free blocks admission takes; running: free blocks its next step takes
    num_preemptions: int  # how often it has been preempted so far
    preempted_this_step: bool  # a sequence preempted in this step cannot be admitted again before the next
    now: int = 0  # the engine step being scheduled (now - arrival: the steps it has been in the engine)
    num_prefix_hit_tokens: int = 0  # waiting: prompt tokens admission would find in the prefix cache now


@dataclass(frozen=True)
class Refuse:
    """Turn the waiting sequence at ``index`` away for good, telling its request why."""

    index: int
    reason: str


class SchedulingPolicy(Protocol):
    """The two choices of the scheduler (lab C)."""

    def choose_admission(self, waiting: list[SeqView], free_blocks: int) -> int | Refuse | None: ...

    def choose_victim(self, running: list[SeqView], needy: SeqView) -> int: ...


class SchedulingPolicyError(RuntimeError):
    """The policy made a choice the scheduler cannot carry out; the message says which and why."""


class FCFSPolicy:
    """First come, first served; the newest running sequence is preempted first (vLLM's order)."""

    def choose_admission(self, waiting: list[SeqView], free_blocks: int) -> int | Refuse | None:
        if not waiting or waiting[0].preempted_this_step:
            return None
        return 0

    def choose_victim(self, running: list[SeqView], needy: SeqView) -> int:
        return running[-1].seq_id


class LongestPrefixFirst(FCFSPolicy):
    """SGLang's ``lpm``: admit the waiting sequence whose prompt finds the longest prefix in the cache (ties: first
    come), before it is evicted; preempt as FCFS does. A request that shares nothing can wait while others hit."""

    def choose_admission(self, waiting: list[SeqView], free_blocks: int) -> int | Refuse | None:
        ready = [i for i, view in enumerate(waiting) if not view.preempted_this_step]
        return max(ready, key=lambda i: (waiting[i].num_prefix_hit_tokens, -i)) if ready else None
