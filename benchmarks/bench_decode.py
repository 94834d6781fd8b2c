"""Decode speed on SmolLM2-135M: our generate(cache="contiguous") against Hugging Face, and the floor.

One run, side by side, on 2 threads, greedy, same prompt, 128 new tokens, fp32 and bf16:
  * ours: kvcourse.kernels.generate(cache="contiguous"), decode seconds per token;
  * hf:   model.generate(use_cache=True), decode seconds per token (timestamps taken by a
          logits processor at every step, so prefill is excluded the same way as ours);
  * floor_torch:  the model's bare nn.Linear layers alone (q, k, v, o, gate, up, down of every
          layer + lm_head, M=1, in that dtype) per token, each weight read once;
  * floor_packed: the same matrices as our engine runs them (fused q/k/v and gate/up,
          oneDNN-packed), i.e. the floor for the kernels we chose.
The measurements are interleaved round-robin and each figure is the median of the rounds,
so a busy machine shifts all of them alike; compare the ratios.
Then the cache on/off speedup by output length (whole generate, prefill included).

Run: .venv/bin/python -m benchmarks.bench_decode [--rounds 3] [--lengths 32 64 128 256 512]
Writes benchmarks/results/decode.json.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import set_threads, write_result

PROMPT = [{"role": "user", "content": "Explain what a KV cache is and why it makes text generation faster."}]
TARGETS = {"max_ratio_to_floor": 1.25, "min_speedup_vs_hf_bf16": 1.5, "min_speedup_vs_hf_fp32": 1.1}


class StepClock:
    """A transformers LogitsProcessor that only notes the time: called once per generated token."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.times.append(time.perf_counter())
        return scores


def hf_decode(hf_model, ids: torch.Tensor, num_new: int) -> tuple[float, list[int]]:
    """Seconds per decode token of HF generate(use_cache=True), and its tokens."""
    from transformers import LogitsProcessorList

    clock = StepClock()
    with torch.inference_mode():
        out = hf_model.generate(ids[None], max_new_tokens=num_new, min_new_tokens=num_new, do_sample=False,
                                use_cache=True, logits_processor=LogitsProcessorList([clock]),
                                pad_token_id=0)
    # times[0] follows the prefill; times[i] follows decode step i.
    per_token = (clock.times[-1] - clock.times[0]) / (len(clock.times) - 1)
    return per_token, out[0, len(ids):].tolist()


def ours_decode(model, ids: torch.Tensor, num_new: int) -> tuple[float, list[int]]:
    from kvcourse.kernels import generate

    result = generate(model, ids, num_new, cache="contiguous", eos_token_id=[])
    return result.decode_seconds / result.num_decode_steps, result.tokens


def linears_per_token(linears: list[torch.nn.Module], dtype: torch.dtype, repeats: int = 10) -> float:
    """Seconds to push one row through every linear once (the weight-streaming floor)."""
    inputs = {}
    for lin in linears:
        k = lin.weight.shape[1]
        inputs.setdefault(k, torch.randn(1, k, dtype=dtype))
    with torch.inference_mode():
        for lin in linears:
            lin(inputs[lin.weight.shape[1]])
        start = time.perf_counter()
        for _ in range(repeats):
            for lin in linears:
                lin(inputs[lin.weight.shape[1]])
    return (time.perf_counter() - start) / repeats


def hf_linears(hf_model) -> list[torch.nn.Module]:
    mods = []
    for layer in hf_model.model.layers:
        a, m = layer.self_attn, layer.mlp
        mods += [a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj]
    return mods + [hf_model.lm_head]


def our_linears(model) -> list[torch.nn.Module]:
    from kvcourse.kernels.model.layers import Linear

    return [mod for mod in model.modules() if isinstance(mod, Linear)]


def compare_dtype(hf_model, ids: torch.Tensor, dtype: torch.dtype, num_new: int, rounds: int) -> dict:
    from kvcourse.kernels import Transformer

    hf_model.to(dtype)
    ours = Transformer.from_hf(hf_model).pack_weights()
    samples: dict[str, list[float]] = {"ours": [], "hf": [], "floor_torch": [], "floor_packed": []}
    ours_tokens: list[int] = []
    hf_tokens: list[int] = []
    ours_decode(ours, ids, 8)  # warm-up: first calls allocate and pick kernels
    for _ in range(rounds):
        t, ours_tokens = ours_decode(ours, ids, num_new)
        samples["ours"].append(t)
        t, hf_tokens = hf_decode(hf_model, ids, num_new)
        samples["hf"].append(t)
        samples["floor_torch"].append(linears_per_token(hf_linears(hf_model), dtype))
        samples["floor_packed"].append(linears_per_token(our_linears(ours), dtype))
    med = {k: statistics.median(v) for k, v in samples.items()}
    same = next((i for i, (a, b) in enumerate(zip(ours_tokens, hf_tokens)) if a != b), len(ours_tokens))
    return {
        "ms_per_token": {k: v * 1e3 for k, v in med.items()},
        "samples_ms": {k: [x * 1e3 for x in v] for k, v in samples.items()},
        "tokens_per_second": {"ours": 1 / med["ours"], "hf": 1 / med["hf"]},
        "speedup_vs_hf": med["hf"] / med["ours"],
        "ratio_to_floor_torch": med["ours"] / med["floor_torch"],
        "ratio_to_floor_packed": med["ours"] / med["floor_packed"],
        "tokens_identical_to_hf": ours_tokens == hf_tokens,
        "num_leading_tokens_identical": same,
    }


def cache_sweep(model, ids: torch.Tensor, lengths: list[int]) -> list[dict]:
    """Whole-generation time with and without the KV cache, by number of new tokens."""
    from kvcourse.kernels import generate

    rows = []
    for n in lengths:
        timings = {}
        tokens = {}
        for cache in ("contiguous", "none"):
            start = time.perf_counter()
            tokens[cache] = generate(model, ids, n, cache=cache, eos_token_id=[]).tokens
            timings[cache] = time.perf_counter() - start
        rows.append({"new_tokens": n, "seconds_cache": timings["contiguous"], "seconds_no_cache": timings["none"],
                     "speedup": timings["none"] / timings["contiguous"],
                     "tokens_identical": tokens["none"] == tokens["contiguous"]})
        print(f"  {n:4d} new tokens: cache {timings['contiguous']:7.2f} s, no cache {timings['none']:7.2f} s, "
              f"speedup {rows[-1]['speedup']:5.1f}x, same tokens: {rows[-1]['tokens_identical']}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--lengths", type=int, nargs="*", default=[32, 64, 128, 256, 512])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    set_threads(args.threads)

    from kvcourse.kernels import Transformer
    from kvcourse.models import load_model

    hf_model, tok = load_model()
    ids = tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt")["input_ids"][0]
    result: dict = {"model": "smollm2-135m", "prompt_tokens": len(ids), "new_tokens": args.new_tokens,
                    "rounds": args.rounds, "targets": TARGETS}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        row = compare_dtype(hf_model, ids, dtype, args.new_tokens, args.rounds)
        result[name] = row
        ms = row["ms_per_token"]
        print(f"{name}: ours {ms['ours']:.1f} ms/token, HF {ms['hf']:.1f}, floor (nn.Linear) {ms['floor_torch']:.1f}, "
              f"floor (packed) {ms['floor_packed']:.1f} -> {row['speedup_vs_hf']:.2f}x HF, "
              f"{row['ratio_to_floor_torch']:.2f}x torch floor, {row['ratio_to_floor_packed']:.2f}x packed floor; "
              f"tokens identical to HF: {row['tokens_identical_to_hf']} "
              f"({row['num_leading_tokens_identical']} leading)", flush=True)
    result["meets_targets"] = {
        "fp32_vs_hf": result["fp32"]["speedup_vs_hf"] >= TARGETS["min_speedup_vs_hf_fp32"],
        "bf16_vs_hf": result["bf16"]["speedup_vs_hf"] >= TARGETS["min_speedup_vs_hf_bf16"],
        "fp32_floor": result["fp32"]["ratio_to_floor_torch"] <= TARGETS["max_ratio_to_floor"],
        "bf16_floor": result["bf16"]["ratio_to_floor_torch"] <= TARGETS["max_ratio_to_floor"],
    }
    hf_model.to(torch.float32)
    if args.lengths:
        print("cache on/off by output length (fp32):", flush=True)
        sweep = cache_sweep(Transformer.from_hf(hf_model).pack_weights(), ids, sorted(args.lengths))
        result["cache_sweep_fp32"] = sweep
        speedups = [r["speedup"] for r in sweep]
        result["meets_targets"]["speedup_grows_with_length"] = all(b > a for a, b in zip(speedups, speedups[1:]))
    path = write_result("decode", result)
    print(f"targets: {result['meets_targets']}; written to {path}")
    return result


if __name__ == "__main__":
    main()
