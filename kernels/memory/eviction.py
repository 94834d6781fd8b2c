"""Which cached block to forget when the pool runs out of empty ones: the eviction policy (lesson 13, lab B).

The block pool hands out an empty block whenever it has one. Only when every free block still
holds a cached prefix must one of them be forgotten, and that choice is the policy's. The pool
shows the policy every such block as an ``EvictionCandidate`` (what it knows about the block's
use) and takes back one ``block_id``. A choice the pool cannot honour raises
``EvictionPolicyError`` with the reason, and nothing changes:
- a block that is not among the candidates: it is in use (a sequence holds it), or it caches
  nothing, or it does not exist;
- a block whose next block in its prefix is still cached, while a candidate without one (a tail)
  could go: the prefix cache finds a block by walking from the first block of a prompt, so the
  cached child could never be found again yet would keep its place. Evict chains from the tail.

``LRUEviction`` is vLLM's choice, kept to tails: the tail freed longest ago goes first. Without a
policy the pool evicts in the order blocks were freed, which is the same but for one case: two
equal prompts computed side by side cache one copy of a block and its children under both, and
plain order can then forget the parent before a child (vLLM does the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class EvictionCandidate:
    """A free block that still caches a prefix block, as the eviction policy sees it.

    ``last_used`` and ``cached_at`` are ticks of the pool's clock, which moves on every time a
    block is freed or found in the cache; a larger tick is more recent.
    """

    block_id: int
    last_used: int  # the tick at which it was last freed or found (a prefix hit)
    cached_at: int  # the tick at which it entered the prefix cache
    num_hits: int  # prefix hits on it since it was cached
    depth: int  # its place in its prefix: 0 for a prompt's first block
    has_cached_children: bool  # a block that extends this prefix is still cached


class EvictionPolicy(Protocol):
    """Chooses the cached block to forget (lab B). Return one candidate's ``block_id``."""

    def choose(self, candidates: list[EvictionCandidate]) -> int: ...


class EvictionPolicyError(RuntimeError):
    """The policy chose a block the pool must not evict; the message says which and why."""


class LRUEviction:
    """Least recently used first; on a tie the deeper block (a tail before its head)."""

    def choose(self, candidates: list[EvictionCandidate]) -> int:
        tails = [c for c in candidates if not c.has_cached_children] or candidates
        return min(tails, key=lambda c: (c.last_used, -c.depth)).block_id


def rejection(choice: object, candidates: list[EvictionCandidate], ref_counts: list[int]) -> str | None:
    """Why the pool must refuse ``choice``, or None when it is one of the candidates it may evict."""
    if isinstance(choice, bool) or not isinstance(choice, int):
        return f"choose returned {choice!r}, not a block id (an int among the candidates' block_id)"
    by_id = {c.block_id: c for c in candidates}
    if choice in by_id:
        tail = next((c.block_id for c in candidates if not c.has_cached_children), None)
        if by_id[choice].has_cached_children and tail is not None:
            return (
                f"block {choice} is the parent of a block still cached: evicting it breaks the hash chain "
                f"(the child could never be found again) while block {tail}, a tail, could go; evict from "
                "the tail of a prefix"
            )
        return None
    if not 0 <= choice < len(ref_counts):
        return f"block {choice} does not exist: the pool holds blocks 0 to {len(ref_counts) - 1}"
    if ref_counts[choice] > 0:
        return (
            f"block {choice} is in use ({ref_counts[choice]} block table(s) hold it): only free blocks can be evicted"
        )
    return f"block {choice} caches nothing: it is not among the {len(candidates)} candidates"
