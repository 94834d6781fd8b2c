"""What local layers cost SmolLM2 in answers, beside the memory they save (issue 45 item 3; lesson 24).

``window_sweep`` gives five layers in six a window (Gemma 3's pattern, ``local_global_windows``) and measures,
on one text, the perplexity and the next-token agreement with the model as shipped (every layer global), beside
the cache one sequence of that text holds: the global layers' part grows with it, the local layers' part stops
at their window (``kernels/cache_layout.py``). Each window is read through its attention-mask reference
(``NoCacheBackend(layer_windows=...)``, one pass), which the cache that drops old tokens equals
(tests/kernels/test_local_global.py). Beside each window, the same window with the first ``SINKS`` tokens kept
on every local layer (StreamingLLM's attention sinks, lesson 16): a model trained with full attention puts much of
its attention on the first token, which a plain window takes away (``SinkWindowMask``). Nothing is trained:
SmolLM2 was trained with every layer global, so this is what a window costs a model that never learnt to live
with one; Gemma 3 was trained with its windows.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch
import torch.nn.functional as F

from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.attention.backends.sliding import LOCAL_PER_GLOBAL, local_global_windows
from kvcourse.kernels.attention.reference import causal_mask
from kvcourse.kernels.cache_layout import CacheLayout, full, window
from kvcourse.kernels.measure.perplexity import perplexity_of
from kvcourse.kernels.model.transformer import Transformer


def local_global_layout(
    config: object, tokens: int, bytes_per_value: int, local_per_global: int = LOCAL_PER_GLOBAL
) -> CacheLayout:
    """The cache layout of ``config`` with five layers in six windowed to ``tokens`` (``local_global_windows``)."""
    layers, heads, dim = (getattr(config, name) for name in ("num_layers", "num_kv_heads", "head_dim"))
    local = sum(w is not None for w in local_global_windows(layers, tokens, local_per_global))
    groups = (full(layers - local, heads, dim),) if layers > local else ()  # a short model may have no global layer
    return CacheLayout((*groups, window(local, heads, dim, tokens)), bytes_per_value)


SINKS = 4  # StreamingLLM keeps the first four tokens


class SinkWindowMask:
    """A one-pass backend: each layer sees its window of keys (None: all) and, on a windowed layer, the first
    ``sinks`` tokens too, under the causal mask."""

    def __init__(self, layer_windows: Sequence[int | None], sinks: int = SINKS) -> None:
        self.layer_windows, self.sinks = tuple(layer_windows), sinks

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (T, H, D), k and v (T, Hkv, D) -> (T, H, D)."""
        tokens, window = q.shape[0], self.layer_windows[layer_idx]
        mask = causal_mask(tokens, tokens, 0, window, q.device)
        if window is not None:
            mask[:, : self.sinks] |= causal_mask(tokens, tokens, 0, None, q.device)[:, : self.sinks]
        q_, k_, v_ = (t.transpose(0, 1)[None] for t in (q, k, v))  # (1, heads, T, D)
        return F.scaled_dot_product_attention(q_, k_, v_, attn_mask=mask, enable_gqa=True)[0].transpose(0, 1)


def masked_logits(
    model: Transformer, ids: Sequence[int], windows: Sequence[int | None] | None, sinks: int = 0
) -> torch.Tensor:
    """Logits (T, vocab) of every prefix of ``ids`` in float32, each layer seeing its window of keys (None: all),
    and with ``sinks`` the first tokens as well on a windowed layer."""
    tokens = torch.tensor(list(ids), device=model.device)
    positions = torch.arange(len(tokens), device=model.device)
    backend = SinkWindowMask(windows, sinks) if sinks and windows else NoCacheBackend(layer_windows=windows)
    with torch.inference_mode():
        return model(tokens, positions, backend).float()


def window_sweep(model: Transformer, ids: Sequence[int], windows: Sequence[int], sinks: int = 0) -> pd.DataFrame:
    """One row per local window, and with ``sinks`` one per window keeping that many first tokens too (the model
    as shipped first, "all global"): the cache of one sequence of ``ids`` and its share of the all-global cache,
    perplexity, next-token agreement with the model as shipped. Sinks cost their tokens' bytes on every local
    layer."""
    config, bytes_per_value, n = model.config, model.dtype.itemsize, len(ids)
    reference = masked_logits(model, ids, None)
    everything = local_global_layout(config, n, bytes_per_value).bytes_at(n).total  # every window holds the text
    rows = {"all global": _row(reference, reference, ids, everything, everything)}
    for tokens in sorted(windows, reverse=True):
        layer_windows = local_global_windows(config.num_layers, tokens)
        for kept in sorted({0, sinks}):
            logits = masked_logits(model, ids, layer_windows, kept)
            held = local_global_layout(config, tokens + kept, bytes_per_value).bytes_at(n).total
            label = f"window {tokens}" + (f" + {kept} sinks" if kept else "")
            rows[label] = _row(logits, reference, ids, held, everything)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("local layers")


def _row(logits: torch.Tensor, reference: torch.Tensor, ids: Sequence[int], held: int, everything: int) -> dict:
    return {
        "cache bytes at the text's length": held,
        "share of all global": held / everything,
        "perplexity": perplexity_of(logits, ids),
        "next-token agreement": float((logits.argmax(-1) == reference.argmax(-1)).float().mean()),
    }
