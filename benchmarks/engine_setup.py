"""What the engine benchmarks share: the real model on the CPU, 2 threads, and seeded prompts."""

from __future__ import annotations

import random
import time

import torch

from benchmarks.common import set_threads


def load_engine_model(dtype: torch.dtype = torch.float32):
    """(Transformer, hf_model, tokenizer) for SmolLM2-135M-Instruct in ``dtype`` on the CPU.

    Two threads, the course's reference machine; KVCOURSE_BENCH_THREADS overrides it (on an
    oversubscribed CPU every two-thread matrix product waits for a descheduled thread, and
    the figures measure the queue, not the engine). The count used is written in each JSON.
    """
    set_threads()
    from kvcourse.kernels.engine.generate import as_transformer
    from kvcourse.models import load_model

    hf_model, tokenizer = load_model(dtype=dtype, device="cpu")
    return as_transformer(hf_model), hf_model, tokenizer


def random_prompts(
    num: int,
    min_len: int,
    max_len: int,
    seed: int = 0,
    vocab: tuple[int, int] = (100, 20000),
) -> list[list[int]]:
    """Seeded prompts of ordinary token ids (no special tokens), lengths drawn uniformly."""
    rng = random.Random(seed)
    return [[rng.randrange(*vocab) for _ in range(rng.randint(min_len, max_len))] for _ in range(num)]


def timed(fn):
    """(result, seconds) of one call."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start
