"""A chat served turn by turn on the real engine, with the cache kept or started afresh (lesson 06).

``serve_turn`` runs one turn's prompt through an ``LLMEngine`` and reports how many prompt tokens
the engine had to compute (the rest it found in its prefix cache), the seconds to the first
reply token (the prefill step) and the reply; ``turn_table`` lays the turns of two ways of
serving the same conversation side by side, one row per turn.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.engine.sampling import SamplingParams


@dataclass(frozen=True)
class Turn:
    """One turn served: prompt tokens, how many of them were computed, seconds to the first reply token, the reply."""

    prompt_tokens: int
    computed: int
    seconds_to_first_token: float
    reply: list[int]

    @property
    def cached(self) -> int:
        return self.prompt_tokens - self.computed


def serve_turn(engine: LLMEngine, prompt_ids: Sequence[int], max_new_tokens: int) -> Turn:
    """Serve one prompt to the end on ``engine``; the first step is the prefill, whose output is the first token."""
    request_id = engine.add_request(list(prompt_ids), SamplingParams(max_new_tokens=max_new_tokens))
    start = time.perf_counter()
    engine.step()
    seconds = time.perf_counter() - start
    while engine.has_unfinished_requests:
        engine.step()
    out = engine.requests[request_id].output()
    return Turn(len(prompt_ids), len(prompt_ids) - out.num_cached_tokens, seconds, out.tokens)


def turn_table(kept: Sequence[Turn], fresh: Sequence[Turn]) -> pd.DataFrame:
    """One row per turn: prompt tokens, then tokens computed and seconds to the first word, cache kept vs
    fresh start."""
    if len(kept) != len(fresh):
        raise ValueError(f"kept and fresh must cover the same turns, got {len(kept)} and {len(fresh)}")
    rows = [
        {
            "turn": i,
            "prompt tokens": k.prompt_tokens,
            "cache kept: computed": k.computed,
            "cache kept: s to first word": round(k.seconds_to_first_token, 2),
            "fresh start: computed": f.computed,
            "fresh start: s to first word": round(f.seconds_to_first_token, 2),
        }
        for i, (k, f) in enumerate(zip(kept, fresh, strict=True), start=1)
    ]
    return pd.DataFrame(rows).set_index("turn")
