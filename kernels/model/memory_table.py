"""Real models' cache and weights side by side, from the engine's config table and cost model (lesson 07).

``memory_table`` is one row per model: its query and key/value heads, the bytes one token's
keys and values take, the weights' bytes, the tokens at which one conversation's cache weighs
as much as the weights, and the model's context window (``max_position_embeddings``).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from kvcourse.kernels import costs
from kvcourse.kernels.model.config import ModelConfig


def memory_table(configs: Mapping[str, ModelConfig], bytes_per_value: int = 2) -> pd.DataFrame:
    """One row per model, every number stored at ``bytes_per_value`` (weights and cache alike)."""
    rows = []
    for name, cfg in configs.items():
        rows.append(
            {
                "model": name,
                "query heads": cfg.num_heads,
                "KV heads": cfg.num_kv_heads,
                "KV bytes per token": costs.kv_bytes_per_token(cfg, bytes_per_value),
                "weights (GB)": round(costs.weight_bytes(cfg, bytes_per_value) / 1e9, 1),
                "one user's cache = weights at (tokens)": costs.kv_crossover_tokens(cfg, 1, bytes_per_value),
                "max context (tokens)": cfg.max_position_embeddings,
            }
        )
    table = pd.DataFrame(rows).set_index("model")
    table["crossover within the context"] = (
        table["one user's cache = weights at (tokens)"] <= table["max context (tokens)"]
    )
    return table
