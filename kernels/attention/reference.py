"""Causal attention three ways behind one signature: naive, torch SDPA, tiled online softmax (lesson 03).

Every implementation takes head-major tensors:
q (num_heads, Tq, head_dim), k and v (num_kv_heads, Tk, head_dim), and ``q_start``, the index
among the keys of the first query (query j may see keys 0 .. q_start + j; with ``window``
only the last ``window`` of those). It returns (num_heads, Tq, head_dim) in q's dtype.
Grouped-query attention: query head h reads KV head h // (num_heads // num_kv_heads).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kvcourse.kernels import costs


@dataclass
class AttentionStats:
    """What attention calls measured: score cells computed and the largest score buffer held (lesson 03)."""

    num_score_cells: int = 0
    peak_score_bytes: int = 0

    def record(self, cells: int, score_bytes: int) -> None:
        self.num_score_cells += cells
        self.peak_score_bytes = max(self.peak_score_bytes, score_bytes)


def visible_keys_per_query(num_queries: int, num_keys: int, q_start: int, window: int | None) -> int:
    """How many (query, key) cells one head scores under the causal (and window) mask.

    Query j sits at key index q_start + j and sees min(q_start + j + 1, window) keys, which is
    the cost model's count for num_queries new tokens at the end of a (q_start + num_queries) context.
    """
    return costs.score_cells_per_head(num_queries, q_start + num_queries, window)


def causal_mask(
    num_queries: int, num_keys: int, q_start: int, window: int | None, device: torch.device
) -> torch.Tensor:
    """Boolean (Tq, Tk) mask, True where query j may look at key i."""
    q_pos = torch.arange(num_queries, device=device)[:, None] + q_start  # (Tq, 1)
    k_pos = torch.arange(num_keys, device=device)[None, :]  # (1, Tk)
    mask = k_pos <= q_pos
    if window is not None:
        mask &= k_pos > q_pos - window
    return mask


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_start: int) -> int:
    if q.dim() != 3 or k.dim() != 3 or k.shape != v.shape:
        raise ValueError(f"expected q (H, Tq, D) and k, v (Hkv, Tk, D); got {tuple(q.shape)}, {tuple(k.shape)}")
    if q.shape[0] % k.shape[0] != 0:
        raise ValueError(f"num_heads {q.shape[0]} is not a multiple of num_kv_heads {k.shape[0]}")
    if q_start + q.shape[1] > k.shape[1]:
        raise ValueError(f"queries reach position {q_start + q.shape[1] - 1} but only {k.shape[1]} keys exist")
    return q.shape[0] // k.shape[0]


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_start: int,
    window: int | None = None,
    stats: AttentionStats | None = None,
) -> torch.Tensor:
    """Materialise the whole (H, Tq, Tk) score grid, mask it, softmax, weight V: the textbook version."""
    group = _check(q, k, v, q_start)
    k = k.repeat_interleave(group, dim=0)  # (H, Tk, D)
    v = v.repeat_interleave(group, dim=0)  # (H, Tk, D)
    scores = (q.float() @ k.float().transpose(1, 2)) / math.sqrt(q.shape[-1])  # (H, Tq, Tk)
    mask = causal_mask(q.shape[1], k.shape[1], q_start, window, q.device)
    scores = scores.masked_fill(~mask, float("-inf"))
    if stats is not None:
        stats.record(int(mask.sum()) * q.shape[0], scores.numel() * scores.element_size())
    weights = torch.softmax(scores, dim=-1)
    return (weights @ v.float()).to(q.dtype)


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_start: int,
    window: int | None = None,
    stats: AttentionStats | None = None,
) -> torch.Tensor:
    """torch's fused scaled_dot_product_attention (flash / memory-efficient kernels where available)."""
    _check(q, k, v, q_start)
    num_q, num_k = q.shape[1], k.shape[1]
    mask, is_causal = None, False
    if window is None and q_start + num_q == num_k:
        is_causal = num_q > 1 and q_start == 0  # top-left causal == ours only when queries start at key 0
        if num_q > 1 and q_start > 0:
            mask = causal_mask(num_q, num_k, q_start, None, q.device)
    else:
        mask = causal_mask(num_q, num_k, q_start, window, q.device)
    out = F.scaled_dot_product_attention(
        q[None], k[None], v[None], attn_mask=mask, is_causal=is_causal, enable_gqa=True
    )  # (1, H, Tq, D)
    if stats is not None:
        stats.record(visible_keys_per_query(num_q, num_k, q_start, window) * q.shape[0], 0)
    return out[0]


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_start: int,
    window: int | None = None,
    stats: AttentionStats | None = None,
    block_size: int = 64,
) -> torch.Tensor:
    """Online softmax over blocks of keys: only a (H, Tq, block_size) tile ever exists (the flash idea).

    For each key block: scores for the tile, a running max m, a running denominator l and a
    running weighted sum acc, all rescaled by exp(m_old - m_new) when the max grows.
    """
    group = _check(q, k, v, q_start)
    num_heads, num_q, head_dim = q.shape
    num_k = k.shape[1]
    qf = q.float() / math.sqrt(head_dim)
    m = torch.full((num_heads, num_q, 1), float("-inf"), device=q.device)
    denom = torch.zeros((num_heads, num_q, 1), device=q.device)
    acc = torch.zeros((num_heads, num_q, head_dim), device=q.device)
    peak = 0
    for start in range(0, num_k, block_size):
        end = min(start + block_size, num_k)
        k_blk = k[:, start:end].float().repeat_interleave(group, dim=0)  # (H, B, D)
        v_blk = v[:, start:end].float().repeat_interleave(group, dim=0)  # (H, B, D)
        scores = qf @ k_blk.transpose(1, 2)  # (H, Tq, B)
        peak = max(peak, scores.numel() * scores.element_size())
        mask = causal_mask(num_q, num_k, q_start, window, q.device)[:, start:end]  # (Tq, B)
        scores = scores.masked_fill(~mask, float("-inf"))
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        # Rows that have seen no visible key yet keep m = -inf; guard exp(-inf - -inf) = nan.
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(scores - m_safe)
        correction = torch.exp(m - m_safe)
        denom = denom * correction + p.sum(dim=-1, keepdim=True)
        acc = acc * correction + p @ v_blk
        m = m_new
    if stats is not None:
        stats.record(visible_keys_per_query(num_q, num_k, q_start, window) * num_heads, peak)
    return (acc / denom).to(q.dtype)


def grouped_decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_start: int,
    window: int | None = None,
    stats: AttentionStats | None = None,
) -> torch.Tensor:
    """Plain-matmul attention in float32 that never repeats K/V for grouped heads: fast for a decode step.

    Query heads are viewed as (num_kv_heads, group * Tq) rows so each KV head is read once.
    Everything runs in float32 (a no-op for fp32 models): on CPUs, bf16 batched matmuls of
    these thin shapes are several times slower than casting the few K/V rows and using fp32.
    """
    group = _check(q, k, v, q_start)
    num_heads, num_q, head_dim = q.shape
    num_kv = k.shape[0]
    dtype = q.dtype
    if dtype != torch.float32:  # skipped, not a no-op call, for fp32: every small op counts in a decode step
        q, k, v = q.float(), k.float(), v.float()
    qg = q.reshape(num_kv, group * num_q, head_dim)  # (Hkv, G*Tq, D)
    scores = torch.bmm(qg, k.transpose(1, 2)).mul_(1.0 / math.sqrt(head_dim))  # (Hkv, G*Tq, Tk)
    if num_q > 1 or window is not None or q_start + num_q != k.shape[1]:
        mask = causal_mask(num_q, k.shape[1], q_start, window, q.device).repeat(group, 1)  # (G*Tq, Tk)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = torch.bmm(weights, v).reshape(num_heads, num_q, head_dim)  # (H, Tq, D)
    if stats is not None:
        stats.record(
            visible_keys_per_query(num_q, k.shape[1], q_start, window) * num_heads,
            scores.numel() * scores.element_size(),
        )
    return out if dtype == torch.float32 else out.to(dtype)


def auto_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_start: int,
    window: int | None = None,
    stats: AttentionStats | None = None,
) -> torch.Tensor:
    """The engine's default: SDPA for a prompt (many queries), grouped matmuls for one decode query."""
    fn = grouped_decode_attention if q.shape[1] == 1 else sdpa_attention
    return fn(q, k, v, q_start, window, stats)


AttentionFn = Callable[..., torch.Tensor]

ATTENTION_IMPLS: dict[str, AttentionFn] = {
    "naive": naive_attention,
    "sdpa": sdpa_attention,
    "tiled": tiled_attention,
    "grouped": grouped_decode_attention,
    "auto": auto_attention,
}


def get_attention(name: str) -> AttentionFn:
    """Look up an attention implementation by name (lesson 03)."""
    if name not in ATTENTION_IMPLS:
        raise ValueError(f"unknown attention {name!r}; choose one of {sorted(ATTENTION_IMPLS)}")
    return ATTENTION_IMPLS[name]
