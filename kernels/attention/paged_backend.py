"""The paged attention backend: K/V live in a block pool, read through block tables (lessons 10-11).

``PagedMetadata`` says, for one forward pass over a flat batch of new tokens from several
sequences, where each token's K/V goes (``slot_mapping``) and which blocks each sequence reads
(``block_tables``, ``context_lens``). A fresh ``PagedAttentionBackend`` is made per step from
the pool and that metadata, so nothing travels through a module global.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from kvcourse.kernels.attention.paged import (
    causal_attention,
    decode_mask,
    gather_kv,
    length_groups,
    paged_decode_attention,
    write_kv,
)


class KVBlocks(Protocol):
    """What the backend needs of a KV pool: K and V blocks of every layer (see memory.kv_pool.KVPool)."""

    k: torch.Tensor  # (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
    v: torch.Tensor

    @property
    def block_size(self) -> int: ...


@dataclass(frozen=True)
class PagedMetadata:
    """Per-step attention metadata for a flat batch of sequences (lesson 10)."""

    slot_mapping: torch.Tensor  # (T,) pool slot of each new token
    positions: torch.Tensor  # (T,) position of each new token in its sequence
    block_tables: torch.Tensor  # (B, max blocks), rows padded with block 0 (masked by context_lens)
    context_lens: torch.Tensor  # (B,) tokens in the cache once this step's tokens are written
    query_lens: tuple[int, ...]  # new tokens per sequence, in batch order
    context_lens_list: tuple[int, ...]

    @classmethod
    def build(cls, block_tables: list[list[int]], num_computed: list[int], query_lens: list[int],
              block_size: int, device: str | torch.device = "cpu") -> PagedMetadata:
        """Metadata for sequences whose first ``num_computed`` tokens are cached and next ``query_lens`` are new."""
        if not (len(block_tables) == len(num_computed) == len(query_lens)) or not block_tables:
            raise ValueError("block_tables, num_computed and query_lens must be non-empty and equally long")
        slots, positions = [], []
        for table, done, new in zip(block_tables, num_computed, query_lens):
            if new < 1 or (done + new) > len(table) * block_size:
                raise ValueError(f"{new} new tokens after {done} do not fit {len(table)} blocks of {block_size}")
            for pos in range(done, done + new):
                slots.append(table[pos // block_size] * block_size + pos % block_size)
                positions.append(pos)
        width = max(len(t) for t in block_tables)
        padded = [t + [0] * (width - len(t)) for t in block_tables]
        context = [d + n for d, n in zip(num_computed, query_lens)]
        return cls(
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=device),
            positions=torch.tensor(positions, dtype=torch.long, device=device),
            block_tables=torch.tensor(padded, dtype=torch.long, device=device),
            context_lens=torch.tensor(context, dtype=torch.long, device=device),
            query_lens=tuple(query_lens),
            context_lens_list=tuple(context),
        )

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens)

    @property
    def is_decode_only(self) -> bool:
        return all(n == 1 for n in self.query_lens)


@dataclass(frozen=True)
class DecodeGroup:
    """Decoding sequences attended in one call: their rows of the step's q (None: all of them),
    block tables cut at the group's longest context, context lengths, and mask (CPU path)."""

    rows: torch.Tensor | None
    tables: torch.Tensor
    context_lens: torch.Tensor
    mask: torch.Tensor | None


class PagedAttentionBackend:
    """Writes K/V into the pool at ``slot_mapping`` and attends through the block tables (lesson 10)."""

    def __init__(self, pool: KVBlocks, metadata: PagedMetadata, use_triton: bool | None = None) -> None:
        self.pool = pool
        self.metadata = metadata
        self.use_triton = pool.k.is_cuda if use_triton is None else use_triton
        self._decode_groups: list[DecodeGroup] | None = None

    def _decode_batch(self, seqs: list[int]) -> list[DecodeGroup]:
        """The decoding sequences (indices into the metadata's batch) in groups of similar length,
        each with its block tables, context lengths and mask: built once per step, used by every layer."""
        if self._decode_groups is None:
            meta, block_size = self.metadata, self.pool.block_size
            # The Triton kernel reads each sequence's own blocks: no padding, so no reason to split.
            groups = [] if self.use_triton else length_groups([meta.context_lens_list[i] for i in seqs], block_size)
            if len(groups) <= 1:
                groups = [list(range(len(seqs)))]  # one call, in the batch's own order
            self._decode_groups = []
            for rows in groups:
                index = torch.tensor([seqs[r] for r in rows], device=meta.block_tables.device)
                tables, context = meta.block_tables[index], meta.context_lens[index]
                mask = None
                if not self.use_triton:
                    num_blocks = -(-max(meta.context_lens_list[seqs[r]] for r in rows) // block_size)
                    tables = tables[:, :num_blocks]
                    mask = decode_mask(context, num_blocks * block_size, self.pool.k.dtype)
                whole = len(groups) == 1
                self._decode_groups.append(DecodeGroup(None if whole else torch.tensor(rows, device=index.device),
                                                       tables, context, mask))
        return self._decode_groups

    def _decode(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                seqs: list[int], scale: float) -> torch.Tensor:
        """One new token for each of ``seqs``: q (len(seqs), num_heads, D) -> the same shape."""
        groups = self._decode_batch(seqs)
        if len(groups) == 1:
            return self._decode_group(q, k_cache, v_cache, groups[0], scale)
        out = torch.empty_like(q)
        for group in groups:
            out.index_copy_(0, group.rows, self._decode_group(q.index_select(0, group.rows), k_cache, v_cache,
                                                              group, scale))
        return out

    def _decode_group(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      group: DecodeGroup, scale: float) -> torch.Tensor:
        if self.use_triton:
            from kvcourse.kernels.attention.triton_paged import triton_paged_decode

            return triton_paged_decode(q, k_cache, v_cache, group.tables, group.context_lens, scale)
        return paged_decode_attention(q, k_cache, v_cache, group.tables, group.context_lens, scale, group.mask)

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: (T, num_heads, D), k and v: (T, num_kv_heads, D) -> (T, num_heads, D)."""
        meta = self.metadata
        k_cache, v_cache = self.pool.k[layer_idx], self.pool.v[layer_idx]
        write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
        scale = q.shape[-1] ** -0.5
        if meta.is_decode_only:
            return self._decode(q, k_cache, v_cache, list(range(meta.num_seqs)), scale)
        out = torch.empty_like(q)
        decode_rows, decode_seqs, start = [], [], 0
        for i, (new, context) in enumerate(zip(meta.query_lens, meta.context_lens_list)):
            rows = slice(start, start + new)
            if new == 1:
                decode_rows.append(start)
                decode_seqs.append(i)
            elif new == context:  # nothing cached before: attend to the new K/V directly, no gather
                out[rows] = causal_attention(q[rows], k[rows], v[rows], scale)
            else:  # a prefill chunk after cached tokens (prefix hit or chunked prefill)
                table = meta.block_tables[i]
                out[rows] = causal_attention(q[rows], gather_kv(k_cache, table, context),
                                             gather_kv(v_cache, table, context), scale)
            start += new
        if decode_rows:
            rows_t = torch.tensor(decode_rows, device=q.device)
            out[rows_t] = self._decode(q[rows_t], k_cache, v_cache, decode_seqs, scale)
        return out
