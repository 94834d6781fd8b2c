"""Regroup a trained model's key/value heads after training: fewer by pooling, more by repeating (lesson 16).

In grouped-query attention, query head h reads KV head h // (num_heads // num_kv_heads): each
KV head serves a run of consecutive query heads. Ainslie et al. (2023, "GQA: Training Generalized
Multi-Query Transformer Models from Multi-Head Checkpoints") turn a checkpoint into one with fewer
KV heads by mean-pooling the key and value projections of the heads that will share one, and then
*uptrain* it on about 5 % of the original pre-training compute so the model learns to live with
the merged heads. ``regroup_kv_heads`` does the conversion without the uptraining, which is what
lesson 16 measures. Pooling the projection weights pools the keys themselves: a projection is
linear, and RoPE rotates every head of a position by the same angles, which is linear too.

Going the other way is exact: repeating each KV head gives more heads computing the same keys and
values, so the model answers the same with a bigger cache (what multi-head attention would cost).
"""

from __future__ import annotations

import dataclasses

import torch

from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.model.transformer import Transformer

METHODS = ("mean", "first")


def _regroup(heads: torch.Tensor, num_kv_heads: int, method: str) -> torch.Tensor:
    """(old_kv_heads, head_dim, ...) -> (num_kv_heads, head_dim, ...): pool groups or repeat heads."""
    old = heads.shape[0]
    if num_kv_heads >= old:
        return heads.repeat_interleave(num_kv_heads // old, dim=0)  # each head copied to its new neighbours
    groups = heads.unflatten(0, (num_kv_heads, old // num_kv_heads))  # (new, group, head_dim, ...)
    if method == "first":
        return groups[:, 0]
    return groups.float().mean(dim=1).to(heads.dtype)  # averaged in float32, stored in the model's dtype


def regroup_kv_projection(
    weight: torch.Tensor, num_heads: int, num_kv_heads: int, new_kv_heads: int, head_dim: int, method: str = "mean"
) -> torch.Tensor:
    """A fused [W_q; W_k; W_v] weight (or bias) with its K and V rows regrouped to new_kv_heads heads."""
    q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
    q, k, v = weight[:q_size], weight[q_size : q_size + kv_size], weight[q_size + kv_size :]
    rest = weight.shape[1:]  # (hidden,) for a weight, () for a bias
    k, v = (
        _regroup(x.reshape(num_kv_heads, head_dim, *rest), new_kv_heads, method).reshape(new_kv_heads * head_dim, *rest)
        for x in (k, v)
    )
    return torch.cat([q, k, v])


def regroup_kv_heads(model: Transformer, num_kv_heads: int, method: str = "mean") -> Transformer:
    """A new Transformer whose KV heads are pooled into num_kv_heads (or repeated up to it), no retraining.

    method "mean" averages the K and V projections of each group (the GQA paper's conversion);
    "first" keeps the first head of each group and drops the others. More heads than the model
    has: each head is repeated, which changes no answer. The original model is left untouched; the new one
    runs the fast paths if the original does (``accelerate``), so the two are compared product for product.
    """
    config = model.config
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    check_positive_int("num_kv_heads", num_kv_heads)
    old = config.num_kv_heads
    if (old % num_kv_heads if num_kv_heads <= old else num_kv_heads % old) or config.num_heads % num_kv_heads:
        raise ValueError(
            f"cannot regroup {old} KV heads into {num_kv_heads}: the new count must divide "
            f"{old} (pooling whole groups) or be a multiple of it (repeating), and divide the "
            f"{config.num_heads} query heads"
        )
    new_config = dataclasses.replace(config, num_kv_heads=num_kv_heads)
    state = model.state_dict()
    for name in list(state):
        if name.endswith("qkv_proj.weight") or name.endswith("qkv_proj.bias"):
            state[name] = regroup_kv_projection(
                state[name], config.num_heads, old, num_kv_heads, config.head_dim, method
            )
    with torch.device("meta"):
        new = Transformer(new_config)
    new = new.to_empty(device=model.device).to(model.dtype)
    new.load_state_dict(state)
    if new_config.tie_word_embeddings:
        new.lm_head.weight = new.embed_tokens.weight  # to_empty untied them; tie them again
    if any(path.on for path in model.fast_paths):  # the fast paths the model runs, so a comparison is like for like
        new.accelerate()
    return new.eval()
