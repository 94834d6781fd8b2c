"""Multi-turn chat on SmolLM2: prompt tokens found in the prefix cache, hash chain against radix tree (issue 46).

A synthetic chat trace (6 conversations of 3 to 6 turns, one shared 64-token system prompt, user messages of
8 to 32 tokens, answers of up to 24 tokens; each turn's prompt is the previous prompt, its answer and the next
message) is served round by round (every conversation's turn 1, then turn 2, ...) on four prefix caches:
- ``hash_prompt_only``: the hash chain caching only the prompt's full blocks (answers' blocks are not kept);
- ``hash``: the engine's hash chain (every computed full block, answers' included);
- ``radix``: the radix tree (to the token; answers' partly filled blocks kept);
- ``radix_lpm``: the radix tree, admitting the longest cached prefix first (LongestPrefixFirst, SGLang's lpm);
- ``none``: no prefix cache, the reference the others' tokens must equal (float32).
Each cache runs with an ample pool (512 blocks of 16) and a pressed one (``PRESSED_BLOCKS``). Reported: prompt
tokens found in the cache over the later turns (turn 2 on), their share of those turns' prompt tokens,
evictions, and the median time to first token of the later turns (a round's turns arrive together, so a
turn's TTFT includes its round's batch). One run each. Run: python -m benchmarks.bench_radix_chat
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.common import write_result
from benchmarks.engine_setup import load_engine_model

BLOCK_SIZE, PRESSED_BLOCKS, MAX_NEW_TOKENS = 16, 96, 24
TRACE = {"num_conversations": 6, "turns": (3, 6), "system_len": 64, "user_len": (8, 32), "vocab": (100, 20000)}
CACHES = ("none", "hash_prompt_only", "hash", "radix", "radix_lpm")


def prompt_only_manager(num_blocks: int, block_size: int) -> Any:
    """The hash chain caching only blocks that lie inside the prompt: the answer's blocks are not kept."""
    from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager

    class PromptOnly(KVCacheManager):
        def cache_full_blocks(self, seq: Any) -> None:
            computed = seq.num_computed_tokens
            seq.num_computed_tokens = min(computed, seq.num_prompt_tokens)
            super().cache_full_blocks(seq)
            seq.num_computed_tokens = computed

    return PromptOnly(num_blocks, block_size, enable_prefix_caching=True)


def serve(model: Any, cache: str, num_blocks: int | None, trace: Any, max_new_tokens: int) -> dict:
    """Serve ``trace`` with one prefix cache; per-turn counts and times, and the engine's evictions."""
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
    from kvcourse.kernels.engine.policy import LongestPrefixFirst
    from kvcourse.kernels.memory.events import EventKind
    from kvcourse.kernels.memory.radix_chat import serve_chat

    config = EngineConfig(
        block_size=BLOCK_SIZE,
        num_blocks=num_blocks,
        enable_prefix_caching=cache != "none",
        prefix_index="radix" if cache.startswith("radix") else "hash",
    )
    engine = LLMEngine(
        model,
        config,
        block_manager=prompt_only_manager if cache == "hash_prompt_only" else None,
        scheduling_policy=LongestPrefixFirst() if cache == "radix_lpm" else None,
    )
    params = SamplingParams(max_new_tokens=max_new_tokens, stop_on_eos=False)
    turns = serve_chat(lambda prompts: engine.generate(prompts, params), trace)
    later = [t for t in turns if t.turn > 0]
    ttfts = [t.ttft_s for t in later if t.ttft_s is not None]
    return {
        "answers": [t.answer for t in turns],
        "found_later_turns": sum(t.num_cached_tokens for t in later),
        "prompt_tokens_later_turns": sum(t.prompt_len for t in later),
        "found_per_turn": [t.num_cached_tokens for t in turns],
        "evictions": len(engine.events.of_kind(EventKind.EVICT)),
        "preemptions": len(engine.events.of_kind(EventKind.PREEMPT)),
        "median_ttft_later_turns_s": statistics.median(ttfts) if ttfts else None,
    }


def measure(model: Any, trace: Any, pools: dict[str, int | None], max_new_tokens: int = MAX_NEW_TOKENS) -> dict:
    """Every cache on every pool; asserts each cache's answers equal the uncached ones."""
    results: dict[str, dict[str, dict]] = {}
    for pool, num_blocks in pools.items():
        results[pool] = {}
        for cache in CACHES:
            row = serve(model, cache, num_blocks, trace, max_new_tokens)
            reference = results[pool].get("none", row)
            row["tokens_equal_to_no_cache"] = row["answers"] == reference["answers"]
            results[pool][cache] = row
            share = row["found_later_turns"] / max(row["prompt_tokens_later_turns"], 1)
            print(
                f"{pool:>6} {cache:>16}: {row['found_later_turns']:5d} prompt tokens found ({share:.0%}), "
                f"{row['evictions']} evictions, TTFT {row['median_ttft_later_turns_s'] or 0:.3f} s",
                flush=True,
            )
    for rows in results.values():
        for row in rows.values():
            del row["answers"]
    return results


def main() -> None:
    from kvcourse.kernels.memory.radix_chat import chat_trace

    model, _, _ = load_engine_model()
    trace = chat_trace(**TRACE, seed=0)
    results = measure(model, trace, {"ample": None, "pressed": PRESSED_BLOCKS})
    ratios = {
        pool: rows["radix"]["found_later_turns"] / max(rows["hash"]["found_later_turns"], 1)
        for pool, rows in results.items()
    }
    path = write_result(
        "radix_chat",
        {
            "workload": {
                **TRACE,
                "turns_total": trace.num_turns,
                "block_size": BLOCK_SIZE,
                "max_new_tokens": MAX_NEW_TOKENS,
                "pools": {"ample": 512, "pressed": PRESSED_BLOCKS},
            },
            "results": results,
            "radix_over_hash_found": ratios,
        },
    )
    print(", ".join(f"{pool}: radix / hash prompt tokens found = {r:.3f}x" for pool, r in ratios.items()), path)


if __name__ == "__main__":
    main()
