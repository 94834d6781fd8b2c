"""The lab model and engine settings: a tiny random decoder that serves a trace in a second or two.

The labs judge a policy on what the engine does with it, not on what the model knows, so the model
is the textbook Transformer at toy size with seeded random weights: the same on every machine, fast
on one core in the grading sandbox, and sharp enough (weights of std 0.5) that a corrupted block of
K/V changes the tokens. Fast paths are off and one thread runs it (``LAB_THREADS``, held around the
engine's steps and each beam search), so every run of a trace is the same computation, in the learner's
notebook, in the sandbox and in the grader's replay.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cache

import torch

from kvcourse.kernels import EngineConfig, Transformer, beam_search
from kvcourse.kernels.engine.threads import thread_policy
from kvcourse.kernels.memory.block_manager import BlockManager
from kvcourse.kernels.model.config import ModelConfig

from .traces import VOCAB, BeamRun, LabTrace

LAB_MODEL = ModelConfig(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=None,
    rope_theta=10000.0,
    rms_norm_eps=1e-5,
    max_position_embeddings=128,
    tie_word_embeddings=False,
    attention_bias=False,
)
TOKEN_BUDGET = 48  # tokens per engine step: long prompts are prefilled in chunks
LAB_THREADS = 1  # every run of a trace, in the notebook, the sandbox (1 core) and the grader's replay (any count)


_BUILDING = threading.Lock()


@cache
def _built() -> Transformer:
    model = Transformer(LAB_MODEL)
    model.reset_parameters(std=0.5, generator=torch.Generator().manual_seed(20261202))
    return model.eval()


def lab_model() -> Transformer:
    """The tiny decoder every lab runs on (seeded: identical everywhere). Its weights come from a generator of
    its own, never torch's global one: the grader judges two submissions at once in two threads, and a draw
    from the shared stream in between gave the replay other weights than the sandbox's run."""
    with _BUILDING:  # one model per process, however many threads ask first
        return _built()


def lab_config(trace: LabTrace, prefix_caching: bool = False) -> EngineConfig:
    """The engine settings a trace is served with (prefix caching only where the lab is about it: lab B)."""
    return EngineConfig(
        block_size=trace.block_size,
        num_blocks=trace.num_blocks,
        max_num_seqs=trace.max_num_seqs,
        max_num_batched_tokens=TOKEN_BUDGET,
        max_model_len=LAB_MODEL.max_position_embeddings,
        enable_prefix_caching=prefix_caching,
        fast_paths="off",
        num_threads=LAB_THREADS,
        max_events=0,
    )


def lab_beam_search(
    run: BeamRun, block_size: int, block_manager: Callable[[int, int], BlockManager] | None = None
) -> list[list[int]]:
    """A trace's beam run on the lab model, on LAB_THREADS as the engine's steps are: the grader's process may
    have more threads than the sandbox, and a product summed in another order can change a beam."""
    with thread_policy(LAB_THREADS):
        return beam_search(
            lab_model(), list(run.prompt), run.beam_width, run.max_new_tokens, block_size, block_manager=block_manager
        ).beams
