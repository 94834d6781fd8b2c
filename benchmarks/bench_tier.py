"""A tier below memory (issue 46 item 2): seconds to restore n tokens' K/V from the disk tier against seconds to
recompute them (prefill), on SmolLM2-135M-Instruct in float32, for n = 16 .. 2,048, and where they cross.

Per n (blocks of 16): an engine with the disk tier on (files in a fresh directory under ``TIER_DIR``, default the
system's temporary directory) and a pool of n/16 + 2 blocks.
- ``recompute_s``: the time to first token of a prompt of n + 1 tokens never seen (the prefill of n + 1 tokens),
  ``REPEATS`` prompts, the fastest (on a shared CPU the least disturbed run; every run is kept in the JSON).
- The last prompt's n/16 cached blocks are then pushed out of the pool (every free block allocated and released:
  the pool writes each cached one to the tier), and read back into free blocks with ``DiskTier.restore``:
  ``restore_disk_s`` after every file was flushed and dropped from the page cache (``POSIX_FADV_DONTNEED``: the
  bytes come from the device), ``restore_page_cache_s`` right after a read (the same bytes from the OS page cache,
  a memory copy). The fastest of ``REPEATS``.
- ``ttft_restored_disk_s``: the engine serving that prompt again, its n tokens restored from dropped files, then
  one token computed; its first token is checked equal to the recomputed one.
Bytes per token: 2 (K, V) x 30 layers x 3 KV heads x 64 x 4 bytes = 46,080 in float32 (lesson 07's figure).
The crossover: the smallest n from which restoring (from the device, and from the page cache) stays faster than
recomputing, or None; the smallest n measured (16) means restoring won at every n.
Run: python -m benchmarks.bench_tier (about a minute on 2 threads; on a busy CPU with KVCOURSE_BENCH_THREADS=1,
since a two-thread product waits for a descheduled thread).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import bench_threads, write_result
from benchmarks.engine_setup import load_engine_model, random_prompts
from kvcourse.kernels.measure.tier import BLOCK_SIZE, filesystem, push_out, restore_seconds, the_tier, tier_engine

LENGTHS = (16, 32, 64, 128, 256, 512, 1024, 2048)
REPEATS = 3


def measure(model: Any, n: int, directory: Path, repeats: int = REPEATS, vocab: tuple[int, int] = (100, 20000)) -> dict:
    """One n: recompute, restore from the device and from the page cache, the engine's TTFT with the restore."""
    from kvcourse.kernels import SamplingParams

    engine = tier_engine(model, n, directory)
    one = SamplingParams(max_new_tokens=1, stop_on_eos=False)
    recompute, first = [], []
    for prompt in random_prompts(repeats, n + 1, n + 1, seed=n, vocab=vocab):
        push_out(engine)  # every prompt cold
        start = time.perf_counter()
        out = engine.generate([prompt], one)[0]
        recompute.append(time.perf_counter() - start)
        assert out.finished and not out.refusal and out.num_cached_tokens == 0
        first.append(out.tokens)
    push_out(engine)  # the last prompt's blocks go to the tier
    disk = [restore_seconds(engine, prompt, drop=True) for _ in range(repeats)]
    cached = [restore_seconds(engine, prompt, drop=False) for _ in range(repeats)]
    push_out(engine)
    the_tier(engine).drop_page_cache()
    start = time.perf_counter()
    out = engine.generate([prompt], one)[0]
    ttft_restored = time.perf_counter() - start
    tier = the_tier(engine)
    row = {
        "n": n,
        "recompute_s": min(recompute),
        "restore_disk_s": min(disk),
        "restore_page_cache_s": min(cached),
        "runs_s": {"recompute": recompute, "restore_disk": disk, "restore_page_cache": cached},
        "ttft_restored_disk_s": ttft_restored,
        "restored_tokens": out.num_cached_tokens,
        "first_token_equal": out.tokens == first[-1],
        "block_file_bytes": tier.block_bytes,
    }
    tier.close()
    return row


def crossover(rows: list[dict], key: str) -> int | None:
    """The smallest n from which restoring (``key``) stays faster than recomputing, or None."""
    faster = [row["recompute_s"] > row[key] for row in rows]
    for i, row in enumerate(rows):
        if all(faster[i:]):
            return row["n"]
    return None


def main(argv: list[str] | None = None) -> None:
    from kvcourse.kernels.costs import kv_bytes_per_token

    model, _, _ = load_engine_model()
    directory = Path(os.environ.get("TIER_DIR", tempfile.gettempdir()))
    per_token = kv_bytes_per_token(model.config, bytes_per_value=4)
    measure(model, BLOCK_SIZE, directory, repeats=1)  # warm-up: the first forward passes pay for setup
    rows = []
    for n in LENGTHS:
        rows.append(measure(model, n, directory))
        r = rows[-1]
        print(
            f"n={n:5d}: recompute {r['recompute_s'] * 1e3:8.1f} ms, restore from the device "
            f"{r['restore_disk_s'] * 1e3:7.2f} ms, from the page cache {r['restore_page_cache_s'] * 1e3:7.2f} ms "
            f"({n * per_token / 2**20:.1f} MiB); TTFT restored {r['ttft_restored_disk_s'] * 1e3:.1f} ms, "
            f"{r['restored_tokens']} tokens restored, first token equal: {r['first_token_equal']}",
            flush=True,
        )
    result = {
        "workload": {
            "model": "SmolLM2-135M-Instruct float32",
            "threads": bench_threads(),
            "block_size": BLOCK_SIZE,
            "lengths": LENGTHS,
            "repeats": REPEATS,
            "kv_bytes_per_token": per_token,
            "tier_filesystem": filesystem(directory),
            "disk": "restore_disk_s: files flushed and dropped with POSIX_FADV_DONTNEED (a device read)",
            "page_cache": "restore_page_cache_s: the same files read again (a copy from the OS page cache)",
        },
        "rows": rows,
        "crossover_n_disk": crossover(rows, "restore_disk_s"),
        "crossover_n_page_cache": crossover(rows, "restore_page_cache_s"),
        "recompute_over_restore_disk": {r["n"]: r["recompute_s"] / r["restore_disk_s"] for r in rows},
    }
    path = write_result("tier", result)
    print(
        f"restoring beats recomputing from n = {result['crossover_n_disk']} (device), "
        f"{result['crossover_n_page_cache']} (page cache); {per_token:,} bytes per token; wrote {path}"
    )


if __name__ == "__main__":
    main()
