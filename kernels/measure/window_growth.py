"""What a generation with local and global layers holds, step by step, read from the cache's own tensors (lesson 24).

``generate_held`` runs ``generate(cache="local_global")`` through a ``LayerWindowsBackend`` that, after every
forward pass, weighs the slots each layer's key and value rings hold (``held_tokens``): local layers' bytes stop
growing once their window is full, global layers' grow with every token. The sum of the two columns is the
backend's ``kv_cache_bytes`` at that step.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from kvcourse.kernels.attention.backends.sliding import LayerWindowsBackend, local_global_windows
from kvcourse.kernels.engine.cache_modes import CacheRequest
from kvcourse.kernels.engine.generate import GenerationResult, generate
from kvcourse.kernels.model.transformer import Transformer


class _WeighedLayerWindows(LayerWindowsBackend):
    """A LayerWindowsBackend that writes down, after each step, the bytes its local and global layers hold."""

    def __init__(self, req: CacheRequest, window: int) -> None:
        config = req.model.config
        windows = local_global_windows(config.num_layers, window)
        super().__init__(config, windows, req.max_tokens, req.model.dtype, req.model.device, req.attention)
        self.rows: list[dict[str, int]] = []

    def layer_bytes(self, layer: int) -> int:
        """Bytes of the key and value slots this layer holds now."""
        ring = self.k_ring[layer]
        return 2 * ring[:, : self.held_tokens(layer)].numel() * ring.element_size()

    def end_step(self) -> None:
        super().end_step()
        kinds = {"local layers (bytes)": 0, "global layers (bytes)": 0}
        for layer, window in enumerate(self.windows):
            kinds["global layers (bytes)" if window is None else "local layers (bytes)"] += self.layer_bytes(layer)
        self.rows.append({"tokens cached": self.num_tokens, **kinds, "all layers (bytes)": self.kv_cache_bytes})


def generate_held(
    model: Transformer, prompt: Sequence[int], max_new_tokens: int, window: int
) -> tuple[GenerationResult, pd.DataFrame]:
    """Greedy generation with five layers in six local (``window`` tokens) and a table, one row per step, of the
    bytes the local and the global layers hold after it (no end-of-text stop, so every run takes its steps)."""

    result = generate(model, list(prompt), max_new_tokens, cache=lambda req: _WeighedLayerWindows(req, window),
                      eos_token_id=[])  # fmt: skip
    return result, pd.DataFrame(result.backend.rows).set_index("tokens cached")
