"""One user's context window for real models on real cards, as a table (lesson 15).

A card sold as "N GB" holds N GiB (lesson 00's convention). Weights and cache in 16 bits, the
weights subtracted first, the rest cut into whole blocks. The window compares memory's limit with
what each model's config.json declares (``max_position_embeddings``), which is not always the
length it was trained at, nor what its cache must hold (lesson 15 says which).

The models of 2025-26 (``one_user_table_2026``) mix attention kinds: their cache at n tokens is
``CacheLayout.bytes_at(n)`` (a growing part, a part bounded by windows, a fixed state), and their weights are
counted as each is published (bf16, or MXFP4 and FP8 where that is how it ships).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kvcourse.kernels import costs
from kvcourse.kernels.cache_layout import CacheLayout
from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
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


@dataclass(frozen=True)
class Published:
    """What a model of 2025-26 ships as: its weights' bytes as published, and the positions its config declares."""

    weight_bytes: int
    positions: int  # max_position_embeddings in config.json


# Weights as each model is published (the parameter count on its model card, in the checkpoint's own storage) and
# max_position_embeddings from its config.json. Caches in 16 bits, from cache_layouts.LAYOUTS_2026.
PUBLISHED_2026: dict[str, Published] = {
    # 8.03B and 70.6B parameters in bf16: exactly Llama-3-8B's and Llama-3-70B's shapes (config_table.py)
    "llama-3.1-8b": Published(costs.weight_bytes(MODEL_CONFIGS["llama-3-8b"], 2), 131_072),
    "llama-3.1-70b": Published(costs.weight_bytes(MODEL_CONFIGS["llama-3-70b"], 2), 131_072),
    # Qwen3 declares 40,960 positions (32,768 native); its model card reaches 131,072 with YaRN
    "qwen3-8b": Published(round(8.2e9) * 2, 40_960),  # 8.2B, bf16
    "qwen3-32b": Published(round(32.8e9) * 2, 40_960),  # 32.8B, bf16
    "mistral-small-3.1": Published(round(24.0e9) * 2, 131_072),  # 24B with its vision encoder, bf16
    "gemma-3-27b": Published(round(27.4e9) * 2, 131_072),  # 27.4B with its vision encoder, bf16
    # gpt-oss model card, table 1: checkpoints of 12.8 GiB and 60.8 GiB (experts in MXFP4, the rest bf16)
    "gpt-oss-20b": Published(round(12.8 * GIB), 131_072),
    "gpt-oss-120b": Published(round(60.8 * GIB), 131_072),
    "deepseek-v3": Published(round(671e9), 163_840),  # 671B parameters published in FP8: one byte each, at least
}


def memory_window(layout: CacheLayout, spare_bytes: int, block_size: int = 16) -> int:
    """The longest sequence, in whole blocks, whose cache (growing + bounded + state parts) fits ``spare_bytes``."""
    low, high = 0, 2**30 // block_size  # in blocks; a billion tokens is past every model here
    while low < high:  # the cache only grows with the length, so bisect on it
        mid = (low + high + 1) // 2
        low, high = (mid, high) if layout.bytes_at(mid * block_size).total <= spare_bytes else (low, mid - 1)
    return low * block_size


def one_user_table_2026(
    names: list[str], cards_gib: dict[str, float], context_len: int, block_size: int = 16
) -> pd.DataFrame:
    """One row per model of 2025-26: its layers, weights, one user's cache at ``context_len``, the positions its
    config declares, and the longest sequence memory allows one user on each card (0: the weights do not fit)."""
    rows = {}
    for name in names:
        layout, shipped = LAYOUTS_2026[name], PUBLISHED_2026[name]
        kinds = ", ".join(f"{g.num_layers} {g.kind}" + (f" ({g.window:,})" if g.window else "") for g in layout.groups)
        spares = {card: round(gib * GIB) - shipped.weight_bytes for card, gib in cards_gib.items()}
        rows[name] = {
            "layers": kinds,
            "weights (GB)": round(shipped.weight_bytes / 1e9, 1),
            f"cache at {context_len:,} (GB)": round(layout.bytes_at(context_len).total / 1e9, 1),
            "config's positions": shipped.positions,
            **{card: memory_window(layout, spare, block_size) if spare > 0 else 0 for card, spare in spares.items()},
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def what_binds(table: pd.DataFrame, cards: list[str], context_len: int) -> pd.DataFrame:
    """For one user asking for ``context_len`` tokens, on each card: "weights" (they do not fit), "memory" or
    "model" (whichever ceiling is lower, when it is below ``context_len``), or "fits"."""

    def limit(memory: int, positions: int) -> str:
        if memory == 0:
            return "weights"
        if min(memory, positions) >= context_len:
            return "fits"
        return "memory" if memory < positions else "model"

    return pd.DataFrame(
        {card: [limit(m, p) for m, p in zip(table[card], table["config's positions"], strict=True)] for card in cards},
        index=table.index,
    )


def limit_counts(binds: pd.DataFrame) -> dict[str, int]:
    """How many (model, card) cases of ``what_binds`` end in each verdict: fits, model, memory, weights."""
    counts = binds.stack().value_counts()
    return {verdict: int(counts.get(verdict, 0)) for verdict in ("fits", "model", "memory", "weights")}


def cases_of(binds: pd.DataFrame, verdict: str) -> list[str]:
    """The (model, card) cases of ``what_binds`` with one verdict, as "model on card"."""
    return [f"{name} on {card}" for name in binds.index for card in binds.columns if binds.loc[name, card] == verdict]
