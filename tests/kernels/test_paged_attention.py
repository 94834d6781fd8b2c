"""Paged attention equals dense causal attention, whatever the physical block order (lesson 10)."""

from __future__ import annotations

import torch

from kvcourse.kernels.attention.paged import (
    QUERY_CHUNK,
    causal_attention,
    paged_attention_reference,
    paged_decode_attention,
)
from kvcourse.kernels.attention.paged_backend import PagedAttentionBackend, PagedMetadata
from kvcourse.kernels.memory.kv_pool import BlockCopy, KVPool


def dense_causal(q, k, v):
    """Plain attention with GQA by repetition: q (n, H, D) over k, v (ctx, KV, D), queries last."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    n, ctx = q.shape[0], k.shape[0]
    scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
    mask = torch.ones(n, ctx, dtype=torch.bool).tril(ctx - n)
    probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def test_a_long_prompt_attends_in_query_chunks_equal_to_one_dense_softmax():
    """Past QUERY_CHUNK queries causal_attention splits them; each chunk sees the cached prefix and itself."""
    g = torch.Generator().manual_seed(3)
    for cached, new in ((0, 2 * QUERY_CHUNK + 37), (100, QUERY_CHUNK + 1), (0, QUERY_CHUNK)):
        q = torch.randn(new, 6, 8, generator=g)
        k, v = (torch.randn(cached + new, 2, 8, generator=g) for _ in range(2))
        torch.testing.assert_close(causal_attention(q, k, v, 8**-0.5), dense_causal(q, k, v), atol=1e-5, rtol=1e-5)


def scattered_tables(lens, block_size, num_blocks, seed):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_blocks, generator=g).tolist()
    tables = []
    for n in lens:
        need = (n + block_size - 1) // block_size
        tables.append([perm.pop() for _ in range(need)])
    return tables


def test_backend_matches_dense_for_mixed_prefill_chunks_and_decodes():
    torch.manual_seed(0)
    heads, kv_heads, d, bs, layers = 6, 2, 8, 4, 2
    total_lens = [9, 5, 13, 1]
    cached = [4, 0, 12, 0]  # a prefix hit, a fresh prefill, a decode, a one-token prompt
    tables = scattered_tables(total_lens, bs, 32, seed=1)
    pool = KVPool.create(layers, 32, bs, kv_heads, d)
    full_k = [torch.randn(n, kv_heads, d) for n in total_lens]
    full_v = [torch.randn(n, kv_heads, d) for n in total_lens]
    # place the cached part of every sequence in the pool, as earlier steps would have
    for layer in range(layers):
        for t, c, fk, fv in zip(tables, cached, full_k, full_v, strict=True):
            for pos in range(c):
                pool.k[layer, t[pos // bs], pos % bs] = fk[pos]
                pool.v[layer, t[pos // bs], pos % bs] = fv[pos]
    query_lens = [n - c for n, c in zip(total_lens, cached, strict=True)]
    meta = PagedMetadata.build(tables, cached, query_lens, bs)
    q_all = [torch.randn(n, heads, d) for n in query_lens]
    k_new = torch.cat([fk[c:] for fk, c in zip(full_k, cached, strict=True)])
    v_new = torch.cat([fv[c:] for fv, c in zip(full_v, cached, strict=True)])
    backend = PagedAttentionBackend(pool, meta)
    out = backend.attend(1, torch.cat(q_all), k_new, v_new)
    expected = torch.cat([dense_causal(q, k, v) for q, k, v in zip(q_all, full_k, full_v, strict=True)])
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    ref = paged_attention_reference(
        torch.cat(q_all), pool.k[1], pool.v[1], meta.block_tables, list(meta.context_lens_list), query_lens, d**-0.5
    )
    torch.testing.assert_close(ref, expected, rtol=1e-5, atol=1e-5)
    assert meta.positions.tolist()[:5] == [4, 5, 6, 7, 8]


def test_batched_decode_matches_reference_with_padding_blocks():
    torch.manual_seed(2)
    heads, kv_heads, d, bs = 9, 3, 16, 4  # SmolLM2's 3 query heads per KV head
    lens = [1, 7, 16, 3]
    tables = scattered_tables(lens, bs, 20, seed=3)
    pool = KVPool.create(1, 20, bs, kv_heads, d)
    pool.k.normal_()
    pool.v.normal_()
    meta = PagedMetadata.build(tables, [n - 1 for n in lens], [1] * len(lens), bs)
    q = torch.randn(len(lens), heads, d)
    out = paged_decode_attention(q, pool.k[0], pool.v[0], meta.block_tables, meta.context_lens, d**-0.5)
    ref = paged_attention_reference(q, pool.k[0], pool.v[0], meta.block_tables, list(lens), [1] * 4, d**-0.5)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_copy_blocks_copies_every_layer():
    pool = KVPool.create(2, 4, 2, 1, 2)
    pool.k[:, 1] = 7.0
    pool.copy_blocks([BlockCopy(src=1, dst=3)])
    assert torch.equal(pool.k[:, 3], pool.k[:, 1]) and pool.k[:, 3].eq(7).all()
    assert pool.v[:, 3].eq(0).all()


def test_decode_inputs_are_kept_per_set_of_decoding_sequences():
    """The backend builds a step's decode tables once and reuses them, but only for the rows they were built for."""
    pool = KVPool.create(1, 8, 2, 1, 4)
    meta = PagedMetadata.build([[0, 1], [2, 3, 4], [5]], [3, 4, 0], [1, 1, 2], 2)
    backend = PagedAttentionBackend(pool, meta, kernel="gather")
    first, second = backend._decode_batch((0,)), backend._decode_batch((1,))
    assert first[1].tolist() == [[0, 1]] and second[1].tolist() == [[2, 3, 4]]
    assert first[2].tolist() == [4] and second[2].tolist() == [5]
    assert backend._decode_batch((0,)) is first, "built once, then reused"
    assert backend._decode_batch(None)[1].shape[0] == 3


def test_the_in_place_kernel_takes_only_batches_from_its_measured_smallest():
    """Below ``in_place_from`` decoding sequences a step gathers (a launch of the kernel's threads costs more than
    the copy there); from it up, the in-place kernel runs. A kernel forced without a bound takes every batch."""
    pool = KVPool.create(1, 8, 2, 1, 4)
    meta = PagedMetadata.build([[0, 1], [2, 3, 4], [5]], [3, 4, 0], [1, 1, 2], 2)
    backend = PagedAttentionBackend(pool, meta, kernel="in place", in_place_from=2)
    assert backend._decode_batch((0,))[0] == "gather" and backend._decode_batch((0,))[3] is not None
    assert backend._decode_batch((0, 1))[0] == "in place" and backend._decode_batch((0, 1))[3] is None
    assert PagedAttentionBackend(pool, meta, kernel="in place")._decode_batch((0,))[0] == "in place"
