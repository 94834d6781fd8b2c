"""Block tables on demand: allocate, append, fork, copy on write, free, prefix hits (lessons 10-13).

The ask/do pairs (``can_allocate``/``allocate``, ``can_append``/``append_slots``) let the
scheduler check memory before it commits to a decision. Reference counts always equal the
number of block tables that hold a block; the block pool keeps every unreferenced block, cached
or not, in its one free queue.
"""

from __future__ import annotations

from kvcourse.kernels.checks import ceil_div, check_positive_int
from kvcourse.kernels.memory.block_manager import Sequence
from kvcourse.kernels.memory.block_pool import BlockPool, PoolCounts, block_hash
from kvcourse.kernels.memory.events import EventKind, EventLog
from kvcourse.kernels.memory.eviction import EvictionPolicy
from kvcourse.kernels.memory.kv_pool import BlockCopy


class KVCacheManager(PoolCounts):
    """Maps sequences to physical blocks, with sharing and prefix caching (lessons 10-13): the engine's
    ``BlockManager`` (block_manager.py)."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = False,
        events: EventLog | None = None,
        eviction: EvictionPolicy | None = None,
    ) -> None:
        check_positive_int("block_size", block_size)
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.events = events if events is not None else EventLog()
        self.block_pool = BlockPool(num_blocks, self.events, eviction)

    def _prefix_hits(self, seq: Sequence) -> list[tuple[int, bytes]]:
        """Cached (block, hash) pairs for the longest cached prefix of ``seq``."""
        if not self.enable_prefix_caching:
            return []
        # Only blocks that end before the last token may hit: the last token must be computed
        # to produce logits, and its block must be the sequence's own to write into.
        hits: list[tuple[int, bytes]] = []
        parent = None
        for i in range((seq.num_tokens - 1) // self.block_size):
            tokens = seq.block_tokens(i)
            h = block_hash(parent, tokens)
            block_id = self.block_pool.lookup(h, tokens)
            if block_id is None:
                break
            hits.append((block_id, h))
            parent = h
        return hits

    def prefix_hit_tokens(self, seq: Sequence) -> int:
        """Prompt tokens admission would find in the prefix cache now (a scheduling policy may order by it)."""
        return len(self._prefix_hits(seq)) * self.block_size

    def num_blocks_to_allocate(self, seq: Sequence) -> int:
        """Free blocks that admitting ``seq`` would take (a hit on a block in the free queue counts)."""
        hits = self._prefix_hits(seq)
        num_free_hits = sum(1 for block_id, _ in hits if self.block_pool.ref_counts[block_id] == 0)
        return seq.num_blocks - len(hits) + num_free_hits

    def can_allocate(self, seq: Sequence) -> bool:
        return self.block_pool.can_allocate(self.num_blocks_to_allocate(seq))

    def allocate(self, seq: Sequence) -> None:
        """Give a new sequence blocks for all its tokens, reusing cached prefix blocks."""
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already has blocks")
        hits = self._prefix_hits(seq)
        for block_id, h in hits:
            self.block_pool.hit(block_id)  # hold hits first so allocating cannot evict them
            seq.block_table.append(block_id)
            seq.block_hashes.append(h)
            self.events.record(EventKind.PREFIX_HIT, seq.seq_id, block_id)
        seq.num_computed_tokens = seq.num_cached_tokens = len(hits) * self.block_size
        while len(seq.block_table) < seq.num_blocks:
            seq.block_table.append(self.block_pool.allocate(seq.seq_id))

    def _first_write_block(self, seq: Sequence) -> int:
        return seq.num_computed_tokens // self.block_size

    def num_blocks_to_append(self, seq: Sequence) -> int:
        """Free blocks needed before the uncomputed tokens can be written (new + copy on write)."""
        first = self._first_write_block(seq)
        shared = sum(1 for b in seq.block_table[first:] if self.block_pool.ref_counts[b] > 1)
        return seq.num_blocks - len(seq.block_table) + shared

    def can_append(self, seq: Sequence) -> bool:
        return self.block_pool.can_allocate(self.num_blocks_to_append(seq))

    def append_slots(self, seq: Sequence) -> list[BlockCopy]:
        """Make every block that this step writes exist and be the sequence's own (lesson 12)."""
        copies = []
        for i in range(self._first_write_block(seq), len(seq.block_table)):
            old = seq.block_table[i]
            if self.block_pool.ref_counts[old] > 1:  # shared: copy on write
                new = self.block_pool.allocate(seq.seq_id)
                self.block_pool.release(old, seq.seq_id)
                seq.block_table[i] = new
                copies.append(BlockCopy(old, new))
                self.events.record(EventKind.COPY_ON_WRITE, seq.seq_id, new, f"from block {old}")
        while len(seq.block_table) < seq.num_blocks:
            seq.block_table.append(self.block_pool.allocate(seq.seq_id))
        return copies

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child shares every block of the parent; writes will copy on demand (lesson 12)."""
        if child.block_table:
            raise ValueError(f"sequence {child.seq_id} already has blocks")
        for block_id in parent.block_table:
            self.block_pool.hold(block_id)
            self.events.record(EventKind.FORK, child.seq_id, block_id, f"from sequence {parent.seq_id}")
        child.block_table = list(parent.block_table)
        child.block_hashes = list(parent.block_hashes)
        child.num_computed_tokens = parent.num_computed_tokens
        child.num_cached_tokens = parent.num_cached_tokens

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's holds; the tail goes first so eviction takes tails before heads."""
        for block_id in reversed(seq.block_table):
            self.block_pool.release(block_id, seq.seq_id)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_computed_tokens = 0
        seq.num_cached_tokens = 0

    def rollback(self, seq: Sequence) -> int:
        """Give back the blocks past those the computed tokens fill (speculation's rejected drafts, issue 46);
        the next steps overwrite the rejected slots in the blocks kept. Returns how many blocks it freed."""
        keep = ceil_div(seq.num_computed_tokens, self.block_size)
        if len(seq.block_hashes) > keep:
            raise ValueError(f"sequence {seq.seq_id}: a rollback may not cut a block of the prefix cache")
        for block_id in reversed(seq.block_table[keep:]):
            self.block_pool.release(block_id, seq.seq_id)
        freed = len(seq.block_table) - min(keep, len(seq.block_table))
        del seq.block_table[keep:]
        return freed

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register each newly full, computed block in the prefix cache (lesson 13)."""
        if not self.enable_prefix_caching:
            return
        for i in range(len(seq.block_hashes), seq.num_computed_tokens // self.block_size):
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            tokens = seq.block_tokens(i)
            h = block_hash(parent, tokens)
            seq.block_hashes.append(h)
            if self.block_pool.cache_block(seq.block_table[i], h, tokens, parent, depth=i):
                self.events.record(EventKind.CACHE_INSERT, seq.seq_id, seq.block_table[i])
