"""How large lesson 25's quality run is: how much of the held-out text every cache format reads, and in what steps.

A learner's run reads the whole held-out text (kernels/measure/texts.py, about 3,000 tokens); the suite's headless run
(kvcourse.kernel_env.running_headless) its first 640 tokens (20 steps), so the lesson keeps within its time on 2 cores.
Either way the text arrives 32 tokens a step, as a prompt and then generated text would fill a cache: a 2-bit
cache keeps its newest tokens in full precision, and an FP8 cache sets each layer's scale from the first step.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernel_env import running_headless

STEP_TOKENS = 32  # tokens fed per step: one KIVI group


@dataclass(frozen=True)
class FormatSweep:
    max_tokens: int  # of the held-out text, from its start
    step_tokens: int = STEP_TOKENS  # tokens written to the cache per forward pass


def format_sweep_size() -> FormatSweep:
    """Lesson 25's run: the whole text for people, its first 640 tokens in a headless run."""
    if running_headless():
        return FormatSweep(640)
    return FormatSweep(100_000)
