"""How many blocks one sequence holds in the paged engine, every layer global or with local layers (lesson 24).

``engine_peak_blocks`` serves one prompt through ``LLMEngine`` with every layer global, then with Gemma 3's
pattern (``local_global_windows``) at each window (``EngineConfig.layer_windows``: a block table per group of
layers with one window, all on one pool, and a local group's blocks freed once they slide out of its window).
The blocks are read from the engine's own block tables, in the record of every step (``ScheduledBatch``), when
the sequence holds the most: after the scheduler gave it this step's blocks and before the pass frees any. A
block of the all-global engine holds every layer; with windows it holds one group's layers, so the bytes column
compares the two. The tokens each run wrote are checked against the attention-mask reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from kvcourse.kernels.attention.backends.sliding import local_global_windows
from kvcourse.kernels.attention.paged_windows import NULL_BLOCK
from kvcourse.kernels.checks import ceil_div
from kvcourse.kernels.engine.batch import ScheduledBatch
from kvcourse.kernels.engine.config import EngineConfig
from kvcourse.kernels.engine.llm_engine import LLMEngine
from kvcourse.kernels.engine.sampling import SamplingParams
from kvcourse.kernels.measure.local_global import masked_logits
from kvcourse.kernels.memory.kv_cache_groups import kv_cache_groups
from kvcourse.kernels.model.transformer import Transformer


def _served(engine: LLMEngine, prompt: list[int], max_new_tokens: int) -> tuple[list[int], int]:
    """The tokens the engine wrote and the most blocks the sequence's tables held in any step's record."""
    peak, schedule = 0, engine.scheduler.schedule

    def recorded() -> ScheduledBatch:
        nonlocal peak
        batch = schedule()
        for part in batch.seqs:
            peak = max(peak, sum(b != NULL_BLOCK for table in part.block_tables for b in table))
        return batch

    engine.scheduler.schedule = recorded  # type: ignore[method-assign]  # the engine steps as it always does
    output = engine.generate([prompt], SamplingParams(max_new_tokens=max_new_tokens, stop_on_eos=False))[0]
    return output.tokens, peak


def engine_peak_blocks(
    model: Transformer,
    prompt: Sequence[int],
    max_new_tokens: int,
    windows: Sequence[int],
    block_size: int = 16,
    max_num_batched_tokens: int = 2048,
) -> pd.DataFrame:
    """One row per run (every layer global, then each window): the peak blocks of the sequence, the layers one
    block holds, the peak in blocks of every layer (the all-global engine's block), its peak bytes and their share
    of all global, and the share of its tokens that are the mask reference's first choice after the same prefix
    (1 in float32; bfloat16 may part at a near tie)."""
    prompt, layers = list(prompt), model.config.num_layers
    longest = len(prompt) + max_new_tokens
    rows = {}
    for window in [None, *windows]:
        layer_windows = None if window is None else local_global_windows(layers, window)
        groups = 1 if layer_windows is None else len(kv_cache_groups(layer_windows))
        config = EngineConfig(
            block_size=block_size,
            num_blocks=ceil_div(longest, block_size) * groups,  # the same bytes, whatever a block holds
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=longest,
            layer_windows=layer_windows,
        )
        engine = LLMEngine(model, config)
        tokens, peak = _served(engine, prompt, max_new_tokens)
        block_bytes = engine.pool.nbytes // engine.pool.num_blocks
        first_choices = masked_logits(model, prompt + tokens, layer_windows)[len(prompt) - 1 : -1].argmax(-1)
        rows["all global" if window is None else f"window {window}"] = {
            "peak blocks": peak,
            "layers per block": engine.pool.k.shape[0],
            "in blocks of every layer": peak * engine.pool.k.shape[0] / layers,
            "peak bytes": peak * block_bytes,
            "agreement with the mask reference": (first_choices == torch.tensor(tokens)).float().mean().item(),
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.insert(4, "share of all global", table["peak bytes"] / table["peak bytes"].iloc[0])
    return table
