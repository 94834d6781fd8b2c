"""Lesson 28's simulator, its model: one verifying step of n-gram speculation through a sequence's block table.

Before the step, ``computed`` tokens have their K/V in the cache (ceil(computed / block size) blocks) and one
token, the last the model chose, waits to be computed. The step writes k + 1 slots (that token and k drafts) at
positions ``computed`` ... ``computed + k``, so the table grows to ceil((computed + k + 1) / block size) blocks.
The model accepts ``accepted`` drafts (0 to k) and adds a bonus token of its own: the step yields accepted + 1
tokens. Then the engine rolls back (kernels/engine/speculation.py, ``KVCacheManager.rollback``): computed + 1 +
accepted tokens stay computed, the table keeps ceil of that over the block size, the blocks past it go back to
the pool, and the k - accepted rejected slots in the blocks kept are overwritten by later steps.
``expected_tokens_per_pass``: tokens a pass yields when each draft is accepted with probability ``rate``,
independently, until the first rejection (Leviathan et al., 2023): (1 - rate^(k+1)) / (1 - rate).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernels.checks import ceil_div
from kvcourse.simulators.checks import check_int

MAX_TOKENS = 100_000  # tokens cached before the step, at most


@dataclass(frozen=True)
class SpeculationConfig:
    computed: int = 30  # tokens whose K/V are cached before the step
    block_size: int = 16
    k: int = 4  # drafts verified in the pass
    accepted: int = 2  # drafts the model agreed with

    def __post_init__(self) -> None:
        check_int("Tokens cached", self.computed, 1, MAX_TOKENS)
        check_int("Block size", self.block_size, 1, 256)
        check_int("Drafts k", self.k, 0, 32)
        check_int(f"Drafts accepted (0 to k = {self.k})", self.accepted, 0, self.k)


class SpeculationStep:
    """One draft, verify and rollback step: blocks before, during and after, slots written and freed."""

    def __init__(self, config: SpeculationConfig) -> None:
        self.config = config

    @property
    def computed(self) -> int:
        return self.config.computed

    @property
    def blocks_before(self) -> int:
        return ceil_div(self.config.computed, self.config.block_size)

    @property
    def slots_written(self) -> int:
        """The verifying pass's K/V slots: the waiting token and the k drafts."""
        return self.config.k + 1

    @property
    def blocks_during(self) -> int:
        return ceil_div(self.config.computed + self.slots_written, self.config.block_size)

    @property
    def computed_after(self) -> int:
        return self.config.computed + 1 + self.config.accepted

    @property
    def blocks_after(self) -> int:
        return ceil_div(self.computed_after, self.config.block_size)

    @property
    def blocks_freed(self) -> int:
        """Blocks the rollback gives back: those holding only rejected drafts."""
        return self.blocks_during - self.blocks_after

    @property
    def slots_overwritten(self) -> int:
        """Rejected drafts' slots: freed with their block, or written again by later steps."""
        return self.config.k - self.config.accepted

    @property
    def tokens_out(self) -> int:
        """Accepted drafts plus the bonus token."""
        return self.config.accepted + 1

    def slot_kinds(self) -> list[list[str]]:
        """Per block during the pass, per slot: cached, last (the waiting token), accepted, rejected or empty."""
        c = self.config
        kinds = ["cached"] * c.computed + ["last"] + ["accepted"] * c.accepted + ["rejected"] * (c.k - c.accepted)
        kinds += ["empty"] * (self.blocks_during * c.block_size - len(kinds))
        return [kinds[i : i + c.block_size] for i in range(0, len(kinds), c.block_size)]


def expected_tokens_per_pass(rate: float, k: int) -> float:
    """Tokens a verifying pass yields, each of k drafts accepted with probability ``rate`` until one is not."""
    if not 0 <= rate <= 1:
        raise ValueError(f"an acceptance rate is 0 to 1, not {rate}")
    return float(k + 1) if rate == 1 else (1 - rate ** (k + 1)) / (1 - rate)
