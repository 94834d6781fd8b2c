"""Throughput versus batch size on the same total work (lesson 14): memory buys throughput.

64 requests of 4 prompt tokens and 6 new tokens each, served by LLMEngine with at most B
sequences running at once, B = 1 ... 64. Same tokens every time; only the batch changes.
Target: batch 32 >= 8x the tokens/s of batch 1. Run: python -m benchmarks.bench_batch_throughput
"""

from __future__ import annotations

from benchmarks.common import write_result
from benchmarks.engine_setup import load_engine_model, random_prompts, timed

NUM_REQUESTS, PROMPT_LEN, NEW_TOKENS = 64, 4, 6
BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64]


def main() -> None:
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams

    model, _, _ = load_engine_model()
    prompts = random_prompts(NUM_REQUESTS, PROMPT_LEN, PROMPT_LEN, seed=1)
    params = SamplingParams(max_new_tokens=NEW_TOKENS, stop_on_eos=False)

    def serve(batch: int):
        engine = LLMEngine(model, EngineConfig(max_num_seqs=batch, num_blocks=256))
        outs = engine.generate(prompts, params)
        return outs, engine.num_steps

    LLMEngine(model, EngineConfig()).generate(prompts[:4], params)  # warm-up
    rows, reference = {}, None
    # the two sizes in the target are measured twice, in opposite order, and the faster run kept
    order = BATCH_SIZES + [32, 1]
    for batch in order:
        (outs, steps), seconds = timed(lambda b=batch: serve(b))
        tokens = [o.tokens for o in outs]
        reference = reference or tokens
        assert tokens == reference, "greedy tokens changed with the batch size"
        best = min(seconds, rows.get(batch, {}).get("seconds", float("inf")))
        rows[batch] = {"batch": batch, "seconds": best, "steps": steps,
                       "tokens_per_second": NUM_REQUESTS * NEW_TOKENS / best}
        print(f"batch {batch:3d}: {steps:4d} steps {seconds:7.2f} s  {NUM_REQUESTS * NEW_TOKENS / seconds:8.1f} tok/s",
              flush=True)
    speedup = rows[32]["tokens_per_second"] / rows[1]["tokens_per_second"]
    result = {"workload": {"requests": NUM_REQUESTS, "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS},
              "rows": [rows[b] for b in BATCH_SIZES], "batch32_over_batch1": speedup,
              "target": 8.0, "meets_target": speedup >= 8.0}
    path = write_result("batch_throughput", result)
    print(f"batch 32 / batch 1 = {speedup:.1f}x (target >= 8x: {'met' if speedup >= 8 else 'NOT met'}); {path}")


if __name__ == "__main__":
    main()
