"""Latent attention without training: one low-rank factor shared by a layer's keys and values (issue 45).

DeepSeek-V2 and V3 cache a latent ``c = W_down x`` of r values per token and layer, and rebuild keys and
values from it with up-projections: ``k = W_uk c``, ``v = W_uv c``. Their W_down is learnt. SmolLM2 was
trained with full keys and values, so here each layer's stacked ``[W_k; W_v]`` (2 kv_size x hidden) is
factorised jointly by a singular value decomposition, ``W_kv ~ U_r (S_r V_r^T)``: the down-projection is
``S_r V_r^T`` (r x hidden), the up-projections the two halves of ``U_r`` (kv_size x r each). The rank-r
product is the closest one to ``W_kv`` (Eckart-Young), which is all a conversion without training can ask.
MHA2MLA (2025) starts from such a factorisation and then fine-tunes; the course does not fine-tune, so the
quality measured here at a rank is what the conversion gives before any training repairs it.

``latent_twin`` is the model whose k and v come from the latent: the same weights but those rows of each
layer's fused qkv projection, replaced by ``W_uk W_down`` and ``W_uv W_down``. Its outputs are exactly
those of an engine that caches only c and decompresses it each step (the product is associative), so the
quality of the twin is the quality of the latent cache, and ``latent_bytes_per_token`` its size.

The absorption trick (``absorbed_attention``) is why DeepSeek never decompresses: a score ``q . (W_uk c)``
is ``(W_uk^T q) . c``, so the up-projection folds into the query side, and ``softmax(s) (W_uv c)`` then
``W_o`` is ``(W_o W_uv)`` applied to ``softmax(s) c``, so the value up-projection folds into the output
side; attention then reads the latent directly. It needs keys without a position-dependent rotation between
``W_uk`` and the score: RoPE turns each key by its own position, so ``W_uk`` cannot move past it. DeepSeek
therefore keeps RoPE on a separate small key shared by the heads (decoupled RoPE); SmolLM2 rotates every key
dimension, so its converted form decompresses the keys, and the trick is shown on the unrotated scores.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from kvcourse.kernels.cost_checks import count
from kvcourse.kernels.model.config import ModelConfig
from kvcourse.kernels.model.transformer import Attention, Transformer


@dataclass(frozen=True)
class LatentFactors:
    """One layer's factors: c = down x (rank values), k = up_k c, v = up_v c (lesson 2026's latent cache)."""

    down: torch.Tensor  # (rank, hidden)
    up_k: torch.Tensor  # (kv_size, rank)
    up_v: torch.Tensor  # (kv_size, rank)

    @property
    def rank(self) -> int:
        return self.down.shape[0]


def full_rank(config: ModelConfig) -> int:
    """The rank at which the factorisation is exact: the smaller side of the stacked [W_k; W_v]."""
    return min(2 * config.kv_size, config.hidden_size)


def factorise(w_k: torch.Tensor, w_v: torch.Tensor, rank: int) -> LatentFactors:
    """The rank-``rank`` joint factorisation of keys' and values' projections (kv_size x hidden each).

    Computed in float64 and returned in the weights' dtype; the singular values go with the down side."""
    stacked = torch.cat([w_k, w_v]).to(torch.float64)  # (2 kv_size, hidden)
    limit = min(stacked.shape)
    count("rank", rank)
    if rank > limit:
        raise ValueError(f"rank {rank} exceeds {limit}, the rank of the stacked key and value projections")
    u, s, vh = torch.linalg.svd(stacked, full_matrices=False)
    down = s[:rank, None] * vh[:rank]  # (rank, hidden)
    up = u[:, :rank]  # (2 kv_size, rank)
    kv_size = w_k.shape[0]
    return LatentFactors(down.to(w_k.dtype), up[:kv_size].to(w_k.dtype), up[kv_size:].to(w_k.dtype))


def layer_factors(attention: Attention, rank: int) -> LatentFactors:
    """A layer's factors, from its fused qkv projection's key and value rows."""
    w = attention.qkv_proj.weight
    q_size, kv_size = attention.q_size, attention.kv_size
    return factorise(w[q_size : q_size + kv_size], w[q_size + kv_size :], rank)


def latent_twin(model: Transformer, rank: int) -> Transformer:
    """A twin of ``model`` whose keys and values come from a rank-``rank`` latent, every layer.

    Only the key and value rows of each layer's qkv weight are new tensors; every other weight is shared
    with ``model``, which is left exactly as it is."""
    on = any(path.on for path in getattr(model, "fast_paths", ()))
    twin = model.accelerated("auto" if on else "off")
    with torch.no_grad():
        for attention in (module for module in twin.modules() if isinstance(module, Attention)):
            factors = layer_factors(attention, rank)
            weight = attention.qkv_proj.weight.detach().clone()
            start = attention.q_size
            weight[start : start + attention.kv_size] = factors.up_k @ factors.down
            weight[start + attention.kv_size :] = factors.up_v @ factors.down
            projection = copy.copy(attention.qkv_proj)
            projection._parameters = dict(projection._parameters)
            projection.weight = nn.Parameter(weight, requires_grad=False)
            attention.qkv_proj = projection
    return twin


def latent_bytes_per_token(config: ModelConfig, rank: int, bytes_per_value: int) -> int:
    """Cache bytes per token with a rank-``rank`` latent per layer (one vector serves keys and values)."""
    count("rank", rank)
    count("bytes_per_value", bytes_per_value)
    return config.num_layers * rank * bytes_per_value


@dataclass(frozen=True)
class Absorbed:
    """One attention computed both ways from the same latent (``absorbed_attention``)."""

    decompressed: torch.Tensor  # (T, hidden): keys and values rebuilt, then attended, then W_o
    absorbed: torch.Tensor  # (T, hidden): attended on the latent, the up-projections folded into q and W_o

    @property
    def largest_difference(self) -> float:
        return float((self.decompressed - self.absorbed).abs().max())


@torch.no_grad()
def absorbed_attention(attention: Attention, factors: LatentFactors, x: torch.Tensor) -> Absorbed:
    """Causal attention of ``x`` (T, hidden) through one layer with its keys and values from the latent,
    computed by decompressing and by absorption, without RoPE (see the module docstring for why)."""
    num_heads, num_kv_heads, head_dim = attention.num_heads, attention.num_kv_heads, attention.head_dim
    group, scale, tokens = num_heads // num_kv_heads, head_dim**-0.5, x.shape[0]
    q = (x @ attention.qkv_proj.weight[: attention.q_size].T).view(tokens, num_heads, head_dim)
    latent = x @ factors.down.T  # (T, rank): all the cache holds
    up_k = factors.up_k.view(num_kv_heads, head_dim, -1)  # per KV head: (D, rank)
    up_v = factors.up_v.view(num_kv_heads, head_dim, -1)
    w_o = attention.o_proj.weight.view(-1, num_heads, head_dim)  # (hidden, H, D)
    mask = torch.ones(tokens, tokens, dtype=torch.bool, device=x.device).tril()
    decompressed, absorbed = torch.zeros_like(x), torch.zeros_like(x)
    for head in range(num_heads):
        kv = head // group
        keys, values = latent @ up_k[kv].T, latent @ up_v[kv].T  # (T, D) rebuilt
        weights = ((q[:, head] @ keys.T) * scale).masked_fill(~mask, float("-inf")).softmax(-1)
        decompressed += (weights @ values) @ w_o[:, head].T
        q_latent = q[:, head] @ up_k[kv]  # (T, rank): W_uk folded into the query
        weights = ((q_latent @ latent.T) * scale).masked_fill(~mask, float("-inf")).softmax(-1)
        absorbed += (weights @ latent) @ (w_o[:, head] @ up_v[kv]).T  # W_uv folded into W_o
    return Absorbed(decompressed, absorbed)
