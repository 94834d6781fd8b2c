"""KV-cache groups: a block table per group of layers with the same window, every group on one pool (issue 45).

A model whose layers have different attention windows (Gemma 3: five local layers in six) can free a local
layer's old blocks while its global layers keep theirs only if the two do not share a block. vLLM's hybrid
KV-cache manager groups the layers: layers with the same window form groups of EQUAL layer count, a physical
block holds one group's layers for ``block_size`` tokens (so a block id means the same bytes in every group),
and each sequence keeps one block table per group. SmolLM2 with Gemma 3's pattern has 25 local layers and 5
global ones: groups of 5 layers, five local groups and one global group.

The group size is the greatest common divisor of the layer counts per window (25 and 5: 5). Counts that share
no divisor make groups of one layer (7 local and 3 global: ten groups), where vLLM pads the smaller kind with
layers that hold nothing; the bytes are the same, the tables more.

A global group (window None) holds every block of its sequence, as the one-table engine does. A local group of
window ``w`` holds only what a token still to be computed can see: the token at position p sees the keys at
p - w + 1 .. p, so once ``c`` tokens are computed every block that ends before position c - w + 1 goes back to
the pool (``free_slid_out``, after each pass), and a step that computes up to position ``end`` writes to the
pool only the positions from end - w + 1 on (earlier new tokens are seen within the step, never after it).
A freed entry of a local table is ``NULL_BLOCK``, so a table still maps logical block i to its entry.
Prefix caching and forked sequences are refused with windows (a shared block would need every group's tables).
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Seq
from dataclasses import dataclass

from kvcourse.kernels.attention.paged_windows import NULL_BLOCK
from kvcourse.kernels.checks import ceil_div, check_positive_int
from kvcourse.kernels.memory.block_manager import Sequence
from kvcourse.kernels.memory.block_pool import BlockPool, PoolCounts
from kvcourse.kernels.memory.events import EventLog
from kvcourse.kernels.memory.kv_pool import BlockCopy

NOT_WITH_WINDOWS = "not supported with windows"


@dataclass(frozen=True)
class KVCacheGroup:
    """Layers that share a block table: ``window`` None for global layers, else the local layers' window."""

    window: int | None
    layers: tuple[int, ...]


def kv_cache_groups(layer_windows: Seq[int | None]) -> tuple[KVCacheGroup, ...]:
    """Layers with the same window, in groups of equal size (the gcd of the counts); global groups first."""
    if not layer_windows:
        raise ValueError("layer_windows must give a window (or None) for each layer")
    for window in layer_windows:
        check_positive_int("window", window, optional=True)
    kinds = sorted(set(layer_windows), key=lambda w: (w is not None, w or 0))
    layers = {w: tuple(i for i, lw in enumerate(layer_windows) if lw == w) for w in kinds}
    size = math.gcd(*(len(ls) for ls in layers.values()))
    return tuple(
        KVCacheGroup(w, ls[i : i + size]) for w in kinds for ls in [layers[w]] for i in range(0, len(ls), size)
    )


class KVCacheGroupsManager(PoolCounts):
    """One BlockPool, one block table per group and sequence; local groups give back what slid out of their
    window (the engine's ``BlockManager`` where ``EngineConfig.layer_windows`` is set)."""

    def __init__(
        self, num_blocks: int, block_size: int, groups: Seq[KVCacheGroup], events: EventLog | None = None
    ) -> None:
        check_positive_int("block_size", block_size)
        self.block_size = block_size
        self.groups = tuple(groups)
        self.events = events if events is not None else EventLog()
        self.block_pool = BlockPool(num_blocks, self.events)
        self.peak_blocks: dict[int, int] = {}  # seq id -> the most blocks it held at once, over every group

    def min_blocks(self, num_tokens: int) -> int:
        """The fewest blocks a sequence of ``num_tokens`` tokens needs at its last step, over every group."""
        total = ceil_div(num_tokens, self.block_size)
        return sum(
            total if g.window is None else ceil_div(min(num_tokens, g.window), self.block_size) for g in self.groups
        )

    def _needed(self, group: KVCacheGroup, seq: Sequence) -> range | list[int]:
        """Logical blocks the group must hold for the step that computes ``seq.num_scheduled_tokens`` tokens."""
        bs, done = self.block_size, seq.num_computed_tokens
        if group.window is None:
            return range(seq.num_blocks)
        end = done + (seq.num_scheduled_tokens or seq.num_tokens - done)  # no count yet: every uncomputed token
        seen = range(max(0, done - group.window + 1) // bs, ceil_div(done, bs))  # what the new tokens see
        kept = range(max(done, end - group.window + 1) // bs, ceil_div(end, bs))  # what later tokens will see
        return sorted({*seen, *kept})

    def num_held_blocks(self, seq: Sequence) -> int:
        """Blocks ``seq`` holds now, over every group."""
        return sum(b != NULL_BLOCK for table in seq.group_tables for b in table)

    def _missing(self, seq: Sequence) -> int:
        tables = seq.group_tables or [[] for _ in self.groups]
        return sum(
            1
            for group, table in zip(self.groups, tables, strict=True)
            for i in self._needed(group, seq)
            if i >= len(table) or table[i] == NULL_BLOCK
        )

    def num_blocks_to_allocate(self, seq: Sequence) -> int:
        return self._missing(seq)

    def can_allocate(self, seq: Sequence) -> bool:
        return self.block_pool.can_allocate(self._missing(seq))

    def allocate(self, seq: Sequence) -> None:
        """Tables for a new sequence, each with the blocks its group needs for the scheduled tokens."""
        if seq.group_tables or seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already has blocks")
        seq.group_tables = [[] for _ in self.groups]
        seq.block_table = seq.group_tables[0]
        self._fill(seq)

    def num_blocks_to_append(self, seq: Sequence) -> int:
        return self._missing(seq)

    def can_append(self, seq: Sequence) -> bool:
        return self.block_pool.can_allocate(self._missing(seq))

    def append_slots(self, seq: Sequence) -> list[BlockCopy]:
        """Blocks for this step's tokens in every group; nothing is shared, so nothing is copied."""
        self._fill(seq)
        return []

    def _fill(self, seq: Sequence) -> None:
        for group, table in zip(self.groups, seq.group_tables, strict=True):
            needed = self._needed(group, seq)
            if needed and len(table) <= needed[-1]:
                table.extend([NULL_BLOCK] * (needed[-1] + 1 - len(table)))
            for i in needed:
                if table[i] == NULL_BLOCK:
                    table[i] = self.block_pool.allocate(seq.seq_id)
        held = self.num_held_blocks(seq)
        self.peak_blocks[seq.seq_id] = max(held, self.peak_blocks.get(seq.seq_id, 0))

    def free_slid_out(self, seq: Sequence) -> None:
        """Give back every local block that ends before the window of the next token to compute."""
        for group, table in zip(self.groups, seq.group_tables, strict=True):
            if group.window is None:
                continue
            for i in range(min(len(table), max(0, seq.num_computed_tokens - group.window + 1) // self.block_size)):
                if table[i] != NULL_BLOCK:
                    self.block_pool.release(table[i], seq.seq_id)
                    table[i] = NULL_BLOCK

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Called after every pass (``finish_pass``): nothing is cached with windows; slid-out blocks are freed."""
        self.free_slid_out(seq)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        raise ValueError(f"{NOT_WITH_WINDOWS}: forking a sequence (n > 1 samples, beam search)")

    def free(self, seq: Sequence) -> None:
        """Drop every block of every group, tails first."""
        for table in reversed(seq.group_tables):
            for block_id in reversed(table):
                if block_id != NULL_BLOCK:
                    self.block_pool.release(block_id, seq.seq_id)
        seq.group_tables, seq.block_table = [], []
        seq.num_computed_tokens = seq.num_cached_tokens = 0
