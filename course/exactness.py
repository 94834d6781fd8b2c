"""Checks whose strictness depends on the dtype, kept out of a lesson's cells (lessons 12, 13).

In float32 the engine's paths agree bit for bit where the course claims it, and these helpers
``expect`` it. In a 16-bit dtype two computations that add the same numbers in a different order
(another batch shape, another implementation) round differently, so a nearly tied token can flip
or a sum of log-probabilities can drift: there the helpers say so in words instead of failing.
"""

from __future__ import annotations

import torch

from kvcourse.notebook import expect

_WHY_NOT_EXACT = ("where two tokens are nearly tied, the pick can flip. In float32 it holds, and the course's "
                  "tests check it there.")


def expect_same_answers(same: int, total: int, dtype: torch.dtype, sentence: str, why: str) -> None:
    """``same`` of ``total`` answers matched token for token: required in float32, explained otherwise.

    ``why`` says how the two runs computed differently (e.g. "the separate requests ran their prompts
    in a batch of four"); it is printed only when a 16-bit run did not match everywhere.
    """
    if dtype == torch.float32 or same == total:
        expect(same == total, sentence)
    else:
        print(f"In {dtype} that is not guaranteed: {why}, which adds numbers in a different order and rounds "
              f"differently; {_WHY_NOT_EXACT}")


def expect_close(gap: float, scale: float, dtype: torch.dtype, sentence: str) -> None:
    """Two computations of one quantity differ by ``gap``: under 1e-3 in float32, within 5 % of ``scale`` otherwise."""
    tolerance = 1e-3 if dtype == torch.float32 else 0.05 * abs(scale)
    if dtype != torch.float32:
        print(f"(in {dtype} two implementations round differently: agreement within 5 % is all one can ask)")
    expect(gap < tolerance, sentence)
