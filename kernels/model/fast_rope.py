"""RoPE in fewer kernels (cpu_fast.py's twin of layers.RotaryEmbedding), in the form measured fastest here.

The textbook rotation (layers.py) is x * cos + rotate_half(x) * sin: five elementwise kernels.
Two other forms turn x by the same angles: "folded" folds rotate_half's sign into the sin table
(one roll, bit for bit the textbook), and "matrix" writes a decode step's rotation as what it is,
one (D, D) matrix per token (one batched product, equal up to rounding). Which is fastest depends
on the CPU and the dtype (a bf16 batched product is slow on an AVX2-only CPU), so a decode step and
a prompt each take the form measured fastest here (timing.py), the textbook unless another wins.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from kvcourse.kernels.model import timing
from kvcourse.kernels.model.layers import RotaryEmbedding, RotationForm


class FastRotaryEmbedding(RotaryEmbedding):
    """RoPE in fewer kernels, where that measured faster here: a decode step's rotation as one matrix per token
    ("matrix"), or the textbook's arithmetic with the sign folded into the sin table ("folded", bit for bit)."""

    matrix_rows = 8  # at most this many tokens (a decode step) may take the rotation as one (D, D) matrix per token
    num_heads = 12  # q and k heads rotated in one call (accelerate() sets the model's): the measured shape
    _cast: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, torch.Tensor]] | None = None

    def _tables(self, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and the sign-folded sin, (P, D), in this dtype: rotate_half(x) * sin == roll(x) * folded_sin."""
        if self._cast is None:
            self._cast = {}
        if (dtype, device) not in self._cast:
            half = self.sin_table.shape[-1] // 2
            folded = torch.cat([-self.sin_table[:, :half], self.sin_table[:, half:]], dim=-1)  # (P, D), exact
            self._cast[dtype, device] = (self.cos_table.to(device, dtype), folded.to(device, dtype))
        return self._cast[dtype, device]

    def form(self, num_tokens: int, dtype: torch.dtype) -> str:
        """ "textbook", "folded" or "matrix": what a pass of ``num_tokens`` tokens takes (measured once per dtype)."""
        decode = num_tokens <= self.matrix_rows
        return rope_form(dtype, self.cos_table.shape[-1], self.num_heads, decode, torch.get_num_threads())[0]

    def at(self, positions: torch.Tensor, dtype: torch.dtype) -> RotationForm:
        return self.rotation(self.form(len(positions), dtype), positions, dtype)

    def rotation(self, form: str, positions: torch.Tensor, dtype: torch.dtype) -> RotationForm:
        """The rotation at these positions (T,) in ``form``: all three turn x by the same angles."""
        if form == "textbook":
            return super().at(positions, dtype)
        cos, folded_sin = self._tables(dtype, positions.device)
        cos, folded_sin = cos[positions], folded_sin[positions]  # (T, D) each
        if form == "folded":
            return FoldedRotation(cos[:, None, :], folded_sin[:, None, :])  # (T, 1, D) each
        # out[j] = x[j] cos[j] + x[j +- D/2] folded_sin[j]: cos on the diagonal, the folded sin where
        # row j +- D/2 meets column j (the diagonal matrix's rows rolled by half of D).
        half = cos.shape[-1] // 2
        return MatrixRotation(torch.diag_embed(cos) + torch.diag_embed(folded_sin).roll(half, dims=-2))  # (T, D, D)


@functools.cache
def rope_form(dtype: torch.dtype, head_dim: int, num_heads: int, decode: bool, threads: int) -> tuple[str, str]:
    """The fastest rotation for a decode step (1 token: matrix, folded, textbook) or a prompt (32: folded,
    textbook) of ``num_heads`` heads in ``dtype``, and why: measured once, applied as every layer applies it."""
    fast = FastRotaryEmbedding(head_dim, 64, 10000.0)
    forms = ["textbook", "folded", "matrix"] if decode else ["textbook", "folded"]
    positions = torch.arange(1 if decode else 32) + 20
    x = torch.randn(len(positions), num_heads, head_dim).to(dtype)
    calls = {form: functools.partial(fast.rotation(form, positions, dtype), x) for form in forms}
    with torch.inference_mode():
        return timing.pick(timing.time_calls(calls))


@dataclass(frozen=True)
class FoldedRotation:
    """The textbook rotation bit for bit in fewer kernels: one roll and a sign-folded sin table (negation is exact)."""

    cos: torch.Tensor  # (T, 1, D)
    folded_sin: torch.Tensor  # (T, 1, D)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        swapped = torch.roll(x, x.shape[-1] // 2, dims=-1)  # (T, heads, D): (x2, x1), one copy
        return (x * self.cos).add_(swapped.mul_(self.folded_sin))


@dataclass(frozen=True)
class MatrixRotation:
    """The rotation as what it is, a (D, D) matrix per token: one batched product (equal up to rounding)."""

    matrix: torch.Tensor  # (T, D, D)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, self.matrix)  # (T, heads, D) @ (T, D, D)
