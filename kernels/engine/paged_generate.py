"""generate(cache="paged"): one sequence on a block pool, through the same paged backend (lesson 10).

This is the single-sequence face of the paged engine, so lessons can put paged generation next
to the no-cache and contiguous modes and check that all give the same tokens. Blocks come
from a ``BlockManager`` on demand, one ``block_size`` at a time; the physical order can be
shuffled (``scatter=True``) to show that the block table, not adjacency, defines the sequence.
"""

from __future__ import annotations

import torch

from kvcourse.kernels.attention.backend import StepMetadata
from kvcourse.kernels.attention.paged_backend import PagedAttentionBackend, PagedMetadata
from kvcourse.kernels.engine.generate import CacheRequest, register_cache
from kvcourse.kernels.engine.sequence import Sequence
from kvcourse.kernels.memory.kv_cache_manager import BlockManager
from kvcourse.kernels.memory.kv_pool import KVPool

DEFAULT_BLOCK_SIZE = 16


class PagedSequenceCache:
    """A SequenceCache whose K/V live in fixed-size blocks found through a block table (lesson 10)."""

    def __init__(self, model: torch.nn.Module, max_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 scatter: bool = False, seed: int = 0, use_triton: bool | None = None) -> None:
        if max_tokens < 1 or block_size < 1:
            raise ValueError(f"max_tokens and block_size must be positive, got {max_tokens}, {block_size}")
        mc = model.config
        num_blocks = (max_tokens + block_size - 1) // block_size
        self.block_manager = BlockManager(num_blocks, block_size)
        if scatter:  # hand out physical blocks in a random order
            self.block_manager.allocator.shuffle_free_blocks(seed)
        self.pool = KVPool.create(mc.num_layers, num_blocks, block_size, mc.num_kv_heads, mc.head_dim,
                                  dtype=model.dtype, device=model.device)
        self.num_heads, self.num_layers = mc.num_heads, mc.num_layers
        self.seq = Sequence(0, [], 0, block_size)
        self.use_triton = use_triton
        self._backend: PagedAttentionBackend | None = None
        self._score_cells = 0

    @property
    def num_cached_tokens(self) -> int:
        return self.seq.num_computed_tokens

    @property
    def block_table(self) -> list[int]:
        return list(self.seq.block_table)

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of the filled slots (K and V, every layer)."""
        per_slot = self.pool.k[0, 0, 0].nbytes * 2 * self.num_layers
        return self.seq.num_computed_tokens * per_slot

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the blocks the sequence holds, filled or not: waste is only in the last block."""
        return len(self.seq.block_table) * self.pool.nbytes // self.pool.num_blocks

    @property
    def num_score_cells(self) -> int:
        return self._score_cells

    def begin_step(self, meta: StepMetadata) -> None:
        seq = self.seq
        if meta.start_pos != seq.num_computed_tokens:
            raise ValueError(f"this step starts at position {meta.start_pos}, but the cache holds "
                             f"{seq.num_computed_tokens} tokens (feed tokens in order, each once)")
        seq.token_ids.extend([0] * (meta.end_pos - seq.num_tokens))  # ids are not needed without prefix caching
        if not self.block_manager.can_append(seq):
            raise RuntimeError(f"the pool of {self.block_manager.num_blocks} blocks is full")
        self.pool.copy_blocks(self.block_manager.append_slot(seq))
        paged = PagedMetadata.build([seq.block_table], [meta.start_pos], [meta.num_tokens],
                                    self.block_manager.block_size, self.pool.k.device)
        self._backend = PagedAttentionBackend(self.pool, paged, self.use_triton)
        n, end = meta.num_tokens, meta.end_pos
        self._score_cells += self.num_heads * self.num_layers * (n * end - n * (n - 1) // 2)

    def end_step(self) -> None:
        self.seq.num_computed_tokens = self.seq.num_tokens
        self._backend = None

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self._backend is None:
            raise RuntimeError("call begin_step(StepMetadata(...)) before the forward pass")
        return self._backend.attend(layer_idx, q, k, v)


def _paged(req: CacheRequest) -> PagedSequenceCache:
    return PagedSequenceCache(req.model, req.max_tokens)


register_cache("paged", _paged)
