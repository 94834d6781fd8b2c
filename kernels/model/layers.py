"""The decoder's building blocks: RMSNorm, rotary position embedding, a packable Linear (lessons 01, 04)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


def _mkldnn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class Linear(nn.Module):
    """y = x W^T + b, with an optional CPU fast path for decode steps: a re-laid-out copy of the weight.

    A decode step multiplies ONE row by every weight matrix, so it is bound by how fast the
    weights stream from memory, and torch's default CPU mat-vec (F.linear) streams them slowly.
    Measured on a 2-core AVX-512 machine for SmolLM2's 211 matrices, one row each:
      float32: x @ W^T stored transposed (K, N) ~22 ms vs F.linear ~30-60 ms; it also stays fast
               when the cores are oversubscribed, where oneDNN's fp32 path collapsed;
      bfloat16: oneDNN with a pre-packed (blocked) weight ~7 ms vs F.linear ~23 ms.
    The copy is used only on the CPU, without autograd, for at most ``max_packed_rows`` rows;
    a prompt goes through F.linear, the same BLAS call Hugging Face makes, so prefill logits
    match it bit for bit. The plain weight stays the source of truth.
    """

    max_packed_rows = 8

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self._packed: torch.Tensor | None = None
        self._packed_onednn = False

    def pack(self) -> None:
        """Make the decode-step copy of the weight (CPU only; a no-op elsewhere)."""
        if self.weight.device.type != "cpu":
            return
        weight = self.weight.detach()
        if weight.dtype == torch.float32 or not _mkldnn_available():
            self._packed, self._packed_onednn = weight.t().contiguous(), False  # (in, out)
        else:
            self._packed, self._packed_onednn = torch.ops.mkldnn._reorder_linear_weight(weight, 1), True

    def unpack(self) -> None:
        self._packed = None

    def _apply(self, fn, recurse=True):  # a dtype or device change invalidates the packed copy
        self._packed = None
        return super()._apply(fn, recurse)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """x W^T + b, plus ``residual`` when given: the block's skip connection added in the same call.

        On the packed path (a decode step) the skip connection rides in the matrix product
        (addmm), one small op fewer per use; it equals adding afterwards up to the last bit, since
        addmm may fold the addition into its final rounding. Elsewhere (a prompt) it is the plain
        sum, so prompt logits stay bit for bit Hugging Face's.
        """
        packed = self._packed
        if (packed is not None and x.dtype == packed.dtype and not torch.is_grad_enabled()
                and x.numel() <= self.max_packed_rows * x.shape[-1]):
            if self._packed_onednn:
                y = torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")
            elif x.dim() == 2 and self.bias is None:
                return torch.mm(x, packed) if residual is None else torch.addmm(residual, x, packed)  # (T, out)
            else:
                y = x @ packed  # (..., out)
                y = y if self.bias is None else y + self.bias
        else:
            y = F.linear(x, self.weight, self.bias)
        return y if residual is None else y + residual


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 and cast back as Llama does."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torch's rms_norm is Llama's arithmetic (mean of squares in float32, + eps, rsqrt, scale),
        # bit for bit, in one call: a decode step runs 61 of these, each just after a matrix
        # product has pushed the code out of the CPU's caches, so every call counts.
        if x.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Llama rounds the normalised activations to the model dtype BEFORE the weight multiply.
        return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotates each (x_i, x_{i+d/2}) pair of q and k by angle position * theta^(-2i/d) (lesson 04).

    cos and sin are tabulated once for every position up to max_positions, in float32,
    exactly as Hugging Face computes them, then cast to the activations' dtype when used.
    """

    matrix_rows = 8  # at most this many tokens (a decode step): the rotation as one matrix per token

    def __init__(self, head_dim: int, max_positions: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim))
        angles = torch.arange(max_positions, device="cpu").float()[:, None] * inv_freq[None, :]  # (P, D/2)
        angles = torch.cat([angles, angles], dim=-1)  # (P, D)
        # Plain float32 attributes, not buffers: a model.to(bfloat16) must not round the table itself.
        self.cos_table, self.sin_table = angles.cos(), angles.sin()  # (P, D) each
        # rotate_half(x) * sin == swap_halves(x) * folded_sin: the minus sign moves into the table (exactly).
        half = head_dim // 2
        self.folded_sin_table = torch.cat([-self.sin_table[:, :half], self.sin_table[:, half:]], dim=-1)  # (P, D)
        self._cast: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, ...]] = {}

    def _tables_in(self, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
        key = (dtype, device)
        if key not in self._cast:
            self._cast[key] = tuple(t.to(device, dtype) for t in (self.cos_table, self.sin_table,
                                                                   self.folded_sin_table))
        return self._cast[key]

    def at(self, positions: torch.Tensor, dtype: torch.dtype) -> Rotation:
        """The rotation for these positions (T,), built once per forward pass and used by every layer."""
        cos, _, folded_sin = self._tables_in(dtype, positions.device)
        cos, folded_sin = cos[positions], folded_sin[positions]  # (T, D) each
        if len(positions) > self.matrix_rows:
            return Rotation(cos=cos[:, None, :], folded_sin=folded_sin[:, None, :])  # (T, 1, D) each
        # out[j] = x[j] cos[j] + x[j +- D/2] folded_sin[j]: cos on the diagonal, the folded sin where
        # row j +- D/2 meets column j (the diagonal matrix's rows rolled by half of D).
        half = cos.shape[-1] // 2
        matrix = torch.diag_embed(cos) + torch.diag_embed(folded_sin).roll(half, dims=-2)  # (T, D, D)
        return Rotation(matrix=matrix)

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin at the given positions in the given dtype, shaped (T, 1, D) to broadcast over heads."""
        cos, sin, _ = self._tables_in(dtype, positions.device)
        return cos[positions][:, None, :], sin[positions][:, None, :]  # (T, 1, D)

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x (T, heads, D) rotated: x * cos + rotate_half(x) * sin, the textbook form."""
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    @staticmethod
    def rotate_folded(x: torch.Tensor, cos: torch.Tensor, folded_sin: torch.Tensor) -> torch.Tensor:
        """rotate() bit for bit, in 4 small kernels instead of 7: the engine's per-layer path.

        rotate_half(x) = (-x2, x1) and sin = (s1, s2), so rotate_half(x) * sin = (x2, x1) * (-s1, s2):
        one flip of the halves and a table with the sign already in it (negation is exact).
        """
        swapped = torch.roll(x, x.shape[-1] // 2, dims=-1)  # (T, heads, D): (x2, x1), one copy
        return (x * cos).add_(swapped.mul_(folded_sin))


@dataclass(frozen=True)
class Rotation:
    """RoPE at one forward pass's positions, applied to q and k (T, heads, D) in every layer (lesson 04).

    For a prompt, cos and the sign-folded sin, (T, 1, D), applied elementwise: rotate_folded, bit for
    bit Hugging Face's rotation. For a decode step (a few tokens), the same rotation written as what
    it is, a (D, D) rotation matrix per token, applied in one batched matrix product: one op per
    layer instead of four. The two agree up to rounding (a matrix product sums with fused
    multiply-adds).
    """

    cos: torch.Tensor | None = None
    folded_sin: torch.Tensor | None = None
    matrix: torch.Tensor | None = None  # (T, D, D)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.matrix is not None:
            return torch.bmm(x, self.matrix)  # (T, heads, D) @ (T, D, D)
        return RotaryEmbedding.rotate_folded(x, self.cos, self.folded_sin)
