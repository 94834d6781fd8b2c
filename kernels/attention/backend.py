"""The seam between the model and its KV storage: one attention call per layer (lessons 04-06, 10).

The model runs on a FLAT batch of T tokens (the vLLM / nano-vllm way). Every attention layer
computes q of shape (T, num_heads, head_dim) and k, v of shape (T, num_kv_heads, head_dim),
rotates q and k with RoPE at the tokens' ABSOLUTE positions, and hands them to
``backend.attend(layer_idx, q, k, v)``, which returns (T, num_heads, head_dim). What the
backend does with k and v — drop them, append them to a contiguous cache, quantise them,
keep a window, scatter them into pages — is its own business; the model never knows.

Per-step facts (where the new tokens sit, which sequence they belong to) travel in a
dataclass handed to the backend before the forward pass (``begin_step``), never in a global.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class AttentionBackend(Protocol):
    """Stores k/v however it likes and computes causal attention for one layer (lesson 05)."""

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (T, num_heads, head_dim), k and v (T, num_kv_heads, head_dim) -> (T, num_heads, head_dim)."""
        ...


@dataclass(frozen=True)
class StepMetadata:
    """Where this step's tokens sit in ONE sequence: absolute positions start_pos .. start_pos+num_tokens-1."""

    start_pos: int
    num_tokens: int

    def __post_init__(self) -> None:
        if self.start_pos < 0:
            raise ValueError(f"start_pos must be >= 0, got {self.start_pos}")
        if self.num_tokens <= 0:
            raise ValueError(f"num_tokens must be positive, got {self.num_tokens}")

    @property
    def end_pos(self) -> int:
        """One past the last new token: the sequence length after this step."""
        return self.start_pos + self.num_tokens


@runtime_checkable
class SequenceCache(AttentionBackend, Protocol):
    """An attention backend that serves one growing sequence, as ``generate`` drives it (lessons 02-06, 16).

    ``num_computed_tokens`` is how many leading tokens have their K/V held, so need not be fed
    again: 0 for the no-cache backend (every step reruns the whole sequence), the sequence
    length otherwise (the engine's Sequence uses the name with the same meaning).
    """

    @property
    def num_computed_tokens(self) -> int: ...

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of K/V (and scales) the backend holds for the sequence right now, measured on its tensors."""
        ...

    @property
    def num_score_cells(self) -> int:
        """(query, key) cells scored so far, over all heads and layers."""
        ...

    def begin_step(self, meta: StepMetadata) -> None: ...

    def end_step(self) -> None: ...
