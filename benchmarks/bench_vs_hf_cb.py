"""Our LLMEngine versus transformers' own continuous batching on one realistic workload (lesson 14).

Both serve the same 16 requests (prompts of 128-384 tokens, answers of 64-256 tokens, each
request its own length) greedily on SmolLM2-135M, float32, CPU, 2 threads, with up to 16
sequences in flight. Peer: transformers' continuous-batching manager (the engine behind
``generate_batch``, eager, paged cache), fed the same per-request lengths. Both sides get one
warm-up run, then 3 interleaved rounds; the figure is the ratio of the median wall times,
with the per-round ratios' spread. The tokens must agree (float32, greedy).
Target: ours >= 2x faster (issue 29). Run: .venv/bin/python -m benchmarks.bench_vs_hf_cb [--rounds 3] [--requests 16]
Writes benchmarks/results/vs_hf_continuous_batching.json.
"""

from __future__ import annotations

import argparse
import logging
import time

from benchmarks.common import interleaved, paired_ratio, summary, write_result
from benchmarks.engine_setup import load_engine_model
from benchmarks.workloads import Workload

TARGET = 2.0
BLOCK_SIZE, NUM_BLOCKS = 16, 1024  # both sides get a KV pool of 16,384 token slots


def serve_ours(model, workload: Workload, max_num_seqs: int) -> list[list[int]]:
    """Every request of the workload through our LLMEngine; tokens in request order."""
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams

    engine = LLMEngine(
        model,
        EngineConfig(
            max_num_seqs=max_num_seqs, num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE, max_num_batched_tokens=2048
        ),
    )
    params = [SamplingParams(max_new_tokens=n, stop_on_eos=False) for n in workload.answer_lens]
    return [o.tokens for o in engine.generate(workload.prompts, params)]


def serve_hf(hf_model, workload: Workload, max_num_seqs: int) -> list[list[int]]:
    """Every request through transformers' continuous-batching manager, each with its own max_new_tokens.

    Its KV pool is sized like ours (left alone it sizes itself from the free memory and zero-fills
    gigabytes per call); its own page size (256 tokens) is kept.
    """
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    from transformers.generation.continuous_batching.utils import WorkloadHints

    config = GenerationConfig(
        max_new_tokens=max(workload.answer_lens), do_sample=False, eos_token_id=-1, pad_token_id=0
    )
    page_size = 256
    cb_config = ContinuousBatchingConfig(
        page_size=page_size,
        num_blocks=BLOCK_SIZE * NUM_BLOCKS // page_size,
        max_batch_tokens=2048,
        max_requests_per_batch=max_num_seqs,
    )
    hints = WorkloadHints(
        max_prompt_length=max(map(len, workload.prompts)),
        max_generated_length=max(workload.answer_lens),
        num_requests=min(len(workload), max_num_seqs),
    )
    results = {}
    with hf_model.continuous_batching_context_manager(
        generation_config=config,
        continuous_batching_config=cb_config,
        block=True,
        timeout=5,
        warmup=False,
        workload_hints=hints,
    ) as manager:
        ids = [
            manager.add_request(p, request_id=f"r{i}", max_new_tokens=n)
            for i, (p, n) in enumerate(zip(workload.prompts, workload.answer_lens, strict=True))
        ]
        while len(results) < len(ids):
            out = manager.get_result(timeout=1)
            if out is not None and out.is_finished():
                results[out.request_id] = out.generated_tokens
            elif out is None and not manager.is_running():
                raise RuntimeError("transformers' continuous batching stopped before finishing")
    return [results[i] for i in ids]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=16)
    args = parser.parse_args(argv)
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.ERROR)
    model, hf_model, _ = load_engine_model()
    workload = Workload.make(args.requests, seed=2)
    warm = Workload.make(2, prompt_tokens=(16, 32), answer_tokens=(4, 4), seed=3)
    serve_ours(model, warm, args.requests)  # the first calls of each shape pick their kernels
    serve_hf(hf_model, warm, args.requests)
    tokens: dict[str, list[list[int]]] = {}

    def timed(name, fn, *a):
        start = time.perf_counter()
        tokens[name] = fn(*a)
        return time.perf_counter() - start

    samples = interleaved(
        {
            "ours": lambda: timed("ours", serve_ours, model, workload, args.requests),
            "transformers_cb": lambda: timed("hf", serve_hf, hf_model, workload, args.requests),
        },
        args.rounds,
        warmup=0,
    )
    matching = sum(a == b for a, b in zip(tokens["ours"], tokens["hf"], strict=False))
    speedup = paired_ratio(samples["transformers_cb"], samples["ours"])
    num_tokens = workload.num_answer_tokens
    result = {
        "workload": workload.describe(),
        "max_num_seqs": args.requests,
        "dtype": "float32",
        "peer": "transformers continuous batching (ContinuousBatchingManager, as generate_batch uses), eager",
        "rounds": args.rounds,
        "seconds": {k: summary(v) for k, v in samples.items()},
        "samples_seconds": samples,
        "tokens_per_second": {k: num_tokens / summary(v)["median"] for k, v in samples.items()},
        "speedup": speedup,
        "requests_with_identical_tokens": matching,
        "target": TARGET,
        "meets_target": speedup["ratio_of_medians"] >= TARGET,
    }
    path = write_result("vs_hf_continuous_batching", result)
    print(
        f"ours / transformers = {speedup['ratio_of_medians']:.2f}x (per round "
        f"{speedup['per_round']['min']:.2f}-{speedup['per_round']['max']:.2f}; target >= {TARGET}x: "
        f"{'met' if result['meets_target'] else 'NOT met'}); identical tokens in {matching}/{len(workload)} "
        f"requests; {path}"
    )
    return result


if __name__ == "__main__":
    main()
