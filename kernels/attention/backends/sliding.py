"""Caches that keep only a window of recent tokens: on every layer (lesson 16), or on most layers (issue 45).

Tokens still carry their absolute positions (RoPE), as in Mistral; each query of a windowed layer sees only
the last `window` keys, so generation equals the full cache until the sequence outgrows the window.

Models of 2025-26 window most of their layers, not all: Gemma 3 makes five layers in six local (a 1,024-token
window) and the sixth global; gpt-oss alternates 128-token windows with full layers. ``LayerWindowsBackend``
takes a window per layer (None: the layer sees every token), so a local layer holds at most its window while a
global layer grows with the sequence; ``local_global_windows`` lays Gemma 3's pattern over a model's layers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvcourse.kernels.attention.backend import StepMetadata
from kvcourse.kernels.attention.backends.contiguous import _SequenceBackend
from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.model.config import ModelConfig

LOCAL_PER_GLOBAL = 5  # Gemma 3's pattern: five local layers, then one global


def local_global_windows(
    num_layers: int, window: int, local_per_global: int = LOCAL_PER_GLOBAL
) -> tuple[int | None, ...]:
    """A window per layer: ``local_per_global`` local layers of ``window`` tokens, then one global (None), repeated
    (Gemma 3: 5 and 1, so layers 5, 11, 17, ... are global; gpt-oss: 1 and 1)."""
    check_positive_int("num_layers", num_layers)
    check_positive_int("window", window)
    check_positive_int("local_per_global", local_per_global)
    return tuple(None if (layer + 1) % (local_per_global + 1) == 0 else window for layer in range(num_layers))


class LayerWindowsBackend(_SequenceBackend):
    """A ring buffer per layer: ``window`` slots on a local layer, ``max_tokens`` on a global one (window None).

    The token at position p lives in slot p % slots of each layer's ring; a global layer's ring never wraps.
    """

    def __init__(
        self,
        config: ModelConfig,
        windows: Sequence[int | None],
        max_tokens: int,
        dtype: torch.dtype,
        device: torch.device | str,
        attention: str = "auto",
    ) -> None:
        super().__init__(attention)
        if len(windows) != config.num_layers:
            raise ValueError(f"windows must give one window per layer ({config.num_layers}), got {len(windows)}")
        for window in windows:
            check_positive_int("window", window, optional=True)
        check_positive_int("max_tokens", max_tokens)
        self.config, self.windows, self.max_tokens = config, tuple(windows), max_tokens
        self.slots = tuple(max_tokens if w is None else w for w in self.windows)
        shapes = [(config.num_kv_heads, slots, config.head_dim) for slots in self.slots]
        self.k_ring = [torch.zeros(shape, dtype=dtype, device=device) for shape in shapes]
        self.v_ring = [torch.zeros(shape, dtype=dtype, device=device) for shape in shapes]
        self.num_tokens = 0  # tokens absorbed so far, the next token's position

    @property
    def num_computed_tokens(self) -> int:
        return self.num_tokens

    def held_tokens(self, layer_idx: int) -> int:
        """Tokens whose keys and values the layer holds now: all of them on a global layer, the window's on a local."""
        return min(self.num_tokens, self.slots[layer_idx])

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of the slots in use: a local layer's stay flat once its window is full, a global layer's grow."""
        return sum(
            2 * ring[:, : self.held_tokens(layer)].numel() * ring.element_size()
            for layer, ring in enumerate(self.k_ring)
        )

    def begin_step(self, meta: StepMetadata) -> None:
        if meta.end_pos > self.max_tokens and None in self.windows:
            raise ValueError(f"this step ends at position {meta.end_pos}, beyond max_tokens = {self.max_tokens}")
        super().begin_step(meta)

    def end_step(self) -> None:
        if self.meta is not None:
            self.num_tokens = self.meta.end_pos
        super().end_step()

    def _held_in_order(self, layer_idx: int, ring: torch.Tensor) -> torch.Tensor:
        first = self.num_tokens - self.held_tokens(layer_idx)
        slots = torch.arange(first, self.num_tokens, device=ring.device) % self.slots[layer_idx]
        return ring[:, slots]  # (Hkv, held, D), oldest first

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.meta is None:
            raise RuntimeError("call begin_step(StepMetadata(...)) before the forward pass")
        start, end, num_new = self.meta.start_pos, self.meta.end_pos, self.meta.num_tokens
        k_ring, v_ring = self.k_ring[layer_idx], self.v_ring[layer_idx]
        slots, window = self.slots[layer_idx], self.windows[layer_idx]
        if num_new == 1:
            # Decode: every held key is inside the window, and attention does not care about key order.
            k_ring[:, start % slots] = k[0]
            v_ring[:, start % slots] = v[0]
            held = min(end, slots)
            return self._attend(q, k_ring[:, :held], v_ring[:, :held], held - 1)
        # A chunk: lay the held keys out in order, append the new ones, mask to the window.
        num_held = self.held_tokens(layer_idx)
        k_all = torch.cat([self._held_in_order(layer_idx, k_ring), k.transpose(0, 1)], dim=1)  # (Hkv, held + T, D)
        v_all = torch.cat([self._held_in_order(layer_idx, v_ring), v.transpose(0, 1)], dim=1)  # (Hkv, held + T, D)
        out = self._attend(q, k_all, v_all, num_held, window)
        keep = min(num_new, slots)
        kept = torch.arange(end - keep, end, device=k.device) % slots
        k_ring[:, kept] = k[num_new - keep :].transpose(0, 1)
        v_ring[:, kept] = v[num_new - keep :].transpose(0, 1)
        return out


class SlidingWindowBackend(LayerWindowsBackend):
    """The same ``window`` on every layer (lesson 16): constant memory, once the window is full."""

    def __init__(
        self, config: ModelConfig, window: int, dtype: torch.dtype, device: torch.device | str, attention: str = "auto"
    ) -> None:
        check_positive_int("window", window)
        super().__init__(config, (window,) * config.num_layers, window, dtype, device, attention)
        self.window = window

    @property
    def num_held_tokens(self) -> int:
        return min(self.num_tokens, self.window)
