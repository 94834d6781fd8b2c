"""generate(cache="paged"): one sequence on a block pool, run by the engine's model runner (lesson 10).

This is the single-sequence face of the paged engine, so lessons can put paged generation next
to the no-cache and contiguous modes and check that all give the same tokens. Blocks come from
a ``KVCacheManager`` on demand, one ``block_size`` at a time; the physical order can be shuffled
(``scatter=True``) to show that the block table, not adjacency, defines the sequence.
"""

from __future__ import annotations

import torch

from kvcourse.kernels.checks import ceil_div, check_positive_int
from kvcourse.kernels.engine.batch import ScheduledBatch, finish_pass
from kvcourse.kernels.engine.model_runner import ModelRunner
from kvcourse.kernels.engine.sequence import Sequence
from kvcourse.kernels.memory.kv_cache_manager import KVCacheManager
from kvcourse.kernels.model.transformer import Transformer

DEFAULT_BLOCK_SIZE = 16


class PagedSequenceCache:
    """A cache whose K/V live in fixed-size blocks found through a block table (lesson 10)."""

    def __init__(
        self,
        model: Transformer,
        max_tokens: int,
        block_size: int = DEFAULT_BLOCK_SIZE,
        scatter: bool = False,
        seed: int = 0,
        use_triton: bool | None = None,
    ) -> None:
        check_positive_int("max_tokens", max_tokens)
        check_positive_int("block_size", block_size)
        num_blocks = ceil_div(max_tokens, block_size)
        self.kv_cache_manager = KVCacheManager(num_blocks, block_size)
        if scatter:  # hand out physical blocks in a random order
            self.kv_cache_manager.block_pool.shuffle_free_blocks(seed)
        self.runner = ModelRunner.for_model(model, num_blocks, block_size, use_triton)
        self.pool = self.runner.pool
        self.num_heads, self.num_layers = model.config.num_heads, model.config.num_layers
        self.seq = Sequence(0, [], 0, block_size)
        self._score_cells = 0

    @property
    def num_computed_tokens(self) -> int:
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

    def forward(self, token_ids: list[int]) -> torch.Tensor:
        """Compute the tokens after the cached ones; logits (1, vocab) of the last token."""
        seq = self.seq
        if len(token_ids) <= seq.num_computed_tokens or token_ids[: seq.num_tokens] != seq.token_ids:
            raise ValueError("feed the sequence so far, extended by at least one new token")
        seq.token_ids = list(token_ids)
        if not self.kv_cache_manager.can_append(seq):
            raise RuntimeError(f"the pool of {self.kv_cache_manager.num_blocks} blocks is full")
        copies = self.kv_cache_manager.append_slots(seq)
        n, end = seq.num_uncomputed_tokens, seq.num_tokens
        batch = ScheduledBatch.of([seq], [n], copies)
        logits = self.runner.run(batch)
        finish_pass(batch, [seq], self.kv_cache_manager)  # the engine's own end of a pass
        self._score_cells += self.num_heads * self.num_layers * (n * end - n * (n - 1) // 2)
        return logits
