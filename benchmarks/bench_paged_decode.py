"""Paged versus contiguous KV cache: decode time of one sequence (lesson 10).

generate(cache="contiguous") and generate(cache="paged") on a 512-token prompt, 32 new tokens,
alternating, 3 runs each; the ratio of the median decode times (prefill excluded). The paged
cache reads K/V through a block table (a gather per layer); the contiguous one reads a slice.
Target: paged <= 1.15x contiguous. Run: python -m benchmarks.bench_paged_decode
"""

from __future__ import annotations

import statistics

from benchmarks.common import write_result
from benchmarks.engine_setup import load_engine_model, random_prompts

PROMPT_LEN, NEW_TOKENS, RUNS = 512, 32, 3


def main() -> None:
    from kvcourse.kernels import generate

    model, _, _ = load_engine_model()
    prompt = random_prompts(1, PROMPT_LEN, PROMPT_LEN, seed=3)[0]
    generate(model, prompt[:64], 4, cache="paged")  # warm-up
    times: dict[str, list[float]] = {"contiguous": [], "paged": []}
    tokens = {}
    for _ in range(RUNS):
        for cache in times:
            result = generate(model, prompt, NEW_TOKENS, cache=cache, eos_token_id=[])
            times[cache].append(result.decode_seconds)
            tokens[cache] = result.tokens
            print(f"{cache:10s} decode {result.decode_seconds:.2f} s", flush=True)
    assert tokens["paged"] == tokens["contiguous"]
    ratio = statistics.median(times["paged"]) / statistics.median(times["contiguous"])
    result = {
        "workload": {"prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS, "runs": RUNS},
        "decode_seconds": times,
        "paged_over_contiguous": ratio,
        "target": 1.15,
        "meets_target": ratio <= 1.15,
    }
    path = write_result("paged_decode", result)
    print(
        f"paged / contiguous decode = {ratio:.3f}x (target <= 1.15x: {'met' if ratio <= 1.15 else 'NOT met'}); {path}"
    )


if __name__ == "__main__":
    main()
