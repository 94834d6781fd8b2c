"""An FP8 KV cache: E4M3 numbers with one scale per tensor, as vLLM stores them (issue 45, lesson 16's int8 beside it).

E4M3 is an 8-bit float: a sign, 4 exponent bits and 3 mantissa bits, from 2**-9 up to 448, with a relative
step of 1/8 near every power of two (torch.float8_e4m3fn; the "fn" variant spends no codes on infinities).
Where int8 spaces its 255 levels evenly and so needs a scale per small group (lesson 16: one per token and
KV head, 4 bytes each), a float spaces them by magnitude, so one scale for a whole layer's keys (and one for
its values) keeps small and large numbers alike to about 6 % of their size. vLLM's ``kv_cache_dtype="fp8"``
works so: a key is stored as ``key / k_scale`` in E4M3, one ``k_scale`` and ``v_scale`` per layer. Its
scales come from a calibration run, or from the first batch it sees (``calculate_kv_scales``); here they are
set, per layer, by the first tokens written (the prompt): the largest magnitude maps to 448. A later value
beyond that saturates at 448 x scale (``saturated`` counts them), which is the cost of a scale fixed early.

Bytes per token: 2 x layers x kv_heads x head_dim x 1, exactly half of a 16-bit cache; the scales are 2 x
layers x 4 bytes per sequence, whatever its length (``costs.fp8_kv_bytes_per_token``).
"""

from __future__ import annotations

import torch

from kvcourse.kernels.attention.backends.int8 import _QuantizedCache

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448.0
SCALE_BYTES = 4  # one float32 scale per layer, for K and for V


def quantize_fp8(x: torch.Tensor, scale: float) -> tuple[torch.Tensor, int]:
    """x / scale rounded to E4M3 (saturating at +-448), and how many values had to saturate."""
    scaled = x.float() / scale
    saturated = int((scaled.abs() > FP8_MAX).sum())
    return scaled.clamp(-FP8_MAX, FP8_MAX).to(FP8), saturated


def dequantize_fp8(x8: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """Back to the model's dtype: x8 * scale."""
    return (x8.float() * scale).to(dtype)


def scale_for(x: torch.Tensor) -> float:
    """The per-tensor scale that maps the largest magnitude of ``x`` to E4M3's largest number."""
    return max(float(x.float().abs().max()), torch.finfo(torch.float32).tiny) / FP8_MAX


class FP8KVBackend(_QuantizedCache):
    """The contiguous cache with K and V stored as E4M3, one scale per layer for K and for V (set by the prompt).

    ``measure_error`` records the round-trip error of every stored value (it costs a sync per layer).
    """

    def _allocate(self, capacity: int, device: torch.device | str) -> None:
        self.k8, self.v8 = self._zeros(capacity, FP8, device), self._zeros(capacity, FP8, device)
        self.k_scale: list[float | None] = [None] * self.config.num_layers  # set by the first tokens each layer stores
        self.v_scale: list[float | None] = [None] * self.config.num_layers
        self.saturated = 0  # values beyond 448 x scale, stored as 448 x scale

    def _stores(self) -> tuple[list[torch.Tensor], ...]:
        return self.k8, self.v8

    @property
    def kv_cache_bytes(self) -> int:
        """The E4M3 values for the filled slots plus the per-layer scales, measured on the tensors."""
        values = sum(t[:, : self.num_tokens].numel() * t.element_size() for t in self.k8 + self.v8)
        return values + 2 * self.config.num_layers * SCALE_BYTES

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        start, end = self._span()
        scales = []
        for x, values, per_layer in ((k, self.k8[layer_idx], self.k_scale), (v, self.v8[layer_idx], self.v_scale)):
            head_major = x.transpose(0, 1)  # (Hkv, T, D)
            if per_layer[layer_idx] is None:
                per_layer[layer_idx] = scale_for(head_major)
            scale = per_layer[layer_idx]
            assert scale is not None
            x8, saturated = quantize_fp8(head_major, scale)
            values[:, start:end] = x8
            self.saturated += saturated
            if self.error is not None:
                self.error.record(head_major, dequantize_fp8(x8, scale, x.dtype))
            scales.append(scale)
        k_all = dequantize_fp8(self.k8[layer_idx][:, :end], scales[0], q.dtype)
        v_all = dequantize_fp8(self.v8[layer_idx][:, :end], scales[1], q.dtype)
        return self._attend(q, k_all, v_all, start)  # (T, H, D)
