"""The KV cache on versus off, by answer length: whole generate() time, prefill included (lessons 02, 05).

Our generate(cache="contiguous") and generate(cache="none") on one chat prompt, greedy, float32,
2 threads, for each number of new tokens; the two sides alternate (cache first, then the other
order) and each keeps the median of its runs. The tokens must be identical. Without a cache
every step reruns the whole sequence, so the speedup must grow with the length.
Run: .venv/bin/python -m benchmarks.bench_cache_onoff [--lengths 32 64 128 256] [--runs 2]
Writes benchmarks/results/cache_onoff.json.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.common import set_threads, write_result

PROMPT = [{"role": "user", "content": "Explain what a KV cache is and why it makes text generation faster."}]


def sweep(model, ids, lengths: list[int], runs: int) -> list[dict]:
    """One row per length: median seconds with and without the cache, their ratio, tokens identical."""
    from kvcourse.kernels import generate

    rows = []
    for n in lengths:
        seconds: dict[str, list[float]] = {"contiguous": [], "none": []}
        tokens = {}
        for r in range(runs):
            for cache in ("contiguous", "none") if r % 2 == 0 else ("none", "contiguous"):
                start = time.perf_counter()
                tokens[cache] = generate(model, ids, n, cache=cache, eos_token_id=[]).tokens
                seconds[cache].append(time.perf_counter() - start)
        med = {k: statistics.median(v) for k, v in seconds.items()}
        rows.append(
            {
                "new_tokens": n,
                "seconds_cache": med["contiguous"],
                "seconds_no_cache": med["none"],
                "samples": seconds,
                "speedup": med["none"] / med["contiguous"],
                "tokens_identical": tokens["none"] == tokens["contiguous"],
            }
        )
        print(
            f"  {n:4d} new tokens: cache {med['contiguous']:7.2f} s, no cache {med['none']:7.2f} s, "
            f"speedup {rows[-1]['speedup']:5.1f}x, same tokens: {rows[-1]['tokens_identical']}",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="*", default=[32, 64, 128, 256])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)
    set_threads()

    from kvcourse.kernels.engine.generate import as_transformer
    from kvcourse.models import load_model

    hf_model, tok = load_model(dtype="float32", device="cpu")
    ids = tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt")["input_ids"][0]
    model = as_transformer(hf_model)
    rows = sweep(model, ids, sorted(args.lengths), args.runs)
    speedups = [r["speedup"] for r in rows]
    result = {
        "model": "smollm2-135m",
        "dtype": "float32",
        "prompt_tokens": len(ids),
        "rows": rows,
        "meets_targets": {
            "speedup_grows_with_length": all(b > a for a, b in zip(speedups, speedups[1:], strict=False)),
            "tokens_identical": all(r["tokens_identical"] for r in rows),
        },
    }
    path = write_result("cache_onoff", result)
    print(f"targets: {result['meets_targets']}; written to {path}")
    return result


if __name__ == "__main__":
    main()
