"""What the scheduler asks of a block manager (lessons 10-13, lab A): one interface, two implementations.

The engine's own ``KVCacheManager`` (prefix caching, eviction) and a learner's manager in lab A
(``course.labs.BlockManagerBase``) both answer it; the scheduler, the engine and beam search type
their manager as this and call nothing else on it. The ask/do pairs (``can_allocate``/``allocate``,
``can_append``/``append_slots``) let the scheduler check memory before it commits to a decision.

Optional parts: a manager may have these; who reads them, and what is assumed without them.

- ``num_blocks_to_allocate(seq)``/``num_blocks_to_append(seq) -> int``: policy_choices.seq_view (the blocks a
  ``SchedulingPolicy`` sees a sequence need, and the scheduler's "short of blocks" reason); sharing and prefix
  hits change the count. Without them: the blocks past the sequence's table.
- ``prefix_hit_tokens(seq) -> int`` (``FindsPrefixes``): seq_view, so ``LongestPrefixFirst`` can order by it.
  Without it: 0 for every sequence.
- ``pop_copies() -> list[BlockCopy]`` (``CopiesOnAdmission``): the scheduler, right after ``allocate``, puts the
  block copies admission planned into the step (the radix manager copies a partly matched block). Without: none.
- ``rollback(seq) -> int`` (``RollsBack``): the ``Speculator`` (engine/speculation.py) after verifying drafts,
  to give back the blocks past the computed tokens. Needed only with ``EngineConfig.speculation``: the engine
  refuses a manager without it there.
- ``events`` (an ``EventLog``): the scheduler and beam search log into it when they are given no log.

The scheduler writes ``seq.num_scheduled_tokens`` before it calls ``can_append``/``can_allocate``; only the
manager with windows (kv_cache_groups.py) reads it. The engine's managers: ``KVCacheManager`` (and its disk-tier
kind, disk_tier.py) has every optional part but ``pop_copies``, which only the radix kind adds (radix_manager.py);
``KVCacheGroupsManager`` has the counts and ``events``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from kvcourse.kernels.memory.kv_pool import BlockCopy


class Sequence(Protocol):
    """What a block manager reads and writes on a sequence (engine.sequence.Sequence is one)."""

    seq_id: int
    block_table: list[int]
    group_tables: list[list[int]]  # one table per group of layers, where layers have windows (kv_cache_groups.py)
    block_hashes: list[bytes]
    num_computed_tokens: int
    num_cached_tokens: int
    num_scheduled_tokens: int  # this step's tokens, set by the scheduler before it asks for blocks

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_blocks(self) -> int: ...

    def block_tokens(self, index: int) -> list[int]: ...


@runtime_checkable
class BlockManager(Protocol):
    """Maps sequences to physical blocks of the pool; every block id it hands out is below its ``num_blocks``."""

    @property
    def num_blocks(self) -> int: ...

    @property
    def num_free_blocks(self) -> int: ...

    @property
    def num_used_blocks(self) -> int: ...

    def can_allocate(self, seq: Sequence) -> bool: ...

    def allocate(self, seq: Sequence) -> None: ...

    def can_append(self, seq: Sequence) -> bool: ...

    def append_slots(self, seq: Sequence) -> list[BlockCopy]: ...

    def fork(self, parent: Sequence, child: Sequence) -> None: ...

    def free(self, seq: Sequence) -> None: ...

    def cache_full_blocks(self, seq: Sequence) -> None: ...


@runtime_checkable
class FindsPrefixes(Protocol):
    """Optional part: the prompt tokens admission would find in the prefix cache now (read by seq_view)."""

    def prefix_hit_tokens(self, seq: Sequence) -> int: ...


@runtime_checkable
class CopiesOnAdmission(Protocol):
    """Optional part: block copies ``allocate`` planned, taken by the scheduler into the step's batch."""

    def pop_copies(self) -> list[BlockCopy]: ...


@runtime_checkable
class RollsBack(Protocol):
    """Optional part, needed with speculation: give back the blocks past the computed tokens; how many it freed."""

    def rollback(self, seq: Sequence) -> int: ...
