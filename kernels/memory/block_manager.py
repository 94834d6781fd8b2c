"""What the scheduler asks of a block manager (lessons 10-13, lab A): one interface, two implementations.

The engine's own ``KVCacheManager`` (prefix caching, eviction) and a learner's manager in lab A
(``course.labs.BlockManagerBase``) both answer it; the scheduler, the engine and beam search type
their manager as this and call nothing else on it. The ask/do pairs (``can_allocate``/``allocate``,
``can_append``/``append_slots``) let the scheduler check memory before it commits to a decision.
The scheduler also reads ``num_blocks_to_allocate``/``num_blocks_to_append`` where a manager has
them (sharing and prefix hits change the count); a manager without them is read as one with neither.
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
