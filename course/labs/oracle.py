"""Belady's rule on a lab B trace: forget the cached block whose next use lies farthest in the future (the grader's).

No online policy can know the future; the grader can, because it holds the whole trace. It serves the trace once
(with least recently used) and writes down, for every prompt the KV-cache manager admits, the hashes of the blocks
a prefix hit could reuse: the block-hash access sequence. It then serves the trace again with ``BeladyEviction``,
which reads that sequence. Each admission crosses off the first access still ahead with the same hashes; when the
pool asks which cached block to forget, the policy evicts the tail (the pool's rule holds for the oracle too) whose
hash is next needed latest, or never. Admission order can differ a little between the two runs (a request served
from the cache finishes sooner, and its next turn comes sooner), which matching by hashes absorbs.

Belady's rule is optimal for a cache of equal, independent items; a prefix cache's blocks come in chains, and a hit
counts only while every block before it is cached, so the rule is the ceiling in practice (the room a policy could
still win), not a proof of one.
"""

from __future__ import annotations

from kvcourse.kernels import LLMEngine
from kvcourse.kernels.memory.block_pool import BlockPool, block_hash
from kvcourse.kernels.memory.eviction import EvictionCandidate, LRUEviction

from .drive import Served, serve
from .model import lab_config, lab_model
from .traces import LabTrace

Access = tuple[bytes, ...]  # the hashes of the blocks one admitted prompt could find cached, first block first


def _hit_hashes(seq, block_size: int) -> Access:
    """The hashes of the blocks of ``seq`` that a prefix hit may cover (all full blocks before its last token)."""
    hashes: list[bytes] = []
    parent = None
    for i in range((seq.num_tokens - 1) // block_size):
        parent = block_hash(parent, seq.block_tokens(i))
        hashes.append(parent)
    return tuple(hashes)


def _watched(trace: LabTrace, eviction, on_admit) -> LLMEngine:
    """The lab's engine for ``trace``, its KV-cache manager calling ``on_admit(hashes)`` before each admission."""
    engine = LLMEngine(lab_model(), lab_config(trace, prefix_caching=True), eviction=eviction)
    manager = engine.kv_cache_manager
    allocate = manager.allocate

    def admit(seq) -> None:
        on_admit(_hit_hashes(seq, trace.block_size))
        allocate(seq)

    manager.allocate = admit  # type: ignore[method-assign]
    return engine


def access_sequence(trace: LabTrace) -> list[Access]:
    """Serve ``trace`` with least recently used and write down each admitted prompt's block hashes, in order."""
    accesses: list[Access] = []
    serve(_watched(trace, LRUEviction(), accesses.append), trace)
    return accesses


class BeladyEviction:
    """Evicts the tail whose next use in the access sequence lies farthest ahead (never used again: farthest)."""

    def __init__(self, accesses: list[Access]) -> None:
        self.ahead = list(accesses)
        self.pool: BlockPool | None = None

    def admitted(self, hashes: Access) -> None:
        """A prompt was admitted: its access is no longer ahead."""
        if hashes in self.ahead:
            self.ahead.remove(hashes)

    def _next_use(self, block_id: int) -> int:
        assert self.pool is not None
        h = self.pool._cached[block_id].block_hash
        return next((i for i, access in enumerate(self.ahead) if h in access), len(self.ahead))

    def choose(self, candidates: list[EvictionCandidate]) -> int:
        tails = [c for c in candidates if not c.has_cached_children] or candidates
        return max(tails, key=lambda c: (self._next_use(c.block_id), -c.last_used, c.depth)).block_id


def serve_oracle(trace: LabTrace) -> Served:
    """``trace`` served with Belady's rule on its own access sequence."""
    oracle = BeladyEviction(access_sequence(trace))
    engine = _watched(trace, oracle, oracle.admitted)
    oracle.pool = engine.kv_cache_manager.block_pool
    return serve(engine, trace)
