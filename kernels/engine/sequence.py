"""A sequence and its block table: logical blocks mapped to physical ones (lessons 10-11).

The sequence owns its token ids and its ``block_table`` (physical block ids, one per logical
block of ``block_size`` tokens). Two counts, used with one meaning throughout the engine:
``num_computed_tokens`` is how many leading tokens have their K/V in the pool now (the next
forward pass computes the tokens after them); ``num_cached_tokens`` is how many of those were
found in the prefix cache at admission instead of being computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import torch

from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.engine.sampling import SamplingParams


class SequenceStatus(Enum):
    """Where a sequence is in its life (lesson 08)."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(Enum):
    """Why a sequence stopped: its stop token, its length budget, or an abort (lesson 08)."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


@dataclass(eq=False)
class Sequence:
    """One token stream with its block table (lesson 10)."""

    seq_id: int
    token_ids: list[int]
    num_prompt_tokens: int
    block_size: int
    params: SamplingParams = field(default_factory=SamplingParams)
    request_id: int | None = None
    generator: torch.Generator | None = None  # this sample's own random stream (lesson 12)
    block_table: list[int] = field(default_factory=list)
    group_tables: list[list[int]] = field(default_factory=list)  # one per group of layers, with windows only
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    block_hashes: list[bytes] = field(default_factory=list)  # one per full, computed block
    status: SequenceStatus = SequenceStatus.WAITING
    finish_reason: FinishReason | None = None
    cumulative_logprob: float = 0.0  # beam search ranks sequences by this
    fork_generators: list[torch.Generator | None] = field(default_factory=list)  # streams of samples to fork
    arrival: int = 0  # the engine step at which its request was added (the scheduling policy sees it)
    num_preemptions: int = 0
    num_scheduled_tokens: int = 0  # this step's count, set before blocks are asked for (windows allocate by it)
    num_draft_tokens: int = 0  # speculation: unverified drafts at the end of token_ids, from schedule to update

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_blocks(self) -> int:
        """Blocks needed to hold every token of the sequence."""
        return ceil_div(self.num_tokens, self.block_size)

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def num_pending_forks(self) -> int:
        """Samples still to split off this sequence: n - 1 until its first token, then 0 (lesson 12)."""
        return self.params.n - 1 if self.num_completion_tokens == 0 else 0

    def block_tokens(self, index: int) -> list[int]:
        """The token ids held by logical block ``index``."""
        return self.token_ids[index * self.block_size : (index + 1) * self.block_size]

    def slot(self, position: int) -> int:
        """The pool slot (physical block * block_size + offset) that holds token ``position``."""
        return self.block_table[position // self.block_size] * self.block_size + position % self.block_size

    def fork(self, seq_id: int, token_ids: list[int], generator: torch.Generator | None = None) -> Sequence:
        """A sibling with the same prompt, params and request, drawing from ``generator``; it gets
        blocks from the manager's fork."""
        return Sequence(
            seq_id,
            token_ids,
            self.num_prompt_tokens,
            self.block_size,
            self.params,
            self.request_id,
            generator,
            arrival=self.arrival,
        )
