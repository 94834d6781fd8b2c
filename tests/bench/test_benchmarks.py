"""Every benchmark's measuring code runs on a tiny model: the figures are not checked, only that they come out.

Tests never time anything; `make bench` measures on the real model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from factories import make_tiny_hf_llama

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ sits beside tests/, not in the package

from benchmarks import (  # noqa: E402
    bench_batch_throughput,
    bench_chunked_prefill,
    bench_decode,
    bench_greedy,
    bench_vs_hf_cb,
    decode_attention,
)
from benchmarks.common import cpu_facts, interleaved, paired_ratio, summary  # noqa: E402
from benchmarks.eager_bound import eager_decode  # noqa: E402
from benchmarks.floor import engine_linears, hf_linears, linears_seconds  # noqa: E402
from benchmarks.workloads import Workload  # noqa: E402
from kvcourse.kernels import Transformer  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    """The tiny model with its fast paths, whatever KVCOURSE_FAST_PATHS says: the eager bound reads them."""
    hf = make_tiny_hf_llama()
    with pytest.MonkeyPatch.context() as env:
        env.delenv("KVCOURSE_FAST_PATHS", raising=False)
        return Transformer.from_hf(hf).accelerate(), hf


def test_machine_facts_name_the_cpu_and_bf16():
    facts = cpu_facts()
    assert facts["cpu_model"] and facts["bf16_native"] in (True, False, None)


def test_interleaved_rounds_rotate_and_summaries_hold():
    calls = []
    samples = interleaved(
        {"a": lambda: calls.append("a") or 2.0, "b": lambda: calls.append("b") or 1.0}, rounds=2, warmup=1, log=None
    )
    assert calls == ["a", "b", "a", "b", "b", "a"]  # warm-ups, then round 2 starts with the other side
    assert summary([1.0, 2.0, 3.0])["median"] == 2.0 and summary([1.0, 3.0])["spread"] == 1.0
    assert paired_ratio(samples["a"], samples["b"])["ratio_of_medians"] == 2.0


def test_the_greedy_benchmark_times_two_pickers_of_the_same_tokens():
    logits = torch.randn(3, 50)
    assert torch.equal(bench_greedy.argmax(logits), bench_greedy.greedy(logits))
    assert bench_greedy.per_call(bench_greedy.argmax, logits, calls=2)() >= 0


def test_floor_runs_every_linear(tiny):
    ours, hf = tiny
    assert len(engine_linears(ours)) == 4 * ours.config.num_layers + 1  # qkv, o, gate_up, down + lm_head
    assert len(hf_linears(hf)) == 7 * ours.config.num_layers + 1
    assert linears_seconds(engine_linears(ours), rows=3, repeats=1) > 0


def test_decode_comparison_runs(tiny):
    ours, hf = tiny
    textbook = Transformer.from_hf(hf).accelerate("off")
    row = bench_decode.compare(ours, hf, torch.arange(3, 11), num_new=4, rounds=1, textbook=textbook)
    assert row["tokens_identical_to_hf"] and set(row["ms_per_token"]) == {
        "ours",
        "floor",
        "hf_eager_generate",
        "hf_linears",
        "eager_bound",
        "textbook",
    }
    assert row["eager_bound_tokens_identical"] and row["textbook_tokens_identical"]
    graded = bench_decode.grade({"fp32": row, "bf16": row}, onednn_bf16=False)
    assert graded.keys() == {
        "fp32_vs_textbook",
        "fp32_eager_bound",
        "fp32_vs_hf_eager",
        "bf16_vs_textbook",
        "bf16_vs_hf_eager",
    }, "every dtype graded on every CPU"
    fast = {**row, "speedup_vs_hf_eager_generate": {"ratio_of_medians": 1.2}}
    assert bench_decode.grade({"bf16": fast}, onednn_bf16=False)["bf16_vs_hf_eager"]
    assert not bench_decode.grade({"bf16": fast}, onednn_bf16=True)["bf16_vs_hf_eager"], "1.5x where oneDNN runs"
    assert not bench_decode.grade(
        {"bf16": {**fast, "fast_paths_speedup": {"ratio_of_medians": 0.9}}}, onednn_bf16=False
    )["bf16_vs_textbook"], "a fast path slower than the textbook"


def test_eager_bound_does_all_the_work(tiny):
    """The flat loop is a bound only if it computes what the engine does: the same greedy tokens, step for step."""
    from kvcourse.kernels import generate

    ours, _ = tiny
    prompt = list(range(3, 20))
    _, tokens = eager_decode(ours, prompt, 24)
    assert tokens == generate(ours, prompt, 24, eos_token_id=[]).tokens
    unpacked = Transformer(ours.config)
    with pytest.raises(ValueError, match="accelerate"):
        eager_decode(unpacked, prompt, 2)


def test_batch_sweep_keeps_the_batch_full(tiny):
    ours, _ = tiny
    workload = Workload.make(2, prompt_tokens=(8, 12), answer_tokens=(8, 8), seed=0, vocab=(3, 90))
    result = bench_batch_throughput.sweep(ours, workload, [1, 2], rounds=1, steps=2)
    assert [r["batch"] for r in result["rows"]] == [1, 2] and result["meets_target"] in (True, False)
    reachable = result["floor_scaling"] >= bench_batch_throughput.TARGET_FRACTION_OF_LINEARS * result["linears_scaling"]
    assert result["target_reachable"] is reachable
    attention, gather = (
        result["largest_batch_attention_ms_per_step"],
        result["largest_batch_gather_attention_ms_per_step"],
    )
    assert attention["n"] == gather["n"] == 1 and attention["median"] > 0 and gather["median"] > 0


def test_attention_timing_leaves_the_pool_as_it_was(tiny):
    ours, _ = tiny
    workload = Workload.make(3, prompt_tokens=(8, 40), answer_tokens=(8, 8), seed=0, vocab=(3, 90))
    engine = decode_attention.prefilled_engine(ours, workload, 3)
    k, v = engine.pool.k.clone(), engine.pool.v.clone()
    seconds = {kernel: decode_attention.attention_seconds(engine, kernel) for kernel in ("in place", "gather")}
    assert torch.equal(engine.pool.k, k) and torch.equal(engine.pool.v, v)
    assert seconds["in place"] > 0 and seconds["gather"] > 0


def test_continuous_batching_sides_agree(tiny):
    ours, hf = tiny
    workload = Workload.make(2, prompt_tokens=(5, 9), answer_tokens=(3, 5), seed=0, vocab=(3, 90))
    theirs = bench_vs_hf_cb.serve_hf(hf, workload, max_num_seqs=2)
    assert bench_vs_hf_cb.serve_ours(ours, workload, max_num_seqs=2) == theirs
    assert [len(t) for t in theirs] == workload.answer_lens


def test_chunked_prefill_sides_serve_every_request(tiny):
    ours, _ = tiny
    document, chats = list(range(3, 43)), [list(range(5, 5 + n)) for n in (4, 6)]
    whole = bench_chunked_prefill.serve_chat_and_document(ours, 64, document, chats, answer=6)
    chunked = bench_chunked_prefill.serve_chat_and_document(ours, 8, document, chats, answer=6)
    assert set(whole.latencies) == set(chunked.latencies) == {"chat 0", "chat 1", "document"}
    # 40 tokens: 6 per step beside the two chats' last two decodes, then 8 per step once they finish
    assert whole.latencies["document"].ttft_steps == 1 and chunked.latencies["document"].ttft_steps == 6
    assert all(gap == 1 for name, lat in chunked.latencies.items() if name != "document" for gap in lat.itl_steps)
    row = bench_chunked_prefill.figures(chunked)
    assert row["chat_worst_gap_s"] >= row["chat_p99_itl_s"] >= row["chat_p50_itl_s"] > 0
