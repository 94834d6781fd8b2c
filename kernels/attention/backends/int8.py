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


class _QuantizedCache(_GrowingCache):
    """The contiguous cache with K and V stored in fewer bits: what the int8 and FP8 (fp8.py) caches share.

    The capacity check, the model's config and dtype, the token count and, with ``measure_error``, the
    round-trip error of every stored value (it costs a sync per layer). Each format makes its own stores
    (``_allocate``) and writes them (``attend``).
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
        self.num_tokens = 0
        self.error: QuantizationError | None = QuantizationError() if measure_error else None
        self._allocate(capacity, device)

    def _allocate(self, capacity: int, device: torch.device | str) -> None:
        """Make the format's stores for ``capacity`` tokens, zeroed."""
        raise NotImplementedError

    def _zeros(
        self, capacity: int, dtype: torch.dtype, device: torch.device | str, per_value: bool = True
    ) -> list[torch.Tensor]:
        """A zeroed store per layer: (kv_heads, capacity, head_dim), or (kv_heads, capacity) for one number per
        token and KV head (``per_value=False``)."""
        shape = (self.config.num_kv_heads, capacity, self.config.head_dim)[: 3 if per_value else 2]
        return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(self.config.num_layers)]

    def _span(self) -> tuple[int, int]:
        """The positions the current step writes, start to end (end excluded)."""
        if self.meta is None:
            raise RuntimeError("call begin_step(StepMetadata(...)) before the forward pass")
        return self.meta.start_pos, self.meta.end_pos


class Int8KVBackend(_QuantizedCache):
    """Like the contiguous cache, but K and V are stored as int8 plus a float32 scale per (token, KV head).

    Bytes per token: 2 x layers x kv_heads x (head_dim x 1 + 4), see costs.quantized_kv_bytes_per_token.
    ``measure_error`` records the round-trip error of every stored value (it costs a sync per layer).
    """

    def _allocate(self, capacity: int, device: torch.device | str) -> None:
        self.k_q, self.v_q = self._zeros(capacity, torch.int8, device), self._zeros(capacity, torch.int8, device)
        self.k_scale = self._zeros(capacity, torch.float32, device, per_value=False)
        self.v_scale = self._zeros(capacity, torch.float32, device, per_value=False)

    def _stores(self) -> tuple[list[torch.Tensor], ...]:
        return self.k_q, self.v_q, self.k_scale, self.v_scale

    @property
    def kv_cache_bytes(self) -> int:
        """int8 values plus their scales for the filled slots, measured on the tensors."""
        tensors = self.k_q + self.v_q + self.k_scale + self.v_scale
        return sum(t[:, : self.num_tokens].numel() * t.element_size() for t in tensors)

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        start, end = self._span()
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
