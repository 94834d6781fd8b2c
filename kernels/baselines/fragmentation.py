"""Reservation versus paging replayed on one request trace (lessons 09, 11, 14, 16).

``ReservationReplay`` gives each request one contiguous region sized for the longest answer it
may write; ``PagingReplay`` serves the trace with the engine's own scheduler and KV-cache manager,
blocks on demand, step for step as LLMEngine would. Both record what ``replay.py`` defines, step
by step.
"""

from __future__ import annotations

from kvcourse.kernels.baselines.replay import (  # noqa: F401  (re-exported: lessons and simulators import them here)
    CATEGORIES,
    MemoryReport,
    Segment,
    StepRecord,
    TurnedAway,
    _Replay,
)
from kvcourse.kernels.baselines.reservation import Region, ReservationAllocator
from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.engine.policy import SchedulingPolicy
from kvcourse.kernels.engine.sampling import SamplingParams
from kvcourse.kernels.engine.scheduler import Scheduler
from kvcourse.kernels.engine.sequence import Sequence, SequenceStatus
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager
from kvcourse.kernels.workload import TraceRequest

DUMMY_TOKEN = 0  # the paging replay's every token: no model reads it, and no EOS set holds it


class ReservationReplay(_Replay):
    """Each request reserves prompt + answer limit contiguous slots, first fit (lesson 09)."""

    name = "reservation"

    def __init__(self, trace: list[TraceRequest], num_slots: int) -> None:
        too_long = [r.max_len for r in trace if r.max_len > num_slots]
        if too_long:
            raise ValueError(f"a request reserves {max(too_long)} slots, more than the pool's {num_slots}")
        super().__init__(trace, num_slots)
        self.allocator = ReservationAllocator(num_slots)
        self.waiting: list[int] = []
        self.lengths: dict[int, int] = {}  # running request -> tokens written
        self._refused: set[int] = set()
        self.blocked: TurnedAway | None = None  # the head of the queue, refused this step with enough free
        self._recorded: list[tuple[int, int]] = []  # (request, tokens written) as the last step recorded them
        self._recorded_regions: dict[int, Region] = {}
        self._free_category = "idle"

    def _admit(self) -> None:
        while self.waiting:
            rid = self.waiting[0]
            need = self.trace[rid].max_len
            if not self.allocator.can_allocate(need):
                free = self.allocator.num_free_slots
                if free >= need:
                    self.blocked = TurnedAway(self.step_index, rid, need, free, self.allocator.largest_gap)
                    if rid not in self._refused:  # the report keeps each request's first refusal
                        self._refused.add(rid)
                        self.report.turned_away.append(self.blocked)
                return
            self.allocator.allocate(self.waiting.pop(0), need)
            self.lengths[rid] = self.trace[rid].num_prompt_tokens

    def step(self) -> StepRecord:
        self.waiting += self._arrivals()
        self.blocked = None
        self._admit()
        for rid in self.lengths:
            self.lengths[rid] += 1
        free = self.allocator.num_free_slots
        head_need = self.trace[self.waiting[0]].max_len if self.waiting else None
        fragmented = head_need is not None and free >= head_need
        record = StepRecord(
            step=self.step_index,
            used=sum(self.lengths.values()),
            reserved_future=sum(self.trace[r].final_len - n for r, n in self.lengths.items()),
            internal=sum(self.trace[r].max_len - self.trace[r].final_len for r in self.lengths),
            external=free if fragmented else 0,
            stranded=free if head_need is not None and not fragmented else 0,
            idle=free if head_need is None else 0,
            running=len(self.lengths),
            waiting=len(self.waiting),
        )
        self.report.history.append(record)
        self._recorded = list(self.lengths.items())  # the map as recorded, before finished requests leave
        self._recorded_regions = dict(self.allocator.regions)
        self._free_category = "external" if fragmented else "stranded" if head_need is not None else "idle"
        for rid in [r for r, n in self.lengths.items() if n >= self.trace[r].final_len]:
            del self.lengths[rid]
            self.allocator.free(rid)
            self.num_finished += 1
        return record

    def memory_map(self) -> list[Segment]:
        """The pool at the last recorded step, in address order: each region split into its used,
        reserved_future and internal slots, every hole in the step's free category (external,
        stranded or idle). Category by category, the slots add up to that step's StepRecord."""
        segments, cursor = [], 0
        by_start = sorted(self._recorded, key=lambda item: self._recorded_regions[item[0]].start)
        for rid, written in by_start:
            region, request = self._recorded_regions[rid], self.trace[rid]
            if region.start > cursor:
                segments.append(Segment(cursor, region.start - cursor, self._free_category))
            cursor = region.start
            for category, num in (
                ("used", written),
                ("reserved_future", request.final_len - written),
                ("internal", request.max_len - request.final_len),
            ):
                if num:
                    segments.append(Segment(cursor, num, category, rid))
                    cursor += num
        if cursor < self.report.num_slots:
            segments.append(Segment(cursor, self.report.num_slots - cursor, self._free_category))
        return segments


class PagingReplay(_Replay):
    """The trace served as LLMEngine serves it, with dummy tokens and no model (lesson 11).

    The engine's own ``Scheduler`` and ``KVCacheManager`` do the work: blocks on demand, the
    newest running request preempted (and later recomputed) when a running one needs a block and
    none is free, first come first served. Each step is the engine's: ``schedule``, then
    ``update`` with one dummy token per sampled sequence. The scheduler gets no per-step token
    budget or sequence limit that could bind (the pool runs out first), so block for block the
    replay equals an engine with such roomy limits (tests/simulators/test_sim_paging.py checks it on a tiny
    model). A sampled token gets its slot in the next step, when its K/V is computed.

    ``scheduling_policy`` (lab C) makes the scheduler's two choices, who is admitted and who gives
    way, as ``LLMEngine(..., scheduling_policy=...)`` does; without one it is first come, first served.
    ``finish_steps`` records when each request finished (engine steps done by then).
    """

    name = "paging"

    def __init__(
        self,
        trace: list[TraceRequest],
        num_blocks: int,
        block_size: int = 16,
        scheduling_policy: SchedulingPolicy | None = None,
    ) -> None:
        longest = max(r.final_len for r in trace) if trace else 0
        blocks_needed = ceil_div(longest, block_size)
        if blocks_needed > num_blocks:
            raise ValueError(
                f"a request of {longest} tokens needs {blocks_needed} blocks of {block_size}; the pool has {num_blocks}"
            )
        super().__init__(trace, num_blocks * block_size)
        self.block_size = block_size
        self.manager = KVCacheManager(num_blocks, block_size)
        # one step never computes more tokens than the pool holds, nor runs more sequences than blocks
        self.scheduler = Scheduler(
            self.manager,
            max_num_seqs=num_blocks,
            max_num_batched_tokens=num_blocks * block_size,
            max_model_len=longest,
            policy=scheduling_policy,
        )
        self.num_recomputed_tokens = 0  # tokens whose K/V a preemption threw away
        self._num_refused = 0  # requests the scheduling policy turned away, over every step
        self.finish_steps: dict[int, int] = {}  # request -> engine steps done when it finished
        self._recorded: list[tuple[int, list[int], int]] = []  # (request, block table, tokens stored)
        self._free_category = "idle"

    @property
    def running(self) -> list[Sequence]:
        return self.scheduler.running

    @property
    def num_refused(self) -> int:
        """Requests the scheduling policy turned away (never with first come, first served)."""
        return self._num_refused

    @property
    def done(self) -> bool:
        return self.num_finished + self.num_refused == len(self.trace)

    @property
    def waiting(self) -> list[Sequence]:
        return list(self.scheduler.waiting)

    def _arrive(self) -> None:
        for rid in self._arrivals():
            req = self.trace[rid]
            params = SamplingParams(max_new_tokens=req.num_output_tokens, stop_on_eos=False)
            self.scheduler.add(
                Sequence(
                    rid,
                    [DUMMY_TOKEN] * req.num_prompt_tokens,
                    req.num_prompt_tokens,
                    self.block_size,
                    params,
                    request_id=rid,
                    arrival=self.step_index,
                )
            )

    def step(self) -> StepRecord:
        self._arrive()
        self.manager.events.step = self.step_index
        stored = {seq.seq_id: seq.num_computed_tokens for seq in self.scheduler.running}  # a preemption resets it
        batch = self.scheduler.schedule()
        self._num_refused += len(batch.refused)
        self.report.num_preemptions += len(batch.preempted)
        self.num_recomputed_tokens += sum(stored[seq_id] for seq_id in batch.preempted)
        if len(batch.sampled) != len(self.scheduler.running):
            raise RuntimeError("a running sequence was not computed to its last token: a scheduler limit bound")
        record = self._record()
        if not batch.is_empty:
            grown = self.scheduler.update(batch, [[DUMMY_TOKEN] for _ in batch.sampled])
            finished = [seq.seq_id for seq in grown if seq.status is SequenceStatus.FINISHED]
            self.finish_steps.update(dict.fromkeys(finished, self.step_index))
            self.num_finished += len(finished)
        if self.done and self.manager.num_free_blocks != self.manager.num_blocks:
            raise RuntimeError(f"the paging replay leaked {self.manager.num_used_blocks} blocks")
        return record

    def _record(self) -> StepRecord:
        """The pool as this step's forward pass leaves it: every running sequence's tokens stored."""
        running, waiting = self.scheduler.running, len(self.scheduler.waiting)
        used = sum(s.num_tokens for s in running)
        free = self.manager.num_free_blocks * self.block_size
        record = StepRecord(
            step=self.step_index,
            used=used,
            reserved_future=0,
            internal=self.manager.num_used_blocks * self.block_size - used,
            external=0,
            stranded=free if waiting else 0,
            idle=0 if waiting else free,
            running=len(running),
            waiting=waiting,
        )
        self.report.history.append(record)
        self._recorded = [(s.seq_id, list(s.block_table), s.num_tokens) for s in running]
        self._free_category = "stranded" if waiting else "idle"
        return record

    def memory_map(self) -> list[Segment]:
        """The pool at the last recorded step, block by block in address order: each held block's
        tokens (used) and its empty tail (internal), every free block in the step's free category
        (stranded or idle). Category by category, the slots add up to that step's StepRecord."""
        bs = self.block_size
        owner: dict[int, tuple[int, int]] = {}  # block -> (request, tokens it holds)
        for rid, table, stored in self._recorded:
            for i, block in enumerate(table):
                owner[block] = (rid, min(bs, stored - i * bs))
        segments = []
        for block in range(self.manager.num_blocks):
            if block not in owner:
                segments.append(Segment(block * bs, bs, self._free_category))
                continue
            rid, held = owner[block]
            segments.append(Segment(block * bs, held, "used", rid))
            if held < bs:
                segments.append(Segment(block * bs + held, bs - held, "internal", rid))
        return segments


def simulate_reservation(trace: list[TraceRequest], num_slots: int) -> MemoryReport:
    """Replay ``trace`` on contiguous max-length reservations to the end."""
    return ReservationReplay(trace, num_slots).run()


def simulate_paging(trace: list[TraceRequest], num_blocks: int, block_size: int = 16) -> MemoryReport:
    """Replay ``trace`` to the end as LLMEngine serves it, blocks on demand (see PagingReplay)."""
    return PagingReplay(trace, num_blocks, block_size).run()
