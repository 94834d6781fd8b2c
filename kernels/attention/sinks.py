"""How much attention one query gives one key, in every layer and head at once (lesson 16's attention sink).

``attention_to_key`` takes recorded queries and keys (lesson 04's ``record_qkv``: ``q`` of shape
(layers, query heads, tokens, head dim), ``k`` of shape (layers, KV heads, tokens, head dim)) and
returns the softmax weight that the query at one position puts on the key at another, as
scaled dot-product attention computes it, causal mask included. Query head h reads KV head
h // (query heads per KV head), as in grouped-query attention.
"""

from __future__ import annotations

import numpy as np


def attention_to_key(q: np.ndarray, k: np.ndarray, query: int, key: int = 0) -> np.ndarray:
    """The attention weight the query at ``query`` gives the key at ``key``: shape (layers, query heads)."""
    num_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads cannot share {num_kv_heads} KV heads evenly")
    if not 0 <= key <= query < q.shape[2]:
        raise ValueError(f"need 0 <= key <= query < {q.shape[2]}; got key {key}, query {query}")
    keys = np.repeat(k[:, :, : query + 1], num_heads // num_kv_heads, axis=1)  # one KV head per query head
    scores = np.einsum("lhd,lhtd->lht", q[:, :, query], keys) / np.sqrt(q.shape[-1])
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return weights[..., key] / weights.sum(-1)
