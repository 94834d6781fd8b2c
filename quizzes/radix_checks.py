"""Lesson 26's parameterised quick checks: the prompt tokens a chat turn finds in the prefix cache, with the radix
tree and with the hash chain (which keeps answers' full blocks), when nothing was evicted.

A turn's prompt is the previous prompt (``prev_prompt`` tokens), the model's answer (``answer_tokens``) and the
new message. The previous turn computed its prompt and its answer but the answer's last token, which was sampled
and never fed, so ``prev_prompt + answer_tokens - 1`` tokens hold K/V; the radix tree finds them all (to the token,
its partly filled last block kept), the hash chain the whole blocks among them. The draws keep that count off a
block boundary and the answer longer than a block, so no named slip lands on the key
(tests/quizzes/test_quiz_bank_26.py checks every draw, and the engine's counts for one).
"""

from __future__ import annotations

from typing import Any


def computed_tokens(values: dict[str, Any]) -> int:
    """Tokens of the previous turn that hold K/V: its prompt and its answer but the answer's last token."""
    return int(values["prev_prompt"]) + int(values["answer_tokens"]) - 1


def radix_found(values: dict[str, Any]) -> float:
    """The radix tree: every computed token of the previous turn."""
    return computed_tokens(values)


def hash_found(values: dict[str, Any]) -> float:
    """The hash chain: the whole blocks among them."""
    block = int(values["block_size"])
    return computed_tokens(values) // block * block
