"""The model runner: one step's paged metadata, one forward pass, the logits (lessons 10, 14).

The same three moves serve ``LLMEngine``, beam search and ``generate(cache="paged")``: lay every
scheduled sequence's new tokens end to end in one flat batch, say where each token's K/V goes
and which blocks each sequence reads (``PagedMetadata``), and run the model once. The batch
(batch.py, a record of values) says which sequences get logits: those whose new tokens reach their
last token, since a prompt chunk that stops short of the end needs none. The runner reads the record
and changes no bookkeeping; the caller ends the pass (``finish_pass`` or ``Scheduler.update``).
"""

from __future__ import annotations

import itertools

import torch

from kvcourse.kernels.attention.backend import AttentionBackend
from kvcourse.kernels.attention.paged_backend import (
    PagedAttentionBackend,
    PagedMetadata,
    decode_kernel,
    kernel_for_batch,
    smallest_in_place_batch,
)
from kvcourse.kernels.engine.batch import ScheduledBatch
from kvcourse.kernels.memory.kv_pool import KVPool
from kvcourse.kernels.model.transformer import Transformer


class ModelRunner:
    """Runs the model on a flat batch over the paged KV pool (lesson 10)."""

    def __init__(self, model: Transformer, pool: KVPool, use_triton: bool | None = None) -> None:
        self.model = model
        self.pool = pool
        # The CPU's in-place decode kernel is one of the model's fast paths: off where they are off.
        fast = any(path.on for path in getattr(model, "fast_paths", ()))
        self.decode_kernel = decode_kernel(pool.k.device, pool.k.dtype, use_triton, in_place=fast)
        # Where the in-place kernel is chosen, a batch of fewer decoding sequences than this gathers (measured).
        self.in_place_from = smallest_in_place_batch(pool.k.dtype) if self.decode_kernel == "in place" else 1

    def kernel_for(self, num_decoding: int) -> str:
        """The kernel a decode step of ``num_decoding`` sequences takes: the chosen one, but for the in-place kernel
        below its measured smallest batch, where the gather is faster."""
        return kernel_for_batch(self.decode_kernel, self.in_place_from, num_decoding)

    @classmethod
    def for_model(
        cls, model: Transformer, num_blocks: int, block_size: int, use_triton: bool | None = None
    ) -> ModelRunner:
        """A runner with a fresh, zeroed pool of ``num_blocks`` blocks in the model's dtype and device."""
        mc = model.config
        pool = KVPool.create(
            mc.num_layers, num_blocks, block_size, mc.num_kv_heads, mc.head_dim, dtype=model.dtype, device=model.device
        )
        return cls(model, pool, use_triton)

    def build_metadata(self, batch: ScheduledBatch) -> PagedMetadata:
        """Slots, positions, block tables and context lengths for the batch's scheduled tokens."""
        return PagedMetadata.build(
            [list(s.block_table) for s in batch.seqs],
            [s.start_position for s in batch.seqs],
            list(batch.num_scheduled_tokens),
            self.pool.block_size,
            self.model.device,
        )

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> torch.Tensor:
        """Logits (rows asked for, vocab): each sequence's ``num_logits`` last new tokens, in batch order.
        Reads the record only: no sequence is touched."""
        self.pool.copy_blocks(list(batch.copies))
        positions, backend = self.backend(batch)
        device = self.model.device
        new_tokens = [t for s in batch.seqs for t in s.new_token_ids]
        input_ids = torch.tensor(new_tokens, dtype=torch.long, device=device)  # (T,)
        ends = list(itertools.accumulate(batch.num_scheduled_tokens))
        rows = [end - k for s, end in zip(batch.seqs, ends, strict=True) for k in range(s.num_logits, 0, -1)]
        logits_index = torch.tensor(rows, dtype=torch.long, device=device)
        logits: torch.Tensor = self.model(input_ids, positions, backend, logits_index)
        return logits  # (len(rows), vocab)

    def backend(self, batch: ScheduledBatch) -> tuple[torch.Tensor, AttentionBackend]:
        """The new tokens' positions and the step's attention backend over the pool."""
        meta = self.build_metadata(batch)
        return meta.positions, PagedAttentionBackend(self.pool, meta, self.decode_kernel, self.in_place_from)
