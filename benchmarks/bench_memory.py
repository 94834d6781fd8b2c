"""Memory: utilisation of paging versus reservation on one trace (lessons 09, 11), and the blocks
that sharing saves in beam search and parallel sampling on the real model (lesson 12).

Targets: paging utilisation >= 96 % (the vLLM paper measured 20-40 % for reservation systems);
beam search of width 4 holds >= 40 % fewer blocks than private copies would.
Run: python -m benchmarks.bench_memory
"""

from __future__ import annotations

from benchmarks.common import write_result
from benchmarks.engine_setup import load_engine_model

BLOCK_SIZE = 16


def fragmentation() -> dict:
    from kvcourse.kernels import simulate_paging, simulate_reservation, workload

    trace = workload.request_trace(workload.LESSON_TRACE)
    num_slots = workload.LESSON_POOL_SLOTS
    reservation = simulate_reservation(trace, num_slots)
    paging = simulate_paging(trace, num_slots // BLOCK_SIZE, BLOCK_SIZE)  # as LLMEngine steps (lesson 11)
    for report in (reservation, paging):
        print(
            f"{report.name:12s} utilisation {report.utilisation:6.1%}  internal {report.share('internal'):6.1%}  "
            f"external {report.share('external'):6.1%}  stranded {report.share('stranded'):6.1%}  "
            f"reserved-ahead {report.share('reserved_future'):6.1%}  "
            f"mean batch {report.mean_running:5.1f}  steps {report.num_steps}"
        )
    return {
        "trace": {
            "config": "workload.LESSON_TRACE",
            **workload.trace_summary(trace),
            "pool_slots": num_slots,
            "block_size": BLOCK_SIZE,
        },
        "reservation": reservation.as_dict(),
        "paging": paging.as_dict(),
    }


def sharing(model, tokenizer) -> dict:
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
    from kvcourse.kernels.engine.beam_search import beam_search

    messages = [
        {"role": "system", "content": "You are a helpful assistant. " * 20},
        {"role": "user", "content": "Explain in two sentences why a KV cache speeds up generation."},
    ]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")["input_ids"][0]
    prompt = prompt.tolist()
    beams = beam_search(model, prompt, beam_width=4, max_new_tokens=16, block_size=BLOCK_SIZE)
    print(
        f"beam search width 4, prompt {len(prompt)} tokens: {beams.peak_blocks_shared} blocks shared vs "
        f"{beams.peak_blocks_unshared} private ({beams.blocks_saved:.1%} saved)"
    )
    engine = LLMEngine(model, EngineConfig(block_size=BLOCK_SIZE))
    rid = engine.add_request(prompt, SamplingParams(max_new_tokens=16, n=4, temperature=0.8, seed=0, stop_on_eos=False))
    peak_used = peak_private = 0
    while engine.has_unfinished_requests:
        engine.step()
        used = engine.kv_cache_manager.num_used_blocks
        if used > peak_used:
            peak_used, peak_private = used, sum(len(s.block_table) for s in engine.requests[rid].seqs)
    saved = 1 - peak_used / peak_private
    print(f"parallel sampling n=4: {peak_used} blocks shared vs {peak_private} private ({saved:.1%} saved)")
    return {
        "prompt_tokens": len(prompt),
        "new_tokens": 16,
        "beam_width_4": {
            "blocks_shared": beams.peak_blocks_shared,
            "blocks_private": beams.peak_blocks_unshared,
            "saved": beams.blocks_saved,
        },
        "parallel_sampling_n4": {"blocks_shared": peak_used, "blocks_private": peak_private, "saved": saved},
    }


def main() -> None:
    model, _, tokenizer = load_engine_model()
    frag = fragmentation()
    share = sharing(model, tokenizer)
    util = frag["paging"]["utilisation"]
    beam_saved = share["beam_width_4"]["saved"]
    result = {
        "fragmentation": frag,
        "sharing": share,
        "targets": {"paging_utilisation": 0.96, "beam_width_4_saved": 0.40},
        "meets_target": util >= 0.96 and beam_saved >= 0.40,
    }
    path = write_result("memory", result)
    print(
        f"paging utilisation {util:.1%} (target >= 96 %), reservation {frag['reservation']['utilisation']:.1%}; "
        f"beam width 4 saves {beam_saved:.1%} (target >= 40 %); {path}"
    )


if __name__ == "__main__":
    main()
