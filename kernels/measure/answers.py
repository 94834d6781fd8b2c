"""Two runs' answers compared token by token (lesson 10: the paged engine against the contiguous cache)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvcourse.kernels.measure.agreement import first_difference

__all__ = ["AnswerMatch", "match_answers"]


@dataclass(frozen=True)
class AnswerMatch:
    """How far two runs over the same prompts agree."""

    same_answers: int  # answers identical token for token
    num_answers: int
    same_tokens: int  # positions where both runs wrote the same token
    num_tokens: int
    first_difference: tuple[int, ...]  # per answer: the first position that differs (its length if none)

    def verdict(self, same: str, different: str) -> str:
        """``same`` when every answer matched token for token, else ``different``."""
        return same if self.same_answers == self.num_answers else different


def match_answers(first: Sequence[Sequence[int]], second: Sequence[Sequence[int]]) -> AnswerMatch:
    """Compare answer i of one run with answer i of the other, for every i."""
    if len(first) != len(second):
        raise ValueError(f"{len(first)} answers against {len(second)}: compare the same prompts")
    same_tokens = sum(x == y for a, b in zip(first, second, strict=True) for x, y in zip(a, b, strict=False))
    return AnswerMatch(
        same_answers=sum(list(a) == list(b) for a, b in zip(first, second, strict=True)),
        num_answers=len(first),
        same_tokens=same_tokens,
        num_tokens=sum(max(len(a), len(b)) for a, b in zip(first, second, strict=True)),
        first_difference=tuple(_differs_at(a, b) for a, b in zip(first, second, strict=True)),
    )


def _differs_at(a: Sequence[int], b: Sequence[int]) -> int:
    """``first_difference``, with the shorter length where one answer is the other's beginning or both are equal."""
    at = first_difference(a, b)
    return min(len(a), len(b)) if at is None else at
