"""One step's contract as data: what the scheduler fixed for this step, that the runner reads (lesson 14).

A step reads as three calls over this one record, as vLLM v1's ``SchedulerOutput``:
``batch = scheduler.schedule()``, ``logits = runner.run(batch)``, ``scheduler.update(batch, sampled)``.
The record holds plain values, never a live ``Sequence``: for each scheduled sequence its id, its
request, the token ids this step computes and the position of the first, its block table, and how
many logits rows it needs; then the block copies that go first, the sequences preempted and the
requests refused while it was made (with the reason). Nothing downstream can change it or read a
value that ``update`` has since moved on. Beam search and ``generate(cache="paged")`` build the same
record from their sequences (``ScheduledBatch.of``) and end the pass the same way (``finish_pass``).

``block_tables`` is one table per group of layers: one group without windows; with ``EngineConfig.layer_windows``
each group of layers with one window keeps its own (engine/windows.py). ``num_logits`` counts rows, so a step
that verifies draft tokens asks for several.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvcourse.kernels.engine.sequence import Sequence
from kvcourse.kernels.memory.block_manager import BlockManager
from kvcourse.kernels.memory.kv_pool import BlockCopy


@dataclass(frozen=True)
class ScheduledSeq:
    """One sequence's part of a step, as values."""

    seq_id: int
    request_id: int | None
    new_token_ids: tuple[int, ...]  # the tokens whose K/V this step computes, in order
    start_position: int  # the position of the first of them (tokens already computed)
    block_tables: tuple[tuple[int, ...], ...]  # block ids in logical order, one table per group of layers
    num_logits: int  # logits rows it needs: 1 where its last token is computed (1 + drafts), else 0
    num_draft_tokens: int = 0  # speculation: the last new tokens are drafts to verify (speculation.py)

    @property
    def num_new_tokens(self) -> int:
        return len(self.new_token_ids)

    @property
    def block_table(self) -> tuple[int, ...]:
        """The table of the first group of layers (the only one without windows)."""
        return self.block_tables[0]

    @classmethod
    def of(cls, seq: Sequence, num_tokens: int) -> ScheduledSeq:
        """``seq``'s next ``num_tokens`` uncomputed tokens, with its table as it stands now."""
        start = seq.num_computed_tokens
        if not 0 < num_tokens <= seq.num_tokens - start:
            raise ValueError(
                f"sequence {seq.seq_id} has {seq.num_tokens - start} uncomputed tokens; cannot schedule {num_tokens}"
            )
        new = tuple(seq.token_ids[start : start + num_tokens])
        tables = tuple(map(tuple, seq.group_tables)) if seq.group_tables else (tuple(seq.block_table),)
        last = start + num_tokens == seq.num_tokens
        if seq.num_draft_tokens and not last:
            raise ValueError(f"sequence {seq.seq_id}: drafts are verified together with the token before them")
        return cls(
            seq.seq_id, seq.request_id, new, start, tables, int(last) + seq.num_draft_tokens, seq.num_draft_tokens
        )


@dataclass(frozen=True)
class Refusal:
    """A request the scheduler turned away while it made the step, and why (its output shows the reason)."""

    seq_id: int
    request_id: int | None
    reason: str


@dataclass(frozen=True)
class ScheduledBatch:
    """The sequences of one step in batch order, the copies before it, and what the scheduler turned away."""

    seqs: tuple[ScheduledSeq, ...]
    copies: tuple[BlockCopy, ...] = ()
    preempted: tuple[int, ...] = ()  # seq ids preempted while the step was made
    refused: tuple[Refusal, ...] = ()  # requests turned away, for the engine to end

    @classmethod
    def of(
        cls,
        seqs: Iterable[Sequence],
        num_scheduled_tokens: Iterable[int],
        copies: Iterable[BlockCopy] = (),
        preempted: Iterable[Sequence] = (),
        refused: Iterable[tuple[Sequence, str]] = (),
    ) -> ScheduledBatch:
        """The record of live sequences as they stand now, each computing its count of new tokens."""
        seqs, counts = list(seqs), list(num_scheduled_tokens)
        if len(seqs) != len(counts):
            raise ValueError(f"{len(seqs)} sequences but {len(counts)} token counts")
        return cls(
            tuple(ScheduledSeq.of(s, n) for s, n in zip(seqs, counts, strict=True)),
            tuple(copies),
            tuple(s.seq_id for s in preempted),
            tuple(Refusal(s.seq_id, s.request_id, why) for s, why in refused),
        )

    @property
    def num_scheduled_tokens(self) -> tuple[int, ...]:
        return tuple(s.num_new_tokens for s in self.seqs)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_scheduled_tokens)

    @property
    def sampled(self) -> tuple[int, ...]:
        """Batch positions that get logits rows, in row order."""
        return tuple(i for i, s in enumerate(self.seqs) if s.num_logits)

    @property
    def sampled_ids(self) -> tuple[int, ...]:
        """The seq ids at those positions, in row order."""
        return tuple(self.seqs[i].seq_id for i in self.sampled)

    @property
    def is_empty(self) -> bool:
        return not self.seqs


def finish_pass(batch: ScheduledBatch, seqs: Iterable[Sequence], kv_cache_manager: BlockManager) -> None:
    """After the forward pass: the batch's sequences (``seqs``, in batch order) have their new tokens
    computed, and newly full blocks cached. Drafts are not computed until verified (speculation.py)."""
    for seq, part in zip(seqs, batch.seqs, strict=True):
        if seq.seq_id != part.seq_id or seq.num_computed_tokens != part.start_position:
            raise ValueError(
                f"sequence {seq.seq_id} is not the one this batch scheduled at that place "
                f"({part.seq_id}, from position {part.start_position})"
            )
        seq.num_computed_tokens += part.num_new_tokens - part.num_draft_tokens
        kv_cache_manager.cache_full_blocks(seq)
