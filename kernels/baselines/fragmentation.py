"""Reservation versus paging on one request trace: where the memory goes (lessons 09 and 11).

Both allocators serve the same requests, first come first served, one token per running
request per step. Every step the memory is split into: token slots holding K/V (``used``),
slots reserved for tokens not yet generated (``reserved_future``), slots that will never hold
a token (``internal``: a reservation beyond the final length, or the unused tail of a last
block), free slots while a request waits (``external``: memory exists but cannot be used) and
free slots while nobody waits (``idle``, not waste). Utilisation is used / (all but idle).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kvcourse.kernels.baselines.reservation import ReservationAllocator
from kvcourse.kernels.engine.sequence import Sequence
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when it arrives, its prompt, its (future) answer, what it may reserve."""

    arrival_step: int
    num_prompt_tokens: int
    num_output_tokens: int
    max_len: int

    def __post_init__(self) -> None:
        if min(self.num_prompt_tokens, self.num_output_tokens) < 1 or self.arrival_step < 0:
            raise ValueError(f"invalid trace request {self}")
        if self.final_len > self.max_len:
            raise ValueError(f"final length {self.final_len} exceeds max_len {self.max_len}")

    @property
    def final_len(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens


def mixed_length_trace(num_requests: int = 200, max_len: int = 2048, arrivals_per_step: int = 4,
                       seed: int = 0) -> list[TraceRequest]:
    """Prompts and answers of widely mixed lengths (log-normal); each request reserves its prompt
    plus the answer limit its client asked for (256, 512 or 1024 tokens), capped at ``max_len``."""
    rng = random.Random(seed)
    trace = []
    for i in range(num_requests):
        prompt = min(max_len // 2, max(1, int(rng.lognormvariate(5.0, 1.0))))
        limit = min(max_len - prompt, rng.choice([256, 512, 1024]))
        output = min(limit, max(1, int(rng.lognormvariate(4.5, 1.0))))
        trace.append(TraceRequest(i // arrivals_per_step, prompt, output, prompt + limit))
    return trace


@dataclass
class MemoryReport:
    """Slot-steps in each category, summed over the run, and derived shares (lesson 09)."""

    name: str
    num_slots: int
    used: int = 0
    reserved_future: int = 0
    internal: int = 0
    external: int = 0
    idle: int = 0
    num_steps: int = 0
    num_preemptions: int = 0
    running_per_step: list[int] = field(default_factory=list)

    @property
    def busy(self) -> int:
        return self.used + self.reserved_future + self.internal + self.external

    @property
    def utilisation(self) -> float:
        return self.used / self.busy if self.busy else 0.0

    def share(self, category: str) -> float:
        return getattr(self, category) / self.busy if self.busy else 0.0

    @property
    def mean_running(self) -> float:
        return sum(self.running_per_step) / max(1, len(self.running_per_step))

    def as_dict(self) -> dict:
        return {"name": self.name, "num_slots": self.num_slots, "num_steps": self.num_steps,
                "utilisation": self.utilisation, "internal_share": self.share("internal"),
                "external_share": self.share("external"), "reserved_future_share": self.share("reserved_future"),
                "mean_running": self.mean_running, "num_preemptions": self.num_preemptions}


def simulate_reservation(trace: list[TraceRequest], num_slots: int) -> MemoryReport:
    """Each request reserves ``max_len`` contiguous slots, first fit."""
    allocator = ReservationAllocator(num_slots)
    report = MemoryReport("reservation", num_slots)
    pending = sorted(enumerate(trace), key=lambda p: p[1].arrival_step)
    waiting: list[int] = []
    lengths: dict[int, int] = {}  # running request -> tokens held
    step = 0
    while pending or waiting or lengths:
        while pending and pending[0][1].arrival_step <= step:
            waiting.append(pending.pop(0)[0])
        while waiting and allocator.can_allocate(trace[waiting[0]].max_len):
            rid = waiting.pop(0)
            allocator.allocate(rid, trace[rid].max_len)
            lengths[rid] = trace[rid].num_prompt_tokens
        for rid in lengths:
            lengths[rid] += 1
        report.used += sum(lengths.values())
        report.reserved_future += sum(trace[r].final_len - n for r, n in lengths.items())
        report.internal += sum(trace[r].max_len - trace[r].final_len for r in lengths)
        free = allocator.num_free_slots
        if waiting:
            report.external += free
        else:
            report.idle += free
        report.running_per_step.append(len(lengths))
        for rid in [r for r, n in lengths.items() if n >= trace[r].final_len]:
            del lengths[rid]
            allocator.free(rid)
        step += 1
    report.num_steps = step
    return report


def simulate_paging(trace: list[TraceRequest], num_blocks: int, block_size: int = 16) -> MemoryReport:
    """Blocks on demand from the real block manager; the newest request is preempted when none is free."""
    manager = KVCacheManager(num_blocks, block_size)
    report = MemoryReport("paging", num_blocks * block_size)
    pending = sorted(enumerate(trace), key=lambda p: p[1].arrival_step)
    waiting: list[Sequence] = []
    running: list[Sequence] = []
    step = 0
    while pending or waiting or running:
        while pending and pending[0][1].arrival_step <= step:
            rid, req = pending.pop(0)
            # the prefill step also produces the first answer token, so it needs a slot at admission
            waiting.append(Sequence(rid, [0] * (req.num_prompt_tokens + 1), req.num_prompt_tokens, block_size))
        for seq in running:
            seq.token_ids.append(0)
            while not manager.can_append(seq):
                victim = running.pop()  # the newest gives way and recomputes later
                manager.free(victim)
                del victim.token_ids[victim.num_prompt_tokens + 1:]
                waiting.insert(0, victim)
                report.num_preemptions += 1
                if victim is seq:
                    break
            if seq in running:
                manager.append_slot(seq)
        while waiting and manager.can_allocate(waiting[0]):
            seq = waiting.pop(0)
            manager.allocate(seq)
            running.append(seq)
        for seq in running:
            seq.num_computed_tokens = seq.num_tokens
        used = sum(s.num_tokens for s in running)
        report.used += used
        report.internal += manager.num_used_blocks * block_size - used
        free = manager.num_free_blocks * block_size
        if waiting:
            report.external += free
        else:
            report.idle += free
        report.running_per_step.append(len(running))
        for seq in [s for s in running if s.num_tokens >= trace[s.seq_id].final_len]:
            running.remove(seq)
            manager.free(seq)
        step += 1
    report.num_steps = step
    if manager.num_free_blocks != num_blocks:
        raise RuntimeError(f"the paging replay leaked {manager.num_used_blocks} blocks")
    return report
