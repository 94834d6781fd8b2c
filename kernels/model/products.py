"""Which matrix product a Linear runs on this CPU, per dtype and shape: measured once, never assumed.

Every product below computes x W^T (+ b); they differ in how the weight is laid out and in what
arithmetic the CPU does. Which is fastest depends on the CPU, the dtype and the number of rows,
and the differences are large (measured side by side, ``python -m benchmarks.bench_decode``):

===============  ===============================================  ================================
product          what it does                                     where it wins (measured)
===============  ===============================================  ================================
textbook         F.linear(x, W): the call Hugging Face makes      bf16 on AVX2 for one row; many
                                                                  rows of fp32 everywhere
transposed       torch.mm(x, W^T) on a contiguous (in, out) copy  fp32 one row of the lm_head
                                                                  (about 2x); 15x SLOWER for bf16
                                                                  on AVX2
onednn           oneDNN's blocked bf16 weight (a packed copy)     bf16 decode rows on AVX-512
                                                                  (about 2x F.linear)
float32 tiles    bf16/fp16: x and a tile of W's rows turned to    bf16 batches and prompts on AVX2
                 float32, multiplied there, rounded once (no      (about 3x F.linear: its bf16
                 copy kept: a tile stays in the L2 cache)         product has no fast kernel there)
===============  ===============================================  ================================

A Linear's rows fall in three classes (``ROW_CLASSES``): one row (a decode step), a few rows
(2 to 8: a small batch) and many (a prompt, a large batch). For each dtype, weight shape, row
class and thread count the products this CPU runs are timed side by side, interleaved, best of
five rounds, on a random weight of that shape; the fastest is chosen if it beats the textbook by
``timing.MARGIN``, else the textbook runs. Many rows take F.linear unless float32 tiles beat it, so prompt
logits stay bit for bit Hugging Face's wherever its product is fast. Measured once per process (``choose`` is cached); a
decision never depends on a CPU's name or flags, only on what the products did here.

``KVCOURSE_LINEAR=<product>`` forces one product for every row class (the suite proves each
equal to the textbook that way, whatever the CPU); a product this CPU cannot run is refused
with the reason.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kvcourse.kernels.model import timing

PRODUCTS = ("textbook", "transposed", "onednn", "float32 tiles")
LINEAR_ENV = "KVCOURSE_LINEAR"


@dataclass(frozen=True)
class RowClass:
    """Rows up to ``max_rows`` (None: any number), measured with ``probe_rows`` rows."""

    name: str
    max_rows: int | None
    probe_rows: int


ROW_CLASSES = (RowClass("one row", 1, 1), RowClass("2-8 rows", 8, 4), RowClass("more rows", None, 32))
HALF = (torch.bfloat16, torch.float16)


def row_class(rows: int) -> int:
    """The index in ``ROW_CLASSES`` of a product of ``rows`` rows."""
    return 0 if rows <= 1 else 1 if rows <= 8 else 2


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
    return True, "oneDNN's blocked bf16 weight runs on this CPU (tried once on a tiny tensor)"


def runs(product: str, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether ``product`` can compute in ``dtype`` on this CPU, and if not, why."""
    if product not in PRODUCTS:
        raise ValueError(f"{product!r} is not a product: choose one of {PRODUCTS}")
    if product == "onednn":
        return onednn_bf16_linear() if dtype == torch.bfloat16 else (False, "oneDNN's packed weight is bf16 only")
    if product == "float32 tiles" and dtype not in HALF:
        return False, "float32 tiles only help a 16-bit dtype"
    return True, ""


def prepare(product: str, weight: torch.Tensor) -> torch.Tensor | None:
    """What ``product`` multiplies by: a copy laid out for it, or None where it reads W as it is."""
    if product == "transposed":
        return weight.t().contiguous()  # (in, out)
    if product == "onednn":
        return torch.ops.mkldnn._reorder_linear_weight(weight, 1)
    return None


def multiply(
    product: str, x: torch.Tensor, weight: torch.Tensor, prepared: torch.Tensor | None, bias: torch.Tensor | None
) -> torch.Tensor:
    """x (..., in) times W (out, in) transposed, plus the bias: (..., out), by ``product``."""
    if product == "textbook":
        return F.linear(x, weight, bias)
    if product == "onednn":
        return torch.ops.mkldnn._linear_pointwise(x, prepared, bias, "none", [], "")
    if product == "transposed":
        assert prepared is not None, "the transposed product multiplies by prepare()'s W^T"
        y = torch.mm(x, prepared) if x.dim() == 2 else x @ prepared  # (..., in) @ (in, out)
        return y if bias is None else y + bias
    return _float32_tiles(x, weight, bias)


FEW_ROWS_TILED = 256  # below it the (out, R) layout, at and above it (R, out): where each measured faster


def _float32_tiles(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The product in float32, W converted a tile of rows at a time (about 2 MB each), rounded to x's dtype once.

    The result is returned row-major, as F.linear's: a transposed one would send every later kernel down a
    strided path (SDPA's flash kernel wants contiguous heads and falls back to its math path without them).
    With few rows the tiles fill an (out, R) buffer whose rounding is then transposed, half the bytes; with many
    rows that transposition costs more than the product gains, so the tiles write their columns of an (R, out)
    buffer directly. Measured under ATEN_CPU_CAPABILITY=avx2 (Intel Xeon, one thread): at 32 rows (out, R) was
    up to 30 % faster, at 1,000 rows (R, out) 10 % faster on the 49,152-row lm_head; they crossed near 256."""
    rows = x.reshape(-1, x.shape[-1]).float()  # (R, in)
    tile = max(1, (1 << 19) // weight.shape[1])
    many = rows.shape[0] >= FEW_ROWS_TILED
    out = torch.empty((rows.shape[0], weight.shape[0]) if many else (weight.shape[0], rows.shape[0]))
    for start in range(0, weight.shape[0], tile):
        w_tile = weight[start : start + tile].float()
        if many:
            torch.mm(rows, w_tile.t(), out=out[:, start : start + tile])
        else:
            torch.mm(w_tile, rows.t(), out=out[start : start + tile])
    if bias is not None:
        out += bias.float() if many else bias.float()[:, None]
    result = out.to(x.dtype) if many else out.to(x.dtype).t().contiguous()  # (R, out), row-major
    return result.reshape(*x.shape[:-1], weight.shape[0])  # (..., out)


@dataclass(frozen=True)
class Choice:
    """The product a shape's rows take, and the measurement that chose it (seconds per call, per product)."""

    product: str
    why: str
    seconds: tuple[tuple[str, float], ...] = ()


def forced_product() -> str | None:
    """The product ``KVCOURSE_LINEAR`` forces, or None (unset or "auto": measure)."""
    value = os.environ.get(LINEAR_ENV, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in PRODUCTS:
        raise ValueError(
            f"{LINEAR_ENV}={value!r} is not understood: set it to one of {PRODUCTS}, or to auto "
            "(or leave it unset) to let each shape take the product measured fastest here"
        )
    return value


def candidates(dtype: torch.dtype, cls: int) -> list[str]:
    """The products this CPU runs for ``dtype`` that may be chosen for row class ``cls``, textbook first."""
    if cls == len(ROW_CLASSES) - 1:  # a prompt's rows: F.linear (bit for bit Hugging Face's) where it is fast
        return [p for p in ("textbook", "float32 tiles") if runs(p, dtype)[0]]
    return [p for p in PRODUCTS if runs(p, dtype)[0]]


def choose(dtype: torch.dtype, out_features: int, in_features: int, cls: int) -> Choice:
    """The product rows of class ``cls`` take for a (out, in) weight in ``dtype``: forced, or measured once."""
    forced = forced_product()
    if forced is not None:
        ok, why = runs(forced, dtype)
        if not ok:
            raise ValueError(f"{LINEAR_ENV}={forced} cannot run for {dtype}: {why}")
        return Choice(forced, f"{LINEAR_ENV}={forced}")
    return _measured(dtype, out_features, in_features, cls, torch.get_num_threads())


@functools.cache
def _measured(dtype: torch.dtype, out_features: int, in_features: int, cls: int, threads: int) -> Choice:
    names = candidates(dtype, cls)
    if len(names) == 1:
        return Choice(names[0], "the only candidate")
    seconds = time_products(names, dtype, out_features, in_features, ROW_CLASSES[cls].probe_rows)
    product, why = timing.pick(seconds)
    return Choice(product, why.replace("the textbook form", "F.linear"), tuple(seconds.items()))


def time_products(
    names: list[str], dtype: torch.dtype, out_features: int, in_features: int, rows: int
) -> dict[str, float]:
    """Seconds per call of each product on a random (out, in) weight and ``rows`` rows (timing.time_calls)."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=gen).to(dtype)
    x = torch.randn(rows, in_features, generator=gen).to(dtype)
    with torch.inference_mode():
        calls = {name: functools.partial(multiply, name, x, weight, prepare(name, weight), None) for name in names}
        return timing.time_calls(calls)


def describe(choices: dict[tuple[int, int], list[Choice]]) -> str:
    """One line: per row class, the product each weight shape takes and what it measured against F.linear."""
    parts = []
    for cls, row in enumerate(ROW_CLASSES):
        groups: dict[str, list[tuple[str, float]]] = {}
        for (out_f, in_f), per_class in choices.items():
            choice = per_class[cls]
            seconds = dict(choice.seconds)
            speedup = seconds["textbook"] / seconds[choice.product] if choice.product in seconds else float("nan")
            groups.setdefault(choice.product, []).append((f"{out_f}x{in_f}", speedup))
        said = []
        for product, shapes in groups.items():
            where = "" if len(groups) == 1 else " for " + " ".join(shape for shape, _ in shapes)
            speedups = [x for _, x in shapes if x == x and product != "textbook"]
            gain = f", {min(speedups):.1f}-{max(speedups):.1f}x F.linear's speed" if speedups else ""
            said.append(f"{product}{where}{gain}")
        parts.append(f"{row.name}: {'; '.join(said)}")
    return " | ".join(parts) + (" (measured here)" if any(c.seconds for v in choices.values() for c in v) else "")


def relative_speed(dtype: torch.dtype, shape: tuple[int, int] = (1536, 576)) -> dict[str, float]:
    """Per row class, the time of ``dtype``'s chosen product over float32's, measured now on a (out, in) weight.

    What a sentence about "bf16 on this CPU" may say: above 1, ``dtype`` is slower here for that many rows.
    """
    ratios = {}
    for cls, row in enumerate(ROW_CLASSES):
        times = [
            time_products([choose(d, *shape, cls).product], d, *shape, row.probe_rows) for d in (dtype, torch.float32)
        ]
        ratios[f"{row.probe_rows} row{'s' if row.probe_rows > 1 else ''}"] = min(times[0].values()) / min(
            times[1].values()
        )
    return ratios
