"""Structured engine events that simulators can replay (lessons 08-13).

Every bookkeeping decision the engine takes (a block allocated, shared, copied, evicted, a
sequence preempted) is recorded as one ``Event`` with the step it happened in. A simulator can
replay a real run from this list instead of inventing its own trace. The log is bounded: it
keeps the last ``max_events`` events (0 keeps none) and counts every event ever recorded.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from enum import Enum

DEFAULT_MAX_EVENTS = 100_000


class EventKind(Enum):
    """What happened (lessons 08-13)."""

    ADMIT = "admit"  # a waiting sequence got its blocks and joined the running batch
    REFUSE = "refuse"  # a request that can never fit was turned away
    ALLOCATE = "allocate"  # a free block was handed to a sequence
    FREE = "free"  # a sequence dropped its hold on a block (the block may stay in use by others)
    FORK = "fork"  # a child sequence now shares its parent's blocks
    COPY_ON_WRITE = "copy_on_write"  # a shared block was copied before a write
    PREFIX_HIT = "prefix_hit"  # a cached block was reused instead of recomputed
    CACHE_INSERT = "cache_insert"  # a full, computed block was registered in the prefix cache
    EVICT = "evict"  # an unreferenced cached block was reclaimed (least recently used first)
    PREEMPT = "preempt"  # a running sequence lost its blocks and went back to waiting
    FINISH = "finish"  # a sequence ended (stop token or length)
    TIER_WRITE = "tier_write"  # an evicted cached block was written to the tier below memory (disk_tier.py)
    TIER_RESTORE = "tier_restore"  # a prefix block was read back from the tier instead of recomputed
    TIER_FALLBACK = "tier_fallback"  # the tier was full or a file unreadable: the block is recomputed
    TIER_DROP = "tier_drop"  # a full tier removed a file (a least recently used tail) to make room


@dataclass(frozen=True)
class Event:
    """One engine event: the step it happened in, what, which sequence and which block."""

    step: int
    kind: EventKind
    seq_id: int | None = None
    block_id: int | None = None
    detail: str = ""


@dataclass
class EventLog:
    """The last ``max_events`` events and a count of every kind; ``step`` stamps new events."""

    max_events: int = DEFAULT_MAX_EVENTS
    step: int = 0
    events: deque[Event] = field(init=False)
    _counts: Counter[str] = field(init=False, default_factory=Counter)

    def __post_init__(self) -> None:
        if isinstance(self.max_events, bool) or not isinstance(self.max_events, int) or self.max_events < 0:
            raise ValueError(f"max_events must be an integer >= 0, got {self.max_events!r}")
        self.events = deque(maxlen=self.max_events)

    def record(self, kind: EventKind, seq_id: int | None = None, block_id: int | None = None, detail: str = "") -> None:
        """Count one event and keep it, stamped with the current step (the oldest falls off when full)."""
        self._counts[kind.value] += 1
        if self.max_events:
            self.events.append(Event(self.step, kind, seq_id, block_id, detail))

    def of_kind(self, kind: EventKind) -> list[Event]:
        """The kept events of one kind, in order."""
        return [e for e in self.events if e.kind == kind]

    def counts(self) -> dict[str, int]:
        """How many events of each kind were recorded, kept or not."""
        return dict(self._counts)
