"""Paged decode attention as a Triton kernel (lesson 10): one program per (sequence, KV head).

Each program loads the query heads that share one KV head, walks the sequence's block table a
tile of tokens at a time, and keeps a running max, a running sum and an fp32 accumulator
(online softmax), so the score row is never materialised. ``tl.arange`` needs power-of-two
lengths, so the head group (3 for SmolLM2), the head dim and the tile are padded to powers of
two and masked; everything is loaded and accumulated in fp32 (the interpreter mishandles bf16
arithmetic). ``paged_decode_attention`` in ``paged_attention`` is the reference it must match.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


# Unannotated on purpose: triton.jit reads a parameter's annotation as its type (tl.constexpr, or a
# specialisation), so only the constexpr ones have one.
@triton.jit
def _paged_decode_kernel(  # type: ignore[no-untyped-def]  # see above
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    context_lens_ptr,
    out_ptr,
    scale,
    stride_q_seq,
    stride_q_head,
    stride_c_block,
    stride_c_slot,
    stride_c_head,
    stride_table,
    stride_o_seq,
    stride_o_head,
    GROUP: tl.constexpr,
    GROUP_P: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_P: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    context_len = tl.load(context_lens_ptr + seq)
    num_blocks = (context_len + BLOCK_SIZE - 1) // BLOCK_SIZE

    g = tl.arange(0, GROUP_P)
    d = tl.arange(0, HEAD_DIM_P)
    t = tl.arange(0, TILE)
    g_ok = g < GROUP
    d_ok = d < HEAD_DIM
    heads = kv_head * GROUP + g
    q = tl.load(
        q_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + d[None, :],
        mask=g_ok[:, None] & d_ok[None, :],
        other=0.0,
    ).to(tl.float32)  # (GROUP_P, HEAD_DIM_P)

    running_max = tl.full([GROUP_P], float("-inf"), tl.float32)
    running_sum = tl.zeros([GROUP_P], tl.float32)
    acc = tl.zeros([GROUP_P, HEAD_DIM_P], tl.float32)
    for start in range(0, num_blocks * BLOCK_SIZE, TILE):
        pos = start + t  # logical token positions of this tile
        t_ok = pos < context_len
        logical_block = pos // BLOCK_SIZE
        block = tl.load(block_tables_ptr + seq * stride_table + logical_block, mask=logical_block < num_blocks, other=0)
        offsets = block * stride_c_block + (pos % BLOCK_SIZE) * stride_c_slot + kv_head * stride_c_head
        kv_mask = t_ok[:, None] & d_ok[None, :]
        k = tl.load(k_cache_ptr + offsets[:, None] + d[None, :], mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + offsets[:, None] + d[None, :], mask=kv_mask, other=0.0).to(tl.float32)

        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale  # (GROUP_P, TILE)
        scores = tl.where(t_ok[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        correction = tl.exp(running_max - new_max)
        p = tl.exp(scores - new_max[:, None])
        running_sum = running_sum * correction + tl.sum(p, axis=1)
        acc = acc * correction[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        running_max = new_max

    out = acc / running_sum[:, None]
    tl.store(
        out_ptr + seq * stride_o_seq + heads[:, None] * stride_o_head + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=g_ok[:, None] & d_ok[None, :],
    )


def triton_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    tile: int = 64,
    num_warps: int = 4,
) -> torch.Tensor:
    """q (B, num_heads, D) over one layer's pool (num_blocks, block_size, kv_heads, D) -> (B, num_heads, D)."""
    batch, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if k_cache.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("the last dimension of q and of the pool must be contiguous")
    group = num_heads // num_kv_heads
    out = torch.empty_like(q)
    block_tables = block_tables.contiguous()
    _paged_decode_kernel[(batch, num_kv_heads)](
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        out,
        scale,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        GROUP=group,
        GROUP_P=triton.next_power_of_2(group),
        HEAD_DIM=head_dim,
        HEAD_DIM_P=triton.next_power_of_2(head_dim),
        BLOCK_SIZE=block_size,
        TILE=max(tile, triton.next_power_of_2(block_size)),
        num_warps=num_warps,
    )
    return out
