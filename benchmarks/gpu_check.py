"""GPU check for the paged engine (lesson 10), under 5 minutes on one CUDA GPU.

1. The Triton paged decode kernel against the PyTorch reference on several head layouts
   (SmolLM2's 9/3 heads of 64, Llama-style 32/8 of 128, MHA, MQA), fp32 and bf16.
2. The card's measured copy bandwidth (a large device-to-device copy), then the kernel's
   achieved bandwidth on a large decode batch (bytes of K and V read / kernel time), over a
   few tile sizes and warp counts; the best as a fraction of the copy bandwidth.
3. End to end: LLMEngine on the GPU (Triton decode) gives the same greedy tokens as
   generate(cache="contiguous"), on SmolLM2-135M in float32.

Run from the repository root after `pip install -e .`:  python -m benchmarks.gpu_check
Without CUDA it prints a message and exits 0. Results go to benchmarks/results/gpu_check.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def make_case(batch, heads, kv_heads, head_dim, block_size, context, dtype, device, seed=0):
    """Random q and pool on ``device``; block tables scattered; sequence 0 has the full context."""
    torch.manual_seed(seed)
    lens = torch.randint(1, context + 1, (batch,), device=device)
    lens[0] = context
    blocks_per_seq = (context + block_size - 1) // block_size
    num_blocks = batch * blocks_per_seq + 3
    tables = torch.randperm(num_blocks, device=device)[: batch * blocks_per_seq].view(batch, blocks_per_seq)
    k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, device=device, dtype=dtype)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, device=device, dtype=dtype)
    q = torch.randn(batch, heads, head_dim, device=device, dtype=dtype)
    return q, k_cache, v_cache, tables, lens


def check_correctness(device) -> list[dict]:
    from kvcourse.kernels.attention.paged import paged_decode_attention
    from kvcourse.kernels.attention.triton_paged import triton_paged_decode

    rows = []
    for heads, kv_heads, head_dim in [(9, 3, 64), (32, 8, 128), (16, 16, 64), (8, 1, 64), (6, 2, 80)]:
        for dtype in (torch.float32, torch.bfloat16):
            q, kc, vc, tables, lens = make_case(7, heads, kv_heads, head_dim, 16, 300, dtype, device)
            scale = head_dim ** -0.5
            ref = paged_decode_attention(q.float(), kc.float(), vc.float(), tables, lens, scale)
            out = triton_paged_decode(q, kc, vc, tables, lens, scale).float()
            err = (out - ref).abs().max().item()
            tol = 1e-4 if dtype == torch.float32 else 3e-2
            rows.append({"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "dtype": str(dtype),
                         "max_abs_error": err, "ok": err <= tol})
            print(f"  {heads:2d}/{kv_heads:2d} heads, dim {head_dim:3d}, {str(dtype):14s} max error {err:.2e} "
                  f"{'ok' if err <= tol else 'FAIL'}", flush=True)
    return rows


def cuda_time(fn, repeats=20) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / repeats


def copy_bandwidth(device) -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)  # 1 GiB
    dst = torch.empty_like(src)
    seconds = cuda_time(lambda: dst.copy_(src))
    return 2 * src.numel() / seconds  # read + write


def decode_bandwidth(device) -> dict:
    from kvcourse.kernels.attention.triton_paged import triton_paged_decode

    batch, heads, kv_heads, head_dim, block_size, context = 128, 32, 8, 128, 16, 4096
    q, kc, vc, tables, lens = make_case(batch, heads, kv_heads, head_dim, block_size, context, torch.bfloat16, device)
    lens.fill_(context)
    kv_bytes = 2 * batch * context * kv_heads * head_dim * kc.element_size()
    best = None
    for tile in (16, 32, 64, 128):
        for warps in (2, 4, 8):
            try:
                seconds = cuda_time(lambda t=tile, w=warps: triton_paged_decode(
                    q, kc, vc, tables, lens, head_dim ** -0.5, tile=t, num_warps=w))
            except Exception as exc:  # a configuration that does not compile is skipped, not fatal
                print(f"  tile {tile}, {warps} warps: failed ({type(exc).__name__})")
                continue
            bandwidth = kv_bytes / seconds
            print(f"  tile {tile:3d}, {warps} warps: {seconds * 1e3:7.3f} ms, {bandwidth / 1e9:7.1f} GB/s", flush=True)
            if best is None or bandwidth > best["bytes_per_second"]:
                best = {"tile": tile, "num_warps": warps, "seconds": seconds, "bytes_per_second": bandwidth}
    return {"shape": {"batch": batch, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
                      "block_size": block_size, "context": context, "dtype": "bfloat16"},
            "kv_bytes_read": kv_bytes, "best": best}


def end_to_end(device) -> dict:
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams, generate
    from kvcourse.kernels.engine.generate import as_transformer
    from kvcourse.models import load_model

    hf_model, tok = load_model(dtype=torch.float32, device=device)
    model = as_transformer(hf_model)
    questions = ["What is a KV cache?", "Name three colours.", "Why do we batch requests?"]
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                       return_tensors="pt")["input_ids"][0].tolist() for q in questions]
    expected = [generate(model, p, 24, cache="contiguous", eos_token_id=[]).tokens for p in prompts]
    engine = LLMEngine(model, EngineConfig(enable_prefix_caching=True))
    start = time.perf_counter()
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=24, stop_on_eos=False))
    seconds = time.perf_counter() - start
    matches = [o.tokens == e for o, e in zip(outs, expected)]
    print(f"  engine on {device} (Triton decode): {sum(matches)}/{len(matches)} prompts give the contiguous tokens, "
          f"{seconds:.2f} s", flush=True)
    return {"prompts": len(prompts), "matching": sum(matches), "seconds": seconds, "ok": all(matches)}


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible to PyTorch; nothing to check here (this is not an error).")
        return 0
    device = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    print(f"gpu_check on {name}")
    result: dict = {"device": name, "torch": torch.__version__}
    print("1. Triton paged decode vs PyTorch reference")
    result["correctness"] = check_correctness(device)
    print("2. bandwidth")
    copy = copy_bandwidth(device)
    print(f"  device copy: {copy / 1e9:.1f} GB/s")
    result["copy_bytes_per_second"] = copy
    result["decode"] = decode_bandwidth(device)
    best = result["decode"]["best"]
    if best:
        result["decode_fraction_of_copy"] = best["bytes_per_second"] / copy
        print(f"  best paged decode: {best['bytes_per_second'] / 1e9:.1f} GB/s = "
              f"{result['decode_fraction_of_copy']:.0%} of copy bandwidth")
    print("3. end to end")
    try:
        result["end_to_end"] = end_to_end(device)
    except Exception as exc:  # e.g. the model package is missing on this machine: report, keep the rest
        print(f"  skipped: {type(exc).__name__}: {exc}")
        result["end_to_end"] = {"skipped": f"{type(exc).__name__}: {exc}"}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "gpu_check.json").write_text(json.dumps(result, indent=2))
    ok = all(r["ok"] for r in result["correctness"]) and result["end_to_end"].get("ok", True)
    print(f"gpu_check {'passed' if ok else 'FAILED'}; written to {RESULTS / 'gpu_check.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
