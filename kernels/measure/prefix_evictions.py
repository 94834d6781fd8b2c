"""A prefix-caching engine's evictions read back from its event log, as tables (lesson 13).

The lesson serves one request per visit, in order, so a request's sequence id is its visit's
number counted from 0. ``evictions`` pairs each EVICT event with the CACHE_INSERT that filled the
block, naming whose prefix was overwritten; ``visit_table`` shows each visit's reuse and what it
evicted; ``eviction_queue`` lists the cached blocks still in the free list, next to go first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.memory.events import EventKind
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager


def _holders(engine: LLMEngine) -> tuple[dict[int, int], list[tuple[int, int, int]]]:
    holder: dict[int, int] = {}  # physical block -> the visit whose prefix it holds now
    evicted: list[tuple[int, int, int]] = []  # (visit that took it, block, visit whose prefix it held)
    for event in engine.events.events:
        if event.kind is EventKind.CACHE_INSERT:
            assert event.block_id is not None and event.seq_id is not None, "the cache manager names both"
            holder[event.block_id] = event.seq_id
        elif event.kind is EventKind.EVICT:
            assert event.block_id is not None and event.seq_id is not None, "the manager allocates for a sequence"
            evicted.append((event.seq_id, event.block_id, holder.pop(event.block_id)))
    return holder, evicted


def evictions(engine: LLMEngine, names: Sequence[str]) -> pd.DataFrame:
    """One row per evicted block, in order: the visit (from 1) that took it, and whose cached prefix it held."""
    _, evicted = _holders(engine)
    rows = [
        {"taken by visit": taker + 1, "block": block, "held the prefix of": names[held], "cached by visit": held + 1}
        for taker, block, held in evicted
    ]
    return pd.DataFrame(rows, columns=["taken by visit", "block", "held the prefix of", "cached by visit"])


def visit_table(names: Sequence[str], outputs: Sequence[Any], evicted: pd.DataFrame) -> pd.DataFrame:
    """One row per visit: who, tokens reused from the cache, and the blocks it evicted (whose, cached when)."""
    rows = []
    for number, (name, out) in enumerate(zip(names, outputs, strict=True), start=1):
        taken = evicted[evicted["taken by visit"] == number]
        what = [
            f"block {b} ({who}, visit {v})"
            for b, who, v in zip(taken["block"], taken["held the prefix of"], taken["cached by visit"], strict=True)
        ]
        rows.append(
            {
                "visit": number,
                "who": name,
                "tokens reused": out.num_cached_tokens,
                "evicted": ", ".join(what) or "nothing",
            }
        )
    return pd.DataFrame(rows).set_index("visit")


def eviction_queue(engine: LLMEngine, names: Sequence[str]) -> list[str]:
    """The cached blocks still in the free list, next to be evicted first: "block (whose prefix)"."""
    holder, _ = _holders(engine)
    manager = engine.kv_cache_manager
    if not isinstance(manager, KVCacheManager):
        raise TypeError(f"the eviction queue is the engine's own KVCacheManager's, not a {type(manager).__name__}'s")
    pool = manager.block_pool
    return [f"{b} ({names[holder[b]]})" for b in pool.free_block_ids if pool.is_cached(b)]
