"""An int8 KV cache: one scale per token and KV head, error measured against the unquantised values (lesson 16)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcourse.kernels.attention.backends.contiguous import _GrowingCache
from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.model.config import ModelConfig

INT8_MAX = 127


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 over the last dimension: x ~ q * scale, scale = max|x| / 127 per row."""
    scale = x.float().abs().amax(dim=-1) / INT8_MAX  # (...,)
    scale = scale.clamp(min=torch.finfo(torch.float32).tiny)  # an all-zero row must not divide by zero
    q = torch.round(x.float() / scale[..., None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Back to floating point: q * scale, cast to the model dtype."""
    return (q.float() * scale[..., None]).to(dtype)


@dataclass
class QuantizationError:
    """How far the stored K/V are from what the model computed (lesson 16)."""

    max_abs_error: float = 0.0
    squared_error: float = 0.0
    squared_norm: float = 0.0

    @property
    def relative_rms_error(self) -> float:
        """sqrt(sum (x - x_hat)^2 / sum x^2) over every value stored so far."""
        return (self.squared_error / self.squared_norm) ** 0.5 if self.squared_norm else 0.0

    def record(self, x: torch.Tensor, x_hat: torch.Tensor) -> None:
        diff = x.float() - x_hat.float()
        self.max_abs_error = max(self.max_abs_error, diff.abs().max().item())
        self.squared_error += diff.pow(2).sum().item()
        self.squared_norm += x.float().pow(2).sum().item()


class Int8KVBackend(_GrowingCache):
    """Like the contiguous cache, but K and V are stored as int8 plus a float32 scale per (token, KV head).

    Bytes per token: 2 x layers x kv_heads x (head_dim x 1 + 4), see costs.quantized_kv_bytes_per_token.
    ``measure_error`` records the round-trip error of every stored value (it costs a sync per layer).
    """

    def __init__(
        self,
        config: ModelConfig,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device | str,
        attention: str = "auto",
        measure_error: bool = True,
    ) -> None:
        super().__init__(attention)
        check_positive_int("capacity", capacity)
        self.config, self.dtype = config, dtype
        shape = (config.num_kv_heads, capacity, config.head_dim)
        self.k_q = [torch.zeros(shape, dtype=torch.int8, device=device) for _ in range(config.num_layers)]
        self.v_q = [torch.zeros(shape, dtype=torch.int8, device=device) for _ in range(config.num_layers)]
        self.k_scale = [torch.zeros(shape[:2], device=device) for _ in range(config.num_layers)]
        self.v_scale = [torch.zeros(shape[:2], device=device) for _ in range(config.num_layers)]
        self.num_tokens = 0
        self.error: QuantizationError | None = QuantizationError() if measure_error else None

    def _stores(self) -> tuple[list[torch.Tensor], ...]:
        return self.k_q, self.v_q, self.k_scale, self.v_scale

    @property
    def kv_cache_bytes(self) -> int:
        """int8 values plus their scales for the filled slots, measured on the tensors."""
        tensors = self.k_q + self.v_q + self.k_scale + self.v_scale
        return sum(t[:, : self.num_tokens].numel() * t.element_size() for t in tensors)

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.meta is None:
            raise RuntimeError("call begin_step(StepMetadata(...)) before the forward pass")
        start, end = self.meta.start_pos, self.meta.end_pos
        for x, values, scales in (
            (k, self.k_q[layer_idx], self.k_scale[layer_idx]),
            (v, self.v_q[layer_idx], self.v_scale[layer_idx]),
        ):
            x_q, x_scale = quantize_int8(x.transpose(0, 1))  # (Hkv, T, D), (Hkv, T)
            values[:, start:end] = x_q
            scales[:, start:end] = x_scale
            if self.error is not None:
                self.error.record(x.transpose(0, 1), dequantize_int8(x_q, x_scale, x.dtype))
        k_all = dequantize_int8(self.k_q[layer_idx][:, :end], self.k_scale[layer_idx][:, :end], q.dtype)
        v_all = dequantize_int8(self.v_q[layer_idx][:, :end], self.v_scale[layer_idx][:, :end], q.dtype)
        return self._attend(q, k_all, v_all, start)  # (T, H, D)
