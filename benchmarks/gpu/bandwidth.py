"""Check 2: the Triton decode kernel's achieved bandwidth as a share of the card's copy bandwidth (lesson 10).

Decode attention reads every cached K and V once and does little arithmetic on it, so the
bound is memory bandwidth; a large device-to-device copy measures what the card really moves.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from benchmarks.gpu.kernel import make_case

GOAL_SHARE = 0.60  # of the copy bandwidth, on an H200 (issue 29)


def cuda_time(fn: Callable[[], object], repeats: int = 20) -> float:
    """Seconds per call of ``fn`` on the GPU, by CUDA events, after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000 / repeats


def copy_bandwidth(device: torch.device) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = cuda_time(lambda: dst.copy_(src))
    return 2 * src.numel() / seconds


def decode_bandwidth(device: torch.device) -> dict:
    """The best K+V read rate of the kernel on a large bf16 decode batch, over tile sizes and warp counts."""
    from kvcourse.kernels.attention.triton_paged import triton_paged_decode

    batch, heads, kv_heads, head_dim, block_size, context = 128, 32, 8, 128, 16, 4096
    q, kc, vc, tables, lens = make_case(batch, heads, kv_heads, head_dim, block_size, context, torch.bfloat16, device)
    lens.fill_(context)
    kv_bytes = 2 * batch * context * kv_heads * head_dim * kc.element_size()
    best = None
    for tile in (16, 32, 64, 128):
        for warps in (2, 4, 8):
            try:
                seconds = cuda_time(
                    lambda t=tile, w=warps: triton_paged_decode(
                        q, kc, vc, tables, lens, head_dim**-0.5, tile=t, num_warps=w
                    )
                )
            except Exception as exc:  # a configuration that does not compile is skipped, not fatal
                print(f"  tile {tile}, {warps} warps: failed ({type(exc).__name__})")
                continue
            bandwidth = kv_bytes / seconds
            print(f"  tile {tile:3d}, {warps} warps: {seconds * 1e3:7.3f} ms, {bandwidth / 1e9:7.1f} GB/s", flush=True)
            if best is None or bandwidth > best["bytes_per_second"]:
                best = {"tile": tile, "num_warps": warps, "seconds": seconds, "bytes_per_second": bandwidth}
    return {
        "shape": {
            "batch": batch,
            "heads": heads,
            "kv_heads": kv_heads,
            "head_dim": head_dim,
            "block_size": block_size,
            "context": context,
            "dtype": "bfloat16",
        },
        "kv_bytes_read": kv_bytes,
        "best": best,
    }


def check_bandwidth(device: torch.device) -> dict:
    """Copy bandwidth, the kernel's best, and its share against the 60 % goal."""
    copy = copy_bandwidth(device)
    print(f"  device copy: {copy / 1e9:.1f} GB/s", flush=True)
    result = {"copy_bytes_per_second": copy, "decode": decode_bandwidth(device), "goal_share": GOAL_SHARE}
    best = result["decode"]["best"]
    if best is None:
        print("  no kernel configuration ran")
        return {**result, "share_of_copy": None, "goal_met": False}
    share = best["bytes_per_second"] / copy
    met = share >= GOAL_SHARE
    print(
        f"  best paged decode: {best['bytes_per_second'] / 1e9:.1f} GB/s = {share:.0%} of copy bandwidth; "
        f"goal {GOAL_SHARE:.0%} {'met' if met else 'NOT met'}",
        flush=True,
    )
    return {**result, "share_of_copy": share, "goal_met": met}
