"""How large lesson 23's sweep over latent ranks is: how much of the held-out text, and which ranks.

A learner's run reads the whole held-out text (about 3,000 tokens) at six ranks below the full one; the suite's
headless run (kvcourse.kernel_env.running_headless) its first 600 tokens at three ranks (a half, a third and a
quarter of the full rank), so the lesson keeps well within its minute on two cores. The ranks are shares of the
full rank, so the same sweep fits any model's shape. The activation-aware factorisation reads the calibration
text's first 2,000 tokens (500 headless) and is measured at two thirds, a half, a third and a quarter of the full
rank (headless: a half); partial RoPE alone (the full rank) and at the bytes of
two thirds, a half and a third of it (headless: a half only), where the rotated dimensions leave the latent room.
Every pass over the text costs time in proportion to its length, and the headless run makes ten of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernel_env import running_headless

PEOPLE_SHARES = (5 / 6, 2 / 3, 1 / 2, 1 / 3, 1 / 4, 1 / 8)
HEADLESS_SHARES = (1 / 2, 1 / 3, 1 / 4)
HEADLESS_TOKENS = 600  # of the held-out text; the people's run reads all of it
HEADLESS_CALIBRATION = 500  # of the calibration text; the people's run reads 2,000


@dataclass(frozen=True)
class LatentSweep:
    max_tokens: int  # of the held-out text, from its start
    ranks: tuple[int, ...]  # latent values per token and layer, below the full rank, largest first
    calibration_tokens: int  # of the calibration text, from its start: what the activation-aware fit reads
    aware_ranks: tuple[int, ...]  # of ranks, those at which the activation-aware fit is measured too
    partial_ranks: tuple[int, ...]  # the full rank, then the ranks at whose bytes partial RoPE is measured


def latent_sweep_size(full_rank: int) -> LatentSweep:
    """Lesson 23's sweep for a model whose stacked key and value projections have rank ``full_rank``: the full
    one for people, a shorter one in a headless run (tests). Every sweep holds a half, a third (one KV head's
    size in SmolLM2: MQA's) and a quarter of the full rank."""
    if full_rank < 8:
        raise ValueError(f"a full rank of {full_rank} leaves no room for a sweep below it (at least 8)")
    headless = running_headless()
    shares, max_tokens = (HEADLESS_SHARES, HEADLESS_TOKENS) if headless else (PEOPLE_SHARES, 100_000)
    ranks = tuple(round(share * full_rank) for share in shares)
    aware = ranks[:1] if headless else ranks[1:5]  # headless: a half; else two thirds to a quarter
    partial = (full_rank, ranks[0]) if headless else (full_rank, *ranks[1:4])  # else 2/3, 1/2, 1/3
    return LatentSweep(max_tokens, ranks, HEADLESS_CALIBRATION if headless else 2000, aware, partial)
