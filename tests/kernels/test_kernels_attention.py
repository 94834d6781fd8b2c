"""Naive, SDPA, tiled and grouped attention agree, and report what they hold (lesson 03)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcourse.kernels import costs
from kvcourse.kernels.attention.reference import (
    ATTENTION_IMPLS,
    AttentionStats,
    causal_mask,
    get_attention,
    naive_attention,
    tiled_attention,
)


def random_qkv(num_heads, num_kv, num_q, num_k, head_dim=8, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(num_heads, num_q, head_dim, generator=g).to(dtype)
    k = torch.randn(num_kv, num_k, head_dim, generator=g).to(dtype)
    v = torch.randn(num_kv, num_k, head_dim, generator=g).to(dtype)
    return q, k, v


@pytest.mark.parametrize("name", sorted(ATTENTION_IMPLS))
@pytest.mark.parametrize("num_q,num_k", [(1, 1), (1, 37), (37, 37), (5, 37), (130, 130)])
@pytest.mark.parametrize("window", [None, 1, 8])
def test_every_implementation_matches_naive(name, num_q, num_k, window):
    q, k, v = random_qkv(6, 2, num_q, num_k)
    ref = naive_attention(q, k, v, num_k - num_q, window)
    out = get_attention(name)(q, k, v, num_k - num_q, window)
    assert out.shape == ref.shape == (6, num_q, 8)
    assert (out - ref).abs().max().item() <= 1e-5


@settings(max_examples=25, deadline=None)
@given(
    num_kv=st.sampled_from([1, 2, 4]),
    group=st.sampled_from([1, 2, 3]),
    num_q=st.integers(1, 20),
    extra=st.integers(0, 40),
    window=st.one_of(st.none(), st.integers(1, 30)),
    block=st.integers(1, 17),
)
def test_tiled_equals_naive_for_any_shape(num_kv, group, num_q, extra, window, block):
    q, k, v = random_qkv(num_kv * group, num_kv, num_q, num_q + extra)
    ref = naive_attention(q, k, v, extra, window)
    out = tiled_attention(q, k, v, extra, window, block_size=block)
    assert (out - ref).abs().max().item() <= 1e-5


def test_naive_holds_the_grid_tiled_holds_a_tile():
    q, k, v = random_qkv(4, 2, 256, 256)
    naive_stats, tiled_stats = AttentionStats(), AttentionStats()
    naive_attention(q, k, v, 0, stats=naive_stats)
    tiled_attention(q, k, v, 0, stats=tiled_stats, block_size=32)
    assert naive_stats.peak_score_bytes == costs.score_grid_bytes(256, 256, num_heads=4, bytes_per_value=4)
    assert tiled_stats.peak_score_bytes == costs.score_grid_bytes(256, 32, num_heads=4, bytes_per_value=4)
    assert naive_stats.num_score_cells == tiled_stats.num_score_cells == 4 * 256 * 257 // 2


@pytest.mark.parametrize("name", sorted(ATTENTION_IMPLS))
@pytest.mark.parametrize("window", [None, 5])
def test_cells_counted_equal_the_cost_model(name, window):
    q, k, v = random_qkv(4, 2, 7, 19)
    stats = AttentionStats()
    get_attention(name)(q, k, v, 12, window, stats)
    assert stats.num_score_cells == 4 * costs.score_cells_per_head(7, 19, window)
    mask_cells = int(causal_mask(7, 19, 12, window, torch.device("cpu")).sum()) * 4
    assert stats.num_score_cells == mask_cells


@pytest.mark.parametrize("name", sorted(ATTENTION_IMPLS))
def test_bf16_inputs_give_bf16_close_to_fp32(name):
    q, k, v = random_qkv(4, 2, 9, 9)
    ref = naive_attention(q, k, v, 0)
    out = get_attention(name)(q.bfloat16(), k.bfloat16(), v.bfloat16(), 0)
    assert out.dtype == torch.bfloat16
    assert (out.float() - ref).abs().max().item() <= 0.05


def test_bad_shapes_and_names():
    q, k, v = random_qkv(6, 4, 3, 3)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        naive_attention(q, k, v, 0)
    q, k, v = random_qkv(4, 2, 5, 3)
    with pytest.raises(ValueError, match="only 3 keys"):
        tiled_attention(q, k, v, 0)
    with pytest.raises(ValueError, match="unknown attention"):
        get_attention("flash9")
