"""How large lesson 27's restore-against-recompute run is: the prompt lengths and the repeats at each.

A learner's run times prompts of 16 to 2,048 tokens, three times each; the suite's headless run
(kvcourse.kernel_env.running_headless) 16, 64 and 256 tokens twice each, so the lesson keeps within its time on
2 cores (recomputing 2,048 tokens takes seconds on a CPU; restoring them, a fraction of one).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernel_env import running_headless


@dataclass(frozen=True)
class TierSweep:
    lengths: tuple[int, ...]  # tokens restored or recomputed, whole blocks of 16
    repeats: int  # timed runs per length; the fastest is kept


def tier_sweep_size() -> TierSweep:
    """Lesson 27's run: 16 to 2,048 tokens three times each for people, 16, 64 and 256 twice headless."""
    if running_headless():
        return TierSweep((16, 64, 256), 2)
    return TierSweep((16, 32, 64, 128, 256, 512, 1024, 2048), 3)
