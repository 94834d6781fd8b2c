"""The model runner: one step's paged metadata, one forward pass, the logits (lessons 10, 14).

The same three moves serve ``LLMEngine``, beam search and ``generate(cache="paged")``: lay every
scheduled sequence's new tokens end to end in one flat batch, say where each token's K/V goes
and which blocks each sequence reads (``PagedMetadata``), and run the model once. Logits come
back only for sequences whose new tokens reach their last token: a prompt chunk that stops
short of the end needs none. The runner changes no bookkeeping; the caller updates the
sequences after the pass.
"""

from __future__ import annotations

import itertools

import torch

from kvcourse.kernels.attention.paged_backend import PagedAttentionBackend, PagedMetadata
from kvcourse.kernels.engine.sequence import Sequence
from kvcourse.kernels.memory.kv_pool import BlockCopy, KVPool


def sampling_indices(seqs: list[Sequence], query_lens: list[int]) -> list[int]:
    """Batch positions of the sequences whose last token is computed in this step: they get logits."""
    return [i for i, (s, n) in enumerate(zip(seqs, query_lens)) if s.num_computed_tokens + n == s.num_tokens]


class ModelRunner:
    """Runs the model on a flat batch over the paged KV pool (lesson 10)."""

    def __init__(self, model: torch.nn.Module, pool: KVPool, use_triton: bool | None = None) -> None:
        self.model = model
        self.pool = pool
        self.use_triton = use_triton

    @classmethod
    def for_model(cls, model: torch.nn.Module, num_blocks: int, block_size: int,
                  use_triton: bool | None = None) -> ModelRunner:
        """A runner with a fresh, zeroed pool of ``num_blocks`` blocks in the model's dtype and device."""
        mc = model.config
        pool = KVPool.create(mc.num_layers, num_blocks, block_size, mc.num_kv_heads, mc.head_dim,
                             dtype=model.dtype, device=model.device)
        return cls(model, pool, use_triton)

    def build_metadata(self, seqs: list[Sequence], query_lens: list[int]) -> PagedMetadata:
        """Slots, positions, block tables and context lengths for the next ``query_lens`` tokens of each."""
        return PagedMetadata.build([s.block_table for s in seqs], [s.num_computed_tokens for s in seqs],
                                   query_lens, self.pool.block_size, self.model.device)

    @torch.inference_mode()
    def run(self, seqs: list[Sequence], query_lens: list[int], copies: list[BlockCopy] | None = None,
            ) -> torch.Tensor:
        """Logits (len(sampling_indices(seqs, query_lens)), vocab), in batch order."""
        self.pool.copy_blocks(copies or [])
        device = self.model.device
        meta = self.build_metadata(seqs, query_lens)
        new_tokens = [t for s, n in zip(seqs, query_lens)
                      for t in s.token_ids[s.num_computed_tokens:s.num_computed_tokens + n]]
        input_ids = torch.tensor(new_tokens, dtype=torch.long, device=device)  # (T,)
        ends = list(itertools.accumulate(query_lens))
        last_rows = [ends[i] - 1 for i in sampling_indices(seqs, query_lens)]
        logits_index = torch.tensor(last_rows, dtype=torch.long, device=device)
        backend = PagedAttentionBackend(self.pool, meta, self.use_triton)
        return self.model(input_ids, meta.positions, backend, logits_index)  # (len(last_rows), vocab)
