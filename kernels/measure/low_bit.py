"""Lesson 25: 8-bit and 2-bit caches on the real model's keys and values (issue 45, items 4 and 5).

Three things, each on what SmolLM2 itself computes:

* ``channel_outliers``: where the large numbers sit. Per layer, each KV head's channels by their largest
  magnitude over the tokens: how far the largest channel stands above the median one, and at what share of the
  tokens that channel is among the token's four largest. Keys have such channels (large for nearly every
  token); values much less. KIVI's reason to group keys by channel and values by token.
* ``round_trips``: each format's stored-and-read-back error on the same K/V, beside the bound its arithmetic
  promises per value: int8 half a step of its row's scale (max / 127); FP8 E4M3 a sixteenth of the value (3
  mantissa bits) or, below E4M3's smallest normal number (2**-6 x scale), half its smallest step (2**-10 x
  scale); 2-bit half a step of its group ((largest - smallest) / 3), allowing for the float16 low and step.
* ``format_sweep``: perplexity and next-token agreement on a text read through each engine format, beside the
  bytes: a per-token part (the codes and their per-token scales) and a per-sequence part (FP8's per-layer
  scales, the 2-bit cache's newest tokens in full precision), and the cache the run left, weighed on its tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from kvcourse.kernels import costs
from kvcourse.kernels.attention.backends.fp8 import FP8KVBackend, dequantize_fp8, quantize_fp8, scale_for
from kvcourse.kernels.attention.backends.int8 import Int8KVBackend, dequantize_int8, quantize_int8
from kvcourse.kernels.attention.backends.kivi import Kivi2Backend, dequantize_2bit, quantize_2bit
from kvcourse.kernels.cache_layout import CacheBytes
from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.measure.agreement import all_logits, logits_in_steps
from kvcourse.kernels.measure.perplexity import perplexity_of
from kvcourse.kernels.model.config import ModelConfig
from kvcourse.kernels.model.transformer import Transformer

FORMATS = ("as computed", "int8", "fp8", "fp8, scale 1.0", "kivi2")
BITS = {"as computed": None, "int8": 8, "fp8": 8, "fp8, scale 1.0": 8, "kivi2": 2}
GROUP = 32  # KIVI's group: 32 tokens per key channel's low and step, 32 channels per value group
RESIDUAL = 32  # the newest tokens a 2-bit cache keeps in full precision, at least (the engine's default)
E4M3_SMALLEST_NORMAL = 2.0**-6
FP8_SCALE_BYTES = 4  # one float32 scale per layer, for K and for V
TOP = 4  # "among the token's largest": its 4 largest channels of the head


def kivi_split(tokens: int, group: int = GROUP, residual: int = RESIDUAL) -> tuple[int, int]:
    """(tokens stored in 2 bits, newest tokens kept in full precision) once a 2-bit cache holds ``tokens``: whole
    groups leave full precision while at least ``residual`` tokens stay behind (backends/kivi.py)."""
    quantised = group * max(0, (tokens - residual) // group)
    return quantised, tokens - quantised


def per_token_bytes(config: ModelConfig, name: str, bytes_per_value: int, group: int = GROUP) -> int:
    """The bytes each token adds in format ``name``: its codes and every scale kept per token (``costs``)."""
    if name == "as computed":
        return costs.kv_bytes_per_token(config, bytes_per_value)
    if name == "int8":
        return costs.quantized_kv_bytes_per_token(config, 1, 4)
    if name in ("fp8", "fp8, scale 1.0"):
        return costs.fp8_kv_bytes_per_token(config)
    if name == "kivi2":
        return costs.kivi_kv_bytes_per_token(config, group)
    raise ValueError(f"format must be one of {FORMATS}, got {name!r}")


def format_bytes(config: ModelConfig, name: str, tokens: int, bytes_per_value: int, group: int = GROUP,
                 residual: int = RESIDUAL) -> CacheBytes:  # fmt: skip
    """One sequence's cache in format ``name`` at ``tokens``: ``growing`` the per-token part x the tokens it
    covers, ``bounded`` a 2-bit cache's newest tokens in the model's dtype, ``state`` FP8's per-layer scales."""
    per_token = per_token_bytes(config, name, bytes_per_value, group)
    if name == "kivi2":
        quantised, recent = kivi_split(tokens, group, residual)
        return CacheBytes(tokens, per_token * quantised, costs.kv_bytes_per_token(config, bytes_per_value) * recent, 0)
    scales = 2 * config.num_layers * FP8_SCALE_BYTES if name.startswith("fp8") else 0
    return CacheBytes(tokens, per_token * tokens, 0, scales)


def _backend(model: Transformer, name: str, capacity: int) -> Int8KVBackend | FP8KVBackend | Kivi2Backend:
    config, dtype, device = model.config, model.dtype, model.device
    if name == "int8":
        return Int8KVBackend(config, capacity, dtype, device, measure_error=False)
    if name == "kivi2":
        return Kivi2Backend(config, dtype, device, group=GROUP, residual=RESIDUAL, measure_error=False)
    backend = FP8KVBackend(config, capacity, dtype, device, measure_error=False)
    if name == "fp8, scale 1.0":  # vLLM's default when no scale is calibrated
        backend.k_scale = [1.0] * config.num_layers
        backend.v_scale = [1.0] * config.num_layers
    return backend


def read_through(
    model: Transformer, ids: Sequence[int], name: str, step: int
) -> tuple[torch.Tensor, Int8KVBackend | FP8KVBackend | Kivi2Backend]:
    """The logits (T, vocab, float32) after every prefix of ``ids`` with its K/V stored in format ``name``, the text
    written ``step`` tokens a forward pass; and the cache it leaves."""
    check_positive_int("step", step)
    backend = _backend(model, name, len(ids))
    return logits_in_steps(model, ids, backend, step), backend


def format_sweep(model: Transformer, ids: Sequence[int], step: int = GROUP) -> pd.DataFrame:
    """One row per format (``FORMATS``, the model's own K/V first): bytes per token, the per-sequence part and the
    cache at the text's length (weighed on the cache's tensors), perplexity, and next-token agreement with the model
    in its own dtype reading its K/V as computed (one pass without a cache)."""
    config, bytes_per_value = model.config, model.dtype.itemsize
    reference = all_logits(model, ids)
    first = reference.argmax(-1)
    rows = {}
    for name in FORMATS:
        parts = format_bytes(config, name, len(ids), bytes_per_value)
        if name == "as computed":
            logits, held, clipped = reference, parts.total, 0
        else:
            logits, backend = read_through(model, ids, name, step)
            held, clipped = backend.kv_cache_bytes, getattr(backend, "saturated", 0)
        rows[name] = {
            "bits per value": BITS[name] or 8 * bytes_per_value,
            "bytes per token": per_token_bytes(config, name, bytes_per_value),
            "per sequence (bytes)": parts.bounded + parts.state,
            "cache at the text's length (bytes)": held,
            "bytes per token at this length": held / len(ids),
            "perplexity": perplexity_of(logits, ids),
            "next-token agreement": float((logits.argmax(-1) == first).float().mean()),
            "values clipped": clipped,
        }
    table = pd.DataFrame(rows).T
    table.index.name = "format"
    return table


def channel_outliers(keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> pd.DataFrame:
    """One row per layer, for K and for V (each (Hkv, T, D)): the largest channel by its largest magnitude over the
    tokens (named "head h, channel c"), that magnitude over the median channel's (averaged over the heads), and the
    share of tokens at which the largest channel is among that token's ``TOP`` largest in its head."""
    rows = []
    for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
        row: dict[str, object] = {"layer": layer}
        for name, x in (("K", k), ("V", v)):
            peak = x.abs().amax(dim=1)  # (Hkv, D): each channel's largest magnitude over the tokens
            head, channel = divmod(int(peak.argmax()), x.shape[-1])
            ratio = peak.amax(-1) / peak.median(-1).values
            top_at_token = x[head].abs().topk(TOP, dim=-1).indices  # (T, TOP)
            row[f"{name} largest channel"] = f"head {head}, channel {channel}"
            row[f"{name} largest / median channel"] = float(ratio.mean())
            row[f"{name} largest among a token's {TOP}"] = float((top_at_token == channel).any(-1).float().mean())
        rows.append(row)
    return pd.DataFrame(rows).set_index("layer")


def _fp8_trip(x: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    x8, _ = quantize_fp8(x, scale)
    bound = torch.maximum(x.abs() * 2.0**-4, torch.full_like(x, scale * 2.0**-10))  # a normal's half step, or 2^-10
    clipped = (x.abs() - 448.0 * scale).clamp(min=0)  # beyond E4M3's largest number: stored as 448 x scale
    return dequantize_fp8(x8, scale, torch.float32), bound + clipped


def _kivi_trip(x: torch.Tensor, by: str, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """2-bit in the engine's groups: "channel" along each channel over ``group`` tokens, "token" across ``group``
    channels of one token (whole groups only: the newest tokens stay in full precision)."""
    heads, tokens, dim = x.shape
    usable = tokens - tokens % group
    if by == "channel":
        groups, axis = x[:, :usable].reshape(heads, usable // group, group, dim), 2
    else:
        groups, axis = x.reshape(heads, tokens, dim // group, group), 3
    codes, low, step = quantize_2bit(groups, dim=axis)
    low, step = low.float(), step.float()
    bound = step / 2 + (low.abs() + 3 * step) * 2.0**-10  # float16's rounding of the low and the step
    return groups, dequantize_2bit(codes, low, step, torch.float32), bound.expand_as(groups)


def _trip(x: torch.Tensor, fmt: str, is_key: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x as grouped, x stored and read back, the bound on each value's error) for one layer's K or V."""
    if fmt == "int8":
        q, scale = quantize_int8(x)
        return x, dequantize_int8(q, scale, torch.float32), (scale / 2)[..., None].expand_as(x)
    if fmt in ("fp8", "fp8, scale 1.0"):
        back, bound = _fp8_trip(x, scale_for(x) if fmt == "fp8" else 1.0)
        return x, back, bound
    return _kivi_trip(x, "channel" if is_key else "token", GROUP)


def round_trips(keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> pd.DataFrame:
    """One row per stored format: K's and V's relative RMS error over every layer, and the worst value's error as
    a share of its bound (at most 1: every value within its bound). K/V in float32, (Hkv, T, D) per layer."""
    rows = {}
    for fmt in FORMATS[1:]:
        row: dict[str, float] = {}
        worst = 0.0
        for name, tensors in (("K", keys), ("V", values)):
            squared_error = squared_norm = 0.0
            for x in tensors:
                grouped, back, bound = _trip(x.float(), fmt, name == "K")
                error = (back - grouped).abs()
                squared_error += float(error.pow(2).sum())
                squared_norm += float(grouped.pow(2).sum())
                worst = max(worst, float((error / bound).max()))
            row[f"{name} error (relative RMS)"] = (squared_error / squared_norm) ** 0.5
        row["worst error / its bound"] = worst
        rows[fmt] = row
    table = pd.DataFrame(rows).T
    table.index.name = "format"
    return table


def e4m3_range(tensors: Sequence[torch.Tensor], scale: float = 1.0) -> dict[str, float]:
    """Where values divided by ``scale`` fall in E4M3's range: the largest magnitude, the share beyond 448 (clipped)
    and below the smallest normal number 2**-6 (fewer bits: the step there is a fixed 2**-9)."""
    every = torch.cat([t.float().flatten() for t in tensors]).abs() / scale
    return {
        "largest": float(every.max()),
        "share clipped": float((every > 448).float().mean()),
        "share below 2^-6": float((every < E4M3_SMALLEST_NORMAL).float().mean()),
    }


def scale_risk(tensors: Sequence[torch.Tensor], factors: Sequence[float]) -> pd.DataFrame:
    """The same values multiplied by each factor (a model whose activations are that much larger or smaller), stored
    in E4M3 with a scale calibrated on them and with scale 1.0: relative RMS error of each, and how many clip."""
    rows = {}
    for factor in factors:
        scaled = [t.float() * factor for t in tensors]
        row = {}
        for label, scale in (("calibrated", None), ("scale 1.0", 1.0)):
            err = norm = 0.0
            for x in scaled:
                back, _ = _fp8_trip(x, scale_for(x) if scale is None else scale)
                err += float((back - x).pow(2).sum())
                norm += float(x.pow(2).sum())
            row[f"error, {label}"] = (err / norm) ** 0.5
        row.update({f"at scale 1.0: {k}": v for k, v in e4m3_range(scaled).items() if k != "largest"})
        rows[f"x {factor:g}"] = row
    return pd.DataFrame(rows).T
