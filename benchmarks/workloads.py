"""Realistic serving workloads: prompts of hundreds of tokens, answers of 64-256 (lesson 14).

Four-token prompts make a decode step look cheaper than it is: attention reads every cached
token, so the batch figures are measured at the contexts a chat assistant sees.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PROMPT_TOKENS = (128, 384)
ANSWER_TOKENS = (64, 256)


@dataclass(frozen=True)
class Workload:
    """Seeded prompts of ordinary token ids and, for each, the number of tokens to generate."""

    prompts: list[list[int]]
    answer_lens: list[int]

    @classmethod
    def make(
        cls,
        num_requests: int,
        prompt_tokens: tuple[int, int] = PROMPT_TOKENS,
        answer_tokens: tuple[int, int] = ANSWER_TOKENS,
        seed: int = 0,
        vocab: tuple[int, int] = (100, 20000),
    ) -> Workload:
        rng = random.Random(seed)
        prompts = [[rng.randrange(*vocab) for _ in range(rng.randint(*prompt_tokens))] for _ in range(num_requests)]
        return cls(prompts, [rng.randint(*answer_tokens) for _ in range(num_requests)])

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(map(len, self.prompts))

    @property
    def num_answer_tokens(self) -> int:
        return sum(self.answer_lens)

    def describe(self) -> dict:
        return {
            "requests": len(self),
            "prompt_tokens": [min(map(len, self.prompts)), max(map(len, self.prompts))],
            "prompt_tokens_total": self.num_prompt_tokens,
            "answer_tokens": [min(self.answer_lens), max(self.answer_lens)],
            "answer_tokens_total": self.num_answer_tokens,
        }
