"""A 2-bit KV cache in the manner of KIVI (Liu et al., ICML 2024): keys per channel, values per token (issue 45).

Two bits give four levels, x ~ low + code x step with code in 0..3, so where the levels sit decides everything.
KIVI's finding, from the K/V of real models: a few key *channels* are large for every token (outliers by
channel), while values have no such pattern. So keys are quantised per channel, over a group of ``group``
tokens (the channel's own low and step for those tokens), and values per token, over groups of ``group``
channels. A key group can only be formed once its tokens exist, so the most recent tokens stay in the model's
dtype: between ``residual`` and ``residual + group - 1`` of them, the oldest ``group`` quantised together when
there are more. (KIVI's paper uses a residual of 32 to 128 tokens and reports 2.6x less peak memory with
quality close to 16 bits, without any tuning.)

Stored per quantised token, for each layer and KV head: the codes packed four to a byte (head_dim / 4 bytes
for K and as many for V); for V a float16 low and step per group of channels; for K a float16 low and step
per channel, shared by the group's tokens. ``costs.kivi_kv_bytes_per_token`` counts it; the recent tokens
are a part per sequence, whatever its length.
"""

from __future__ import annotations

import torch

from kvcourse.kernels.attention.backends.contiguous import _SequenceBackend
from kvcourse.kernels.attention.backends.int8 import QuantizationError
from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.model.config import ModelConfig

LEVELS = 4  # two bits
SCALE_DTYPE = torch.float16  # each low and step, as the paper keeps them


def quantize_2bit(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Codes 0..3 (uint8) and the low and step (float16, kept along ``dim``) of x ~ low + code x step, the levels
    spread from x's smallest to its largest value along ``dim``."""
    low = x.float().amin(dim=dim, keepdim=True).to(SCALE_DTYPE)
    high = x.float().amax(dim=dim, keepdim=True)
    step = ((high - low.float()) / (LEVELS - 1)).clamp(min=torch.finfo(SCALE_DTYPE).tiny).to(SCALE_DTYPE)
    codes = torch.round((x.float() - low.float()) / step.float()).clamp(0, LEVELS - 1).to(torch.uint8)
    return codes, low, step


def dequantize_2bit(codes: torch.Tensor, low: torch.Tensor, step: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (low.float() + codes.float() * step.float()).to(dtype)


def pack(codes: torch.Tensor) -> torch.Tensor:
    """Four 2-bit codes to a byte, along the last axis (its length a multiple of 4)."""
    fours = codes.reshape(*codes.shape[:-1], -1, 4)
    return fours[..., 0] | fours[..., 1] << 2 | fours[..., 2] << 4 | fours[..., 3] << 6


def unpack(packed: torch.Tensor) -> torch.Tensor:
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=packed.device)
    return ((packed[..., None] >> shifts) & 3).reshape(*packed.shape[:-1], -1)


class Kivi2Backend(_SequenceBackend):
    """Keys quantised per channel over groups of ``group`` tokens, values per token over groups of ``group``
    channels, both to 2 bits; the most recent ``residual`` to ``residual + group - 1`` tokens in full precision."""

    def __init__(
        self,
        config: ModelConfig,
        dtype: torch.dtype,
        device: torch.device | str,
        attention: str = "auto",
        group: int = 32,
        residual: int = 32,
        measure_error: bool = True,
    ) -> None:
        super().__init__(attention)
        check_positive_int("group", group)
        if residual < 0:
            raise ValueError(f"residual must be >= 0 tokens, got {residual}")
        if config.head_dim % group or config.head_dim % 4:
            raise ValueError(f"head_dim {config.head_dim} must be a multiple of 4 and of the group ({group})")
        self.config, self.dtype, self.group, self.residual = config, dtype, group, residual
        empty = torch.zeros(config.num_kv_heads, 0, config.head_dim, dtype=dtype, device=device)
        layers = range(config.num_layers)
        self.recent_k, self.recent_v = [empty] * config.num_layers, [empty] * config.num_layers
        self.quantized: list[list[tuple[torch.Tensor, ...]]] = [[] for _ in layers]  # per layer: one tuple per group
        self.num_tokens = 0
        self.error: QuantizationError | None = QuantizationError() if measure_error else None

    @property
    def num_computed_tokens(self) -> int:
        return self.num_tokens

    @property
    def num_quantized_tokens(self) -> int:
        return len(self.quantized[0]) * self.group

    def end_step(self) -> None:
        if self.meta is not None:
            self.num_tokens = self.meta.end_pos
        super().end_step()

    @property
    def kv_cache_bytes(self) -> int:
        """Every stored tensor: packed codes, lows and steps, and the recent tokens in full precision."""
        stored = [t for layer in self.quantized for group in layer for t in group] + self.recent_k + self.recent_v
        return sum(t.numel() * t.element_size() for t in stored)

    def _quantize_group(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One group of ``group`` tokens (Hkv, group, D): keys per channel, values per token and channel group."""
        k_codes, k_low, k_step = quantize_2bit(k, dim=1)  # over the group's tokens: a low and step per channel
        by_channels = v.reshape(*v.shape[:2], -1, self.group)  # (Hkv, group, D / group, group)
        v_codes, v_low, v_step = quantize_2bit(by_channels, dim=3)
        if self.error is not None:
            self.error.record(k, dequantize_2bit(k_codes, k_low, k_step, k.dtype))
            self.error.record(by_channels, dequantize_2bit(v_codes, v_low, v_step, v.dtype))
        return pack(k_codes), k_low, k_step, pack(v_codes.flatten(2)), v_low, v_step

    def _dequantized(self, layer_idx: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = [], []
        for k_packed, k_low, k_step, v_packed, v_low, v_step in self.quantized[layer_idx]:
            keys.append(dequantize_2bit(unpack(k_packed), k_low, k_step, dtype))
            v_codes = unpack(v_packed).reshape(*v_packed.shape[:2], -1, self.group)
            values.append(dequantize_2bit(v_codes, v_low, v_step, dtype).flatten(2))
        return torch.cat([*keys, self.recent_k[layer_idx]], 1), torch.cat([*values, self.recent_v[layer_idx]], 1)

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.meta is None:
            raise RuntimeError("call begin_step(StepMetadata(...)) before the forward pass")
        recent_k = torch.cat([self.recent_k[layer_idx], k.transpose(0, 1)], 1)  # (Hkv, recent + T, D)
        recent_v = torch.cat([self.recent_v[layer_idx], v.transpose(0, 1)], 1)
        while recent_k.shape[1] >= self.residual + self.group:  # the oldest group leaves full precision
            group = self._quantize_group(recent_k[:, : self.group], recent_v[:, : self.group])
            self.quantized[layer_idx].append(group)
            recent_k, recent_v = recent_k[:, self.group :], recent_v[:, self.group :]
        self.recent_k[layer_idx], self.recent_v[layer_idx] = recent_k, recent_v
        k_all, v_all = self._dequantized(layer_idx, q.dtype)
        return self._attend(q, k_all, v_all, self.meta.start_pos)  # (T, H, D)
