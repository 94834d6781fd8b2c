"""Static against continuous (iteration-level) batching on the real engine, and what a run's steps cost (lesson 14).

*Static* batching starts B requests together and starts the next B only when the longest answer of
the group has finished: slots freed by short answers stay empty until then. *Continuous* batching,
introduced by Orca (Yu et al., OSDI 2022) and used by every serving engine since, schedules per
iteration: the engine admits a waiting request into a freed slot at its next step. The engine of this
course batches continuously; capping its running sequences at B (``max_num_seqs``) and handing it
the next group only when it is empty makes it batch statically, so both run the same model code.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd

from kvcourse.kernels.engine.config import EngineConfig
from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.measure.serving import ServedTrace, TraceServer, serve_interleaved
from kvcourse.kernels.model.transformer import Transformer
from kvcourse.kernels.workload import TraceRequest

NOT_YET = sys.maxsize  # the start step of a request whose group has not been handed over

__all__ = ["StaticServer", "compare_table", "seconds_for_batches", "serve_static_and_continuous"]


class StaticServer(TraceServer):
    """Hands the engine ``batch`` requests at a time, in trace order, the next group once it is empty."""

    def __init__(self, engine: LLMEngine, trace: list[TraceRequest], prompts: list[list[int]], batch: int) -> None:
        super().__init__(engine, trace, prompts, [0] * len(trace))
        self.batch = batch
        self._released = 0  # requests handed over so far: whole groups

    def step(self) -> None:
        if not self.engine.has_unfinished_requests:
            self._released = min(len(self.trace), self._released + self.batch)
        self.starts = [0 if i < self._released else NOT_YET for i in range(len(self.trace))]
        super().step()


def serve_static_and_continuous(
    model: Transformer, trace: list[TraceRequest], prompts: list[list[int]], batch: int, block_size: int = 16
) -> tuple[ServedTrace, ServedTrace]:
    """Every request of ``trace`` waiting at step 0, served at most ``batch`` at a time: (static, continuous).

    The two engines step in turn, so a busy moment of a shared machine slows both alike. The pool holds
    every request at once, so only the scheduling differs, never the memory.
    """
    roomy = sum(math.ceil(r.final_len / block_size) for r in trace)
    engines = [
        LLMEngine(model, EngineConfig(block_size=block_size, num_blocks=roomy, max_num_seqs=batch)) for _ in range(2)
    ]
    static = StaticServer(engines[0], trace, prompts, batch)
    continuous = TraceServer(engines[1], trace, prompts, [0] * len(trace))
    served = serve_interleaved([static, continuous])
    return served[0], served[1]


def seconds_for_batches(batch_per_step: list[int] | list[float], step_seconds: dict[int, float]) -> float:
    """The seconds a run of these batches takes if a step of batch b costs ``step_seconds[b]``.

    Batch sizes between the ones given are interpolated linearly (lesson 14's sweep times a few).
    """
    known = sorted(step_seconds)
    return float(np.interp(batch_per_step, known, [step_seconds[b] for b in known]).sum())


def compare_table(runs: dict[str, ServedTrace]) -> pd.DataFrame:
    """One row per run: the engine's steps, tokens and tokens per step (any machine), and the measured tokens/s."""
    rows = {
        name: {
            "steps": run.num_steps,
            "tokens": run.num_tokens,
            "tokens per step": run.num_tokens / run.num_steps,
            "tokens/s measured": run.tokens_per_second,
        }
        for name, run in runs.items()
    }
    return pd.DataFrame.from_dict(rows, orient="index").round(2)
