"""Continuous batching: who runs this step, within a token budget and the block pool (lessons 08, 14).

Every step the scheduler first keeps the running sequences going (one decode token each, or the
next chunk of a long prompt), preempting the newest running sequence when blocks run out; then
it admits waiting sequences, oldest first, while the token budget, the sequence limit and the
free blocks allow. A preempted sequence loses its blocks and recomputes later (its finished
prefix blocks may still be found in the prefix cache).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kvcourse.kernels.engine.sequence import Sequence, SequenceStatus
from kvcourse.kernels.memory.events import EventKind
from kvcourse.kernels.memory.kv_cache_manager import BlockManager
from kvcourse.kernels.memory.kv_pool import BlockCopy


@dataclass
class ScheduledBatch:
    """One step's work: sequences in batch order and how many new tokens each computes."""

    seqs: list[Sequence] = field(default_factory=list)
    query_lens: list[int] = field(default_factory=list)
    copies: list[BlockCopy] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def is_empty(self) -> bool:
        return not self.seqs


class Scheduler:
    """FCFS continuous batching with recompute preemption (lessons 08 and 14)."""

    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def add_running(self, seq: Sequence) -> None:
        """A forked child that already holds blocks joins the running batch directly."""
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def finish(self, seq: Sequence) -> None:
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
        self.running.remove(seq)
        self.block_manager.events.record(EventKind.FINISH, seq.seq_id)

    def preempt(self, seq: Sequence) -> None:
        """Take all blocks back; the sequence waits at the head of the queue and recomputes."""
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.block_manager.events.record(EventKind.PREEMPT, seq.seq_id, detail="recompute")

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self.max_num_batched_tokens
        self._schedule_running(batch, budget)
        self._schedule_waiting(batch, budget - batch.num_tokens)
        return batch

    def _schedule_running(self, batch: ScheduledBatch, budget: int) -> None:
        queue = list(self.running)
        while queue and budget > 0:
            seq = queue.pop(0)
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            while not self.block_manager.can_append(seq):
                victim = self.running[-1]  # the newest running sequence gives way
                self.preempt(victim)
                batch.preempted.append(victim)
                if victim is seq:
                    break
            if seq.status is not SequenceStatus.RUNNING:
                continue
            batch.copies += self.block_manager.append_slot(seq)
            num_new = min(seq.num_uncomputed_tokens, budget)
            batch.seqs.append(seq)
            batch.query_lens.append(num_new)
            budget -= num_new

    def _schedule_waiting(self, batch: ScheduledBatch, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if seq in batch.preempted or not self.block_manager.can_allocate(seq):
                break  # first come, first served: nobody overtakes the head of the queue
            self.waiting.popleft()
            self.block_manager.allocate(seq)
            self.block_manager.events.record(EventKind.ADMIT, seq.seq_id,
                                             detail=f"{seq.num_cached_tokens} tokens from the prefix cache")
            self.add_running(seq)
            num_new = min(seq.num_uncomputed_tokens, budget)
            batch.seqs.append(seq)
            batch.query_lens.append(num_new)
            budget -= num_new
