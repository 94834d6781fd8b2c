"""Two ways to run generation: no cache (recompute everything) and a contiguous KV cache (lessons 02, 05, 06)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvcourse.kernels.attention.backend import StepMetadata
from kvcourse.kernels.attention.reference import AttentionStats, get_attention
from kvcourse.kernels.model.config import ModelConfig


class _SequenceBackend:
    """Shared bookkeeping: the current step's metadata, the attention function, the measurements."""

    def __init__(self, attention: str = "auto") -> None:
        self.attention_name = attention
        self.attention_fn = get_attention(attention)
        self.stats = AttentionStats()
        self.meta: StepMetadata | None = None

    @property
    def num_score_cells(self) -> int:
        return self.stats.num_score_cells

    @property
    def num_computed_tokens(self) -> int:
        """Tokens whose K/V the backend holds: each backend counts its own."""
        raise NotImplementedError

    def begin_step(self, meta: StepMetadata) -> None:
        if meta.start_pos != self.num_computed_tokens:
            raise ValueError(
                f"this step starts at position {meta.start_pos}, but the backend expects "
                f"{self.num_computed_tokens} (tokens must be fed in order, each once)"
            )
        self.meta = meta

    def end_step(self) -> None:
        self.meta = None

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_start: int, window: int | None = None
    ) -> torch.Tensor:
        """q (T, H, D); k, v head-major (Hkv, Tk, D) -> (T, H, D)."""
        out = self.attention_fn(q.transpose(0, 1), k, v, q_start, window, self.stats)  # (H, T, D)
        return out.transpose(0, 1)  # (T, H, D)


class NoCacheBackend(_SequenceBackend):
    """Keeps nothing: every step must feed the whole sequence again (lesson 02).

    Also the plain causal backend for a one-off forward pass: without begin_step, the T
    tokens are taken as one sequence starting at position 0. ``seq_lens`` splits a flat batch
    into several independent sequences laid end to end. ``layer_windows`` gives each layer its own
    window (None: every key), the attention-mask reference of a model with local and global layers.
    """

    def __init__(
        self,
        attention: str = "auto",
        window: int | None = None,
        seq_lens: list[int] | None = None,
        layer_windows: Sequence[int | None] | None = None,
    ) -> None:
        super().__init__(attention)
        if window is not None and layer_windows is not None:
            raise ValueError("give one window for every layer (window) or one per layer (layer_windows), not both")
        self.window = window
        self.seq_lens = seq_lens
        self.layer_windows = None if layer_windows is None else tuple(layer_windows)

    @property
    def num_computed_tokens(self) -> int:
        return 0

    @property
    def kv_cache_bytes(self) -> int:
        return 0

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        lens = self.seq_lens or [q.shape[0]]
        if sum(lens) != q.shape[0]:
            raise ValueError(f"seq_lens sum to {sum(lens)} but the batch has {q.shape[0]} tokens")
        window = self.window if self.layer_windows is None else self.layer_windows[layer_idx]
        outs, start = [], 0
        for n in lens:
            kk = k[start : start + n].transpose(0, 1)  # (Hkv, n, D)
            vv = v[start : start + n].transpose(0, 1)  # (Hkv, n, D)
            outs.append(self._attend(q[start : start + n], kk, vv, 0, window))
            start += n
        return outs[0] if len(outs) == 1 else torch.cat(outs)


class _GrowingCache(_SequenceBackend):
    """Per-layer buffers with a token axis (axis 1) that fill in order and double when full."""

    num_tokens: int

    def _stores(self) -> tuple[list[torch.Tensor], ...]:
        """Every per-layer list of buffers; each buffer is (num_kv_heads, capacity, ...)."""
        raise NotImplementedError

    @property
    def capacity(self) -> int:
        return self._stores()[0][0].shape[1]

    @property
    def num_computed_tokens(self) -> int:
        return self.num_tokens

    def _grow(self, needed: int) -> None:
        new_capacity = max(needed, 2 * self.capacity)
        for store in self._stores():
            for i, old in enumerate(store):
                new = old.new_zeros((old.shape[0], new_capacity, *old.shape[2:]))
                new[:, : self.num_tokens] = old[:, : self.num_tokens]
                store[i] = new

    def begin_step(self, meta: StepMetadata) -> None:
        super().begin_step(meta)
        if meta.end_pos > self.capacity:
            self._grow(meta.end_pos)

    def end_step(self) -> None:
        if self.meta is not None:
            self.num_tokens = self.meta.end_pos
        super().end_step()


class ContiguousKVBackend(_GrowingCache):
    """One preallocated (num_kv_heads, capacity, head_dim) buffer per layer for K and for V (lessons 05-06).

    A step writes its new K/V into the next free slots and attends over everything so far.
    Capacity doubles when exceeded, so a step never pays for torch.cat of the whole cache.
    """

    def __init__(
        self,
        config: ModelConfig,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device | str,
        attention: str = "auto",
    ) -> None:
        super().__init__(attention)
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.config = config
        shape = (config.num_kv_heads, capacity, config.head_dim)
        self.k_cache = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.v_cache = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.num_tokens = 0

    def _stores(self) -> tuple[list[torch.Tensor], ...]:
        return self.k_cache, self.v_cache

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of the filled slots, summed over the layers' K and V buffers (axis 1 is the token slot).

        Read from each buffer's shape and element size rather than by slicing it: generate asks
        after every step, and 2 x num_layers slices a token cost more than a layer's norm.
        """
        return self.num_tokens * sum(t.numel() // t.shape[1] * t.element_size() for t in self.k_cache + self.v_cache)

    @property
    def reserved_bytes(self) -> int:
        """Bytes allocated, filled or not."""
        return sum(t.numel() * t.element_size() for t in self.k_cache + self.v_cache)

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.meta is None:
            raise RuntimeError("call begin_step(StepMetadata(...)) before the forward pass")
        start, end = self.meta.start_pos, self.meta.end_pos
        k_cache, v_cache = self.k_cache[layer_idx], self.v_cache[layer_idx]
        # narrow + copy_, not slice assignment: the same copy without the indexing machinery
        k_cache.narrow(1, start, end - start).copy_(k.transpose(0, 1))  # (Hkv, T, D) into the next slots
        v_cache.narrow(1, start, end - start).copy_(v.transpose(0, 1))
        return self._attend(q, k_cache.narrow(1, 0, end), v_cache.narrow(1, 0, end), start)
