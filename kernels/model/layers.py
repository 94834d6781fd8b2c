"""The decoder's building blocks as a textbook writes them: Linear, RMSNorm, rotary embedding (lessons 01, 04).

These are the reference forms: what a learner reads, bit for bit what Hugging Face computes for
a prompt, and what every fast path is tested equal to. The CPU tricks that speed up a decode
step (a re-laid-out weight copy, a one-call norm, RoPE as a rotation matrix) live in
``cpu_fast.py``; ``Transformer.accelerate()`` swaps them in, and ``accelerate("off")`` swaps
these back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    """y = x W^T + b, with W stored (out_features, in_features) as torch and Hugging Face store it."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        # Tensor, as torch's nn.Linear declares it: a tied lm_head takes the embedding's weight.
        self.weight: torch.Tensor = nn.Parameter(torch.empty(out_features, in_features))
        self.bias: torch.Tensor | None = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)  # (..., in) -> (..., out)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight: computed in float32 and cast back, as Llama writes it."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        input_dtype = x.dtype
        h = x.float()
        variance = h.pow(2).mean(-1, keepdim=True)  # (..., 1): the mean square of each row
        h = h * torch.rsqrt(variance + self.eps)
        # Llama rounds the normalised activations to the model's dtype BEFORE the weight multiply.
        return self.weight * h.to(input_dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the last dimension split in halves: the 90-degree turn of each pair."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotates each (x_i, x_{i+d/2}) pair of q and k by angle position * theta^(-2i/d) (lesson 04).

    cos and sin are tabulated once for every position up to max_positions, in float32,
    exactly as Hugging Face computes them, and cast to the activations' dtype when used.
    """

    def __init__(self, head_dim: int, max_positions: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim))
        angles = torch.arange(max_positions, device="cpu").float()[:, None] * inv_freq[None, :]  # (P, D/2)
        angles = torch.cat([angles, angles], dim=-1)  # (P, D): pair i and i + D/2 turn by the same angle
        # Plain float32 attributes, not buffers: a model.to(bfloat16) must not round the table itself.
        self.cos_table, self.sin_table = angles.cos(), angles.sin()  # (P, D) each

    def at(self, positions: torch.Tensor, dtype: torch.dtype) -> RotationForm:
        """The rotation at these positions (T,), built once per forward pass and used by every layer."""
        if self.cos_table.device != positions.device:  # the tables follow the model to its device, once
            self.cos_table, self.sin_table = self.cos_table.to(positions.device), self.sin_table.to(positions.device)
        cos, sin = self.cos_table[positions].to(dtype), self.sin_table[positions].to(dtype)  # (T, D) each
        return Rotation(cos=cos[:, None, :], sin=sin[:, None, :])  # (T, 1, D): broadcast over heads


class RotationForm(Protocol):
    """RoPE at one pass's positions in any form (Rotation, or fast_rope.py's faster ones): x (T, heads, D) turned."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class Rotation:
    """RoPE at one forward pass's positions: x * cos + rotate_half(x) * sin, for x (T, heads, D)."""

    cos: torch.Tensor  # (T, 1, D)
    sin: torch.Tensor  # (T, 1, D)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.cos + rotate_half(x) * self.sin  # (T, heads, D)
