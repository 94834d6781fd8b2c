"""The cache modes generate() runs on: what a cache factory is given, the caches it builds, the fixed table of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, runtime_checkable

import torch

from kvcourse.kernels.attention.backend import SequenceCache
from kvcourse.kernels.attention.backends.contiguous import ContiguousKVBackend, NoCacheBackend
from kvcourse.kernels.attention.backends.fp8 import FP8KVBackend
from kvcourse.kernels.attention.backends.int8 import Int8KVBackend
from kvcourse.kernels.attention.backends.kivi import Kivi2Backend
from kvcourse.kernels.attention.backends.sliding import LayerWindowsBackend, SlidingWindowBackend, local_global_windows
from kvcourse.kernels.engine.paged_generate import PagedSequenceCache
from kvcourse.kernels.model.transformer import Transformer


@dataclass(frozen=True)
class CacheRequest:
    """What a cache factory needs to build a backend for one generation."""

    model: Transformer
    max_tokens: int  # prompt + new tokens: a contiguous cache can preallocate this much
    window: int | None = None
    attention: str = "auto"


@runtime_checkable
class ModelRunningCache(Protocol):
    """A cache that runs the model itself: the paged cache, through the engine's model runner (lesson 10)."""

    @property
    def num_computed_tokens(self) -> int: ...

    @property
    def kv_cache_bytes(self) -> int: ...

    @property
    def num_score_cells(self) -> int: ...

    def forward(self, token_ids: list[int]) -> torch.Tensor:
        """Compute the tokens not yet cached; logits (1, vocab) of the last one."""
        ...


CacheFactory = Callable[[CacheRequest], SequenceCache | ModelRunningCache]


def _no_cache(req: CacheRequest) -> SequenceCache:
    return NoCacheBackend(req.attention)


def _contiguous(req: CacheRequest) -> SequenceCache:
    return ContiguousKVBackend(req.model.config, req.max_tokens, req.model.dtype, req.model.device, req.attention)


def _int8(req: CacheRequest) -> SequenceCache:
    return Int8KVBackend(req.model.config, req.max_tokens, req.model.dtype, req.model.device, req.attention)


def _fp8(req: CacheRequest) -> SequenceCache:
    return FP8KVBackend(req.model.config, req.max_tokens, req.model.dtype, req.model.device, req.attention)


def _kivi2(req: CacheRequest) -> SequenceCache:
    return Kivi2Backend(req.model.config, req.model.dtype, req.model.device, req.attention)


def _sliding(req: CacheRequest) -> SequenceCache:
    if req.window is None:
        raise ValueError('cache="sliding" needs window=N (the number of most recent tokens to keep)')
    return SlidingWindowBackend(req.model.config, req.window, req.model.dtype, req.model.device, req.attention)


def _local_global(req: CacheRequest) -> SequenceCache:
    if req.window is None:
        raise ValueError('cache="local_global" needs window=N (the window of its local layers)')
    config = req.model.config
    windows = local_global_windows(config.num_layers, req.window)
    return LayerWindowsBackend(config, windows, req.max_tokens, req.model.dtype, req.model.device, req.attention)


def _paged(req: CacheRequest) -> ModelRunningCache:
    """The paged engine's cache (paged_generate.py), one sequence, blocks in order."""
    if req.attention != "auto":
        raise ValueError(f"cache='paged' always uses paged attention; attention={req.attention!r} would be ignored")
    return PagedSequenceCache(req.model, req.max_tokens)


# The cache modes, a fixed table: importing the course changes no global state. Another cache is a
# CacheFactory passed as generate(cache=factory), never an entry added here.
CACHE_MODES: Mapping[str, CacheFactory] = MappingProxyType(
    {
        "none": _no_cache,
        "contiguous": _contiguous,
        "int8": _int8,
        "fp8": _fp8,
        "kivi2": _kivi2,
        "sliding": _sliding,
        "local_global": _local_global,
        "paged": _paged,
    }
)
