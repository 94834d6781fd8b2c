"""What a replay records, step by step: where the pool's memory goes (lessons 09, 11, 14, 16).

Both replays serve the same requests (``kvcourse.kernels.workload``), first come first served, one
token per running request per step. The reservation replay writes the prompt and the first answer
token in a request's first step; the paging replay steps as LLMEngine does (its scheduler, with
dummy tokens), where a sampled token's K/V is stored one step later, when it is fed back.
Every step the pool's token slots are split into:

* ``used``: slots holding a token's K/V;
* ``reserved_future``: reserved for answer tokens not written yet (they will be);
* ``internal``: taken but never to be written (a reservation beyond the answer's real end, or
  the unused tail of a sequence's last block);
* ``external``: free, while the next waiting request is refused although that much is free in
  total: no single hole is large enough (paging never has any);
* ``stranded``: free while a request waits and there is too little free memory even in total;
* ``idle``: free while nobody waits (not waste: there is no demand).

Utilisation is ``used`` over every category but ``idle``. A replay steps one engine step at a
time (the simulators of lessons 09 and 11 draw it step by step); ``run`` plays it to the end.
``ReservationReplay.memory_map()`` lays the last recorded step out slot by slot (lesson 09's strip).
``PagingReplay.memory_map()`` does the same block by block (lesson 11).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcourse.kernels.workload import TraceRequest

CATEGORIES = ("used", "reserved_future", "internal", "external", "stranded", "idle")


@dataclass(frozen=True)
class StepRecord:
    """One step's split of the pool, in token slots, and the queue around it."""

    step: int
    used: int
    reserved_future: int
    internal: int
    external: int
    stranded: int
    idle: int
    running: int
    waiting: int

    @property
    def busy(self) -> int:
        return self.used + self.reserved_future + self.internal + self.external + self.stranded

    @property
    def utilisation(self) -> float:
        return self.used / self.busy if self.busy else 1.0


@dataclass(frozen=True)
class TurnedAway:
    """A request refused a place although ``free`` slots >= ``needed`` (external fragmentation)."""

    step: int
    request: int
    needed: int
    free: int
    largest_gap: int


@dataclass(frozen=True)
class Segment:
    """A stretch of the pool in one category at the last recorded step (lesson 09's memory map)."""

    start: int
    num_slots: int
    category: str  # one of CATEGORIES
    request: int | None = None  # the request whose region it lies in; None for free slots

    @property
    def end(self) -> int:
        return self.start + self.num_slots


@dataclass
class MemoryReport:
    """A replay's history and its sums over the run (lessons 09, 11, 14, 16)."""

    name: str
    num_slots: int
    history: list[StepRecord] = field(default_factory=list)
    turned_away: list[TurnedAway] = field(default_factory=list)
    num_preemptions: int = 0

    def total(self, category: str) -> int:
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; one of {CATEGORIES}")
        return sum(getattr(r, category) for r in self.history)

    @property
    def num_steps(self) -> int:
        return len(self.history)

    @property
    def busy(self) -> int:
        return sum(r.busy for r in self.history)

    @property
    def utilisation(self) -> float:
        """Share of the slot-steps under demand that held a real token."""
        busy = self.busy
        return self.total("used") / busy if busy else 0.0

    def share(self, category: str) -> float:
        busy = self.busy
        return self.total(category) / busy if busy else 0.0

    @property
    def running_per_step(self) -> list[int]:
        return [r.running for r in self.history]

    @property
    def mean_running(self) -> float:
        return sum(self.running_per_step) / max(1, self.num_steps)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "num_slots": self.num_slots,
            "num_steps": self.num_steps,
            "utilisation": self.utilisation,
            **{f"{c}_share": self.share(c) for c in CATEGORIES[1:-1]},
            "mean_running": self.mean_running,
            "num_preemptions": self.num_preemptions,
            "num_turned_away": len(self.turned_away),
        }


class _Replay:
    """Arrivals in trace order; subclasses admit, grow and finish requests."""

    name = ""

    def __init__(self, trace: list[TraceRequest], num_slots: int) -> None:
        if not trace:
            raise ValueError("the trace is empty")
        self.trace = trace
        self.report = MemoryReport(self.name, num_slots)
        self._pending = sorted(range(len(trace)), key=lambda i: trace[i].arrival_step)
        self.num_finished = 0

    @property
    def step_index(self) -> int:
        return self.report.num_steps

    def _arrivals(self) -> list[int]:
        arrived = []
        while self._pending and self.trace[self._pending[0]].arrival_step <= self.step_index:
            arrived.append(self._pending.pop(0))
        return arrived

    @property
    def done(self) -> bool:
        return self.num_finished == len(self.trace)

    def step(self) -> StepRecord:
        raise NotImplementedError

    def run(self) -> MemoryReport:
        while not self.done:
            self.step()
        return self.report
