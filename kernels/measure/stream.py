"""Paging against reservation on a stream of requests, served by the real engine in rounds (lesson 14).

One round serves the same trace twice on the same pool, stepping the two engines in turn (one
step of paging, one of reservation, ...), so a busy moment of a shared machine slows both alike.
Several rounds give the spread of the time ratio; what the engine counts (steps, sequences and
tokens per step) is the same in every round, so it is reported once, as the deterministic view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from kvcourse.kernels.baselines.fragmentation import PagingReplay, ReservationReplay
from kvcourse.kernels.engine.config import EngineConfig
from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.measure.serving import (
    ServedTrace,
    TraceServer,
    reservation_start_steps,
    serve_interleaved,
)
from kvcourse.kernels.measure.spread import Spread  # noqa: F401  (re-exported for lesson 14)
from kvcourse.kernels.model.transformer import Transformer
from kvcourse.kernels.workload import TraceRequest


@dataclass(frozen=True)
class PolicyRound:
    """One round: the trace served with paging and with reservation, on the same pool."""

    paged: ServedTrace
    reserved: ServedTrace

    @property
    def ratio(self) -> float:
        """Paging's tokens per second over reservation's, in this round."""
        return self.paged.tokens_per_second / self.reserved.tokens_per_second


def serve_both(
    model: Transformer, trace: list[TraceRequest], prompts: list[list[int]], pool_blocks: int, block_size: int
) -> PolicyRound:
    """One round on fresh engines: paging on ``pool_blocks`` blocks; reservation's admissions on the same slots.

    The engine cannot reserve, so lesson 09's reservation replay decides when each request starts,
    and the reserving engine gets room enough never to make anyone wait itself.
    """
    starts = reservation_start_steps(trace, pool_blocks * block_size)
    roomy = sum(math.ceil(r.final_len / block_size) for r in trace)  # blocks for every request at once
    paged_engine = LLMEngine(model, EngineConfig(block_size=block_size, num_blocks=pool_blocks))
    reserving_engine = LLMEngine(model, EngineConfig(block_size=block_size, num_blocks=roomy))
    paged, reserved = serve_interleaved(
        [TraceServer(paged_engine, trace, prompts), TraceServer(reserving_engine, trace, prompts, starts)]
    )
    return PolicyRound(paged, reserved)


def counts_table(served: PolicyRound, trace: list[TraceRequest], pool_blocks: int, block_size: int) -> pd.DataFrame:
    """What the engine counted, one row per policy: the same in every round, on any machine.

    "utilisation" and "internal" are lesson 11's, from the replays of the same trace on the same pool: the share
    of the busy memory (every slot except those free while nobody waits) that held a token's keys and values, and
    the share lost inside what a request held (reservation: room for answer tokens that never came; paging: the
    empty tail of each sequence's last block).
    """
    replays = {
        "reservation": ReservationReplay(trace, pool_blocks * block_size).run(),
        "paging": PagingReplay(trace, pool_blocks, block_size).run(),
    }
    rows = {}
    for name, run in (("reservation", served.reserved), ("paging", served.paged)):
        rows[name] = {
            "steps": run.num_steps,
            "tokens": run.num_tokens,
            "tokens per step": run.num_tokens / run.num_steps,  # = sequences per step, on average
            "most sequences in a step": run.max_batch,
            "utilisation": f"{replays[name].utilisation:.0%}",
            "internal": f"{replays[name].share('internal'):.0%}",
        }
    return pd.DataFrame.from_dict(rows, orient="index").round(2)


def rounds_table(rounds: list[PolicyRound]) -> pd.DataFrame:
    """One row per round: both policies' tokens per second and their ratio."""
    return pd.DataFrame(
        {
            "paging tokens/s": [r.paged.tokens_per_second for r in rounds],
            "reservation tokens/s": [r.reserved.tokens_per_second for r in rounds],
            "ratio": [r.ratio for r in rounds],
        },
        index=pd.RangeIndex(1, len(rounds) + 1, name="round"),
    ).round(2)
