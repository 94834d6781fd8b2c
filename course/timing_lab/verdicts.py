"""What a sweep showed, in words computed from its numbers (lesson 17).

``cost_per_extra_token`` tabulates the seconds each extra token cost between neighbouring lengths
(constant for a straight line, rising for one that bends upward); ``bend_verdict`` reads that table;
``check_answers`` and ``check_sweep_tokens`` say whether the cached and uncached runs wrote the same
tokens, with the float32 claim checked and lower precision explained; ``direction`` names a change;
``speedup_trend`` says how the speedup moved across the lengths, only as far as every step of the run bears it out.
"""

from __future__ import annotations

import pandas as pd
import torch

from kvcourse.notebook import expect
from kvcourse.timing_lab.sweep import HF_CACHE, HF_NO_CACHE, SweepResult, first_difference

WITH, WITHOUT = "with cache (s per extra token)", "without cache (s per extra token)"
ROUNDING = (
    "Both runs compute the same mathematics, but the uncached one multiplies big matrices over all "
    "positions and the cached one small ones, so they round differently; with 8 significant bits a "
    "near-tie between two tokens can flip, and from there the texts differ."
)


def cost_per_extra_token(result: SweepResult, digits: int = 3) -> pd.DataFrame:
    """One row per pair of neighbouring lengths ("8 → 16 tokens"): the seconds each added token cost,
    with and without the cache (medians, rounded to ``digits``)."""
    lengths = result.completed_lengths
    rows, names = [], []
    for short, long in zip(lengths, lengths[1:], strict=False):
        added = long - short
        names.append(f"{short} → {long} tokens")
        rows.append(
            {
                WITH: (result.median(long, HF_CACHE) - result.median(short, HF_CACHE)) / added,
                WITHOUT: (result.median(long, HF_NO_CACHE) - result.median(short, HF_NO_CACHE)) / added,
            }
        )
    table = pd.DataFrame(rows, index=pd.Index(names, name="answer length"), columns=[WITH, WITHOUT])
    return table.round(digits)


def bend_verdict(steps: pd.DataFrame, tolerance: float = 0.2) -> str:
    """Whether each line stayed straight (cost per extra token within ``tolerance``) or bent, and which more."""
    if len(steps) < 2:
        return "With fewer than three lengths each line is one segment, which cannot bend: run a longer sweep."
    rise = {name: steps[col].iloc[-1] / steps[col].iloc[0] for name, col in (("with", WITH), ("without", WITHOUT))}
    shape = {
        name: "stayed about the same (a straight line)"
        if abs(r - 1) <= tolerance
        else f"changed {r:.2f}x ({'bending upward' if r > 1 else 'bending downward'})"
        for name, r in rise.items()
    }
    more = (
        "the uncached line bent upward more, as the triangle of work predicts"
        if rise["without"] > rise["with"] * (1 + tolerance)
        else "this run shows no clear difference in bend: noise from other programs can hide it at these lengths"
    )
    return (
        f"From the first step of lengths to the last, the cost of an extra token with the cache "
        f"{shape['with']}; without the cache it {shape['without']}. So {more}."
    )


def speedup_trend(speedups: list[float], tolerance: float = 0.1) -> str:
    """How the speedup moved from the shortest length to the longest, in words every step of the run bears out.

    "grew with every length" only if it rose at each step and by more than ``tolerance`` in all (noise on a shared
    CPU moves it by a few percent), "fell with every length" for the mirror case, otherwise no trend is claimed.
    """
    steps = list(zip(speedups, speedups[1:], strict=False))
    if steps and all(b > a for a, b in steps) and speedups[-1] > (1 + tolerance) * speedups[0]:
        return "grew with every length"
    if steps and all(b < a for a, b in steps) and speedups[-1] < (1 - tolerance) * speedups[0]:
        return "fell with every length"
    return "did not move steadily with length"


def direction(ratio: float, tolerance: float = 0.05) -> str:
    """'larger', 'about the same' or 'smaller': how a ratio of new to old compares with 1."""
    if ratio > 1 + tolerance:
        return "larger"
    return "smaller" if ratio < 1 - tolerance else "about the same"


def check_answers(cached: list[int], uncached: list[int], dtype: torch.dtype) -> None:
    """float32: a checked claim that both runs wrote the same tokens; otherwise where they part, and why."""
    if dtype == torch.float32:
        expect(
            cached == uncached, f"the same {len(cached)} tokens both ways: the cache changed the work, not the answer"
        )
        return
    diff = first_difference(cached, uncached)
    where = "agree here, but need not" if diff is None else f"part ways at new token #{diff}"
    print(f"In {dtype} the two answers {where}. {ROUNDING} In float32 they agree.")


def check_sweep_tokens(result: SweepResult, dtype: torch.dtype) -> None:
    """``check_answers`` for every length of a sweep."""
    if dtype == torch.float32:
        expect(result.tokens_match, "at every length, the cached and uncached runs wrote the same tokens")
        return
    print(
        f"In {dtype}: {len(result.mismatches)} of {len(result.completed_lengths)} lengths' uncached answers "
        "differ from the cached ones (rounding, as in section 1).",
        *[m.describe() for m in result.mismatches],
        sep="\n  ",
    )
