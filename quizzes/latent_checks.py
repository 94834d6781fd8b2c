"""Lesson 23's parameterised quick check: the bytes per token of a latent cache, computed by the engine's layout.

A latent layer caches, per token, one latent vector and one RoPE key shared by its heads
(``kvcourse.kernels.cache_layout.latent``), so a token costs layers x (latent + RoPE key) values. formulas.py
registers the formula.
"""

from __future__ import annotations

from typing import Any

from kvcourse.kernels.cache_layout import CacheLayout, latent


def latent_bytes_per_token(values: dict[str, Any]) -> int:
    """Bytes per token of ``num_layers`` latent layers of ``latent_rank`` + ``rope_dims`` values each."""
    group = latent(values["num_layers"], values["latent_rank"], values["rope_dims"])
    return CacheLayout((group,)).with_bytes_per_value(values["bytes_per_value"]).per_token_bytes
