"""One step's contract: the batch the scheduler fixes once, that the runner reads and update consumes (lesson 14).

A step reads as three calls over this one object, as vLLM's ``SchedulerOutput``:
``batch = scheduler.schedule()``, ``logits = runner.run(batch)``, ``scheduler.update(batch, sampled)``.
The batch says, once, which sequences run, how many new tokens each computes, which block
copies go first, and which sequences are sampled: those whose new tokens reach their last
token (a prompt chunk that stops short of the end needs no logits). Nothing downstream
recomputes that, so nothing can read it after ``update`` has changed what it depends on.
Beam search and ``generate(cache="paged")`` build the same object and end the same way
(``finish_pass``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcourse.kernels.engine.sequence import Sequence
from kvcourse.kernels.memory.block_manager import BlockManager
from kvcourse.kernels.memory.kv_pool import BlockCopy


@dataclass(frozen=True)
class ScheduledBatch:
    """Sequences in batch order, the tokens each computes, and the rows that get logits (fixed when made)."""

    seqs: tuple[Sequence, ...]
    num_scheduled_tokens: tuple[int, ...]
    copies: tuple[BlockCopy, ...] = ()
    preempted: tuple[Sequence, ...] = ()
    sampled: tuple[int, ...] = field(init=False)  # batch positions whose last token is computed: logits rows
    sampled_seqs: tuple[Sequence, ...] = field(init=False)  # the sequences at those positions, in row order

    def __post_init__(self) -> None:
        if len(self.seqs) != len(self.num_scheduled_tokens):
            raise ValueError(f"{len(self.seqs)} sequences but {len(self.num_scheduled_tokens)} token counts")
        sampled = tuple(i for i, (seq, n) in enumerate(zip(self.seqs, self.num_scheduled_tokens, strict=True))
                        if seq.num_computed_tokens + n == seq.num_tokens)
        object.__setattr__(self, "sampled", sampled)  # fixed here, once: nothing downstream recomputes it
        object.__setattr__(self, "sampled_seqs", tuple(self.seqs[i] for i in sampled))

    @classmethod
    def of(cls, seqs: list[Sequence], num_scheduled_tokens: list[int], copies: list[BlockCopy] | None = None,
           preempted: list[Sequence] | None = None) -> ScheduledBatch:
        return cls(tuple(seqs), tuple(num_scheduled_tokens), tuple(copies or ()), tuple(preempted or ()))

    @property
    def num_tokens(self) -> int:
        return sum(self.num_scheduled_tokens)

    @property
    def is_empty(self) -> bool:
        return not self.seqs


def finish_pass(batch: ScheduledBatch, kv_cache_manager: BlockManager) -> None:
    """After the forward pass: each sequence's new tokens are computed, and newly full blocks cached."""
    for seq, n in zip(batch.seqs, batch.num_scheduled_tokens, strict=True):
        seq.num_computed_tokens += n
        kv_cache_manager.cache_full_blocks(seq)
