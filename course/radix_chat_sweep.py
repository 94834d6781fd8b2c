"""How large lesson 26's chat on SmolLM2 is: conversations, turns and answer tokens.

A learner's run serves 4 conversations of 4 turns with answers of 16 tokens; the suite's headless run
(kvcourse.kernel_env.running_headless) 3 conversations of 3 turns with answers of 8, so the lesson keeps within its
time on 2 cores. The pool sweep needs no model (the engine's scheduler and KV-cache manager replay the answers),
so its size is the same for both.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernel_env import running_headless


@dataclass(frozen=True)
class ChatRun:
    conversations: int  # of the lesson's list, from its start
    turns: int  # per conversation
    answer_tokens: int


def chat_run_size() -> ChatRun:
    """Lesson 26's SmolLM2 run: 4 x 4 turns of 16 tokens for people, 3 x 3 of 8 headless."""
    if running_headless():
        return ChatRun(3, 3, 8)
    return ChatRun(4, 4, 16)
