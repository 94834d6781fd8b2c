"""How large lesson 28's speculative decoding run is: new tokens per answer and timed rounds.

A learner's run writes 64 new tokens per answer, three interleaved rounds, the fastest kept; the suite's headless
run (kvcourse.kernel_env.running_headless) 32 tokens, one round, so the lesson keeps within its time on 2 cores
(each round serves two tasks with and without drafts, batch 1, a token at a time on a CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernel_env import running_headless


@dataclass(frozen=True)
class SpeculationRun:
    new_tokens: int  # tokens each answer writes
    rounds: int  # interleaved timed rounds; the fastest is kept


def speculation_run_size() -> SpeculationRun:
    """Lesson 28's run: 64 new tokens, three rounds for people; 32 tokens, one round headless."""
    if running_headless():
        return SpeculationRun(32, 1)
    return SpeculationRun(64, 3)
