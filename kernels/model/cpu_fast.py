"""The CPU fast paths for a decode step: what each trick buys, and whether this machine can run it.

``layers.py`` is the textbook; this module holds the twins ``Transformer.accelerate()`` swaps in.
Each twin shares its textbook module's Parameters (no weight is copied to make it) and is tested
equal to it: fp32 tokens identical, prompt logits bit for bit Hugging Face's, bf16 within the
bf16 tolerances. What each buys, measured by switching one off at a time (48 greedy tokens of
SmolLM2-135M, contiguous cache, medians of 5 rounds interleaved in one process, AMD EPYC Zen 4 with
AVX-512, 2 cores; the speed-up each gives a decode step):

=====================  ==========================================  ========  ========
trick                  what it does                                fp32      bf16
=====================  ==========================================  ========  ========
packed linear          a decode row (at most 8) multiplies a copy  1.26x     1.41x
                       of W laid out for the CPU's mat-vec: W^T
                       contiguous, or oneDNN's blocked bf16 layout
one-call RMSNorm       torch's rms_norm: Llama's arithmetic in     ~1.0x     1.13x
                       one kernel instead of six
RoPE as a matrix       a decode step's rotation as one (D, D)      ~1.0x     1.14x
                       matrix per token: one bmm instead of the
                       textbook's five elementwise kernels
all three              ``accelerate()`` against the textbook       1.33x     1.64x
=====================  ==========================================  ========  ========

(An earlier trick, the skip connection folded into the matrix product with addmm, bought 1-2 %,
inside the noise, and was dropped for the textbook's ``x = x + attention``.) ``bench_decode``
reports the fast-paths-off figure beside the fast one on your CPU.

Choosing: the fp32 copy, the one-call norm and the rotation matrix are plain torch and run on
every CPU. oneDNN's packed bf16 linear needs AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT: it is tried
once on a tiny tensor, and where it fails (an AVX2-only CPU) bf16 takes the W^T copy instead,
with one warning (``FastPathFallback``) saying so. ``KVCOURSE_FAST_PATHS=0`` (or ``off``) turns
every fast path off; so does ``accelerate("off")``, which swaps the textbook modules back.
``kvcourse doctor`` prints ``fast_path_report()``.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from kvcourse.kernels.model.layers import Linear, RMSNorm, RotaryEmbedding

if TYPE_CHECKING:
    from kvcourse.kernels.model.transformer import Transformer

FAST_PATHS_ENV = "KVCOURSE_FAST_PATHS"
FAST_PATH_MODES = ("auto", "off")
_ENV_ON, _ENV_OFF = ("", "auto", "1", "on", "true", "yes"), ("0", "off", "false", "no")


class FastPathFallback(RuntimeWarning):
    """A fast path this CPU cannot run: the engine uses the portable one instead (said once per process)."""


@dataclass(frozen=True)
class FastPath:
    """One fast path: whether it is on for a model, and why (``kvcourse doctor`` prints these)."""

    name: str
    on: bool
    why: str

    def __str__(self) -> str:
        return f"{self.name}: {'on' if self.on else 'off'} ({self.why})"


def check_fast_paths(fast_paths: object, *, optional: bool = False) -> None:
    """Refuse anything but "auto" or "off" (or None where ``optional``: the model as it is given)."""
    if not (fast_paths in FAST_PATH_MODES or (optional and fast_paths is None)):
        raise ValueError(f"fast_paths must be one of {FAST_PATH_MODES}{' or None' if optional else ''}, "
                         f"got {fast_paths!r}")


def fast_paths_mode(fast_paths: str = "auto") -> str:
    """"auto" or "off": the argument, where ``KVCOURSE_FAST_PATHS=0`` turns "auto" off."""
    check_fast_paths(fast_paths)
    value = os.environ.get(FAST_PATHS_ENV, "").strip().lower()
    if value not in _ENV_ON + _ENV_OFF:
        raise ValueError(f"{FAST_PATHS_ENV}={value!r} is not understood: set it to 0 (or off) to run the "
                         "textbook forms, or to auto (or leave it unset) for the fast paths")
    return "off" if value in _ENV_OFF else fast_paths


@functools.cache
def onednn_bf16_linear() -> tuple[bool, str]:
    """Whether oneDNN's packed bf16 linear runs on this CPU, and why: tried once, on a tiny tensor."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return False, "this PyTorch build has no oneDNN linear"
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(16, 32, generator=gen).bfloat16()
    x = torch.randn(2, 32, generator=gen).bfloat16()
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 2)
        y = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    except RuntimeError as err:
        return False, f"oneDNN's bf16 linear does not run on this CPU: {str(err).splitlines()[0]}"
    if not torch.allclose(y.float(), F.linear(x, weight).float(), rtol=2e-2, atol=2e-2):
        return False, "oneDNN's bf16 linear gave a wrong product on this CPU"
    return True, "oneDNN's blocked bf16 weight, which this CPU runs (tried once on a tiny tensor)"


@functools.cache
def _say_once(message: str) -> None:
    warnings.warn(message, FastPathFallback, stacklevel=3)


def _pack(weight: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The decode-step copy of a (out, in) weight, and whether it is oneDNN's packed layout."""
    if weight.dtype == torch.bfloat16:
        ok, why = onednn_bf16_linear()
        if ok:
            return torch.ops.mkldnn._reorder_linear_weight(weight, 1), True
        _say_once(f"{why}; bf16 decode steps multiply a transposed weight copy instead (same results within "
                  f"bf16 rounding; {FAST_PATHS_ENV}=0 runs the textbook F.linear)")
    return weight.t().contiguous(), False  # (in, out)


def _linear_why(dtype: torch.dtype) -> str:
    if dtype == torch.bfloat16:
        ok, why = onednn_bf16_linear()
        return why if ok else f"W^T copy: {why}"
    return "W^T stored contiguous for the one-row mat-vec"


def fast_path_report(dtype: torch.dtype, device: torch.device | str = "cpu",
                     fast_paths: str = "auto") -> tuple[FastPath, ...]:
    """Which fast paths a model of this dtype on this device gets from ``accelerate(fast_paths)``, and why."""
    names = ("packed linear", "one-call RMSNorm", "RoPE as a matrix")
    if fast_paths_mode(fast_paths) == "off":
        why = (f"{FAST_PATHS_ENV}={os.environ.get(FAST_PATHS_ENV, '').strip()}" if fast_paths == "auto"
               else 'accelerate("off")') + ": the textbook forms of layers.py"
        return tuple(FastPath(name, False, why) for name in names)
    if torch.device(device).type != "cpu":
        return tuple(FastPath(name, False, f"on {torch.device(device).type} the model runs the textbook forms")
                     for name in names)
    return (FastPath(names[0], True, _linear_why(dtype)),
            FastPath(names[1], True, "torch's rms_norm, bit for bit Llama's"),
            FastPath(names[2], True, f"decode steps of at most {FastRotaryEmbedding.matrix_rows} tokens"))


class PackedLinear(Linear):
    """Linear whose decode rows multiply a copy of W laid out for the CPU (see the table above).

    A decode step multiplies one row by every weight matrix, so it is bound by how fast the
    weights stream from memory, and torch's default mat-vec (F.linear) streams them slowly. A
    prompt (more than ``max_packed_rows`` rows), autograd, or another device goes through the
    textbook F.linear, the BLAS call Hugging Face makes, so prompt logits stay bit for bit its.
    The copy is made again whenever the weight changes (a new tensor, dtype or in-place write).
    """

    max_packed_rows = 8
    _packed: torch.Tensor | None = None
    _packed_for: tuple[Any, ...] | None = None
    _onednn = False

    def packed_weight(self) -> tuple[torch.Tensor, bool]:
        """The decode-step copy (made now if the weight changed since), and whether it is oneDNN's layout."""
        weight = self.weight
        key = (weight.data_ptr(), weight._version, weight.dtype, weight.device)
        if key != self._packed_for:
            self._packed, self._onednn = _pack(weight.detach())
            self._packed_for = key
        return self._packed, self._onednn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.device.type != "cpu" or torch.is_grad_enabled() or x.dtype != self.weight.dtype
                or x.numel() > self.max_packed_rows * self.in_features):
            return super().forward(x)
        packed, onednn = self.packed_weight()
        if onednn:
            return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")  # (..., out)
        y = torch.mm(x, packed) if x.dim() == 2 else x @ packed  # (..., in) @ (in, out)
        return y if self.bias is None else y + self.bias


class FusedRMSNorm(RMSNorm):
    """RMSNorm in one call of torch's rms_norm: Llama's arithmetic, bit for bit (tested at three scales)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Llama's rounding order: normalise in float32, round to the model's dtype, then the weight.
        return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype)


class FastRotaryEmbedding(RotaryEmbedding):
    """RoPE in fewer kernels: a decode step's rotation as one matrix per token, a prompt's with the sign folded in."""

    matrix_rows = 8  # at most this many tokens (a decode step): the rotation as one (D, D) matrix per token
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

    def at(self, positions: torch.Tensor, dtype: torch.dtype) -> MatrixRotation | FoldedRotation:
        cos, folded_sin = self._tables(dtype, positions.device)
        cos, folded_sin = cos[positions], folded_sin[positions]  # (T, D) each
        if len(positions) > self.matrix_rows:
            return FoldedRotation(cos[:, None, :], folded_sin[:, None, :])  # (T, 1, D) each
        # out[j] = x[j] cos[j] + x[j +- D/2] folded_sin[j]: cos on the diagonal, the folded sin where
        # row j +- D/2 meets column j (the diagonal matrix's rows rolled by half of D).
        half = cos.shape[-1] // 2
        return MatrixRotation(torch.diag_embed(cos) + torch.diag_embed(folded_sin).roll(half, dims=-2))  # (T, D, D)


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


_FAST = {Linear: PackedLinear, RMSNorm: FusedRMSNorm, RotaryEmbedding: FastRotaryEmbedding}
_TEXTBOOK = {fast: textbook for textbook, fast in _FAST.items()}


def _twin(cls: type[nn.Module], module: nn.Module) -> nn.Module:
    """A ``cls`` module with ``module``'s Parameters (the same tensors) and settings, none of its caches."""
    twin = cls.__new__(cls)
    nn.Module.__init__(twin)
    for name, value in vars(module).items():
        if not name.startswith("_"):  # in/out features, eps, the RoPE tables, training
            object.__setattr__(twin, name, value)
    for name, param in module._parameters.items():
        twin.register_parameter(name, param)
    return twin


def accelerate(model: Transformer, fast_paths: str = "auto") -> tuple[FastPath, ...]:
    """Swap ``model``'s textbook modules for their fast twins, or back for "off"; returns what is on and why."""
    report = fast_path_report(model.dtype, model.device, fast_paths)
    swap = _FAST if all(path.on for path in report) else _TEXTBOOK
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) in swap:
                setattr(parent, name, _twin(swap[type(child)], child))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, PackedLinear):
                module.packed_weight()  # now, not inside the first decode step that would be timed
    return report
