"""The KV pool: preallocated K and V blocks for every layer, and block copies for copy-on-write (lessons 10-12)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BlockCopy:
    """Copy the K/V of physical block ``src`` into ``dst`` before the next forward (lesson 12)."""

    src: int
    dst: int


@dataclass
class KVPool:
    """The preallocated K and V blocks of every layer: (num_layers, num_blocks, block_size, kv_heads, D)."""

    k: torch.Tensor
    v: torch.Tensor

    @classmethod
    def create(
        cls,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> KVPool:
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        return cls(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))

    @property
    def num_blocks(self) -> int:
        return self.k.shape[1]

    @property
    def block_size(self) -> int:
        return self.k.shape[2]

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def copy_blocks(self, copies: list[BlockCopy]) -> None:
        """Copy-on-write: duplicate whole blocks in every layer before they are written (lesson 12)."""
        if not copies:
            return
        src = torch.tensor([c.src for c in copies], device=self.k.device)
        dst = torch.tensor([c.dst for c in copies], device=self.k.device)
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]
