"""Decode speed on SmolLM2-135M, graded against its floor, and side by side with Hugging Face eager generate.

One run, 2 threads, greedy, one chat prompt, 128 new tokens, in float32 and in bfloat16.
The figures per dtype, measured in interleaved rounds (the starting side rotates each round;
one warm-up run each first), each a median over the rounds with its spread:
  * ours:  kvcourse.kernels.generate(cache="contiguous"), decode seconds per token;
  * floor: the engine's linears (fused q/k/v, o, fused gate/up, down of every layer + lm_head,
           one row), each by the fastest product this machine has for it, whichever the engine
           chose (benchmarks/floor.py): ours / floor is what everything outside the matrix
           products costs, and what a wrong choice of product costs (reported, not graded);
  * hf_eager_generate: transformers' model.generate(use_cache=True) in eager mode (no
           torch.compile, dynamic cache), decode seconds per token (timestamps taken by a logits
           processor at every step, so its prefill is left out the same way as ours);
  * hf_linears (information only): Hugging Face's own unfused nn.Linear layers, one row;
  * eager_bound (float32): the same greedy decode written flat, one torch call per step of the
           maths, on our weights and cache (benchmarks/eager_bound.py); its tokens must equal ours.
           eager_bound / floor is what eager PyTorch pays on this CPU whoever writes the model;
           ours / eager_bound is what our structure (modules, checks, measurements) adds: the
           fp32 grade, since no eager program goes below the bound (issue 26);
  * textbook: the same generate on the model with its CPU fast paths off
           (Transformer.accelerate("off"), kernels/model/cpu_fast.py): textbook / ours is what the
           fast paths buy on this CPU, i.e. the price of reading the textbook forms.
Graded on every CPU kind, in every dtype: ours at least as fast as the textbook model (a fast path
never slower than what it replaces). fp32: ours <= 1.15x the eager bound and >= 1.15x faster than
HF eager generate. bf16: >= 1.1x faster than HF eager generate, and 1.5x where oneDNN's packed bf16
product runs on this CPU (probed: kernels/model/products.py).

Run: .venv/bin/python -m benchmarks.bench_decode [--rounds 5] [--new-tokens 128] [--dtypes fp32 bf16]
Writes benchmarks/results/decode.json. (The cache on/off sweep is benchmarks.bench_cache_onoff.)
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.common import (
    bf16_note,
    interleaved,
    paired_ratio,
    set_threads,
    summary,
    write_result,
)
from benchmarks.eager_bound import eager_decode
from benchmarks.floor import engine_linears, fastest_linears_seconds, hf_linears, linears_seconds

PROMPT = [{"role": "user", "content": "Explain what a KV cache is and why it makes text generation faster."}]
TARGETS = {
    "min_speedup_vs_textbook": 1.0,
    "max_ratio_to_eager_bound_fp32": 1.15,
    "min_speedup_vs_hf_eager_fp32": 1.15,
    "min_speedup_vs_hf_eager_bf16": 1.1,
    "min_speedup_vs_hf_eager_bf16_onednn": 1.5,
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class StepClock:
    """A transformers LogitsProcessor that only notes the time: called once per generated token."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.times.append(time.perf_counter())
        return scores


def hf_decode(hf_model, ids: torch.Tensor, num_new: int) -> tuple[float, list[int]]:
    """Seconds per decode token of HF eager generate(use_cache=True), and its tokens."""
    from transformers import LogitsProcessorList

    clock = StepClock()
    with torch.inference_mode():
        out = hf_model.generate(
            ids[None],
            max_new_tokens=num_new,
            min_new_tokens=num_new,
            do_sample=False,
            use_cache=True,
            logits_processor=LogitsProcessorList([clock]),
            pad_token_id=0,
        )
    # times[0] follows the prefill; times[i] follows decode step i.
    per_token = (clock.times[-1] - clock.times[0]) / (len(clock.times) - 1)
    return per_token, out[0, len(ids) :].tolist()


def ours_decode(model, ids: torch.Tensor, num_new: int) -> tuple[float, list[int]]:
    """Seconds per decode token of our generate(cache="contiguous"), and its tokens.

    Wall time of the whole call less the prefill step, so the loop's own bookkeeping (the
    per-step records) counts too, as everything between two of HF's tokens counts for HF.
    """
    from kvcourse.kernels import generate

    start = time.perf_counter()
    result = generate(model, ids, num_new, cache="contiguous", eos_token_id=[])
    wall = time.perf_counter() - start
    return (wall - result.stats[0].seconds) / result.num_decode_steps, result.tokens


def compare(ours, hf_model, ids: torch.Tensor, num_new: int, rounds: int, textbook=None) -> dict:
    """The figures for one dtype, interleaved; ``ours`` is our Transformer in the same dtype as ``hf_model``,
    ``textbook`` (optional) the same with its fast paths off."""
    tokens: dict[str, list[int]] = {}

    def run_ours() -> float:
        seconds, tokens["ours"] = ours_decode(ours, ids, num_new)
        return seconds

    def run_textbook() -> float:
        seconds, tokens["textbook"] = ours_decode(textbook, ids, num_new)
        return seconds

    def run_hf() -> float:
        seconds, tokens["hf"] = hf_decode(hf_model, ids, num_new)
        return seconds

    def run_bound() -> float:
        seconds, tokens["eager_bound"] = eager_decode(ours, ids.tolist(), num_new)
        return seconds

    ours_linears, their_linears = engine_linears(ours), hf_linears(hf_model)
    measures = {
        "ours": run_ours,
        "floor": lambda: fastest_linears_seconds(ours_linears),
        "hf_eager_generate": run_hf,
        "hf_linears": lambda: linears_seconds(their_linears),
    }
    if ours.dtype == torch.float32:
        measures["eager_bound"] = run_bound
    if textbook is not None:
        measures["textbook"] = run_textbook
    samples = interleaved(measures, rounds)
    same = next(
        (i for i, (a, b) in enumerate(zip(tokens["ours"], tokens["hf"], strict=False)) if a != b), len(tokens["ours"])
    )
    to_floor = paired_ratio(samples["ours"], samples["floor"])
    vs_hf = paired_ratio(samples["hf_eager_generate"], samples["ours"])
    num_layers = ours.config.num_layers
    bound = {}
    if "eager_bound" in samples:
        bound = {
            "eager_bound_to_floor": paired_ratio(samples["eager_bound"], samples["floor"]),
            "ours_to_eager_bound": paired_ratio(samples["ours"], samples["eager_bound"]),
            "eager_bound_tokens_identical": tokens["eager_bound"] == tokens["ours"],
        }
    if "textbook" in samples:
        bound |= {
            "fast_paths_speedup": paired_ratio(samples["textbook"], samples["ours"]),
            "textbook_tokens_identical": tokens["textbook"] == tokens["ours"],
        }
    return {
        "ms_per_token": {k: summary(v, 1e3) for k, v in samples.items()},
        "samples_ms": {k: [x * 1e3 for x in v] for k, v in samples.items()},
        "ratio_to_floor": to_floor,
        "overhead_ms_per_layer": (to_floor["ratio_of_medians"] - 1)
        * summary(samples["floor"])["median"]
        * 1e3
        / num_layers,
        "speedup_vs_hf_eager_generate": vs_hf,
        "tokens_identical_to_hf": tokens["ours"] == tokens["hf"],
        "num_leading_tokens_identical": same,
        **bound,
    }


def grade(result: dict, onednn_bf16: bool) -> dict:
    """Targets per dtype: ours against the textbook model (every dtype), fp32 against the eager bound and HF,
    bf16 against HF (higher where oneDNN's packed bf16 product runs here)."""
    verdicts = {}
    for name in ("fp32", "bf16"):
        if name not in result:
            continue
        row = result[name]
        if "fast_paths_speedup" in row:
            verdicts[f"{name}_vs_textbook"] = (
                row["fast_paths_speedup"]["ratio_of_medians"] >= TARGETS["min_speedup_vs_textbook"]
            )
        if name == "fp32" and "ours_to_eager_bound" in row:
            verdicts["fp32_eager_bound"] = (
                row["ours_to_eager_bound"]["ratio_of_medians"] <= TARGETS["max_ratio_to_eager_bound_fp32"]
            )
        key = f"min_speedup_vs_hf_eager_{name}" + ("_onednn" if name == "bf16" and onednn_bf16 else "")
        verdicts[f"{name}_vs_hf_eager"] = row["speedup_vs_hf_eager_generate"]["ratio_of_medians"] >= TARGETS[key]
    return verdicts


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--dtypes", nargs="*", choices=list(DTYPES), default=list(DTYPES))
    args = parser.parse_args(argv)
    set_threads()

    from kvcourse.kernels import Transformer
    from kvcourse.kernels.model.products import onednn_bf16_linear
    from kvcourse.models import load_model

    hf_model, tok = load_model(dtype=torch.float32, device="cpu")
    attn = getattr(hf_model.config, "_attn_implementation", None)
    ids = tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt")["input_ids"][0]
    result: dict = {
        "model": "smollm2-135m",
        "prompt_tokens": len(ids),
        "new_tokens": args.new_tokens,
        "rounds": args.rounds,
        "peer": f"transformers generate(), eager (attn_implementation={attn})",
        "floor": "the engine's linears, one row, each by the fastest product here (benchmarks/floor.py)",
        "bf16_note": bf16_note(),
        "targets": TARGETS,
    }
    for name in args.dtypes:
        hf_model.to(DTYPES[name])
        row = compare(
            Transformer.from_hf(hf_model).accelerate(),
            hf_model,
            ids,
            args.new_tokens,
            args.rounds,
            textbook=Transformer.from_hf(hf_model).accelerate("off"),
        )
        result[name] = row
        ms = row["ms_per_token"]
        print(
            f"{name}: ours {ms['ours']['median']:.2f} ms/token (spread {ms['ours']['spread']:.0%}), "
            f"floor {ms['floor']['median']:.2f}, HF eager generate {ms['hf_eager_generate']['median']:.2f}, "
            f"HF linears {ms['hf_linears']['median']:.2f} -> ours/floor "
            f"{row['ratio_to_floor']['ratio_of_medians']:.2f}x "
            f"({row['overhead_ms_per_layer']:.3f} ms per layer outside the matmuls), "
            f"{row['speedup_vs_hf_eager_generate']['ratio_of_medians']:.2f}x faster than HF eager; "
            f"tokens identical to HF: {row['tokens_identical_to_hf']} "
            f"({row['num_leading_tokens_identical']} leading)",
            flush=True,
        )
        if "eager_bound_to_floor" in row:
            print(
                f"{name}: eager bound {ms['eager_bound']['median']:.2f} ms/token = "
                f"{row['eager_bound_to_floor']['ratio_of_medians']:.2f}x the floor; ours = "
                f"{row['ours_to_eager_bound']['ratio_of_medians']:.2f}x the eager bound; its tokens equal ours: "
                f"{row['eager_bound_tokens_identical']}",
                flush=True,
            )
        if "fast_paths_speedup" in row:
            print(
                f"{name}: fast paths off (the textbook model) {ms['textbook']['median']:.2f} ms/token: the fast "
                f"paths make decode {row['fast_paths_speedup']['ratio_of_medians']:.2f}x faster; tokens "
                f"identical: {row['textbook_tokens_identical']}",
                flush=True,
            )
    hf_model.to(torch.float32)
    result["onednn_bf16_linear"] = onednn_bf16_linear()[1]
    result["meets_targets"] = grade(result, onednn_bf16_linear()[0])
    path = write_result("decode", result)
    print(f"{result['bf16_note']}\ntargets: {result['meets_targets']}; written to {path}")
    return result


if __name__ == "__main__":
    main()
