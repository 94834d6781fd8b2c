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
dimension, so its converted form decompresses the keys, and the trick is shown on the unrotated scores;
latent_rope.py keeps a few rotary dimensions outside the latent, as DeepSeek and MHA2MLA do, and absorbs the rest.

Activation-aware (``layer_svds(model, second_moments)``): the rank-r factors that rebuild the weights best are
not those that rebuild the keys and values best, which depend on the inputs x the layer sees. With C = E[x x^T]
measured on a calibration text (``latent_rank.input_second_moments``), the error on the actual outputs,
E||(W - W') x||^2 = ||(W - W') S||^2 for C = S S^T, is least for W' = U_r U_r^T W, where U_r holds the top left
singular vectors of W S, i.e. the top eigenvectors of W C W^T (SVD-LLM's whitening, ASVD's idea): the same
truncation of the output space, chosen by the activations' energy rather than the weights'. C = I is the plain SVD.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
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


@dataclass(frozen=True)
class JointSVD:
    """One layer's stacked ``W = [W_k; W_v] = u diag(s) vh``, in float64: every rank's factors are a truncation
    of it, so a sweep over ranks decomposes each layer once. ``down`` holds ``diag(s) vh = u^T W``."""

    u: torch.Tensor  # (2 kv_size, n), n = min(2 kv_size, hidden)
    s: torch.Tensor  # (n,), largest first: W's singular values, or W S's when fitted to activations
    down: torch.Tensor  # (n, hidden)
    dtype: torch.dtype  # the weights' dtype, which the factors are returned in
    key_rows: int = -1  # how many of the stacked rows are keys (the rest values); -1: half of them

    @property
    def full_rank(self) -> int:
        return self.s.shape[0]

    def factors(self, rank: int) -> LatentFactors:
        """The rank-``rank`` factors; the singular values go with the down side."""
        count("rank", rank)
        if rank > self.full_rank:
            raise ValueError(f"rank {rank} exceeds {self.full_rank}, the rank of the stacked key and value projections")
        up = self.u[:, :rank]  # (key rows + value rows, rank)
        keys = up.shape[0] // 2 if self.key_rows < 0 else self.key_rows
        return LatentFactors(self.down[:rank].to(self.dtype), up[:keys].to(self.dtype), up[keys:].to(self.dtype))

    def rebuilt(self, rank: int) -> torch.Tensor:
        """The rank-``rank`` product ``[W_uk; W_uv] W_down`` (2 kv_size x hidden), multiplied in float64 and then
        rounded once to the weights' dtype, so that at full rank it is the stacked projection itself."""
        count("rank", rank)
        return (self.u[:, :rank] @ self.down[:rank]).to(self.dtype)

    def energy_kept(self) -> torch.Tensor:
        """For r = 1 .. full rank, the share of the stacked projection's squared Frobenius norm that rank r keeps
        (the sum of the r largest squared singular values over all of them)."""
        energy = self.s.square()
        return energy.cumsum(0) / energy.sum()


def joint_svd(w_k: torch.Tensor, w_v: torch.Tensor, second_moment: torch.Tensor | None = None) -> JointSVD:
    """The singular value decomposition of keys' and values' projections stacked (rows x hidden each).

    From the eigenvectors of ``W W^T`` (rows square): they are W's left singular vectors, the square roots
    of its eigenvalues the singular values, and ``u^T W`` the rest, ``diag(s) vh``. This asks LAPACK for a small
    symmetric eigenproblem, several times faster than its general SVD of the same matrix. With ``second_moment``
    C (hidden square, the inputs' E[x x^T]), the eigenvectors of ``W C W^T`` instead: the factors that rebuild
    the keys and values of those inputs best (module docstring); ``down`` is still ``u^T W``."""
    stacked = torch.cat([w_k, w_v]).detach().to(torch.float64)  # (rows, hidden)
    n = min(stacked.shape)
    gram = stacked @ stacked.T if second_moment is None else stacked @ second_moment.to(stacked) @ stacked.T
    eigenvalues, vectors = torch.linalg.eigh(gram)  # ascending
    u = vectors.flip(-1)[:, :n]  # (rows, n), largest first
    s = eigenvalues.flip(-1)[:n].clamp(min=0).sqrt()
    return JointSVD(u, s, u.T @ stacked, w_k.dtype, w_k.shape[0])


def factorise(w_k: torch.Tensor, w_v: torch.Tensor, rank: int) -> LatentFactors:
    """The rank-``rank`` joint factorisation of keys' and values' projections (kv_size x hidden each).

    Computed in float64 and returned in the weights' dtype; the singular values go with the down side."""
    count("rank", rank)
    limit = min(2 * w_k.shape[0], w_k.shape[1])
    if rank > limit:
        raise ValueError(f"rank {rank} exceeds {limit}, the rank of the stacked key and value projections")
    return joint_svd(w_k, w_v).factors(rank)


def _key_value_rows(attention: Attention) -> tuple[torch.Tensor, torch.Tensor]:
    w = attention.qkv_proj.weight
    q_size, kv_size = attention.q_size, attention.kv_size
    return w[q_size : q_size + kv_size], w[q_size + kv_size :]


def layer_factors(attention: Attention, rank: int) -> LatentFactors:
    """A layer's factors, from its fused qkv projection's key and value rows."""
    return factorise(*_key_value_rows(attention), rank)


def layer_svds(model: Transformer, second_moments: Sequence[torch.Tensor] | None = None) -> list[JointSVD]:
    """Every layer's joint decomposition, first layer first (``latent_twin`` takes them, to decompose once);
    fitted to each layer's inputs where ``second_moments`` (``latent_rank.input_second_moments``) are given.

    These small eigenproblems ran several times slower on two busy cores than on one (0.75 s on one thread,
    5-33 s on two); the course's lab and tests run kernels on one thread (``kernel_env.offline``), and only the
    thread policy (``kernels/engine/threads.py``) sets torch's thread count, so this function leaves it alone."""
    layers = [a for a in model.modules() if isinstance(a, Attention)]
    moments = [None] * len(layers) if second_moments is None else list(second_moments)
    return [joint_svd(*_key_value_rows(a), c) for a, c in zip(layers, moments, strict=True)]


def latent_twin(model: Transformer, rank: int, svds: Sequence[JointSVD] | None = None) -> Transformer:
    """A twin of ``model`` whose keys and values come from a rank-``rank`` latent, every layer.

    Only the key and value rows of each layer's qkv weight are new tensors; every other weight is shared
    with ``model``, which is left exactly as it is. ``svds`` (``layer_svds(model)``) saves decomposing
    each layer again when several ranks are built."""
    on = any(path.on for path in getattr(model, "fast_paths", ()))
    twin = model.accelerated("auto" if on else "off")
    layers = [module for module in twin.modules() if isinstance(module, Attention)]
    svds = layer_svds(model) if svds is None else svds
    if len(svds) != len(layers):
        raise ValueError(f"{len(svds)} decompositions for a model of {len(layers)} attention layers")
    with torch.no_grad():
        for attention, svd in zip(layers, svds, strict=True):
            svd.factors(rank)  # the rank is checked against this layer's
            weight = attention.qkv_proj.weight.detach().clone()
            weight[attention.q_size :] = svd.rebuilt(rank).to(weight.device)
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


@dataclass(frozen=True)
class DecodeWork:
    """Multiply-adds of one layer's attention for one new token over ``context`` cached tokens (``decode_work``)."""

    decompressed: int  # every cached token's key and value rebuilt from its latent, then attended, then W_o
    absorbed: int  # W_uk folded into the query, scores and sums on the latent, W_o W_uv (folded once) applied

    @property
    def ratio(self) -> float:
        return self.decompressed / self.absorbed


def decode_work(config: ModelConfig, rank: int, context: int) -> DecodeWork:
    """What absorption saves in one decode step of one layer, counted in multiply-adds.

    Decompressing rebuilds each of the ``context`` cached tokens' keys and values, ``rank`` x 2 kv_size each,
    at every step, then attends per head in head_dim values and applies W_o. Absorbing folds W_uk into the
    new query (head_dim x rank per head), scores and sums on the latent (rank values per cached token and
    head), and applies W_o W_uv, folded once when the model is loaded (rank x hidden per head)."""
    count("rank", rank)
    count("context", context)
    heads, head_dim, hidden = config.num_heads, config.head_dim, config.hidden_size
    decompressed = context * rank * 2 * config.kv_size + heads * context * head_dim * 2 + hidden * heads * head_dim
    absorbed = heads * head_dim * rank + heads * context * rank * 2 + hidden * heads * rank
    return DecodeWork(decompressed, absorbed)
