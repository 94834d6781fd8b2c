"""Paged attention in plain PyTorch: attention that reads K/V through a block table (lesson 10).

The pool of one layer is ``(num_blocks, block_size, num_kv_heads, head_dim)``; a sequence's
keys are the rows of the blocks its block table lists, in order, cut at its context length.
``paged_attention_reference`` is the readable definition (one sequence at a time, a gather, a
dense softmax); ``paged_decode_attention`` is the batched CPU path the engine uses for decode,
and the Triton kernel in ``triton_paged_attention`` must agree with both.
"""

from __future__ import annotations

import torch

from kvcourse.kernels.checks import ceil_div


def write_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Store each new token's K/V at its slot (physical block * block_size + offset)."""
    num_kv_heads, head_dim = k_cache.shape[-2:]
    k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, k)  # (slots, kv_heads, D)
    v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, v)


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, context_len: int) -> torch.Tensor:
    """One sequence's K (or V) in logical order: (context_len, num_kv_heads, head_dim)."""
    block_size = cache.shape[1]
    num_blocks = ceil_div(context_len, block_size)
    blocks = cache.index_select(0, block_table[:num_blocks])  # (n, block_size, kv_heads, D)
    return blocks.flatten(0, 1)[:context_len]  # (context_len, kv_heads, D)


QUERY_CHUNK = 256  # a longer prompt attends in chunks of this many queries (see causal_attention)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Queries are the last ``len(q)`` of the ``len(k)`` positions; each sees itself and earlier keys.

    q: (n, num_heads, D); k, v: (context_len, num_kv_heads, D) -> (n, num_heads, D).
    On the CPU, more than ``QUERY_CHUNK`` queries attend ``QUERY_CHUNK`` at a time, each chunk to the keys
    up to its last query: the same result to rounding, and measured about 2.7x faster than one call over a
    prompt of 2,000-4,000 tokens (SmolLM2's heads, float32 and bfloat16, one thread, AMD Zen 4). Up to
    ``QUERY_CHUNK`` queries, and on a GPU (where one fused call was not measured slower), it is one call,
    as Hugging Face makes it.
    """
    num_queries, context_len = q.shape[0], k.shape[0]
    if num_queries <= QUERY_CHUNK or q.device.type != "cpu":
        return _attend(q, k, v, scale)
    before = context_len - num_queries  # keys cached before the first query
    chunks = []
    for start in range(0, num_queries, QUERY_CHUNK):
        end = min(start + QUERY_CHUNK, num_queries)
        chunks.append(_attend(q[start:end], k[: before + end], v[: before + end], scale))
    return torch.cat(chunks)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """``causal_attention`` in one call of SDPA."""
    num_queries, context_len = q.shape[0], k.shape[0]
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    qh, kh, vh = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # (heads, len, D)
    if num_queries == context_len:
        out = torch.nn.functional.scaled_dot_product_attention(
            qh, kh, vh, is_causal=True, scale=scale, enable_gqa=num_heads != num_kv_heads
        )
    else:
        # the cached prefix is fully visible; the new tokens see each other causally
        mask = torch.ones(num_queries, context_len, dtype=torch.bool, device=q.device)
        mask = mask.tril(diagonal=context_len - num_queries)
        out = torch.nn.functional.scaled_dot_product_attention(
            qh, kh, vh, attn_mask=mask, scale=scale, enable_gqa=num_heads != num_kv_heads
        )
    return out.transpose(0, 1)  # (n, num_heads, D)


def paged_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: list[int],
    query_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """The definition: for each sequence, gather its K/V through its block table and attend.

    q: (total new tokens, num_heads, D), sequences concatenated; returns the same shape.
    """
    outputs, start = [], 0
    for i, (context_len, query_len) in enumerate(zip(context_lens, query_lens, strict=True)):
        k = gather_kv(k_cache, block_tables[i], context_len)
        v = gather_kv(v_cache, block_tables[i], context_len)
        outputs.append(causal_attention(q[start : start + query_len], k, v, scale))
        start += query_len
    return torch.cat(outputs)


def decode_mask(context_lens: torch.Tensor, num_keys: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """(B, 1, 1, num_keys) mask of the keys each sequence really has: True where visible, or, with a
    ``dtype``, 0 where visible and -inf elsewhere, added to the scores as it is (SDPA would otherwise
    turn a boolean mask into that in every layer)."""
    visible = torch.arange(num_keys, device=context_lens.device) < context_lens[:, None]  # (B, S)
    visible = visible[:, None, None, :]
    if dtype is None:
        return visible
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """One new token per sequence, all sequences at once: q (B, num_heads, D) -> (B, num_heads, D).

    Rows of ``block_tables`` are padded past each sequence's last block; the padding is masked
    out by ``context_lens``, so whatever block it names is never read into the result. The query
    heads that share a KV head stand in SDPA's query-length axis, so GQA needs no K/V repeat.
    ``mask`` (from ``decode_mask``) may be passed in so a step builds it once for all layers.
    """
    batch, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    num_blocks = ceil_div(int(context_lens.max()), block_size)
    table = block_tables[:, :num_blocks]
    num_keys = num_blocks * block_size
    if mask is None:
        mask = decode_mask(context_lens, num_keys)
    # index_select, not k_cache[table]: advanced indexing enters a thread-parallel region even for
    # a few rows, which costs milliseconds per call when the CPU is shared
    flat = table.reshape(-1)  # (B * num_blocks,)
    k = k_cache.index_select(0, flat).view(batch, num_keys, num_kv_heads, head_dim).transpose(1, 2)  # (B, kv, S, D)
    v = v_cache.index_select(0, flat).view(batch, num_keys, num_kv_heads, head_dim).transpose(1, 2)  # (B, kv, S, D)
    qg = q.view(batch, num_kv_heads, group, head_dim)  # (B, kv, group, D): query heads sharing a KV head
    out = torch.nn.functional.scaled_dot_product_attention(qg, k, v, attn_mask=mask, scale=scale)
    return out.reshape(batch, num_heads, head_dim)  # (B, num_heads, D)
