"""Time to first token with a 1,024-token shared prefix: prefix-cache hit versus miss (lesson 13).

A request made of a 1,024-token prefix and a short question. Miss: a fresh engine computes all
of it. Hit: an engine that already served the same prefix (with another question) finds its
64 blocks in the prefix cache and computes only the question. 3 alternating runs, medians.
Target: hit >= 8x faster. Run: python -m benchmarks.bench_prefix_ttft
"""

from __future__ import annotations

import statistics

from benchmarks.common import write_result
from benchmarks.engine_setup import load_engine_model, random_prompts, timed

PREFIX_LEN, QUESTION_LEN, RUNS = 1024, 16, 3


def main() -> None:
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams

    model, _, _ = load_engine_model()
    prefix = random_prompts(1, PREFIX_LEN, PREFIX_LEN, seed=4)[0]
    warm_q, *questions = random_prompts(RUNS + 1, QUESTION_LEN, QUESTION_LEN, seed=5)
    one = SamplingParams(max_new_tokens=1, stop_on_eos=False)
    config = EngineConfig(enable_prefix_caching=True, num_blocks=256)

    def first_token(engine: LLMEngine, prompt: list[int]):
        rid = engine.add_request(prompt, one)
        while True:
            for out in engine.step():
                if out.request_id == rid and out.tokens:
                    return out

    first_token(LLMEngine(model, config), prefix[:64] + warm_q)  # warm-up
    hits, misses = [], []
    for question in questions:
        cold = LLMEngine(model, config)
        miss_out, seconds = timed(lambda q=question, e=cold: first_token(e, prefix + q))
        misses.append(seconds)
        warm = LLMEngine(model, config)
        first_token(warm, prefix + warm_q)
        hit_out, seconds = timed(lambda q=question, e=warm: first_token(e, prefix + q))
        hits.append(seconds)
        assert hit_out.tokens == miss_out.tokens and hit_out.num_cached_tokens == PREFIX_LEN
        print(f"miss {misses[-1]:.3f} s, hit {hits[-1]:.3f} s ({hit_out.num_cached_tokens} tokens cached)", flush=True)
    speedup = statistics.median(misses) / statistics.median(hits)
    result = {
        "workload": {"prefix_tokens": PREFIX_LEN, "question_tokens": QUESTION_LEN, "runs": RUNS},
        "miss_seconds": misses,
        "hit_seconds": hits,
        "speedup": speedup,
        "target": 8.0,
        "meets_target": speedup >= 8.0,
    }
    path = write_result("prefix_ttft", result)
    print(
        f"time to first token, miss / hit = {speedup:.1f}x "
        f"(target >= 8x: {'met' if speedup >= 8 else 'NOT met'}); {path}"
    )


if __name__ == "__main__":
    main()
