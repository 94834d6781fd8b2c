"""A tier below memory: cached prefix blocks the pool evicts go to files, and come back on a prefix hit (issue 46).

When the block pool must forget a cached prefix block to make room (eviction.py), ``DiskTier.save`` writes the
block's K and V, every layer, to one file named by the block's hash. A later prompt whose prefix misses the pool
but finds the hash here gets a fresh block and reads the bytes back instead of recomputing them
(``TieredKVCacheManager``), as LMCache does with CPU memory and disk under vLLM.

A store at its byte capacity makes room: a lookup walks from a prompt's first block, so it drops files from the
tails, the least recently used block that no kept file continues first (``EventKind.TIER_DROP``), never a block
whose child is kept. The tier never fails a request: a block it cannot keep (every kept block has a kept child)
and a file that cannot be read (missing, truncated, the wrong size) are misses; either way the block is
recomputed, an event says so (``EventKind.TIER_FALLBACK``) and a counter in ``TierStats`` counts it.

A preempted sequence's full blocks need no write of their own: they are cached when computed, so readmission
finds them in the pool, or, once the pool has evicted them, here.

A file just written is read back from the OS page cache, which is a memory copy, not a disk read:
``drop_page_cache`` flushes every file and asks the kernel to forget its pages (``POSIX_FADV_DONTNEED``), so
the next read comes from the device. The files live in a fresh directory under the one configured, removed by
``close`` or, failing that, when the store is garbage collected or the interpreter exits.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.memory.block_manager import Sequence
from kvcourse.kernels.memory.block_pool import CachedBlock, block_hash
from kvcourse.kernels.memory.events import EventKind, EventLog
from kvcourse.kernels.memory.eviction import EvictionPolicy
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager
from kvcourse.kernels.memory.kv_pool import KVPool
from kvcourse.kernels.memory.radix_manager import PrefixCacheConfig
from kvcourse.kernels.memory.radix_manager import kv_cache_manager as memory_only_manager

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvcourse.kernels.memory.block_manager import BlockManager

DEFAULT_TIER_BYTES = 1 << 30  # the tier's files: 1 GiB at most (EngineConfig.disk_tier_bytes)


class TieredCacheConfig(PrefixCacheConfig, Protocol):
    """The settings a tiered manager is built from (engine.config.EngineConfig has them)."""

    @property
    def disk_tier(self) -> str | Path | None: ...

    @property
    def disk_tier_bytes(self) -> int: ...


@dataclass
class TierStats:
    """What the tier did: blocks written and restored, their bytes, and the fallbacks to recomputing."""

    writes: int = 0
    failed_writes: int = 0  # evicted blocks whose file could not be written (an OSError): recomputed later
    restores: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    full: int = 0  # evicted blocks not written: the store was at its capacity and nothing could be dropped
    dropped: int = 0  # files removed to make room for newer blocks (least recently used tails first)
    unreadable: int = 0  # files found missing, truncated or of the wrong size: recomputed instead


@dataclass(frozen=True)
class TierEntry:
    """One block on disk: its tokens (checked on a hit, as the pool checks them), its parent's hash, its file."""

    token_ids: tuple[int, ...]
    parent: bytes | None
    path: Path


class DiskTier:
    """Blocks of one KV pool's K/V as files keyed by their prefix hash, up to ``capacity_bytes`` in all."""

    def __init__(self, directory: str | Path, capacity_bytes: int = DEFAULT_TIER_BYTES, events: EventLog | None = None):
        check_positive_int("capacity_bytes", capacity_bytes)
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="kv-tier-", dir=directory))
        self.capacity_bytes = capacity_bytes
        self.events = events if events is not None else EventLog()
        self.stats = TierStats()
        self.pool: KVPool | None = None
        self._entries: dict[bytes, TierEntry] = {}  # least recently written or restored first
        self._children: dict[bytes, int] = {}  # kept blocks per parent hash: a block with one is never dropped
        self.pinned: set[bytes] = set()  # blocks about to be restored: never dropped
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)

    def attach(self, pool: KVPool) -> None:
        """The pool whose blocks the tier saves and restores (the model runner's, made after the manager)."""
        self.pool = pool

    @property
    def block_bytes(self) -> int:
        """Bytes of one block's K and V over every layer: 2 x layers x block_size x kv_heads x head_dim x itemsize."""
        return 2 * self._pool().k[:, 0].nbytes

    @property
    def num_blocks(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self.num_blocks * self.block_bytes

    def __contains__(self, h: bytes) -> bool:
        return h in self._entries

    def _pool(self) -> KVPool:
        if self.pool is None:
            raise RuntimeError("the disk tier has no KV pool: attach the model runner's pool first")
        return self.pool

    def _fallback(self, block_id: int | None, why: str) -> None:
        self.events.record(EventKind.TIER_FALLBACK, None, block_id, why)

    def save(self, block_id: int, entry: CachedBlock) -> None:
        """Write an evicted block's K/V to a file (the pool calls this before it reuses the block)."""
        if entry.block_hash in self._entries:
            self._touch(entry.block_hash)
            return  # restored earlier and evicted again: the file already holds these bytes
        if not self._make_room(entry.parent):
            self.stats.full += 1
            self._fallback(block_id, f"the tier is full ({self.capacity_bytes:,} bytes): block not kept")
            return
        pool = self._pool()
        path = self.root / f"{entry.block_hash.hex()}.kv"
        try:
            with path.open("wb") as f:
                for t in (pool.k[:, block_id], pool.v[:, block_id]):
                    f.write(t.contiguous().view(torch.uint8).cpu().numpy().tobytes())
        except OSError as err:  # the pool is mid-allocation: never raise from here
            self.stats.failed_writes += 1
            self._fallback(block_id, f"not written: {err.strerror or err}")
            path.unlink(missing_ok=True)
            return
        self._entries[entry.block_hash] = TierEntry(entry.token_ids, entry.parent, path)
        if entry.parent is not None:
            self._children[entry.parent] = self._children.get(entry.parent, 0) + 1
        self.stats.writes += 1
        self.stats.bytes_written += self.block_bytes
        self.events.record(EventKind.TIER_WRITE, None, block_id, path.name)

    def restore(self, h: bytes, token_ids: list[int], block_id: int) -> bool:
        """Read the block named ``h`` into pool block ``block_id``: False (and forgotten) if absent or unreadable."""
        entry = self._entries.get(h)
        if entry is None or entry.token_ids != tuple(token_ids):
            return False
        pool = self._pool()
        buf = bytearray(self.block_bytes)
        try:
            with entry.path.open("rb") as f:
                n = f.readinto(buf)
                extra = f.read(1)
        except OSError as err:
            return self._unreadable(h, block_id, f"{entry.path.name}: {err.strerror or err}")
        if n != len(buf) or extra:
            return self._unreadable(h, block_id, f"{entry.path.name}: {n + len(extra)} bytes, not {len(buf)}")
        half = self.block_bytes // 2
        shape = pool.k[:, block_id].shape
        for dst, part in ((pool.k, buf[:half]), (pool.v, buf[half:])):
            dst[:, block_id] = torch.frombuffer(part, dtype=torch.uint8).view(pool.k.dtype).view(shape)
        self._touch(h)
        self.stats.restores += 1
        self.stats.bytes_read += len(buf)
        self.events.record(EventKind.TIER_RESTORE, None, block_id, entry.path.name)
        return True

    def _unreadable(self, h: bytes, block_id: int, why: str) -> bool:
        self.stats.unreadable += 1
        self._fallback(block_id, f"unreadable, recomputed: {why}")
        self._remove(h)
        return False

    def _touch(self, h: bytes) -> None:
        self._entries[h] = self._entries.pop(h)  # the most recently used last

    def _remove(self, h: bytes) -> TierEntry:
        entry = self._entries.pop(h)
        entry.path.unlink(missing_ok=True)
        if entry.parent is not None and entry.parent in self._children:
            self._children[entry.parent] -= 1
            if not self._children[entry.parent]:
                del self._children[entry.parent]
        return entry

    def droppable(self, parent: bytes | None = None) -> list[bytes]:
        """Kept blocks that no kept block continues (nor the block to come, a child of ``parent``), none pinned,
        the least recently written or restored first: the next to drop first."""
        return [h for h in self._entries if h not in self._children and h != parent and h not in self.pinned]

    def _make_room(self, parent: bytes | None) -> bool:
        """Drop a tail if one more block would not fit (the kept ones always do); False when it cannot fit."""
        if self.nbytes + self.block_bytes <= self.capacity_bytes:
            return True
        tails = self.droppable(parent)
        if self.block_bytes > self.capacity_bytes or not tails:
            return False
        self.stats.dropped += 1
        self.events.record(EventKind.TIER_DROP, None, None, self._remove(tails[0]).path.name)
        return True

    def files(self) -> list[Path]:
        """The block files, one per block kept."""
        return [e.path for e in self._entries.values()]

    def drop_page_cache(self) -> None:
        """Flush every file and drop its pages from the OS page cache, so the next read comes from the device."""
        for path in self.files():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    def close(self) -> None:
        """Remove the files and their directory; the tier then holds nothing."""
        self._entries.clear()
        self._children.clear()
        self._finalizer()


class TieredKVCacheManager(KVCacheManager):
    """The KV-cache manager with a disk tier under its prefix cache (hash chain only): evicted blocks are saved,
    and a prompt's prefix continues from the tier where the pool's cached blocks end."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        tier: DiskTier,
        events: EventLog | None = None,
        eviction: EvictionPolicy | None = None,
    ) -> None:
        super().__init__(num_blocks, block_size, True, events, eviction)
        self.tier = tier
        self.block_pool.on_evict = tier.save

    def allocate(self, seq: Sequence) -> None:
        """Blocks as the plain manager gives them; then the blocks after the pool's hits that the tier holds are
        read into the sequence's fresh blocks, cached again, and count as computed (a prefix hit). Their files
        are pinned meanwhile: the blocks that allocating evicts must not drop them to make room."""
        hits = self._prefix_hits(seq)
        parent, found = (hits[-1][1] if hits else None), []
        for i in range(len(hits), (seq.num_tokens - 1) // self.block_size):  # the last token is always computed
            parent = block_hash(parent, seq.block_tokens(i))
            if parent not in self.tier:
                break
            found.append(parent)
        self.tier.pinned.update(found)
        try:
            super().allocate(seq)
            for i, h in enumerate(found, start=len(hits)):
                tokens, block_id, parent = seq.block_tokens(i), seq.block_table[i], seq.block_hashes[-1] if i else None
                if not self.tier.restore(h, tokens, block_id):
                    break
                seq.block_hashes.append(h)
                if self.block_pool.cache_block(block_id, h, tokens, parent, depth=i):
                    self.events.record(EventKind.CACHE_INSERT, seq.seq_id, block_id)
                self.events.record(EventKind.PREFIX_HIT, seq.seq_id, block_id, "restored from the disk tier")
        finally:
            self.tier.pinned.difference_update(found)
        seq.num_computed_tokens = seq.num_cached_tokens = len(seq.block_hashes) * self.block_size


def kv_cache_manager(
    num_blocks: int,
    config: TieredCacheConfig,
    events: EventLog,
    block_manager: Callable[[int, int], BlockManager] | None = None,
    eviction: EvictionPolicy | None = None,
) -> BlockManager:
    """The engine's KV-cache manager (radix_manager.py's), with the disk tier under it when ``config.disk_tier``."""
    if config.disk_tier is None:
        return memory_only_manager(num_blocks, config, events, block_manager, eviction)
    if block_manager is not None:
        raise ValueError("disk_tier is a part of the engine's own KV-cache manager: not with block_manager")
    tier = DiskTier(config.disk_tier, config.disk_tier_bytes, events)
    return TieredKVCacheManager(num_blocks, config.block_size, tier, events, eviction)


def attach_pool(manager: BlockManager, pool: KVPool) -> None:
    """Give a tiered manager's store the pool it saves from and restores into (a no-op for any other manager)."""
    if isinstance(manager, TieredKVCacheManager):
        manager.tier.attach(pool)
