"""How large lesson 23's sweep over latent ranks is: how much of the held-out text, and which ranks.

A learner's run reads the whole held-out text (about 3,000 tokens) at six ranks below the full one; the suite's
headless run (kvcourse.kernel_env.running_headless) its first 1,000 tokens at three ranks (a half, a third and a
quarter of the full rank), so the lesson keeps within its time on two cores. The ranks are shares of the full
rank, so the same sweep fits any model's shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernel_env import running_headless

PEOPLE_SHARES = (5 / 6, 2 / 3, 1 / 2, 1 / 3, 1 / 4, 1 / 8)
HEADLESS_SHARES = (1 / 2, 1 / 3, 1 / 4)


@dataclass(frozen=True)
class LatentSweep:
    max_tokens: int  # of the held-out text, from its start
    ranks: tuple[int, ...]  # latent values per token and layer, below the full rank, largest first


def latent_sweep_size(full_rank: int) -> LatentSweep:
    """Lesson 23's sweep for a model whose stacked key and value projections have rank ``full_rank``: the full
    one for people, a shorter one in a headless run (tests). Every sweep holds a half, a third (one KV head's
    size in SmolLM2: MQA's) and a quarter of the full rank."""
    if full_rank < 8:
        raise ValueError(f"a full rank of {full_rank} leaves no room for a sweep below it (at least 8)")
    shares, max_tokens = (HEADLESS_SHARES, 1000) if running_headless() else (PEOPLE_SHARES, 100_000)
    return LatentSweep(max_tokens, tuple(round(share * full_rank) for share in shares))
