"""Paged attention with a block table per group of layers, and local layers that read only their window (issue 45).

``GroupedPagedBackend`` sends each layer to its group's backend: a global group's is the engine's own
``PagedAttentionBackend`` on that group's tables; a local group's is ``WindowGroupBackend``. A local group's
blocks that slid out of the window are gone from its tables (kernels/memory/kv_cache_groups.py), so a local layer
attends to the keys it still holds, [c - w + 1, c) for a sequence with c computed tokens, and to this step's
new keys as they come from the model (only the new positions from end - w + 1 on are written to the pool: no
later token sees the earlier ones), under the causal mask cut to the window (query p sees keys p - w + 1 .. p),
the mask that ``NoCacheBackend(layer_windows=...)`` applies in one pass over the whole sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

from kvcourse.kernels.attention.paged import QUERY_CHUNK, write_kv
from kvcourse.kernels.attention.paged_backend import KVBlocks, PagedAttentionBackend, PagedMetadata
from kvcourse.kernels.attention.reference import causal_mask
from kvcourse.kernels.checks import ceil_div

NULL_BLOCK = -1  # a local table's entry whose block slid out of the window and went back to the pool


class LayerGroup(Protocol):
    """Layers that share a block table (memory/kv_cache_groups.py's KVCacheGroup): their window, None if global."""

    @property
    def window(self) -> int | None: ...

    @property
    def layers(self) -> tuple[int, ...]: ...


def windowed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_start: int, window: int) -> torch.Tensor:
    """q (n, H, D) at key indices q_start .. q_start + n - 1 of k, v (Tk, Hkv, D) -> (n, H, D); query j sees the
    keys q_start + j - window + 1 .. q_start + j. A long chunk goes ``QUERY_CHUNK`` queries at a time, each to the
    keys its queries can see only."""
    outs = []
    for a in range(0, q.shape[0], QUERY_CHUNK):
        b = min(a + QUERY_CHUNK, q.shape[0])
        lo, hi = max(0, q_start + a - window + 1), q_start + b  # the keys this chunk of queries can see
        mask = causal_mask(b - a, hi - lo, q_start + a - lo, window, q.device)
        qh, kh, vh = q[a:b].transpose(0, 1), k[lo:hi].transpose(0, 1), v[lo:hi].transpose(0, 1)
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
        outs.append(out.transpose(0, 1))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


@dataclass(frozen=True)
class WindowMetadata:
    """One local group's part of a step: the new tokens it writes, and the window blocks each sequence holds."""

    window: int
    slot_mapping: torch.Tensor  # (kept,) pool slots of the new tokens that later tokens will see
    kept: torch.Tensor  # (kept,) their rows in the flat batch
    first_seen: tuple[int, ...]  # per sequence: the first held position its new tokens see, max(0, c - w + 1)
    seen_tables: tuple[tuple[int, ...], ...]  # per sequence: the blocks from that position's block to c's
    starts: tuple[int, ...]  # computed tokens c before the step, per sequence
    query_lens: tuple[int, ...]

    @classmethod
    def build(
        cls, window: int, tables: Sequence[Sequence[int]], starts: Sequence[int], query_lens: Sequence[int],
        block_size: int, device: torch.device,
    ) -> WindowMetadata:  # fmt: skip
        slots, kept, first_seen, seen_tables, row = [], [], [], [], 0
        for table, done, new in zip(tables, starts, query_lens, strict=True):
            end = done + new
            for pos in range(max(done, end - window + 1), end):
                slots.append(table[pos // block_size] * block_size + pos % block_size)
                kept.append(row + pos - done)
            first = max(0, done - window + 1)
            seen = tuple(table[first // block_size : ceil_div(done, block_size)])
            if NULL_BLOCK in seen:
                raise ValueError(f"a block the window still sees was freed: {seen}")
            first_seen.append(first)
            seen_tables.append(seen)
            row += new
        return cls(
            window,
            torch.tensor(slots, dtype=torch.long, device=device),
            torch.tensor(kept, dtype=torch.long, device=device),
            tuple(first_seen),
            tuple(seen_tables),
            tuple(starts),
            tuple(query_lens),
        )


class WindowGroupBackend:
    """The layers of one local group: write what later tokens will see, attend within the window."""

    def __init__(self, pool: KVBlocks, meta: WindowMetadata) -> None:
        self.pool, self.meta = pool, meta
        self._decode_inputs: tuple[torch.Tensor, torch.Tensor, int] | None = None

    def _held(self, cache: torch.Tensor, i: int) -> torch.Tensor:
        """Sequence i's held keys (or values) its new tokens see, in order: (c - first_seen, Hkv, D)."""
        meta, bs = self.meta, self.pool.block_size
        table = torch.tensor(meta.seen_tables[i], dtype=torch.long, device=cache.device)
        offset = meta.first_seen[i] - meta.first_seen[i] // bs * bs
        return cache.index_select(0, table).flatten(0, 1)[offset : offset + meta.starts[i] - meta.first_seen[i]]

    def _decode_batch(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """For the decoding sequences ``rows``: their held blocks padded to one width, and the additive mask
        over those blocks' slots and the new key (built once a step, for every layer of the group)."""
        if self._decode_inputs is None:
            meta, bs = self.meta, self.pool.block_size
            width = max(len(meta.seen_tables[i]) for i in rows)
            tables = [list(meta.seen_tables[i]) + [0] * (width - len(meta.seen_tables[i])) for i in rows]
            device = self.pool.k.device
            pos = torch.arange(width * bs, device=device)[None, :]  # slot j of the padded row
            base = torch.tensor([meta.first_seen[i] // bs * bs for i in rows], device=device)[:, None]
            first = torch.tensor([meta.first_seen[i] for i in rows], device=device)[:, None]
            done = torch.tensor([meta.starts[i] for i in rows], device=device)[:, None]
            new_key = torch.ones((len(rows), 1), dtype=torch.bool, device=device)
            visible = torch.cat([(pos + base >= first) & (pos + base < done), new_key], dim=1)
            mask = torch.zeros(visible.shape, dtype=self.pool.k.dtype, device=device)
            mask.masked_fill_(~visible, float("-inf"))
            flat = torch.tensor(tables, dtype=torch.long, device=device).reshape(-1)
            self._decode_inputs = (flat, mask[:, None, None, :], width * bs)
        return self._decode_inputs

    def _decode(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: list[int], token_rows: list[int]
    ) -> torch.Tensor:
        """One new token for each of the sequences ``rows`` (at ``token_rows`` of the flat batch)."""
        flat, mask, num_held = self._decode_batch(rows)
        batch, num_heads, head_dim = len(rows), q.shape[1], q.shape[2]
        num_kv_heads = k.shape[1]
        index = torch.tensor(token_rows, device=q.device)
        keys = []
        for cache, new in ((self.pool.k[layer], k), (self.pool.v[layer], v)):
            held = cache.index_select(0, flat).view(batch, num_held, num_kv_heads, head_dim)
            keys.append(torch.cat([held, new[index][:, None]], dim=1).transpose(1, 2))  # (B, Hkv, S + 1, D)
        qg = q[index].view(batch, num_kv_heads, num_heads // num_kv_heads, head_dim)
        out = F.scaled_dot_product_attention(qg, keys[0], keys[1], attn_mask=mask)
        return out.reshape(batch, num_heads, head_dim)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``layer`` is the layer's place in its group (the pool's first axis)."""
        meta = self.meta
        k_cache, v_cache = self.pool.k[layer], self.pool.v[layer]
        out = torch.empty_like(q)
        decode_rows, decode_tokens, start = [], [], 0
        for i, (done, new) in enumerate(zip(meta.starts, meta.query_lens, strict=True)):
            if new == 1:
                decode_rows.append(i)
                decode_tokens.append(start)
            else:
                held = done - meta.first_seen[i]
                keys = torch.cat([self._held(k_cache, i), k[start : start + new]])
                values = torch.cat([self._held(v_cache, i), v[start : start + new]])
                out[start : start + new] = windowed_attention(q[start : start + new], keys, values, held, meta.window)
            start += new
        if decode_rows:
            out[torch.tensor(decode_tokens, device=q.device)] = self._decode(layer, q, k, v, decode_rows, decode_tokens)
        if meta.kept.numel():  # written after reading: the held keys above are the ones before this step
            write_kv(k_cache, v_cache, k[meta.kept], v[meta.kept], meta.slot_mapping)
        return out


class GroupedPagedBackend:
    """Each layer to its group's backend, on the one pool whose first axis is a layer's place in its group."""

    def __init__(
        self,
        pool: KVBlocks,
        groups: Sequence[LayerGroup],
        block_tables: Sequence[Sequence[Sequence[int]]],  # per sequence, one table per group
        starts: Sequence[int],
        query_lens: Sequence[int],
        kernel: str,
        in_place_from: int = 1,
    ) -> None:
        device, bs = pool.k.device, pool.block_size
        self.place: dict[int, tuple[int, int]] = {}  # layer -> (group, place in the group)
        self.backends: list[PagedAttentionBackend | WindowGroupBackend] = []
        for g, group in enumerate(groups):
            tables = [list(seq_tables[g]) for seq_tables in block_tables]
            self.place.update({layer: (g, j) for j, layer in enumerate(group.layers)})
            if group.window is None:
                meta = PagedMetadata.build(tables, list(starts), list(query_lens), bs, device)
                self.backends.append(PagedAttentionBackend(pool, meta, kernel, in_place_from))
            else:
                wmeta = WindowMetadata.build(group.window, tables, starts, query_lens, bs, device)
                self.backends.append(WindowGroupBackend(pool, wmeta))
        positions = [p for done, new in zip(starts, query_lens, strict=True) for p in range(done, done + new)]
        self.positions = torch.tensor(positions, dtype=torch.long, device=device)

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        group, place = self.place[layer_idx]
        return self.backends[group].attend(place, q, k, v)
