"""What a timing sweep measures, and with what: the backends' names and the sweep's settings (lesson 17).

Both sweep.py, which runs a sweep, and runners.py, which builds the backends it times, read these; they sit
here, below both, so that the sweep builds its runners without the two importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvcourse.kernel_env import running_headless

DEFAULT_LENGTHS = (16, 32, 64, 128, 256)
LESSON_LENGTHS = (8, 16, 32, 64)  # the answer lengths lesson 17 times in the notebook


def lesson_lengths() -> list[int]:
    """The answer lengths lesson 17's notebook times: 8 to 64 new tokens, or 8 to 32 in a headless run (tests)."""
    return list(LESSON_LENGTHS[:-1] if running_headless() else LESSON_LENGTHS)


def lesson_repeats() -> int:
    """Timed repeats of each length in lesson 17's notebook: 3, or 1 in a headless run (tests)."""
    return 1 if running_headless() else 3


DEFAULT_PROMPT = "Once upon a time in a distant land"
HF_CACHE = "hf-cache"
HF_NO_CACHE = "hf-no-cache"

# A run maps a number of new tokens to the new tokens it generated.
Runner = Callable[[int], list[int]]
ENGINE_MODES = ("none", "contiguous", "paged")  # the exact modes; int8 and sliding change the answer


@dataclass(frozen=True)
class Backend:
    """One way of generating that the lab times (lesson 17)."""

    name: str  # key in tables and JSON
    label: str  # legend text, readable without the lesson
    engine_cache: str | None = None  # None: Hugging Face generate; else the engine's cache mode


HF_BACKENDS = (
    Backend(HF_CACHE, "HF generate, use_cache=True (KV cache)"),
    Backend(HF_NO_CACHE, "HF generate, use_cache=False (recompute everything)"),
)


def engine_backend(cache: str) -> Backend:
    """The course engine with one cache mode, as a lab backend (lesson 17)."""
    return Backend(f"engine-{cache}", f"course engine, cache={cache!r}", engine_cache=cache)


@dataclass(frozen=True)
class SweepConfig:
    """What to measure: output lengths, repeats, warm-up runs, prompt and engine modes (lesson 17)."""

    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    num_repeats: int = 3
    num_warmup: int = 1
    prompt: str = DEFAULT_PROMPT
    engine_modes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        lengths = tuple(self.lengths)
        if not lengths:
            raise ValueError("lengths: give at least one output length, e.g. 16 32 64")
        for n in lengths:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"lengths: {n!r} is not a positive whole number of tokens")
        # Sorted and unique, so tables and plots read left to right.
        object.__setattr__(self, "lengths", tuple(sorted(set(lengths))))
        object.__setattr__(self, "engine_modes", tuple(self.engine_modes))
        if isinstance(self.num_repeats, bool) or not isinstance(self.num_repeats, int) or self.num_repeats < 1:
            raise ValueError(f"repeats must be a whole number >= 1, got {self.num_repeats!r}")
        if isinstance(self.num_warmup, bool) or not isinstance(self.num_warmup, int) or self.num_warmup < 0:
            raise ValueError(f"warmup must be a whole number >= 0, got {self.num_warmup!r}")
        if not self.prompt.strip():
            raise ValueError("prompt must not be empty")

    @property
    def backends(self) -> tuple[Backend, ...]:
        return HF_BACKENDS + tuple(engine_backend(mode) for mode in self.engine_modes)
