"""Multi-turn chat: prompt tokens found in the prefix cache, hash chain against radix tree, and TTFT (issue 46).

A synthetic chat trace (6 conversations of 3 to 6 turns, one shared 64-token system prompt, user messages of
8 to 32 tokens, answers of 24 tokens; each turn's prompt is the previous prompt, its answer and the next
message) is served round by round (every conversation's turn 1, then turn 2, ...) with five prefix caches:
- ``none``: no prefix cache;
- ``hash_prompt_only``: the hash chain caching only the prompt's full blocks (answers' blocks are not kept);
- ``hash``: the engine's hash chain (every computed full block, answers' included);
- ``radix``: the radix tree (to the token; answers' partly filled blocks kept);
- ``radix_lpm``: the radix tree, admitting the longest cached prefix first (LongestPrefixFirst, SGLang's lpm).

Counts: the engine's scheduler and KV-cache manager serve the trace without a model (each answer is a fixed,
seeded run of token ids, so the counts need no forward pass and take milliseconds; SmolLM2's own answers gave
the same counts on the ample pool), on pools of ``POOLS`` blocks of 16: prompt tokens found in the cache over
the later turns (turn 2 on) and their share, evictions, preemptions.
Times: SmolLM2 (float32, 2 threads) serves a shorter trace (``TTFT_TRACE``, answers of ``TTFT_ANSWER`` tokens)
with the caches of ``TIMED`` on the ample pool, ``ROUNDS`` runs each, round-robin: the median time to first token
of the later turns (a round's turns arrive together, so it includes the round's batch), and the answers checked
equal to ``none``'s. ``--counts-only`` skips the model. On a busy CPU run it with KVCOURSE_BENCH_THREADS=1 (a
two-thread product waits for a descheduled thread: one such run timed hash at 2.8 s and radix at 0.1 s).
Run: python -m benchmarks.bench_radix_chat
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from benchmarks.common import write_result
from benchmarks.engine_setup import load_engine_model

BLOCK_SIZE, AMPLE_BLOCKS, ANSWER = 16, 512, 24
POOLS = (AMPLE_BLOCKS, 48, 32, 24)  # blocks of 16: room for everything, then less than the ~70 the trace caches
VOCAB = (100, 20000)
TRACE = {"num_conversations": 6, "turns": (3, 6), "system_len": 64, "user_len": (8, 32), "vocab": VOCAB}
TTFT_TRACE = {"num_conversations": 3, "turns": (3, 3), "system_len": 64, "user_len": (8, 32), "vocab": VOCAB}
TTFT_ANSWER, ROUNDS = 8, 2
CACHES = ("none", "hash_prompt_only", "hash", "radix", "radix_lpm")
TIMED = ("none", "hash", "radix")


def count(trace: Any, cache: str, num_blocks: int, answer_len: int = ANSWER, seed: int = 0) -> dict:
    """Serve ``trace`` on the engine's scheduler and KV-cache manager alone (``chat_prefix.count_chat``, which
    lesson 26 and its simulator use): every answer is a seeded run of ``answer_len`` token ids (the same for every
    cache), so no model runs. Prompt tokens found in later turns, evictions, preemptions."""
    from kvcourse.kernels.measure.chat_prefix import count_chat, seeded_answers

    counts = count_chat(trace, cache, num_blocks, BLOCK_SIZE, seeded_answers(answer_len, VOCAB, seed))
    found, prompt_tokens = counts.found_later_turns(), counts.prompt_tokens_later_turns()
    return {
        "found_later_turns": found,
        "prompt_tokens_later_turns": prompt_tokens,
        "share_found": found / max(prompt_tokens, 1),
        "evictions": counts.evictions,
        "preemptions": counts.preemptions,
    }


def serve(model: Any, cache: str, trace: Any, answer_len: int) -> dict:
    """Serve ``trace`` on the engine with one prefix cache (ample pool): answers, tokens found, TTFT of later turns."""
    from kvcourse.kernels.measure.chat_prefix import serve_one

    turns = serve_one(model, trace, cache, AMPLE_BLOCKS, BLOCK_SIZE, answer_len)
    later = [t for t in turns if t.turn > 0]
    ttfts = [t.ttft_s for t in later if t.ttft_s is not None]
    return {
        "answers": [t.answer for t in turns],
        "found_later_turns": sum(t.num_cached_tokens for t in later),
        "median_ttft_later_turns_s": statistics.median(ttfts) if ttfts else None,
    }


def measure_times(
    model: Any, trace: Any, answer_len: int, caches: tuple[str, ...] = TIMED, rounds: int = ROUNDS
) -> dict:
    """Each cache ``rounds`` times, round-robin (the order rotates each round); every answer checked equal to
    the uncached ones (``caches[0]``'s). Per cache: each run's median TTFT of the later turns, and their median."""
    runs: dict[str, list[dict]] = {cache: [] for cache in caches}
    for r in range(rounds):
        for cache in caches[r % len(caches) :] + caches[: r % len(caches)]:
            runs[cache].append(serve(model, cache, trace, answer_len))
            ttft = runs[cache][-1]["median_ttft_later_turns_s"] or 0.0
            print(f"round {r} {cache:>16}: TTFT of later turns {ttft:.3f} s", flush=True)
    reference = runs[caches[0]][0]["answers"]
    return {
        cache: {
            "found_later_turns": rows[0]["found_later_turns"],
            "median_ttft_later_turns_s_per_run": [row["median_ttft_later_turns_s"] for row in rows],
            "median_ttft_later_turns_s": statistics.median(row["median_ttft_later_turns_s"] or 0.0 for row in rows),
            "tokens_equal_to_no_cache": all(row["answers"] == reference for row in rows),
        }
        for cache, rows in runs.items()
    }


def main(argv: list[str] | None = None) -> None:
    from kvcourse.kernels.memory.radix_chat import chat_trace

    counts_only = "--counts-only" in (sys.argv[1:] if argv is None else argv)
    trace = chat_trace(**TRACE, seed=0)
    counts = {f"{n}_blocks": {cache: count(trace, cache, n) for cache in CACHES} for n in POOLS}
    for pool, rows in counts.items():
        for cache, row in rows.items():
            print(
                f"{pool:>7} {cache:>16}: {row['found_later_turns']:5d} of {row['prompt_tokens_later_turns']} prompt "
                f"tokens found ({row['share_found']:.0%}), {row['evictions']} evictions, {row['preemptions']} preempted"
            )
    ratios = {
        pool: {c: rows[c]["found_later_turns"] / rows["hash"]["found_later_turns"] for c in ("radix", "radix_lpm")}
        for pool, rows in counts.items()
    }
    times = None
    if not counts_only:
        model, _, _ = load_engine_model()
        times = measure_times(model, chat_trace(**TTFT_TRACE, seed=1), TTFT_ANSWER)
        for cache, row in times.items():
            ratio = times["none"]["median_ttft_later_turns_s"] / max(row["median_ttft_later_turns_s"], 1e-9)
            print(
                f"{cache:>16}: TTFT of later turns {row['median_ttft_later_turns_s']:.3f} s, none's / this {ratio:.1f}x"
            )
    workload = {
        "trace": {**TRACE, "seed": 0, "turns_total": trace.num_turns, "answer_tokens": ANSWER},
        "block_size": BLOCK_SIZE,
        "pools_blocks": POOLS,
        "ttft_trace": {**TTFT_TRACE, "seed": 1, "answer_tokens": TTFT_ANSWER, "model": "SmolLM2-135M-Instruct float32"},
    }
    result = {"workload": workload, "counts": counts, "found_over_hash": ratios, "times": times}
    path = write_result("radix_chat", result)
    for pool, r in ratios.items():
        print(
            f"{pool}: prompt tokens found / the hash chain's: radix {r['radix']:.3f}x, radix_lpm {r['radix_lpm']:.3f}x"
        )
    print(path)


if __name__ == "__main__":
    main()
