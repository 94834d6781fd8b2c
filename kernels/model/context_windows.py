"""One user's context window for real models on real cards, as a table (lesson 15).

A card sold as "N GB" holds N GiB (lesson 00's convention). Weights and cache in 16 bits, the
weights subtracted first, the rest cut into whole blocks. The window compares memory's limit with
what each model's config.json declares (``max_position_embeddings``), which is not always the
length it was trained at, nor what its cache must hold (lesson 15 says which).
"""

from __future__ import annotations

import pandas as pd

from kvcourse.kernels import costs
from kvcourse.kernels.model.config_table import MODEL_CONFIGS

GIB = 2**30


def one_user_window(name: str, card_gib: float, block_size: int = 16) -> int:
    """Tokens of 16-bit cache that fit on the card after the model's 16-bit weights (0: the weights do not fit)."""
    shape = MODEL_CONFIGS[name]
    spare = round(card_gib * GIB) - costs.weight_bytes(shape, 2)
    return costs.context_window(shape, spare, 2, block_size=block_size) if spare > 0 else 0


def one_user_table(names: list[str], cards_gib: dict[str, float], block_size: int = 16) -> pd.DataFrame:
    """One row per model: bytes per token, the positions its config declares, and the window on each card."""
    rows = {}
    for name in names:
        shape = MODEL_CONFIGS[name]
        rows[name] = {
            "bytes/token": costs.kv_bytes_per_token(shape, 2),
            "config's positions": shape.max_position_embeddings,
            **{card: one_user_window(name, gib, block_size) for card, gib in cards_gib.items()},
        }
    return pd.DataFrame.from_dict(rows, orient="index")
