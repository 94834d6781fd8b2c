"""The CPU fast paths for a decode step: what each trick buys, and whether this machine can run it.

``layers.py`` is the textbook; this module holds the twins ``Transformer.accelerate()`` swaps in.
Each twin shares its textbook module's Parameters (no weight is copied to make it) and is tested
equal to it: fp32 tokens identical, prompt logits bit for bit Hugging Face's wherever F.linear is
the product chosen for a prompt, bf16 within the bf16 tolerances.

=====================  ============================================================================
trick                  what it does
=====================  ============================================================================
matrix products        each weight shape, dtype and row count takes the product measured fastest
                       here (products.py): F.linear, W^T contiguous, oneDNN's bf16 layout, or bf16
                       multiplied in float32 tiles
one-call RMSNorm       torch's rms_norm: Llama's arithmetic in one kernel instead of six
RoPE in fewer kernels  a decode step's rotation as one (D, D) matrix per token, or the textbook's
                       arithmetic with the sign folded into the sin table (fast_rope.py)
=====================  ============================================================================

What each buys depends on the CPU and the dtype, and can be nothing or worse: on an AVX2-only CPU
a bf16 W^T product was 14x slower than F.linear (a Zen 2), and a bf16 rotation matrix 2.7x slower than the
textbook's five kernels (AVX2 emulated on a Zen 4). So none is assumed: each is timed against its textbook form once per
process (timing.py) and used only where it won. ``kvcourse doctor`` prints what won and by how
much; ``python -m benchmarks.bench_decode`` measures the whole decode step with the fast paths on
and off on your CPU, and grades "on" at least as fast as "off" in every dtype.

Choosing: a product is used only where it measured faster than F.linear on this CPU, for this
dtype, shape and number of rows (products.py); where none is, the textbook product runs. A product
this CPU cannot run (oneDNN's bf16 layout needs AVX-512 BW/VL/DQ or AVX-NE-CONVERT) is never a
candidate. The one-call norm and the rotation matrix are plain torch and run on every CPU.
``KVCOURSE_FAST_PATHS=0`` (or ``off``) turns every fast path off; so does ``accelerate("off")``,
which swaps the textbook modules back. ``kvcourse doctor`` prints ``fast_path_report()``.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from kvcourse.kernels.model import products, timing
from kvcourse.kernels.model.fast_rope import FastRotaryEmbedding, rope_form
from kvcourse.kernels.model.layers import Linear, RMSNorm, RotaryEmbedding
from kvcourse.kernels.model.products import ROW_CLASSES, Choice

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
        raise ValueError(
            f"fast_paths must be one of {FAST_PATH_MODES}{' or None' if optional else ''}, got {fast_paths!r}"
        )


def fast_paths_mode(fast_paths: str = "auto") -> str:
    """ "auto" or "off": the argument, where ``KVCOURSE_FAST_PATHS=0`` turns "auto" off."""
    check_fast_paths(fast_paths)
    value = os.environ.get(FAST_PATHS_ENV, "").strip().lower()
    if value not in _ENV_ON + _ENV_OFF:
        raise ValueError(
            f"{FAST_PATHS_ENV}={value!r} is not understood: set it to 0 (or off) to run the "
            "textbook forms, or to auto (or leave it unset) for the fast paths"
        )
    return "off" if value in _ENV_OFF else fast_paths


@functools.cache
def _say_once(message: str) -> None:
    warnings.warn(message, FastPathFallback, stacklevel=3)


@dataclass(frozen=True)
class ModelShapes:
    """What the fast paths are measured on: a model's Linear weight shapes, hidden size, head size and the
    number of q and k heads rotated together."""

    linears: tuple[tuple[int, int], ...]
    hidden: int
    head_dim: int
    num_heads: int

    @classmethod
    def of(cls, model: Transformer) -> ModelShapes:
        cfg = model.config
        return cls(tuple(linear_shapes(model)), cfg.hidden_size, cfg.head_dim, cfg.num_heads + cfg.num_kv_heads)


def linear_shapes(model: nn.Module) -> list[tuple[int, int]]:
    """The distinct (out, in) weight shapes of a model's Linear layers, in the order a forward pass meets them."""
    return list(dict.fromkeys(_out_in(m.weight) for m in model.modules() if isinstance(m, Linear)))


def _out_in(weight: torch.Tensor) -> tuple[int, int]:
    out_features, in_features = weight.shape  # a Linear's weight is (out, in)
    return out_features, in_features


def linear_choices(dtype: torch.dtype, shapes: list[tuple[int, int]]) -> dict[tuple[int, int], list[Choice]]:
    """For each (out, in) shape, the product each row class takes in ``dtype`` on this CPU (products.choose)."""
    return {shape: [products.choose(dtype, *shape, cls) for cls in range(len(ROW_CLASSES))] for shape in shapes}


def fast_path_report(
    dtype: torch.dtype, device: torch.device | str, fast_paths: str, shapes: ModelShapes
) -> tuple[FastPath, ...]:
    """Which fast paths a model of these shapes, dtype and device gets from ``accelerate(fast_paths)``, and why.

    On the CPU each is measured here against its textbook form (once per process), and on only where it won.
    """
    names = ("matrix products", "one-call RMSNorm", "RoPE in fewer kernels")
    if fast_paths_mode(fast_paths) == "off":
        why = (
            f"{FAST_PATHS_ENV}={os.environ.get(FAST_PATHS_ENV, '').strip()}"
            if fast_paths == "auto"
            else 'accelerate("off")'
        ) + ": the textbook forms of layers.py"
        return tuple(FastPath(name, False, why) for name in names)
    if torch.device(device).type != "cpu":
        return tuple(
            FastPath(name, False, f"on {torch.device(device).type} the model runs the textbook forms") for name in names
        )
    choices = linear_choices(dtype, list(shapes.linears))
    chosen = any(c.product != "textbook" for per_class in choices.values() for c in per_class)
    threads = torch.get_num_threads()
    norm, norm_why = _norm_form(dtype, shapes.hidden, threads)
    ropes = {
        step: rope_form(dtype, shapes.head_dim, shapes.num_heads, step == "decode", threads)
        for step in ("decode", "prompt")
    }
    rope_why = "; ".join(f"{step}: {form}, {why}" for step, (form, why) in ropes.items())
    return (
        FastPath(names[0], chosen, products.describe(choices)),
        FastPath(names[1], norm != "textbook", f"torch's rms_norm, bit for bit Llama's: {norm_why}"),
        FastPath(names[2], any(form != "textbook" for form, _ in ropes.values()), rope_why),
    )


class FastLinear(Linear):
    """Linear whose rows take the product measured fastest on this CPU for their dtype, shape and count.

    products.py holds the products and how one is chosen: per row class (one row, 2-8, more), so a
    decode step and a prompt may take different ones. Autograd, another device or a dtype other
    than the weight's go through the textbook F.linear. A copy a product needs (W^T, oneDNN's
    layout) is made again whenever the weight changes (a new tensor, dtype or in-place write).
    """

    _choices: tuple[Choice, ...] | None = None
    _choices_for: tuple[Any, ...] | None = None
    _prepared: dict[str, torch.Tensor | None] | None = None
    _prepared_for: tuple[Any, ...] | None = None

    def choices(self) -> tuple[Choice, ...]:
        """The product of each row class for this weight's dtype and shape (measured once per process)."""
        key = (self.weight.dtype, torch.get_num_threads())
        if key != self._choices_for or self._choices is None:
            shape = _out_in(self.weight)
            self._choices = tuple(linear_choices(self.weight.dtype, [shape])[shape])
            self._choices_for = key
        return self._choices

    def prepared(self, product: str) -> torch.Tensor | None:
        """The weight as ``product`` multiplies it (made now if the weight changed since)."""
        weight = self.weight
        key = (weight.data_ptr(), weight._version, weight.dtype, weight.device)
        if key != self._prepared_for or self._prepared is None:
            self._prepared, self._prepared_for = {}, key
        if product not in self._prepared:
            self._prepared[product] = products.prepare(product, weight.detach())
        return self._prepared[product]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if not x.is_cpu or x.dtype != weight.dtype or torch.is_grad_enabled():
            return F.linear(x, weight, self.bias)
        choices = self._choices
        if choices is None or self._choices_for != (weight.dtype, torch.get_num_threads()):
            choices = self.choices()
        rows = x.numel() // self.in_features
        product = choices[0 if rows <= 1 else 1 if rows <= 8 else 2].product  # products.row_class, inlined
        if product == "textbook":
            return F.linear(x, weight, self.bias)
        return products.multiply(product, x, weight, self.prepared(product), self.bias)


class FusedRMSNorm(RMSNorm):
    """RMSNorm in one call of torch's rms_norm (Llama's arithmetic, bit for bit), where that measured faster here."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _norm_form(x.dtype, x.shape[-1], torch.get_num_threads())[0] == "textbook":
            return super().forward(x)
        return self.one_call(x)

    def one_call(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Llama's rounding order: normalise in float32, round to the model's dtype, then the weight.
        return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype)


@functools.cache
def _norm_form(dtype: torch.dtype, hidden: int, threads: int) -> tuple[str, str]:
    """ "one call" or "textbook" for a decode row of ``hidden`` values in ``dtype``, and why: measured once."""
    textbook = RMSNorm(hidden, 1e-5).to(dtype)
    fused = _twin(FusedRMSNorm, textbook)
    x = torch.randn(1, hidden).to(dtype)
    with torch.inference_mode():
        return timing.pick(
            timing.time_calls(
                {"textbook": functools.partial(textbook, x), "one call": functools.partial(fused.one_call, x)}
            )
        )


_FAST = {Linear: FastLinear, RMSNorm: FusedRMSNorm, RotaryEmbedding: FastRotaryEmbedding}
_TEXTBOOK = {fast: textbook for textbook, fast in _FAST.items()}


_ModuleT = TypeVar("_ModuleT", bound=nn.Module)


def _twin(cls: type[_ModuleT], module: nn.Module) -> _ModuleT:
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
    report = fast_path_report(model.dtype, model.device, fast_paths, ModelShapes.of(model))
    fast = fast_paths_mode(fast_paths) == "auto" and model.device.type == "cpu"
    swap = _FAST if fast else _TEXTBOOK
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) in swap:
                setattr(parent, name, _twin(swap[type(child)], child))
    if isinstance(model.rotary, FastRotaryEmbedding):
        model.rotary.num_heads = ModelShapes.of(model).num_heads
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, FastLinear):  # now, not inside the first decode step that would be timed
                for choice in module.choices():
                    module.prepared(choice.product)
    return report
