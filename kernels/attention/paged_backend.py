"""The paged attention backend: K/V live in a block pool, read through block tables (lessons 10-11).

``PagedMetadata`` says, for one forward pass over a flat batch of new tokens from several
sequences, where each token's K/V goes (``slot_mapping``) and which blocks each sequence reads
(``block_tables``, ``context_lens``). A fresh ``PagedAttentionBackend`` is made per step from
the pool and that metadata, so nothing travels through a module global.

Decode steps take one of three kernels (``DECODE_KERNELS``): "triton" (CUDA, triton_paged.py),
"in place" (the CPU twin, cpu_paged.py, where numba runs it for the pool's dtype) and "gather"
(the reference: blocks copied into a padded batch, then SDPA). ``decode_kernel`` chooses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from kvcourse.kernels.attention.paged import (
    causal_attention,
    decode_mask,
    gather_kv,
    paged_decode_attention,
    write_kv,
)
from kvcourse.kernels.checks import ceil_div

DECODE_KERNELS = ("triton", "in place", "gather")


def decode_kernel(
    device: torch.device, dtype: torch.dtype, use_triton: bool | None = None, in_place: bool = True
) -> str:
    """Which kernel decode steps take: Triton on CUDA (or where ``use_triton``), the in-place CPU kernel where
    ``in_place`` (the model's fast paths are on) and numba runs it for ``dtype``, else the gather reference."""
    if use_triton or (use_triton is None and device.type == "cuda"):
        return "triton"
    if in_place and device.type == "cpu":
        from kvcourse.kernels.attention.cpu_paged import DTYPES, SLOWER_HERE, in_place_decode
        from kvcourse.kernels.model.cpu_fast import FAST_PATHS_ENV, _say_once

        ok, why = in_place_decode(dtype)
        if ok:
            return "in place"
        if dtype in DTYPES and not why.startswith(SLOWER_HERE):  # the machine misses something: say so, once
            _say_once(f"{why} (the same results; {FAST_PATHS_ENV}=0 silences this by turning every fast path off)")
    return "gather"


def smallest_in_place_batch(dtype: torch.dtype) -> int:
    """The smallest decode batch the in-place kernel takes where ``decode_kernel`` chose it: below it, one launch
    of numba's threads costs more than the gather's copy (measured once per process, cpu_paged.py)."""
    from kvcourse.kernels.attention.cpu_paged import in_place_decode

    return max(1, in_place_decode(dtype)[0])


def kernel_for_batch(kernel: str, in_place_from: int, num_decoding: int) -> str:
    """The kernel a decode step of ``num_decoding`` sequences takes: ``kernel``, but the gather where the in-place
    kernel was chosen and the batch is below its measured smallest (too few to repay a launch of its threads)."""
    return "gather" if kernel == "in place" and num_decoding < in_place_from else kernel


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
    def build(
        cls,
        block_tables: list[list[int]],
        num_computed: list[int],
        query_lens: list[int],
        block_size: int,
        device: str | torch.device = "cpu",
    ) -> PagedMetadata:
        """Metadata for sequences whose first ``num_computed`` tokens are cached and next ``query_lens`` are new."""
        if not (len(block_tables) == len(num_computed) == len(query_lens)) or not block_tables:
            raise ValueError("block_tables, num_computed and query_lens must be non-empty and equally long")
        slots, positions = [], []
        for table, done, new in zip(block_tables, num_computed, query_lens, strict=True):
            if new < 1 or (done + new) > len(table) * block_size:
                raise ValueError(f"{new} new tokens after {done} do not fit {len(table)} blocks of {block_size}")
            for pos in range(done, done + new):
                slots.append(table[pos // block_size] * block_size + pos % block_size)
                positions.append(pos)
        width = max(len(t) for t in block_tables)
        padded = [t + [0] * (width - len(t)) for t in block_tables]
        context = [d + n for d, n in zip(num_computed, query_lens, strict=True)]
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


class PagedAttentionBackend:
    """Writes K/V into the pool at ``slot_mapping`` and attends through the block tables (lesson 10)."""

    def __init__(
        self, pool: KVBlocks, metadata: PagedMetadata, kernel: str | None = None, in_place_from: int = 1
    ) -> None:
        """``kernel`` for decode steps (``decode_kernel`` chooses where it is None); the in-place kernel takes only
        batches of ``in_place_from`` decoding sequences or more (where it is chosen: ``smallest_in_place_batch``)."""
        if kernel is not None and kernel not in DECODE_KERNELS:
            raise ValueError(f"the decode kernel must be one of {DECODE_KERNELS}, got {kernel!r}")
        self.pool = pool
        self.metadata = metadata
        if kernel is None:
            kernel = decode_kernel(pool.k.device, pool.k.dtype)
            in_place_from = smallest_in_place_batch(pool.k.dtype) if kernel == "in place" else 1
        self.kernel = kernel
        self.in_place_from = in_place_from
        # The decode inputs, built once per step for the first layer and reused by the others, keyed
        # on the decoding sequences they were built for (None: every sequence of the batch).
        self._decode_inputs: dict[
            tuple[int, ...] | None, tuple[str, torch.Tensor, torch.Tensor, torch.Tensor | None]
        ] = {}

    def _decode_batch(
        self, seqs: tuple[int, ...] | None
    ) -> tuple[str, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The kernel for the decoding sequences ``seqs`` (batch positions), their block tables, lengths and mask."""
        if seqs not in self._decode_inputs:
            meta = self.metadata
            rows = None if seqs is None else torch.tensor(seqs, device=meta.context_lens.device)
            tables = meta.block_tables if rows is None else meta.block_tables[rows]
            context = meta.context_lens if rows is None else meta.context_lens[rows]
            kernel, mask = kernel_for_batch(self.kernel, self.in_place_from, len(context)), None
            if kernel == "gather":
                block_size = self.pool.block_size
                num_blocks = ceil_div(int(context.max()), block_size)
                tables = tables[:, :num_blocks]
                mask = decode_mask(context, num_blocks * block_size, self.pool.k.dtype)  # built once a step
            self._decode_inputs[seqs] = (kernel, tables, context, mask)
        return self._decode_inputs[seqs]

    def _decode(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seqs: tuple[int, ...] | None, scale: float
    ) -> torch.Tensor:
        kernel, tables, context, mask = self._decode_batch(seqs)
        if kernel == "triton":
            from kvcourse.kernels.attention.triton_paged import triton_paged_decode

            return triton_paged_decode(q, k_cache, v_cache, tables, context, scale)
        if kernel == "in place":
            from kvcourse.kernels.attention.cpu_paged import cpu_paged_decode

            return cpu_paged_decode(q, k_cache, v_cache, tables, context, scale)
        return paged_decode_attention(q, k_cache, v_cache, tables, context, scale, mask)

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: (T, num_heads, D), k and v: (T, num_kv_heads, D) -> (T, num_heads, D)."""
        meta = self.metadata
        k_cache, v_cache = self.pool.k[layer_idx], self.pool.v[layer_idx]
        write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
        scale = q.shape[-1] ** -0.5
        if meta.is_decode_only:
            return self._decode(q, k_cache, v_cache, None, scale)
        out = torch.empty_like(q)
        decode_rows, decode_seqs, start = [], [], 0
        for i, (new, context) in enumerate(zip(meta.query_lens, meta.context_lens_list, strict=True)):
            rows = slice(start, start + new)
            if new == 1:
                decode_rows.append(start)
                decode_seqs.append(i)
            elif new == context:  # nothing cached before: attend to the new K/V directly, no gather
                out[rows] = causal_attention(q[rows], k[rows], v[rows], scale)
            else:  # a prefill chunk after cached tokens (prefix hit or chunked prefill)
                table = meta.block_tables[i]
                out[rows] = causal_attention(
                    q[rows], gather_kv(k_cache, table, context), gather_kv(v_cache, table, context), scale
                )
            start += new
        if decode_rows:
            rows_t = torch.tensor(decode_rows, device=q.device)
            out[rows_t] = self._decode(q[rows_t], k_cache, v_cache, tuple(decode_seqs), scale)
        return out
