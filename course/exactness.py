"""Checks whose strictness depends on the dtype, kept out of a lesson's cells (lessons 08, 10, 12, 13).

In float32 the engine's paths agree bit for bit where the course claims it, and these helpers
``expect`` it. In a 16-bit dtype two computations that add the same numbers in a different order
(another batch shape, another implementation) round differently, so a nearly tied token can flip
or a sum of log-probabilities can drift: there the helpers say so in words instead of failing.
"""

from __future__ import annotations

import textwrap

import torch

from kvcourse.notebook import expect

__all__ = ["batching_tolerance", "expect_close", "expect_same_answers"]


def expect_same_answers(same: int, total: int, dtype: torch.dtype, *, claim: str, cause: str) -> None:
    """``same`` of ``total`` answers matched token for token: ``expect`` ``claim`` in float32 (or when all
    matched); in a 16-bit dtype with a mismatch, say how many agree and why they may not.

    ``cause`` names what differed between the two runs (e.g. "the tight pool recomputed a request alone"),
    the reason the rounding can differ.
    """
    if dtype == torch.float32 or same == total:
        expect(same == total, claim)
        return
    print(
        textwrap.fill(
            f"Only {same} of {total} answers agree in this run. In {dtype} identical answers are not "
            f"guaranteed: {cause}, so the same sums are added in a different order and round "
            "differently; where two tokens are nearly tied, the pick can flip and the answer takes "
            "another course. In float32 the answers match, and the course's tests check it there.",
            width=100,
        )
    )


def batching_tolerance(dtype: torch.dtype) -> float:
    """The relative gap that batching's rounding keeps SmolLM2's keys under, after all its layers (lesson 10).

    A float32 run stays near 1e-5 of the largest key; bfloat16 keeps 8 bits of mantissa, so a few of its
    rounding steps (2**-7 each) already reach a few percent.
    """
    return 1e-4 if dtype == torch.float32 else 5e-2


def expect_close(gap: float, scale: float, dtype: torch.dtype, sentence: str) -> None:
    """Two computations of one quantity differ by ``gap``: under 1e-3 in float32, within 5 % of ``scale`` otherwise."""
    tolerance = 1e-3 if dtype == torch.float32 else 0.05 * abs(scale)
    if dtype != torch.float32:
        print(f"(in {dtype} two implementations round differently: agreement within 5 % is all one can ask)")
    expect(gap < tolerance, sentence)
