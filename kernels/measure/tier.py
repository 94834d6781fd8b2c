"""Lesson 27's measurement: seconds to restore n tokens' K/V from the engine's disk tier against seconds to
recompute them (a prefill), as n grows (issue 46 item 2).

Per n (whole blocks of 16): an engine with the disk tier on, in a fresh folder under ``directory`` (the system's
temporary directory by default), and a pool of n/16 + 2 blocks.
- ``recompute (s)``: the engine serving a prompt of n + 1 tokens it has never seen, one new token: its prefill
  of n + 1 tokens. The fastest of ``repeats`` prompts (on a shared CPU, the least disturbed run).
- The last prompt's n/16 blocks are then pushed out of the pool (every free block allocated and released: the pool
  writes each cached block to the tier) and read back into free blocks with ``DiskTier.restore``:
  ``restore, device (s)`` after every file was flushed and dropped from the OS page cache (``POSIX_FADV_DONTNEED``:
  the bytes come from the device), ``restore, page cache (s)`` right after a read (the same bytes from the page
  cache: a memory copy). The fastest of ``repeats`` each.
- ``served again (s)``: the engine serving that prompt again with its blocks pushed out and dropped, so its n
  tokens come from the tier; ``tokens restored`` is what the engine counted as cached, and ``same first token``
  whether its first token is the one recomputing gave.

``served_again`` serves one prompt cold, then again from the tier, with more new tokens, for the token-for-token
comparison. ``crossover`` is the smallest n from which restoring stays faster than recomputing, or None;
``filesystem`` names the file system under the tier's folder (a tmpfs would make "the device" memory too).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kvcourse.kernels.engine.config import EngineConfig
from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.engine.sampling import SamplingParams
from kvcourse.kernels.memory.block_pool import block_hash
from kvcourse.kernels.memory.disk_tier import DiskTier, TieredKVCacheManager

BLOCK_SIZE = 16
TIER_DIR = tempfile.gettempdir()  # where the tier's folders go unless told
RECOMPUTE, DEVICE, PAGE_CACHE = "recompute (s)", "restore, device (s)", "restore, page cache (s)"


def filesystem(path: str | Path) -> str:
    """The file system type under ``path`` (from /proc/mounts: the longest mount point that contains it)."""
    best, kind = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mount, fs, *_ = line.split()
            if str(Path(path).resolve()).startswith(mount) and len(mount) > len(best):
                best, kind = mount, fs
    except OSError:
        pass
    return kind


def tier_engine(model: Any, n: int, directory: str | Path | None = None) -> LLMEngine:
    """An engine with the disk tier on and a pool of n/16 + 2 blocks: room for one prompt of n + 1 tokens."""
    config = EngineConfig(block_size=BLOCK_SIZE, num_blocks=n // BLOCK_SIZE + 2, enable_prefix_caching=True,
                          disk_tier=directory or TIER_DIR)  # fmt: skip
    return LLMEngine(model, config)


def _manager(engine: LLMEngine) -> TieredKVCacheManager:
    manager = engine.kv_cache_manager
    if not isinstance(manager, TieredKVCacheManager):
        raise TypeError("the engine has no disk tier: build it with tier_engine")
    return manager


def the_tier(engine: LLMEngine) -> DiskTier:
    """The engine's disk tier (its KV-cache manager's)."""
    return _manager(engine).tier


def push_out(engine: LLMEngine) -> None:
    """Evict every cached block of the pool: allocate every free block (the pool writes cached ones to the tier)
    and release them all, empty."""
    pool = _manager(engine).block_pool
    for block_id in [pool.allocate() for _ in range(pool.num_free_blocks)]:
        pool.release(block_id)


def restore_seconds(engine: LLMEngine, prompt: list[int], drop: bool) -> float:
    """Seconds to read the prompt's full blocks (all but its last token) from the tier into pool blocks 0, 1, ..."""
    tier = the_tier(engine)
    blocks, parent = [], None
    for i in range((len(prompt) - 1) // BLOCK_SIZE):
        tokens = prompt[i * BLOCK_SIZE : (i + 1) * BLOCK_SIZE]
        parent = block_hash(parent, tokens)
        blocks.append((parent, tokens))
    if drop:
        tier.drop_page_cache()
    start = time.perf_counter()
    for block_id, (h, tokens) in enumerate(blocks):
        if not tier.restore(h, tokens, block_id):
            raise RuntimeError(f"block {block_id} of the prompt is not in the tier")
    return time.perf_counter() - start


def _serve(engine: LLMEngine, prompt: list[int], new_tokens: int) -> tuple[Any, float]:
    start = time.perf_counter()
    out = engine.generate([prompt], SamplingParams(max_new_tokens=new_tokens, stop_on_eos=False))[0]
    return out, time.perf_counter() - start


def measure(model: Any, text_ids: list[int], n: int, repeats: int, directory: str | Path | None = None) -> dict:
    """One n: recompute, restore from the device and from the page cache, the engine serving it from the tier."""
    if n % BLOCK_SIZE or len(text_ids) < n + repeats:
        raise ValueError(f"n must be whole blocks of {BLOCK_SIZE} and the text at least n + repeats tokens long")
    engine = tier_engine(model, n, directory)
    recompute, first = [], None
    for r in range(repeats):  # each prompt starts one token later: a different first block, so never cached
        prompt = text_ids[r : r + n + 1]
        push_out(engine)
        out, seconds = _serve(engine, prompt, 1)
        recompute.append(seconds)
        first = out.tokens
    push_out(engine)  # the last prompt's blocks go to the tier
    device = min(restore_seconds(engine, prompt, drop=True) for _ in range(repeats))
    page_cache = min(restore_seconds(engine, prompt, drop=False) for _ in range(repeats))
    push_out(engine)
    the_tier(engine).drop_page_cache()
    out, again = _serve(engine, prompt, 1)
    the_tier(engine).close()
    return {"tokens": n, RECOMPUTE: min(recompute), DEVICE: device, PAGE_CACHE: page_cache, "served again (s)": again,
            "tokens restored": out.num_cached_tokens, "same first token": out.tokens == first}  # fmt: skip


def restore_vs_recompute(
    model: Any, text_ids: list[int], lengths: tuple[int, ...], repeats: int, directory: str | Path | None = None
) -> pd.DataFrame:
    """One row per n (the index): recompute against restore from the device and from the page cache, seconds."""
    measure(model, text_ids, BLOCK_SIZE, 1, directory)  # warm-up: the first passes pay for setting up
    rows = [measure(model, text_ids, n, repeats, directory) for n in lengths]
    table = pd.DataFrame(rows).set_index("tokens")
    table["recompute / device"] = table[RECOMPUTE] / table[DEVICE]
    return table


@dataclass(frozen=True)
class ServedAgain:
    cold: list[int]  # tokens of the prompt served with nothing cached
    restored: list[int]  # the same prompt served again, its blocks read from the tier
    tokens_restored: int
    tier_restores: int  # blocks the tier read back (TierStats.restores)


def served_again(model: Any, prompt: list[int], new_tokens: int, directory: str | Path | None = None) -> ServedAgain:
    """The prompt served cold, then again with its blocks pushed out of the pool and dropped from the page cache."""
    engine = tier_engine(model, len(prompt) + new_tokens, directory)
    cold, _ = _serve(engine, prompt, new_tokens)
    push_out(engine)
    tier = the_tier(engine)
    tier.drop_page_cache()
    again, _ = _serve(engine, prompt, new_tokens)
    result = ServedAgain(list(cold.tokens), list(again.tokens), again.num_cached_tokens, tier.stats.restores)
    tier.close()
    return result


def crossover(table: pd.DataFrame, column: str = DEVICE) -> int | None:
    """The smallest n from which restoring (``column``) stays faster than recomputing at every larger n measured,
    or None (recomputing won at the largest). The smallest n measured means restoring won everywhere."""
    faster = list(table[RECOMPUTE] > table[column])
    for i, n in enumerate(table.index):
        if all(faster[i:]):
            return int(n)
    return None
