"""Every physical KV block in one pool: reference counts and one free queue in eviction order (lessons 11-13).

A block is used (reference count > 0) or sits in the free queue, never both. The queue is kept
in eviction order, as in vLLM v1's ``BlockPool``: a freed block that holds nothing worth keeping
goes to the front, a freed block that is a prefix-cache entry goes to the back (newest last).
``allocate`` takes the front, so a cached block is reused, and forgotten, only when nothing
colder is left; a prefix hit on a cached block in the queue takes it out again.

With an ``EvictionPolicy`` (eviction.py, lab B) the pool still hands out an empty block first; only
when every free block caches a prefix does the policy choose which one to forget. Without one, the
queue's own order decides: least recently freed first, which is ``LRUEviction``.

Prefix caching names a full block by ``hash(parent block's hash, its token ids)``, so equal
hashes mean equal prefixes up to and including the block. SHA-256 is stable across runs, unlike
Python's salted ``hash``; a token-equality check on every hit guards against a collision anyway.
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.memory.events import EventKind, EventLog
from kvcourse.kernels.memory.eviction import EvictionCandidate, EvictionPolicy, EvictionPolicyError, rejection


def block_hash(parent: bytes | None, token_ids: list[int]) -> bytes:
    """SHA-256 of the parent block's hash and this block's token ids (lesson 13)."""
    digest = hashlib.sha256(parent or b"root")
    digest.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return digest.digest()


@dataclass(frozen=True)
class CachedBlock:
    """What the prefix cache knows about one physical block: its hash and tokens, its parent's hash, its place."""

    block_hash: bytes
    token_ids: tuple[int, ...]
    parent: bytes | None = None
    depth: int = 0
    cached_at: int = 0


class OutOfBlocksError(RuntimeError):
    """Asked for a block with none free: callers must check ``can_allocate`` first."""


class BlockPoolInvariantError(AssertionError):
    """The pool's bookkeeping contradicts itself: a bug, never a user error."""


class BlockPool:
    """Hands out physical blocks, counts their holders and remembers cached prefixes (lessons 11-13)."""

    def __init__(self, num_blocks: int, events: EventLog | None = None, eviction: EvictionPolicy | None = None) -> None:
        check_positive_int("num_blocks", num_blocks)
        self.num_blocks = num_blocks
        self.events = events if events is not None else EventLog()
        self.eviction = eviction
        self.ref_counts = [0] * num_blocks
        self._free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # coldest first
        self._block_of_hash: dict[bytes, int] = {}
        self._cached: dict[int, CachedBlock] = {}
        self._children: dict[bytes, int] = {}  # cached blocks per parent hash
        self._clock = 0  # ticks on every free and every prefix hit
        self._last_used = [0] * num_blocks
        self._hits = [0] * num_blocks
        self.on_evict: Callable[[int, CachedBlock], None] | None = None  # a tier below: sees a block before it goes

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    @property
    def free_block_ids(self) -> list[int]:
        """The free queue, the next block to hand out first."""
        return list(self._free_queue)

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.num_free_blocks

    def allocate(self, seq_id: int | None = None) -> int:
        """The coldest free block, with reference count 1; a cached one forgets its prefix (eviction)."""
        if not self._free_queue:
            raise OutOfBlocksError(f"all {self.num_blocks} blocks are in use")
        block_id = next(iter(self._free_queue))  # empty blocks stand before cached ones
        if block_id in self._cached and self.eviction is not None:
            block_id = self._policy_choice(self.eviction)
        del self._free_queue[block_id]
        if block_id in self._cached:
            if self.on_evict is not None:  # its K/V are intact until the new holder writes (disk_tier.py)
                self.on_evict(block_id, self._cached[block_id])
            self._forget(block_id)
            self.events.record(EventKind.EVICT, seq_id, block_id)
        self.ref_counts[block_id] = 1
        self.events.record(EventKind.ALLOCATE, seq_id, block_id)
        return block_id

    def eviction_candidates(self) -> list[EvictionCandidate]:
        """Every free block that caches a prefix, in the queue's order (least recently freed first)."""
        return [
            EvictionCandidate(
                b,
                self._last_used[b],
                entry.cached_at,
                self._hits[b],
                entry.depth,
                self._children.get(entry.block_hash, 0) > 0,
            )
            for b in self._free_queue
            if (entry := self._cached.get(b)) is not None
        ]

    def _policy_choice(self, policy: EvictionPolicy) -> int:
        # By block id: the policy decides from what it is told of each block, not from the queue's order.
        candidates = sorted(self.eviction_candidates(), key=lambda c: c.block_id)
        choice = policy.choose(list(candidates))
        why = rejection(choice, candidates, self.ref_counts)
        if why is not None:
            raise EvictionPolicyError(why)
        return choice

    def _forget(self, block_id: int) -> None:
        entry = self._cached.pop(block_id)
        del self._block_of_hash[entry.block_hash]
        if entry.parent is not None and entry.parent in self._children:
            self._children[entry.parent] -= 1
            if not self._children[entry.parent]:
                del self._children[entry.parent]
        self._hits[block_id] = 0

    def hold(self, block_id: int) -> None:
        """One more block table holds this block (sharing, or a prefix-cache hit)."""
        if self.ref_counts[block_id] == 0:
            if block_id not in self._cached:
                raise ValueError(f"block {block_id} is free; allocate it instead of holding it")
            del self._free_queue[block_id]  # a hit revives a cached block: no longer evictable
        self.ref_counts[block_id] += 1

    def release(self, block_id: int, seq_id: int | None = None) -> None:
        """One block table lets go; the last one returns the block to the free queue."""
        if self.ref_counts[block_id] <= 0:
            raise ValueError(f"block {block_id} released more often than held")
        self.ref_counts[block_id] -= 1
        self.events.record(EventKind.FREE, seq_id, block_id)
        if self.ref_counts[block_id] > 0:
            return
        self._clock += 1
        self._last_used[block_id] = self._clock
        self._free_queue[block_id] = None  # a cached block: the back, evicted last
        if block_id not in self._cached:
            self._free_queue.move_to_end(block_id, last=False)  # worthless: the front, reused first

    def shuffle_free_blocks(self, seed: int = 0) -> None:
        """Hand out free blocks in a random order, to show that adjacency does not matter (lesson 10)."""
        if self._cached:
            raise ValueError("shuffling would break the eviction order of cached blocks")
        blocks = list(self._free_queue)
        random.Random(seed).shuffle(blocks)
        self._free_queue = OrderedDict.fromkeys(blocks)

    # ---- prefix cache ---------------------------------------------------------------------------

    def lookup(self, h: bytes, token_ids: list[int]) -> int | None:
        """The block holding this prefix block, or None; a token mismatch counts as a miss (lesson 13)."""
        block_id = self._block_of_hash.get(h)
        if block_id is None or self._cached[block_id].token_ids != tuple(token_ids):
            return None
        return block_id

    def hit(self, block_id: int) -> None:
        """A prefix hit: hold the cached block, and count the hit for the eviction policy (lesson 13)."""
        self.hold(block_id)
        self._clock += 1
        self._last_used[block_id] = self._clock
        self._hits[block_id] += 1

    def cache_block(
        self, block_id: int, h: bytes, token_ids: list[int], parent: bytes | None = None, depth: int = 0
    ) -> bool:
        """Register a full, computed, held block (``parent`` is the hash of the block before it, ``depth``
        its index in the prefix); False when an equal block is already cached."""
        if h in self._block_of_hash or block_id in self._cached:
            return False
        self._block_of_hash[h] = block_id
        self._cached[block_id] = CachedBlock(h, tuple(token_ids), parent, depth, self._clock)
        if parent is not None:
            self._children[parent] = self._children.get(parent, 0) + 1
        return True

    def is_cached(self, block_id: int) -> bool:
        return block_id in self._cached

    def check_invariants(self, held: list[int] | None = None) -> None:
        """Raise BlockPoolInvariantError unless the bookkeeping is consistent (and matches ``held``)."""
        free = set(self._free_queue)
        zero = {b for b, count in enumerate(self.ref_counts) if count == 0}
        if min(self.ref_counts) < 0 or free != zero:
            raise BlockPoolInvariantError(f"free queue {sorted(free)} != unreferenced blocks {sorted(zero)}")
        if held is not None and held != self.ref_counts:
            raise BlockPoolInvariantError(f"reference counts {self.ref_counts} != holders {held}")
        if {self._block_of_hash[e.block_hash] for e in self._cached.values()} != set(self._cached):
            raise BlockPoolInvariantError("the hash map and the cached blocks disagree")


class PoolCounts:
    """The ``BlockManager`` protocol's three counts (block_manager.py), read from a manager's one ``block_pool``:
    shared by the engine's managers (kv_cache_manager.py, kv_cache_groups.py)."""

    block_pool: BlockPool

    @property
    def num_blocks(self) -> int:
        return self.block_pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.block_pool.num_used_blocks
