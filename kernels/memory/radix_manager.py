"""The KV-cache manager with a radix-tree prefix index instead of the hash chain (issue 46).

``EngineConfig(enable_prefix_caching=True, prefix_index="radix")`` builds this manager. It answers the
scheduler exactly as ``KVCacheManager`` does; three things differ (radix_index.py says why):

- admission matches the prompt in the tree to the token. Whole matched blocks are held as hits; a block
  matched only in part is copied into a block of the sequence's own (the copy goes into the step's
  block copies, ahead of the forward pass, through ``pop_copies``), so ``num_computed_tokens`` may stop
  inside a block and those tokens are not recomputed. The last prompt token is always computed;
- ``free`` caches every computed token of a finished (or preempted) sequence, its partly filled last
  block included: the answer of one chat turn is in the cache for the next;
- eviction goes through the block pool's seam (an ``EvictionPolicy`` sees ``EvictionCandidate``s); the
  default is ``LRUEviction``, which takes leaves only. Should a policy evict a block with cached children
  (no leaf is free), the nodes below it leave the cache too, so no node is ever cut off from the root.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.memory.block_manager import BlockManager, Sequence
from kvcourse.kernels.memory.block_pool import BlockPool, BlockPoolInvariantError
from kvcourse.kernels.memory.events import EventKind, EventLog
from kvcourse.kernels.memory.eviction import EvictionPolicy, LRUEviction
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager
from kvcourse.kernels.memory.kv_pool import BlockCopy
from kvcourse.kernels.memory.radix_index import RadixIndex, RadixMatch, RadixNode


class RadixBlockPool(BlockPool):
    """The block pool whose cached blocks are the radix tree's nodes: evicting one drops its subtree."""

    def __init__(
        self, num_blocks: int, index: RadixIndex, events: EventLog | None = None, eviction: EvictionPolicy | None = None
    ) -> None:
        super().__init__(num_blocks, events, eviction)
        self.index = index

    def _forget(self, block_id: int) -> None:
        """An eviction (``allocate`` took a cached block): its node leaves the tree, with any below it."""
        super()._forget(block_id)
        for below in self.index.remove(block_id)[1:]:
            self.uncache(below)
            self.events.record(EventKind.EVICT, None, below, f"under evicted block {block_id}")

    def uncache(self, block_id: int) -> None:
        """Forget what a block caches, keeping its holders; a free one goes to the front of the queue."""
        BlockPool._forget(self, block_id)
        if self.ref_counts[block_id] == 0:
            self._free_queue.move_to_end(block_id, last=False)

    def register(self, node: RadixNode) -> bool:
        """Cache a node's block under its key (again, if the node grew)."""
        if self.is_cached(node.block_id):
            self.uncache(node.block_id)
        return self.cache_block(node.block_id, node.key, list(node.tokens), self.index.parent_key(node), node.depth)

    def check_invariants(self, held: list[int] | None = None) -> None:
        super().check_invariants(held)
        self.index.check()
        cached = {b for b in range(self.num_blocks) if self.is_cached(b)}
        if cached != set(self.index.nodes):
            raise BlockPoolInvariantError(f"cached blocks {sorted(cached)} != tree nodes {sorted(self.index.nodes)}")


class RadixKVCacheManager(KVCacheManager):
    """``KVCacheManager`` with the radix tree as its prefix index (issue 46); prefix caching is always on."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        events: EventLog | None = None,
        eviction: EvictionPolicy | None = None,
    ) -> None:
        super().__init__(num_blocks, block_size, True, events, eviction)
        self.index = RadixIndex(block_size)
        self.block_pool: RadixBlockPool = RadixBlockPool(
            num_blocks, self.index, self.events, eviction if eviction is not None else LRUEviction()
        )
        self._copies: list[BlockCopy] = []

    def match(self, seq: Sequence) -> RadixMatch:
        """The cached prefix admission would reuse: never the last token, which must give logits."""
        return self.index.match(self._tokens(seq, seq.num_tokens), seq.num_tokens - 1)

    def prefix_hit_tokens(self, seq: Sequence) -> int:
        return self.match(seq).num_tokens

    def _peak(self, seq: Sequence, m: RadixMatch) -> int:
        """Free blocks admitting with ``m`` takes at its peak: hits on free blocks, fresh blocks, and a partly
        matched free block held while its copy is allocated."""
        ref = self.block_pool.ref_counts
        free_hits = sum(1 for b in m.blocks if ref[b] == 0)
        fresh = seq.num_blocks - len(m.blocks)
        if m.partial_block is None:
            return free_hits + fresh
        return free_hits + max(fresh, int(ref[m.partial_block] == 0) + 1)

    def _admission_match(self, seq: Sequence) -> RadixMatch:
        """The match admission uses: without its partly matched block where copying it would not fit now
        but admitting without it would (in a pool the sequence fills alone, say)."""
        m = self.match(seq)
        if m.partial_block is not None and self._peak(seq, m) > self.num_free_blocks:
            whole = RadixMatch(m.blocks, None, 0, self.block_size)
            if self._peak(seq, whole) < self._peak(seq, m):
                return whole
        return m

    def num_blocks_to_allocate(self, seq: Sequence) -> int:
        """Free blocks admission takes at its peak (``_peak``)."""
        return self._peak(seq, self._admission_match(seq))

    def allocate(self, seq: Sequence) -> None:
        """Blocks for a new sequence: hits on whole blocks, a copy of a partly matched one, fresh ones."""
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already has blocks")
        m = self._admission_match(seq)
        for block_id in m.blocks:
            self.block_pool.hit(block_id)  # hold hits first so allocating cannot evict them
            seq.block_table.append(block_id)
            self.events.record(EventKind.PREFIX_HIT, seq.seq_id, block_id)
        if m.partial_block is not None:
            old = m.partial_block
            self.block_pool.hit(old)  # held while its copy is allocated, so that cannot evict it
            new = self.block_pool.allocate(seq.seq_id)
            self.block_pool.release(old, seq.seq_id)
            seq.block_table.append(new)
            self._copies.append(BlockCopy(old, new))  # runs before the pass that writes the rest of ``new``
            detail = f"{m.partial_len} of {self.block_size} tokens"
            self.events.record(EventKind.PREFIX_HIT, seq.seq_id, old, detail)
            self.events.record(EventKind.COPY_ON_WRITE, seq.seq_id, new, f"from block {old} ({detail})")
        seq.num_computed_tokens = seq.num_cached_tokens = m.num_tokens
        while len(seq.block_table) < seq.num_blocks:
            seq.block_table.append(self.block_pool.allocate(seq.seq_id))

    def pop_copies(self) -> list[BlockCopy]:
        """The block copies admissions made since the last call: the scheduler puts them in the step."""
        copies, self._copies = self._copies, []
        return copies

    def _tokens(self, seq: Sequence, num_tokens: int) -> list[int]:
        """The sequence's first ``num_tokens`` token ids, read block by block."""
        return [t for i in range(ceil_div(num_tokens, self.block_size)) for t in seq.block_tokens(i)][:num_tokens]

    def _insert(self, seq: Sequence, num_tokens: int) -> None:
        changed, covered = self.index.insert(self._tokens(seq, num_tokens), seq.block_table)
        for block_id in covered:  # a shorter partly filled leaf: the new node answers every match it did
            self.block_pool.uncache(block_id)
        for node in changed:
            if self.block_pool.register(node):
                self.events.record(EventKind.CACHE_INSERT, seq.seq_id, node.block_id)

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Cache the computed full blocks of a running sequence (a partly filled one waits for ``free``)."""
        self._insert(seq, seq.num_computed_tokens // self.block_size * self.block_size)

    def free(self, seq: Sequence) -> None:
        """Cache every computed token, the partly filled last block too, then drop the holds."""
        if seq.block_table:
            self._insert(seq, seq.num_computed_tokens)
        super().free(seq)


class PrefixCacheConfig(Protocol):
    """The settings the engine's KV-cache manager is built from (engine.config.EngineConfig has them)."""

    @property
    def block_size(self) -> int: ...

    @property
    def enable_prefix_caching(self) -> bool: ...

    @property
    def prefix_index(self) -> str: ...


def kv_cache_manager(
    num_blocks: int,
    config: PrefixCacheConfig,
    events: EventLog,
    block_manager: Callable[[int, int], BlockManager] | None = None,
    eviction: EvictionPolicy | None = None,
) -> BlockManager:
    """The engine's KV-cache manager: the lab's ``block_manager``, or its own with the configured prefix index."""
    if block_manager is not None:
        if config.prefix_index != "hash":
            raise ValueError(
                f"prefix_index={config.prefix_index!r} is the engine's own manager's: not with block_manager"
            )
        return block_manager(num_blocks, config.block_size)
    if config.prefix_index == "radix":
        return RadixKVCacheManager(num_blocks, config.block_size, events, eviction)
    return KVCacheManager(num_blocks, config.block_size, config.enable_prefix_caching, events, eviction)
