"""Prefix caching: full blocks found again by a hash chain (lesson 13).

A full block is named by ``hash(parent block's hash, this block's token ids)``, so equal
hashes mean equal prefixes up to and including the block. The hash is SHA-256 (stable across
runs, unlike Python's salted ``hash``); a token-equality check on every hit guards against the
astronomically rare collision anyway. Cached blocks that no sequence holds stay in the pool,
ordered least recently used first, until a new allocation needs their memory.

The cache holds no reference counts of its own: a cached block is either in use (held by
block tables) or parked here as evictable, and parked blocks count as free memory.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from dataclasses import dataclass


def block_hash(parent: bytes | None, token_ids: list[int]) -> bytes:
    """SHA-256 of the parent block's hash and this block's token ids (lesson 13)."""
    digest = hashlib.sha256(parent or b"root")
    digest.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return digest.digest()


@dataclass(frozen=True)
class CachedBlock:
    """What the cache knows about one physical block."""

    block_hash: bytes
    token_ids: tuple[int, ...]


class PrefixCache:
    """Hash -> physical block, plus an LRU list of cached blocks nobody holds (lesson 13)."""

    def __init__(self) -> None:
        self._block_of: dict[bytes, int] = {}
        self._entry_of: dict[int, CachedBlock] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()  # oldest first
        self.num_hits = 0
        self.num_queries = 0

    @property
    def num_cached_blocks(self) -> int:
        return len(self._entry_of)

    @property
    def num_evictable_blocks(self) -> int:
        return len(self._evictable)

    def lookup(self, h: bytes, token_ids: list[int]) -> int | None:
        """The block holding this prefix block, or None; a token mismatch counts as a miss."""
        block_id = self._block_of.get(h)
        if block_id is None or self._entry_of[block_id].token_ids != tuple(token_ids):
            return None
        return block_id

    def insert(self, block_id: int, h: bytes, token_ids: list[int]) -> bool:
        """Register a full, computed block; False when an equal block is already cached."""
        if h in self._block_of or block_id in self._entry_of:
            return False
        self._block_of[h] = block_id
        self._entry_of[block_id] = CachedBlock(h, tuple(token_ids))
        return True

    def is_cached(self, block_id: int) -> bool:
        return block_id in self._entry_of

    def is_evictable(self, block_id: int) -> bool:
        return block_id in self._evictable

    def park(self, block_id: int) -> None:
        """The last holder let go: keep the contents, make the block evictable (newest last)."""
        self._evictable[block_id] = None

    def unpark(self, block_id: int) -> None:
        """A hit revived a parked block: it is in use again and no longer evictable."""
        del self._evictable[block_id]

    def evict_lru(self) -> int:
        """Forget the least recently used unreferenced block and return its id for reuse."""
        block_id, _ = self._evictable.popitem(last=False)
        entry = self._entry_of.pop(block_id)
        del self._block_of[entry.block_hash]
        return block_id

    def record_query(self, num_blocks: int, num_hits: int) -> None:
        """Count lookups, for the hit rate shown in lesson 13."""
        self.num_queries += num_blocks
        self.num_hits += num_hits
