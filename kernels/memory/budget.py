"""The memory wall: how many KV blocks a byte budget buys (lesson 08).

"An 80 GB card, the weights take W, the rest is cache": the pool is sized from what remains
after the weights and a reserve for activations, divided by the bytes of one block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvcourse.kernels import costs


@dataclass(frozen=True)
class MemoryBudget:
    """Device memory split into weights, a reserve for activations, and the KV pool (lesson 08)."""

    total_bytes: int
    weight_bytes: int
    reserve_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("total_bytes", "weight_bytes", "reserve_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer number of bytes, got {value!r}")
        if self.kv_bytes <= 0:
            raise ValueError(
                f"nothing is left for the KV cache: {self.total_bytes:,} bytes total minus "
                f"{self.weight_bytes:,} of weights and {self.reserve_bytes:,} reserved"
            )

    @classmethod
    def for_model(cls, config: Any, total_bytes: int, bytes_per_value: int = 2, reserve_bytes: int = 0) -> MemoryBudget:
        """The weights' bytes come from the model's own parameter count."""
        return cls(total_bytes, costs.weight_bytes(config, bytes_per_value), reserve_bytes)

    @property
    def kv_bytes(self) -> int:
        return self.total_bytes - self.weight_bytes - self.reserve_bytes


def block_bytes(config: Any, block_size: int, bytes_per_value: int = 2) -> int:
    """K and V of ``block_size`` tokens in every layer."""
    return costs.kv_bytes_per_token(config, bytes_per_value) * block_size


def num_blocks_for_budget(config: Any, budget: MemoryBudget, block_size: int, bytes_per_value: int = 2) -> int:
    """Whole blocks that fit in the budget's KV share (lesson 08)."""
    return budget.kv_bytes // block_bytes(config, block_size, bytes_per_value)
