"""How large lesson 21's serving sweep is: the long document, the chatting users' answers, the token budgets.

A learner's run serves a 2,000-token document among users answering 40 tokens each, at six budgets; the suite's
headless run (kvcourse.kernel_env.running_headless) a 512-token one among 20-token answers, at four budgets, so
the lesson keeps within its time on two cores. The first budget holds the whole document: no chunking.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernel_env import running_headless


@dataclass(frozen=True)
class ServingSweep:
    document_tokens: int
    chat_answer_tokens: int
    budgets: tuple[int, ...]  # tokens per step, from no chunking down to small chunks


def serving_sweep_size() -> ServingSweep:
    """Lesson 21's sweep: the full one for people, a shorter one in a headless run (tests)."""
    if running_headless():
        return ServingSweep(512, 20, (2048, 128, 64, 32))
    return ServingSweep(2000, 40, (2048, 1024, 512, 256, 128, 64))
