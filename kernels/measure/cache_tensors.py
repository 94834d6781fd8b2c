"""The caches the engine really holds, as tensors, and a latent cache built on SmolLM2's latent twin (lesson 22).

``kv_tensors`` reads the keys and values a contiguous cache holds after a generation (the filled part of each
layer's buffers); ``held_bytes`` weighs tensors by their own dtype (``element_size``), never a literal width. So a
lesson compares what the engine holds with what ``kernels/cache_layout.py`` says it should.

``latent_cache`` runs a prompt through a latent twin (``model/latent.py``: each layer's keys and values rebuilt
from a rank-r latent) and keeps, per layer, what a latent engine would cache instead: ``c = W_down x``, r values per
token, the layer's input ``x`` taken as the twin's attention receives it. The values rebuilt from it,
``W_uv c``, are set beside the values the twin's own contiguous cache holds: they agree to rounding, so the r
values per token are the whole cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from kvcourse.kernels.engine.generate import generate
from kvcourse.kernels.model.latent import layer_factors
from kvcourse.kernels.model.transformer import Attention, Transformer


def held_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """The bytes these tensors hold: elements x each one's own element size."""
    return sum(t.numel() * t.element_size() for t in tensors)


def kv_tensors(backend: Any) -> list[torch.Tensor]:
    """The filled part of a contiguous cache's key and value buffers, every layer: 2 x layers tensors."""
    n = backend.num_tokens
    return [k[:, :n] for k in backend.k_cache] + [v[:, :n] for v in backend.v_cache]


@dataclass(frozen=True)
class LatentCache:
    """One latent per layer (tokens, rank), and per layer the values rebuilt from it and those the twin cached."""

    latents: list[torch.Tensor]
    rebuilt_values: list[torch.Tensor]  # (KV heads, tokens, head dim), W_uv c
    cached_values: list[torch.Tensor]  # (KV heads, tokens, head dim), the twin's contiguous cache

    @property
    def num_tokens(self) -> int:
        return self.latents[0].shape[0]

    @property
    def largest_value_difference(self) -> float:
        """The largest difference between a rebuilt value and the cached one, over every layer."""
        return max(
            float((a.float() - b.float()).abs().max())
            for a, b in zip(self.rebuilt_values, self.cached_values, strict=True)
        )

    @property
    def largest_value(self) -> float:
        return max(float(v.float().abs().max()) for v in self.cached_values)


@torch.no_grad()
def latent_cache(twin: Transformer, ids: list[int], rank: int) -> LatentCache:
    """Run ``ids`` through ``twin`` once (one prefill) and build the latent cache of rank ``rank`` its layers imply."""
    attentions = [module for module in twin.modules() if isinstance(module, Attention)]
    inputs: dict[int, torch.Tensor] = {}

    def keep(index: int) -> Any:
        def hook(_module: Any, args: tuple) -> None:  # returns None: the call goes on with its own arguments
            inputs.setdefault(index, args[0].detach())

        return hook

    hooks = [attention.register_forward_pre_hook(keep(i)) for i, attention in enumerate(attentions)]
    try:
        run = generate(twin, ids, 1, cache="contiguous", eos_token_id=[])
    finally:
        for hook in hooks:
            hook.remove()
    latents, rebuilt = [], []
    for i, attention in enumerate(attentions):
        factors = layer_factors(attention, rank)
        latent = inputs[i] @ factors.down.T  # (tokens, rank): all a latent engine keeps
        values = latent @ factors.up_v.T  # (tokens, KV heads x head dim)
        latents.append(latent)
        rebuilt.append(values.view(latent.shape[0], attention.num_kv_heads, attention.head_dim).transpose(0, 1))
    cached = [v[:, : run.backend.num_tokens] for v in run.backend.v_cache]
    return LatentCache(latents, rebuilt, cached)
