"""Did two runs write the same answers? A verdict that is exact in float32 and honest in 16 bits (lessons 08, 10).

In float32 the course's engine writes the same tokens whatever the batch, the block order or the
pool size, so a lesson can ``expect`` it. In bfloat16 a different batch adds the same numbers in a
different order and rounds differently; where two tokens are nearly tied, the pick can flip. The
helper keeps that dtype branch out of the lesson: it checks in float32 and explains in 16 bits.
"""

from __future__ import annotations

import textwrap

import torch

from kvcourse.notebook import expect

__all__ = ["batching_tolerance", "expect_same_answers"]


def expect_same_answers(same: int, total: int, dtype: torch.dtype, *, claim: str, cause: str) -> None:
    """``expect`` that all ``total`` answers matched in float32; in another dtype say why they may not.

    ``claim`` is the sentence a float32 run confirms; ``cause`` names what differed between the two runs'
    batches (e.g. "the tight pool recomputed a request alone"), the reason the rounding can differ.
    """
    if dtype == torch.float32:
        expect(same == total, claim)
        return
    agree = "Every answer agrees in this run" if same == total else f"Only {same} of {total} answers agree in this run"
    print(textwrap.fill(f"{agree}. In {dtype} identical answers are not guaranteed: {cause}, so the same sums are "
                        "added in a different order and round differently; where two tokens are nearly tied, the "
                        "pick can flip and the answer takes another course. In float32 the answers match, and the "
                        "course's tests check it there.", width=100))

def batching_tolerance(dtype: torch.dtype) -> float:
    """The relative gap that batching's rounding keeps SmolLM2's keys under, after all its layers (lesson 10).

    A float32 run stays near 1e-5 of the largest key; bfloat16 keeps 8 bits of mantissa, so a few of its
    rounding steps (2**-7 each) already reach a few percent.
    """
    return 1e-4 if dtype == torch.float32 else 5e-2
