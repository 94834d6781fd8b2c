"""What local layers cost SmolLM2 in answers, beside the memory they save (issue 45 item 3; lesson 24).

``window_sweep`` gives five layers in six a window (Gemma 3's pattern, ``local_global_windows``) and measures,
on one text, the perplexity and the next-token agreement with the model as shipped (every layer global), beside
the cache one sequence of that text holds: the global layers' part grows with it, the local layers' part stops
at their window (``kernels/cache_layout.py``). Each window is read through its attention-mask reference
(``NoCacheBackend(layer_windows=...)``, one pass), which the cache that drops old tokens equals
(tests/kernels/test_local_global.py). Nothing is trained: SmolLM2 was trained with every layer global, so this
is what a window costs a model that never learnt to live with one; Gemma 3 was trained with its windows.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.attention.backends.sliding import LOCAL_PER_GLOBAL, local_global_windows
from kvcourse.kernels.cache_layout import CacheLayout, full, window
from kvcourse.kernels.measure.perplexity import perplexity_of
from kvcourse.kernels.model.transformer import Transformer


def local_global_layout(
    config: object, tokens: int, bytes_per_value: int, local_per_global: int = LOCAL_PER_GLOBAL
) -> CacheLayout:
    """The cache layout of ``config`` with five layers in six windowed to ``tokens`` (``local_global_windows``)."""
    layers, heads, dim = (getattr(config, name) for name in ("num_layers", "num_kv_heads", "head_dim"))
    local = sum(w is not None for w in local_global_windows(layers, tokens, local_per_global))
    groups = (full(layers - local, heads, dim), window(local, heads, dim, tokens))
    return CacheLayout(groups, bytes_per_value)


def masked_logits(model: Transformer, ids: Sequence[int], windows: Sequence[int | None] | None) -> torch.Tensor:
    """Logits (T, vocab) of every prefix of ``ids`` in float32, each layer seeing its window of keys (None: all)."""
    tokens = torch.tensor(list(ids), device=model.device)
    positions = torch.arange(len(tokens), device=model.device)
    with torch.inference_mode():
        return model(tokens, positions, NoCacheBackend(layer_windows=windows)).float()


def window_sweep(model: Transformer, ids: Sequence[int], windows: Sequence[int]) -> pd.DataFrame:
    """One row per local window (the model as shipped first, "all global"): the cache of one sequence of
    ``ids`` and its share of the all-global cache, perplexity, next-token agreement with the model as shipped."""
    config, bytes_per_value, n = model.config, model.dtype.itemsize, len(ids)
    reference = masked_logits(model, ids, None)
    everything = local_global_layout(config, n, bytes_per_value).bytes_at(n).total  # every window holds the text
    rows = {"all global": _row(reference, reference, ids, everything, everything)}
    for tokens in sorted(windows, reverse=True):
        logits = masked_logits(model, ids, local_global_windows(config.num_layers, tokens))
        held = local_global_layout(config, tokens, bytes_per_value).bytes_at(n).total
        rows[f"window {tokens}"] = _row(logits, reference, ids, held, everything)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("local layers")


def _row(logits: torch.Tensor, reference: torch.Tensor, ids: Sequence[int], held: int, everything: int) -> dict:
    return {
        "cache bytes at the text's length": held,
        "share of all global": held / everything,
        "perplexity": perplexity_of(logits, ids),
        "next-token agreement": float((logits.argmax(-1) == reference.argmax(-1)).float().mean()),
    }
