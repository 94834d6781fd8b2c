"""A sequence and its block table: logical blocks mapped to physical ones (lessons 10-11).

The sequence owns its token ids and its ``block_table`` (physical block ids, one per logical
block of ``block_size`` tokens). ``num_computed_tokens`` counts the tokens whose K/V already
sit in the pool; the next forward pass computes the tokens after them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class SequenceStatus(Enum):
    """Where a sequence is in its life (lesson 08)."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """One token stream with its block table (lesson 10)."""

    seq_id: int
    token_ids: list[int]
    num_prompt_tokens: int
    block_size: int
    block_table: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0  # how many of the computed tokens came from the prefix cache
    block_hashes: list[bytes] = field(default_factory=list)  # one per full, computed block
    status: SequenceStatus = SequenceStatus.WAITING
    cumulative_logprob: float = 0.0  # beam search ranks sequences by this

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_blocks(self) -> int:
        """Blocks needed to hold every token of the sequence."""
        return (self.num_tokens + self.block_size - 1) // self.block_size

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def last_block_num_tokens(self) -> int:
        return self.num_tokens - (self.num_blocks - 1) * self.block_size

    def block_tokens(self, index: int) -> list[int]:
        """The token ids held by logical block ``index``."""
        return self.token_ids[index * self.block_size:(index + 1) * self.block_size]

    def slot(self, position: int) -> int:
        """The pool slot (physical block * block_size + offset) that holds token ``position``."""
        return self.block_table[position // self.block_size] * self.block_size + position % self.block_size
