"""A sliding-window KV cache: keep only the last `window` tokens, constant memory (lesson 16).

Tokens still carry their absolute positions (RoPE), as in Mistral; each query sees only the
last `window` keys, so generation equals the full cache until the sequence outgrows the window.
"""

from __future__ import annotations

import torch

from kvcourse.kernels.attention.backends.contiguous import _SequenceBackend
from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.model.config import ModelConfig


class SlidingWindowBackend(_SequenceBackend):
    """A ring buffer of `window` slots per layer: the token at position p lives in slot p % window."""

    def __init__(
        self, config: ModelConfig, window: int, dtype: torch.dtype, device: torch.device | str, attention: str = "auto"
    ) -> None:
        super().__init__(attention)
        check_positive_int("window", window)
        self.config, self.window = config, window
        shape = (config.num_kv_heads, window, config.head_dim)
        self.k_ring = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.v_ring = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.num_tokens = 0  # tokens absorbed so far, the next token's position

    @property
    def num_computed_tokens(self) -> int:
        return self.num_tokens

    @property
    def num_held_tokens(self) -> int:
        return min(self.num_tokens, self.window)

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of the slots in use: grows until the window is full, then stays flat."""
        return sum(t[:, : self.num_held_tokens].numel() * t.element_size() for t in self.k_ring + self.v_ring)

    def end_step(self) -> None:
        if self.meta is not None:
            self.num_tokens = self.meta.end_pos
        super().end_step()

    def _held_in_order(self, ring: torch.Tensor) -> torch.Tensor:
        first = self.num_tokens - self.num_held_tokens
        slots = torch.arange(first, self.num_tokens, device=ring.device) % self.window
        return ring[:, slots]  # (Hkv, held, D), oldest first

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.meta is None:
            raise RuntimeError("call begin_step(StepMetadata(...)) before the forward pass")
        start, end, num_new = self.meta.start_pos, self.meta.end_pos, self.meta.num_tokens
        k_ring, v_ring = self.k_ring[layer_idx], self.v_ring[layer_idx]
        if num_new == 1:
            # Decode: every held key is inside the window, and attention does not care about key order.
            k_ring[:, start % self.window] = k[0]
            v_ring[:, start % self.window] = v[0]
            held = min(end, self.window)
            return self._attend(q, k_ring[:, :held], v_ring[:, :held], held - 1)
        # A chunk: lay the held keys out in order, append the new ones, mask to the window.
        num_held = self.num_held_tokens
        k_all = torch.cat([self._held_in_order(k_ring), k.transpose(0, 1)], dim=1)  # (Hkv, held + T, D)
        v_all = torch.cat([self._held_in_order(v_ring), v.transpose(0, 1)], dim=1)  # (Hkv, held + T, D)
        out = self._attend(q, k_all, v_all, num_held, self.window)
        keep = min(num_new, self.window)
        slots = torch.arange(end - keep, end, device=k.device) % self.window
        k_ring[:, slots] = k[num_new - keep :].transpose(0, 1)
        v_ring[:, slots] = v[num_new - keep :].transpose(0, 1)
        return out
