"""Block tables on demand: allocate, append, fork, copy on write, free (lessons 10-13).

The ask/do pairs (``can_allocate``/``allocate``, ``can_append``/``append_slot``) let the
scheduler check memory before it commits to a decision. Reference counts always equal the
number of block tables that hold a block; the prefix cache holds none of its own.
"""

from __future__ import annotations

from typing import Protocol

from kvcourse.kernels.memory.block_allocator import BlockAllocator
from kvcourse.kernels.memory.events import EventKind, EventLog
from kvcourse.kernels.memory.kv_pool import BlockCopy
from kvcourse.kernels.memory.prefix_cache import PrefixCache, block_hash


class Sequence(Protocol):
    """What the manager reads and writes on a sequence (engine.sequence.Sequence is one)."""

    seq_id: int
    block_table: list[int]
    block_hashes: list[bytes]
    num_computed_tokens: int
    num_cached_tokens: int

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_blocks(self) -> int: ...

    def block_tokens(self, index: int) -> list[int]: ...


class BlockManager:
    """Maps sequences to physical blocks, with sharing and prefix caching (lessons 10-13)."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False,
                 events: EventLog | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.events = events if events is not None else EventLog()
        self.prefix_cache = PrefixCache() if enable_prefix_caching else None
        self.allocator = BlockAllocator(num_blocks, self.prefix_cache, self.events)

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.allocator.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.allocator.num_used_blocks

    def _prefix_hits(self, seq: Sequence) -> list[tuple[int, bytes]]:
        """Cached (block, hash) pairs for the longest cached prefix of ``seq``."""
        if self.prefix_cache is None:
            return []
        # Only blocks that end before the last token may hit: the last token must be computed
        # to produce logits, and its block must be the sequence's own to write into.
        num_candidates = (seq.num_tokens - 1) // self.block_size
        hits: list[tuple[int, bytes]] = []
        parent = None
        for i in range(num_candidates):
            tokens = seq.block_tokens(i)
            h = block_hash(parent, tokens)
            block_id = self.prefix_cache.lookup(h, tokens)
            if block_id is None:
                break
            hits.append((block_id, h))
            parent = h
        return hits

    def num_blocks_to_allocate(self, seq: Sequence) -> int:
        """Free blocks that admitting ``seq`` would consume (hits on parked blocks count)."""
        hits = self._prefix_hits(seq)
        num_parked_hits = sum(1 for block_id, _ in hits if self.allocator.ref_counts[block_id] == 0)
        return seq.num_blocks - len(hits) + num_parked_hits

    def can_allocate(self, seq: Sequence) -> bool:
        return self.allocator.can_allocate(self.num_blocks_to_allocate(seq))

    def allocate(self, seq: Sequence) -> None:
        """Give a new sequence blocks for all its tokens, reusing cached prefix blocks."""
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already has blocks")
        hits = self._prefix_hits(seq)
        for block_id, h in hits:
            self.allocator.hold(block_id)  # hold hits first so allocating cannot evict them
            seq.block_table.append(block_id)
            seq.block_hashes.append(h)
            self.events.record(EventKind.PREFIX_HIT, seq.seq_id, block_id)
        if self.prefix_cache is not None:
            self.prefix_cache.record_query((seq.num_tokens - 1) // self.block_size, len(hits))
        seq.num_computed_tokens = seq.num_cached_tokens = len(hits) * self.block_size
        while len(seq.block_table) < seq.num_blocks:
            seq.block_table.append(self.allocator.allocate(seq.seq_id))

    def _first_write_block(self, seq: Sequence) -> int:
        return seq.num_computed_tokens // self.block_size

    def num_blocks_to_append(self, seq: Sequence) -> int:
        """Free blocks needed before the uncomputed tokens can be written (new + copy on write)."""
        first = self._first_write_block(seq)
        shared = sum(1 for b in seq.block_table[first:] if self.allocator.ref_counts[b] > 1)
        return seq.num_blocks - len(seq.block_table) + shared

    def can_append(self, seq: Sequence) -> bool:
        return self.allocator.can_allocate(self.num_blocks_to_append(seq))

    def append_slot(self, seq: Sequence) -> list[BlockCopy]:
        """Make every block that this step writes exist and be the sequence's own."""
        copies = []
        for i in range(self._first_write_block(seq), len(seq.block_table)):
            old = seq.block_table[i]
            if self.allocator.ref_counts[old] > 1:
                new = self.allocator.allocate(seq.seq_id)
                self.allocator.release(old, seq.seq_id)
                seq.block_table[i] = new
                copies.append(BlockCopy(old, new))
                self.events.record(EventKind.COPY_ON_WRITE, seq.seq_id, new, f"from block {old}")
        while len(seq.block_table) < seq.num_blocks:
            seq.block_table.append(self.allocator.allocate(seq.seq_id))
        return copies

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child shares every block of the parent; writes will copy on demand (lesson 12)."""
        if child.block_table:
            raise ValueError(f"sequence {child.seq_id} already has blocks")
        for block_id in parent.block_table:
            self.allocator.hold(block_id)
            self.events.record(EventKind.FORK, child.seq_id, block_id, f"from sequence {parent.seq_id}")
        child.block_table = list(parent.block_table)
        child.block_hashes = list(parent.block_hashes)
        child.num_computed_tokens = parent.num_computed_tokens
        child.num_cached_tokens = parent.num_cached_tokens

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's holds; the tail goes first so eviction takes tails before heads."""
        for block_id in reversed(seq.block_table):
            self.allocator.release(block_id, seq.seq_id)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_computed_tokens = 0
        seq.num_cached_tokens = 0

    def cache_computed_blocks(self, seq: Sequence) -> None:
        """Register each newly full, computed block in the prefix cache (lesson 13)."""
        if self.prefix_cache is None:
            return
        for i in range(len(seq.block_hashes), seq.num_computed_tokens // self.block_size):
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            tokens = seq.block_tokens(i)
            h = block_hash(parent, tokens)
            seq.block_hashes.append(h)
            if self.prefix_cache.insert(seq.block_table[i], h, tokens):
                self.events.record(EventKind.CACHE_INSERT, seq.seq_id, seq.block_table[i])
