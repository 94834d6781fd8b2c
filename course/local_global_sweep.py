"""How large lesson 24's sweep over local windows is: how much of the held-out text, and which windows;
and how long a prompt its paged-engine run serves (``engine_blocks_size``).

A learner's run reads the whole held-out text (about 3,000 tokens) at five windows, 1,024 down to 64 tokens, each
half the one before; the suite's headless run (kvcourse.kernel_env.running_headless) its first 800 tokens at three
(256, 128 and 64), so the lesson keeps within its time on two cores. Every sweep ends in two halvings, so the
lesson can compare what each one saves and costs, and every window is shorter than the text it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcourse.kernel_env import running_headless

PEOPLE_WINDOWS = (1024, 512, 256, 128, 64)
HEADLESS_WINDOWS = (256, 128, 64)


@dataclass(frozen=True)
class WindowSweep:
    max_tokens: int  # of the held-out text, from its start
    windows: tuple[int, ...]  # the local layers' windows, largest first, each half the one before


def window_sweep_size() -> WindowSweep:
    """Lesson 24's sweep: the whole text at five windows for people, 800 tokens at three in a headless run."""
    if running_headless():
        return WindowSweep(800, HEADLESS_WINDOWS)
    return WindowSweep(100_000, PEOPLE_WINDOWS)


@dataclass(frozen=True)
class EngineBlocksSize:
    prompt_tokens: int  # of the held-out text, from its start
    new_tokens: int
    windows: tuple[int, ...]  # the local layers' windows, largest first


def engine_blocks_size() -> EngineBlocksSize:
    """Lesson 24's run of the paged engine with windows: 2,048 prompt tokens and 64 new at windows of 512 and 256
    for people (benchmarks/bench_engine_windows.py's sizes), 256 and 8 at 64 in a headless run."""
    if running_headless():
        return EngineBlocksSize(256, 8, (64,))
    return EngineBlocksSize(2048, 64, (512, 256))
