"""Our LLMEngine versus transformers' own continuous batching (``generate_batch``) on one workload (lesson 14).

Both serve the same 32 prompts (16-64 tokens) for 16 greedy tokens each on SmolLM2-135M, CPU,
2 threads; each is run twice, alternating, and its faster run kept. The tokens must agree.
Target: ours >= 1.5x faster. Run: python -m benchmarks.bench_vs_hf_cb
"""

from __future__ import annotations

import logging

from benchmarks.common import write_result
from benchmarks.engine_setup import load_engine_model, random_prompts, timed

NUM_REQUESTS, NEW_TOKENS = 32, 16


def main() -> None:
    from transformers import GenerationConfig

    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams

    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.ERROR)
    model, hf_model, _ = load_engine_model()
    prompts = random_prompts(NUM_REQUESTS, 16, 64, seed=2)
    params = SamplingParams(max_new_tokens=NEW_TOKENS, stop_on_eos=False)
    gen_config = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=-1, pad_token_id=0)

    def ours():
        engine = LLMEngine(model, EngineConfig(max_num_seqs=NUM_REQUESTS))
        return [o.tokens for o in engine.generate(prompts, params)]

    def theirs():
        out = hf_model.generate_batch(prompts, generation_config=gen_config, progress_bar=False, warmup=False)
        return [r.generated_tokens for r in out.values()]

    ours_s, theirs_s, tokens = [], [], {}
    for _ in range(2):
        tokens["ours"], s = timed(ours)
        ours_s.append(s)
        tokens["theirs"], s = timed(theirs)
        theirs_s.append(s)
        print(f"ours {ours_s[-1]:.2f} s, transformers generate_batch {theirs_s[-1]:.2f} s", flush=True)
    matching = sum(a == b for a, b in zip(tokens["ours"], tokens["theirs"]))
    speedup = min(theirs_s) / min(ours_s)
    result = {"workload": {"requests": NUM_REQUESTS, "prompt_tokens": "16-64", "new_tokens": NEW_TOKENS},
              "ours_seconds": ours_s, "transformers_seconds": theirs_s,
              "ours_tokens_per_second": NUM_REQUESTS * NEW_TOKENS / min(ours_s),
              "transformers_tokens_per_second": NUM_REQUESTS * NEW_TOKENS / min(theirs_s),
              "speedup": speedup, "requests_with_identical_tokens": matching,
              "target": 1.5, "meets_target": speedup >= 1.5}
    path = write_result("vs_hf_continuous_batching", result)
    print(f"ours / transformers = {speedup:.2f}x (target >= 1.5x: {'met' if speedup >= 1.5 else 'NOT met'}); "
          f"identical tokens in {matching}/{NUM_REQUESTS} requests; {path}")


if __name__ == "__main__":
    main()
