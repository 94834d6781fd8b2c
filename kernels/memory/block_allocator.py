"""Physical KV blocks: a free pool and reference counts (lessons 11-12).

The pool holds ``num_blocks`` fixed-size blocks. A block is in exactly one of three states:
free (reference count 0, contents meaningless), parked (reference count 0, contents still a
valid prefix-cache entry, evictable) or used (reference count > 0). Free and parked blocks
both count as free memory, so ``num_free_blocks + num_used_blocks == num_blocks`` always.
"""

from __future__ import annotations

import random
from collections import deque

from kvcourse.kernels.memory.events import EventKind, EventLog
from kvcourse.kernels.memory.prefix_cache import PrefixCache


class OutOfBlocksError(RuntimeError):
    """Asked for a block with none free: callers must check ``can_allocate`` first."""


class BlockAllocator:
    """Hands out physical blocks and counts how many block tables hold each (lesson 11)."""

    def __init__(self, num_blocks: int, prefix_cache: PrefixCache | None = None,
                 events: EventLog | None = None) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.prefix_cache = prefix_cache
        self.events = events if events is not None else EventLog()
        self.ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        parked = self.prefix_cache.num_evictable_blocks if self.prefix_cache else 0
        return len(self._free) + parked

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.num_free_blocks

    def allocate(self, seq_id: int | None = None) -> int:
        """A block with reference count 1: a free one, else the least recently used parked one."""
        if self._free:
            block_id = self._free.popleft()
        elif self.prefix_cache and self.prefix_cache.num_evictable_blocks:
            block_id = self.prefix_cache.evict_lru()
            self.events.record(EventKind.EVICT, seq_id, block_id)
        else:
            raise OutOfBlocksError(f"all {self.num_blocks} blocks are in use")
        self.ref_counts[block_id] = 1
        self.events.record(EventKind.ALLOCATE, seq_id, block_id)
        return block_id

    def shuffle_free_blocks(self, seed: int = 0) -> None:
        """Hand out free blocks in a random order, to show that adjacency does not matter (lesson 10)."""
        blocks = list(self._free)
        random.Random(seed).shuffle(blocks)
        self._free = deque(blocks)

    def hold(self, block_id: int) -> None:
        """One more block table holds this block (sharing, or a prefix-cache hit)."""
        if self.ref_counts[block_id] == 0:
            if not (self.prefix_cache and self.prefix_cache.is_evictable(block_id)):
                raise ValueError(f"block {block_id} is free; allocate it instead of holding it")
            self.prefix_cache.unpark(block_id)
        self.ref_counts[block_id] += 1

    def release(self, block_id: int, seq_id: int | None = None) -> None:
        """One block table lets go; the last one returns the block to the free memory."""
        if self.ref_counts[block_id] <= 0:
            raise ValueError(f"block {block_id} released more often than held")
        self.ref_counts[block_id] -= 1
        self.events.record(EventKind.FREE, seq_id, block_id)
        if self.ref_counts[block_id] > 0:
            return
        if self.prefix_cache and self.prefix_cache.is_cached(block_id):
            self.prefix_cache.park(block_id)
        else:
            self._free.append(block_id)
