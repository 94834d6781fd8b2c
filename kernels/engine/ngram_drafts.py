"""Prompt-lookup drafts: guess the next tokens by finding the last few tokens earlier in the sequence (issue 46).

A model asked to repeat, quote or edit a text writes long runs that are already in its prompt. Prompt lookup
(n-gram speculation, as vLLM's ``ngram`` method and Hugging Face's ``prompt_lookup_num_tokens``) takes the last
``n`` tokens of the sequence (prompt and output), finds them earlier in it, and proposes the ``k`` tokens that
followed there: no draft model, a search over token ids. ``n`` goes from ``max_ngram`` down to ``min_ngram``;
the first size with a match wins, and among its matches the latest (the nearest context). The model then checks
the drafts in one forward pass (speculation.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvcourse.kernels.checks import check_positive_int


@dataclass(frozen=True)
class SpeculativeConfig:
    """N-gram speculation for greedy requests: up to ``num_tokens`` drafts a step, found by matching the last
    ``max_ngram`` ... ``min_ngram`` tokens earlier in the sequence (``EngineConfig.speculation``; None is off)."""

    num_tokens: int = 4  # k: drafts proposed, and verified, per step
    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self) -> None:
        for name in ("num_tokens", "max_ngram", "min_ngram"):
            check_positive_int(name, getattr(self, name))
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram ({self.min_ngram}) must not exceed max_ngram ({self.max_ngram})")


def propose_ngram_drafts(token_ids: Sequence[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of the sequence's last n tokens, trying n
    from ``max_ngram`` down to ``min_ngram``; ``[]`` when no suffix recurs (or ``k`` is 0).

    >>> propose_ngram_drafts([1, 2, 3, 4, 9, 1, 2], k=2)
    [3, 4]
    """
    tokens = list(token_ids)
    length = len(tokens)
    if k <= 0:
        return []
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        suffix = tokens[length - n :]
        # Latest start first; the match must end before the suffix starts its own copy (start + n < length).
        for start in range(length - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + k]
    return []
