"""Check 1: the Triton paged decode kernel equals the PyTorch gather reference (lesson 10).

The reference runs in fp32 on the same (already rounded) inputs, so the only low-precision
rounding left in the kernel is its output store: it loads and accumulates in fp32. The
tolerances are that one rounding with room to spare. An output is a softmax-weighted mean of
rows of V ~ N(0, 1), so |out| < ~4.5 (a one-token sequence returns its V row as it is):
* fp32 1e-4: only the summation order differs (the kernel's online softmax, tile by tile);
* fp16 5e-3: 10-bit mantissa, half an ulp at 4 is 2**-9 ~ 2e-3, so 5e-3 is ~2.5x that;
* bf16 3e-2: 7-bit mantissa, half an ulp at 4 is 2**-6 ~ 1.6e-2, so 3e-2 is ~2x that.
"""

from __future__ import annotations

import torch

from benchmarks.gpu.plan import CheckPlan

TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def make_case(
    batch: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    block_size: int,
    context: int,
    dtype: torch.dtype,
    device: torch.device | str,
    seed: int = 0,
):
    """(q, k_cache, v_cache, block_tables, context_lens) on ``device``: tables scattered, sequence 0 full."""
    torch.manual_seed(seed)
    lens = torch.randint(1, context + 1, (batch,), device=device)
    lens[0] = context
    blocks_per_seq = (context + block_size - 1) // block_size
    num_blocks = batch * blocks_per_seq + 3
    tables = torch.randperm(num_blocks, device=device)[: batch * blocks_per_seq]
    tables = tables.view(batch, blocks_per_seq)  # (B, blocks_per_seq)
    k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, device=device).to(dtype)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, device=device).to(dtype)
    q = torch.randn(batch, heads, head_dim, device=device).to(dtype)
    return q, k_cache, v_cache, tables, lens


def max_error(
    layout: tuple[int, int, int],
    block_size: int,
    dtype: torch.dtype,
    batch: int,
    context: int,
    device: torch.device | str,
) -> float:
    """Largest |Triton - fp32 reference| over one random case."""
    from kvcourse.kernels.attention.paged import paged_decode_attention
    from kvcourse.kernels.attention.triton_paged import triton_paged_decode

    heads, kv_heads, head_dim = layout
    q, kc, vc, tables, lens = make_case(batch, heads, kv_heads, head_dim, block_size, context, dtype, device)
    scale = head_dim**-0.5
    ref = paged_decode_attention(q.float(), kc.float(), vc.float(), tables, lens, scale)
    out = triton_paged_decode(q, kc, vc, tables, lens, scale).float()
    return (out - ref).abs().max().item()


def check_kernel(plan: CheckPlan, device: torch.device | str) -> list[dict]:
    """Every (layout, block size, dtype) of the plan, one printed line each ("ok" or "FAIL")."""
    rows = []
    for layout, block_size, dtype in plan.kernel_cases:
        err = max_error(layout, block_size, dtype, plan.batch, plan.context, device)
        tol = TOLERANCE[dtype]
        heads, kv_heads, head_dim = layout
        name = str(dtype).removeprefix("torch.")
        rows.append(
            {
                "heads": heads,
                "kv_heads": kv_heads,
                "head_dim": head_dim,
                "block_size": block_size,
                "dtype": name,
                "max_abs_error": err,
                "tolerance": tol,
                "ok": err <= tol,
            }
        )
        print(
            f"  block {block_size:2d}, {heads:2d}/{kv_heads:2d} heads, dim {head_dim:3d}, {name:8s}: "
            f"max error {err:.1e} (tolerance {tol:.0e}) {'ok' if err <= tol else 'FAIL'}",
            flush=True,
        )
    return rows
