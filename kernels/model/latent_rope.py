"""Partial RoPE: a few rotary dimensions per KV head kept beside the latent, the rest absorbed (issue 45 item 2).

RoPE turns each (i, i + D/2) pair of a key's D dimensions by an angle set by its position, at the pair's own
frequency (pair 0 the fastest), and the query's pair by the query's position: their dot product then depends on
the distance between the two. A rotation between the key's up-projection and the score stops the absorption of
latent.py. DeepSeek-V2 keeps position on a separate small rotated key; MHA2MLA (Ji et al., 2025,
arXiv:2502.14837) converts a trained model the same way, by *partial RoPE*: per head it keeps the rotation on a
few pairs and takes it off all the others, in queries and keys alike, and factors the non-rotary key dimensions
jointly with the values. Here:

- ``kept_pairs`` chooses, per KV head, the ``pairs`` frequency pairs that carry the most of the scores:
  MHA2MLA's 2-norm criterion, the product of the query's and the key's norm on that pair (summed over the
  query heads of the group), here root-mean-square norms over a calibration text, read off its second moment
  C = E[x x^T] as the diagonal of W C W^T. MHA2MLA found this choice the best of its four (highest
  frequencies, lowest, uniform, 2-norm) once fine-tuned, and it needs nothing the activation-aware factorisation
  does not. Before any fine-tuning the fastest pairs did a little better here (4 pairs per KV head, the rest
  exact: perplexity 185 against 198, the model's own 22.6, on the held-out text's first 1,000 tokens in float32,
  an Intel Xeon with AVX-512 and AMX); the lesson keeps the paper's choice, the one a fine-tuned conversion uses.
- ``partial_twin`` is the model with partial RoPE and a rank-r latent: the kept pairs' key rows exact (cached
  in full, rotated), the other key rows and the values rebuilt from the latent, and the rotation off the
  dropped pairs of every query and key (``PartialRopeAttention``). At the stack's full rank the only change
  left is the rotation taken off: what partial RoPE itself costs a model never trained with it.
- ``absorbed_partial_attention`` computes one layer both ways WITH RoPE: decompressed (keys rebuilt, then
  scored), and absorbed (the score is the rotary part from the cached rotated dimensions plus the latent part,
  W_uk folded into the non-rotary query; W_uv folded into W_o).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from kvcourse.kernels.cost_checks import count
from kvcourse.kernels.model.config import ModelConfig
from kvcourse.kernels.model.latent import Absorbed, JointSVD, LatentFactors, joint_svd
from kvcourse.kernels.model.layers import RotationForm
from kvcourse.kernels.model.transformer import Attention, Transformer

if TYPE_CHECKING:  # the model only calls a backend; attention is the layer above it
    from kvcourse.kernels.attention.backend import AttentionBackend


def _key_rows(attention: Attention) -> torch.Tensor:
    w = attention.qkv_proj.weight
    return w[attention.q_size : attention.q_size + attention.kv_size]  # (kv_size, hidden)


def _pair_energy(rows: torch.Tensor, heads: int, second_moment: torch.Tensor | None) -> torch.Tensor:
    """E||pair||^2 of each head's (i, i + D/2) pairs, (heads, D/2), from the rows' W C W^T diagonal."""
    w = rows.detach().to(torch.float64)
    c = torch.eye(w.shape[1], dtype=torch.float64) if second_moment is None else second_moment.to(w)
    energy = ((w @ c) * w).sum(-1).view(heads, 2, -1)  # (heads, 2, D/2): first and second half of each head
    return energy.sum(1)


def kept_pairs(attention: Attention, pairs: int, second_moment: torch.Tensor | None = None) -> torch.Tensor:
    """Per KV head, the ``pairs`` frequency pairs (indices 0 .. D/2 - 1, ascending) whose query norm times key
    norm is largest, summed over the group's query heads (MHA2MLA's 2-norm choice); (num_kv_heads, pairs)."""
    count("pairs", pairs)
    if pairs > attention.head_dim // 2:
        raise ValueError(f"{pairs} pairs: a head of {attention.head_dim} dimensions has {attention.head_dim // 2}")
    w_q = attention.qkv_proj.weight[: attention.q_size]
    q = _pair_energy(w_q, attention.num_heads, second_moment).sqrt()  # (H, D/2)
    k = _pair_energy(_key_rows(attention), attention.num_kv_heads, second_moment).sqrt()  # (Hkv, D/2)
    score = q.view(attention.num_kv_heads, -1, q.shape[-1]).sum(1) * k  # (Hkv, D/2)
    return score.topk(pairs, dim=-1).indices.sort(-1).values


def rotated_dims(pairs: torch.Tensor, head_dim: int) -> torch.Tensor:
    """The (num_kv_heads, head_dim) mask of the dimensions that keep RoPE: i and i + D/2 for each kept pair i."""
    mask = torch.zeros(pairs.shape[0], head_dim // 2, dtype=torch.bool)
    mask.scatter_(1, pairs.cpu(), True)
    return torch.cat([mask, mask], dim=-1)


def partial_svd(attention: Attention, rotated: torch.Tensor, second_moment: torch.Tensor | None = None) -> JointSVD:
    """The joint decomposition of the non-rotary key rows stacked on the value rows (activation-aware with
    ``second_moment``); ``rotated`` is ``rotated_dims``'s mask for this layer."""
    w = attention.qkv_proj.weight
    values = w[attention.q_size + attention.kv_size :]
    return joint_svd(_key_rows(attention)[~rotated.flatten().to(w.device)], values, second_moment)


def partial_layers(
    model: Transformer, pairs: int, second_moments: Sequence[torch.Tensor | None] | None = None
) -> tuple[list[torch.Tensor], list[JointSVD]]:
    """Every layer's ``rotated_dims`` mask (``pairs`` kept per KV head, by ``kept_pairs``) and ``partial_svd``,
    first layer first, both fitted to ``second_moments`` where given: what ``partial_twin`` takes."""
    layers = [a for a in model.modules() if isinstance(a, Attention)]
    moments = [None] * len(layers) if second_moments is None else list(second_moments)
    rotated = [rotated_dims(kept_pairs(a, pairs, c), a.head_dim) for a, c in zip(layers, moments, strict=True)]
    return rotated, [partial_svd(a, r, c) for a, r, c in zip(layers, rotated, moments, strict=True)]


class PartialRopeAttention(Attention):
    """An Attention whose queries and keys keep RoPE on the ``rotated`` dimensions of each KV head only."""

    rotated: torch.Tensor  # (num_heads + num_kv_heads, head_dim): a query head takes its KV head's mask

    def forward(self, x: torch.Tensor, rope: RotationForm, backend: AttentionBackend) -> torch.Tensor:
        rotated = self.rotated

        def partial(x: torch.Tensor) -> torch.Tensor:
            return torch.where(rotated, rope(x), x)  # (T, H + Hkv, D)

        return super().forward(x, partial, backend)


def _heads_mask(attention: Attention, rotated: torch.Tensor) -> torch.Tensor:
    group = attention.num_heads // attention.num_kv_heads
    return torch.cat([rotated.repeat_interleave(group, dim=0), rotated])  # (H + Hkv, D)


def partial_twin(
    model: Transformer, rank: int, rotated: Sequence[torch.Tensor], svds: Sequence[JointSVD]
) -> Transformer:
    """A twin of ``model`` with partial RoPE (``rotated``: each layer's mask) and a rank-``rank`` latent for the
    other key dimensions and the values (``svds``: each layer's ``partial_svd``). ``model`` is left as it is;
    every weight but the key and value rows of each qkv projection is shared with it."""
    on = any(path.on for path in getattr(model, "fast_paths", ()))
    twin = model.accelerated("auto" if on else "off")
    layers = [module for module in twin.modules() if isinstance(module, Attention)]
    if not len(layers) == len(rotated) == len(svds):
        raise ValueError(f"{len(rotated)} masks and {len(svds)} decompositions for {len(layers)} attention layers")
    with torch.no_grad():
        for attention, mask, svd in zip(layers, rotated, svds, strict=True):
            svd.factors(rank)  # the rank is checked against this layer's
            weight = attention.qkv_proj.weight.detach().clone()
            rows = torch.arange(attention.q_size, weight.shape[0], device=weight.device)
            latent_rows = rows[torch.cat([~mask.flatten(), torch.ones(attention.kv_size, dtype=torch.bool)])]
            weight[latent_rows] = svd.rebuilt(rank).to(weight.device)
            projection = copy.copy(attention.qkv_proj)
            projection._parameters = dict(projection._parameters)
            projection.weight = nn.Parameter(weight, requires_grad=False)
            attention.qkv_proj = projection
            attention.__class__ = PartialRopeAttention
            attention.rotated = _heads_mask(attention, mask).to(weight.device)
    return twin


def partial_bytes_per_token(config: ModelConfig, rank: int, pairs: int, bytes_per_value: int) -> int:
    """Cache bytes per token: per layer a latent of ``rank`` values and, per KV head, the kept pairs' rotated
    key dimensions in full (2 per pair), beside it."""
    count("rank", rank)
    count("pairs", pairs, allow_zero=True)
    count("bytes_per_value", bytes_per_value)
    return config.num_layers * (rank + config.num_kv_heads * 2 * pairs) * bytes_per_value


@torch.no_grad()
def absorbed_partial_attention(
    attention: Attention, factors: LatentFactors, rotated: torch.Tensor, x: torch.Tensor, rope: RotationForm
) -> Absorbed:
    """Causal attention of ``x`` (T, hidden) through one layer with partial RoPE at the positions ``rope`` turns
    by: the rotated key dimensions computed exactly (cached in full), the others and the values from the latent
    (``factors`` of ``partial_svd``); decompressed and absorbed."""
    num_heads, num_kv_heads, head_dim = attention.num_heads, attention.num_kv_heads, attention.head_dim
    group, scale, tokens = num_heads // num_kv_heads, head_dim**-0.5, x.shape[0]
    rotated = rotated.to(x.device)
    q = (x @ attention.qkv_proj.weight[: attention.q_size].T).view(tokens, num_heads, head_dim)
    q_turned = rope(q)
    k_turned = rope((x @ _key_rows(attention).T).view(tokens, num_kv_heads, head_dim))  # its kept dims: cached
    latent = x @ factors.down.T  # (T, rank): cached beside them
    up_k = factors.up_k.view(num_kv_heads, -1, factors.rank)  # per KV head: (non-rotary dims, rank)
    up_v = factors.up_v.view(num_kv_heads, head_dim, -1)
    w_o = attention.o_proj.weight.view(-1, num_heads, head_dim)  # (hidden, H, D)
    mask = torch.ones(tokens, tokens, dtype=torch.bool, device=x.device).tril()
    decompressed, absorbed = torch.zeros_like(x), torch.zeros_like(x)
    for head in range(num_heads):
        kv, keep = head // group, rotated[head // group]
        rotary = q_turned[:, head, keep] @ k_turned[:, kv, keep].T  # (T, T): the position-dependent part
        q_plain = q[:, head, ~keep]  # (T, non-rotary dims): no rotation between it and W_uk
        rebuilt = q_plain @ (latent @ up_k[kv].T).T
        weights = ((rotary + rebuilt) * scale).masked_fill(~mask, float("-inf")).softmax(-1)
        decompressed += (weights @ (latent @ up_v[kv].T)) @ w_o[:, head].T
        folded = (q_plain @ up_k[kv]) @ latent.T  # W_uk folded into the query
        weights = ((rotary + folded) * scale).masked_fill(~mask, float("-inf")).softmax(-1)
        absorbed += (weights @ latent) @ (w_o[:, head] @ up_v[kv]).T  # W_uv folded into W_o
    return Absorbed(decompressed, absorbed)
