"""Continuous batching: who runs this step, and the bookkeeping once it has run (lessons 08, 12, 14).

``schedule`` first keeps the running sequences going (one decode token each, or the next chunk
of a long prompt), preempting the newest running sequence when blocks run out; then it admits
waiting sequences, oldest first, while the token budget, the sequence limit and the free blocks
allow. A request with n samples is admitted only with room for all n sequences. A preempted
sequence loses its blocks and recomputes later (its full prefix blocks may still be cached).

The two choices in there, who is admitted next and who gives way, belong to a ``SchedulingPolicy``
(policy.py; lab C): ``FCFSPolicy`` unless the engine is given another. The scheduler checks every
choice (policy_choices.py) and carries it out; a policy can also turn a waiting request away, with a reason.

``update`` is everything that follows a forward pass: count the computed tokens, cache newly
full blocks (``batch.finish_pass``), fork the samples of a request after its prompt, append the
sampled tokens and retire the sequences that are done. The batch between the two is one
contract (batch.py): a record of values fixed by ``schedule``, refusals included. Given a ``Speculator``
(speculation.py), ``schedule`` appends drafts to greedy decoding sequences and ``update`` accepts the verified
ones and rolls the cache back past the rest.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field

from kvcourse.kernels.engine.batch import ScheduledBatch, finish_pass
from kvcourse.kernels.engine.policy import FCFSPolicy, SchedulingPolicy, SeqView
from kvcourse.kernels.engine.policy_choices import chosen_admission, chosen_victim, seq_view
from kvcourse.kernels.engine.sequence import FinishReason, Sequence, SequenceStatus
from kvcourse.kernels.engine.speculation import Speculator, drop_drafts
from kvcourse.kernels.engine.stuck import STUCK, short_of_blocks, stuck_sequence
from kvcourse.kernels.memory.block_manager import BlockManager, CopiesOnAdmission
from kvcourse.kernels.memory.events import EventKind, EventLog
from kvcourse.kernels.memory.kv_pool import BlockCopy


@dataclass
class _Draft:
    """The batch while ``schedule`` fills it; sealed into a ScheduledBatch when it is done."""

    seqs: list[Sequence] = field(default_factory=list)
    num_scheduled_tokens: list[int] = field(default_factory=list)
    copies: list[BlockCopy] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    def add(self, seq: Sequence, num_tokens: int) -> None:
        self.seqs.append(seq)
        self.num_scheduled_tokens.append(num_tokens)


class Scheduler:
    """FCFS continuous batching with recompute preemption (lessons 08 and 14)."""

    def __init__(
        self,
        kv_cache_manager: BlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        eos_token_ids: frozenset[int] = frozenset(),
        policy: SchedulingPolicy | None = None,
        events: EventLog | None = None,
        speculator: Speculator | None = None,
    ) -> None:
        self.kv_cache_manager = kv_cache_manager
        self.speculator = speculator
        self.events = events if events is not None else getattr(kv_cache_manager, "events", None) or EventLog()
        self.policy = policy if policy is not None else FCFSPolicy()
        self.refused: list[tuple[Sequence, str]] = []  # turned away while a step is made; it goes into the batch
        self._in_flight: tuple[ScheduledBatch, list[Sequence]] | None = None  # the last batch, until its update
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.eos_token_ids = eos_token_ids
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._seq_ids = itertools.count()

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_reserved_seqs(self) -> int:
        """Running sequences plus the samples they will fork: what ``max_num_seqs`` limits."""
        return sum(1 + s.num_pending_forks for s in self.running)

    def next_seq_id(self) -> int:
        return next(self._seq_ids)

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def _run(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """Retire a running or waiting sequence and give its blocks back."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.kv_cache_manager.free(seq)
        seq.status, seq.finish_reason = SequenceStatus.FINISHED, reason
        self.events.record(EventKind.FINISH, seq.seq_id, detail=reason.value)

    def preempt(self, seq: Sequence) -> None:
        """Take all blocks back; the sequence waits at the head of the queue and recomputes."""
        self.running.remove(seq)
        drop_drafts(seq)
        self.kv_cache_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)
        self.events.record(EventKind.PREEMPT, seq.seq_id, detail="recompute")

    # ---- before the forward pass ----------------------------------------------------------------

    def schedule(self) -> ScheduledBatch:
        """This step's batch: who runs, how many tokens each, who is sampled, fixed once (batch.py)."""
        draft = _Draft()
        budget = self._schedule_running(draft, self.max_num_batched_tokens)
        stop = self._schedule_waiting(draft, budget)
        if not draft.seqs and not draft.preempted and not self.running and self.waiting:
            self._refuse_stuck(stop)  # else no step would ever change anything: the engine would spin
        batch = ScheduledBatch.of(draft.seqs, draft.num_scheduled_tokens, draft.copies, draft.preempted, self.refused)
        self.refused, self._in_flight = [], (batch, draft.seqs)
        return batch

    def live(self, batch: ScheduledBatch) -> list[Sequence]:
        """The sequences ``batch`` schedules, in batch order: for the engine's sampling and ``update``.
        Only the batch this scheduler made last, and only until its ``update``."""
        if self._in_flight is None or self._in_flight[0] is not batch:
            raise ValueError("this batch is not the one this scheduler made last (or it was updated already)")
        return list(self._in_flight[1])

    def _schedule_running(self, batch: _Draft, budget: int) -> int:
        for seq in list(self.running):
            if budget <= 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            if self.speculator is not None:
                self.speculator.draft(seq, budget, self.max_model_len)
            seq.num_scheduled_tokens = min(seq.num_uncomputed_tokens, budget)  # a manager with windows reads it
            while not self.kv_cache_manager.can_append(seq):
                victim = chosen_victim(
                    self.policy, self.kv_cache_manager, self.running, seq, batch.seqs, self.events.step
                )
                self.preempt(victim)
                batch.preempted.append(victim)
                if victim is seq:
                    break
            if seq.status is not SequenceStatus.RUNNING:
                continue
            batch.copies += self.kv_cache_manager.append_slots(seq)
            batch.add(seq, seq.num_scheduled_tokens)
            budget -= batch.num_scheduled_tokens[-1]
        return budget

    def view(self, seq: Sequence, preempted: Collection[Sequence] = ()) -> SeqView:
        """What the policy sees of a sequence (policy_choices.py): blocks needed to admit it, or to append."""
        return seq_view(self.kv_cache_manager, seq, preempted, self.events.step)

    def _refuse(self, seq: Sequence, reason: str) -> None:
        """Turn a waiting sequence away for good; the engine ends its whole request with ``reason``."""
        self.waiting.remove(seq)
        seq.status, seq.finish_reason = SequenceStatus.FINISHED, FinishReason.ABORT
        self.refused.append((seq, reason))
        self.events.record(EventKind.REFUSE, seq.seq_id, detail=reason)

    def _refuse_stuck(self, stop: tuple[Sequence | None, str]) -> None:
        """Nothing runs, nothing was admitted, sequences wait: refuse one, saying why admission stopped
        (stuck.py). If only sequences that have begun their answers are stuck, raise with the cause."""
        stuck = stuck_sequence(self.waiting, stop[0])
        if stuck is None:
            raise RuntimeError(f"nothing runs and no waiting sequence can start again: {stop[1]}")
        self._refuse(stuck, f"{STUCK}: {stop[1]}")

    def _schedule_waiting(self, batch: _Draft, budget: int) -> tuple[Sequence | None, str]:
        """Admit what fits; returns the sequence admission stopped at (if one) and why it stopped."""
        while self.waiting and budget > 0:
            index = chosen_admission(
                self.policy, self.kv_cache_manager, self.waiting, batch.preempted, self._refuse, self.events.step
            )
            if index is None:
                return None, (
                    f"the scheduling policy admitted none of the {len(self.waiting)} waiting sequences "
                    f"({self.kv_cache_manager.num_free_blocks} blocks free)"
                )
            seq = self.waiting[index]
            if self.num_reserved_seqs + 1 + seq.num_pending_forks > self.max_num_seqs:
                return seq, (
                    f"its {1 + seq.num_pending_forks} sequences and the {self.num_reserved_seqs} reserved "
                    f"exceed max_num_seqs = {self.max_num_seqs}"
                )
            if seq in batch.preempted:
                return seq, f"sequence {seq.seq_id} was preempted this step"
            seq.num_scheduled_tokens = min(seq.num_uncomputed_tokens, budget)  # before prefix hits: windows only
            if not self.kv_cache_manager.can_allocate(seq):
                manager = self.kv_cache_manager  # the choice does not fit this step: admissions end here
                return seq, short_of_blocks(
                    seq.seq_id,
                    self.view(seq).num_blocks_needed,
                    manager.num_free_blocks,
                    manager.num_blocks,
                    bool(self.running),
                )
            del self.waiting[index]
            self.kv_cache_manager.allocate(seq)
            if isinstance(self.kv_cache_manager, CopiesOnAdmission):  # a radix index copies a part-matched block
                batch.copies += self.kv_cache_manager.pop_copies()
            self.events.record(
                EventKind.ADMIT, seq.seq_id, detail=f"{seq.num_cached_tokens} tokens from the prefix cache"
            )
            self._run(seq)
            batch.add(seq, min(seq.num_uncomputed_tokens, budget))
            budget -= batch.num_scheduled_tokens[-1]
        return None, "the step's token budget is spent" if self.waiting else "no sequence waits"

    # ---- after the forward pass ------------------------------------------------------------------

    def update(self, batch: ScheduledBatch, sampled: list[list[int]]) -> list[Sequence]:
        """Bookkeeping after the pass; ``sampled`` holds one token list per ``batch.sampled`` row
        (``1 + num_pending_forks`` tokens where samples split). Returns every sequence that got a token."""
        live = self.live(batch)
        sampled_seqs = [live[i] for i in batch.sampled]  # fixed by schedule(), before anything below changes
        if len(sampled) != len(sampled_seqs):
            raise ValueError(f"{len(sampled)} sampled token lists for {len(sampled_seqs)} sampled sequences")
        self._in_flight = None
        finish_pass(batch, live, self.kv_cache_manager)
        grown = []
        for seq, tokens in zip(sampled_seqs, sampled, strict=True):
            if seq.num_draft_tokens and self.speculator is not None:  # the accepted drafts and the bonus token
                self.speculator.accept(seq, tokens, self._append_token)
                grown.append(seq)
                continue
            if len(tokens) != 1 + seq.num_pending_forks:
                raise ValueError(f"sequence {seq.seq_id} needs {1 + seq.num_pending_forks} tokens, got {len(tokens)}")
            family = [seq, *self._fork(seq, len(tokens) - 1)]
            for member, token in zip(family, tokens, strict=True):
                self._append_token(member, token)
            grown += family
        return grown

    def _fork(self, parent: Sequence, num_children: int) -> list[Sequence]:
        """Parallel sampling: after the prompt, children share the parent's blocks (lesson 12)."""
        if len(parent.fork_generators) != num_children:
            raise ValueError(
                f"sequence {parent.seq_id} has {len(parent.fork_generators)} generators "
                f"for {num_children} samples to fork"
            )
        children = []
        for generator in parent.fork_generators:
            child = parent.fork(self.next_seq_id(), list(parent.token_ids), generator)
            self.kv_cache_manager.fork(parent, child)
            self._run(child)
            children.append(child)
        parent.fork_generators = []
        return children

    def _append_token(self, seq: Sequence, token: int) -> None:
        seq.token_ids.append(token)
        if seq.params.stop_on_eos and token in self.eos_token_ids:
            self.finish(seq, FinishReason.STOP)
        elif self._at_length_limit(seq):
            self.finish(seq, FinishReason.LENGTH)

    def _at_length_limit(self, seq: Sequence) -> bool:
        limit = seq.params.max_new_tokens  # None: no limit of its own (the engine always sets one)
        return (limit is not None and seq.num_completion_tokens >= limit) or seq.num_tokens >= self.max_model_len
