"""Token-by-token generation with a choice of KV storage, measuring every step (lessons 02, 05, 06, 16).

The loop is the same for every cache mode; only the backend differs. Each step feeds the
tokens the backend has not seen (all of them without a cache, one with a cache), asks for
logits at the last position only, picks a token, and records what that step cost. The cache
modes, and the factory that builds a cache of your own, are cache_modes.py (CACHE_MODES re-exported here).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import torch

from kvcourse.kernels import costs
from kvcourse.kernels.attention.backend import SequenceCache, StepMetadata
from kvcourse.kernels.engine.cache_modes import CACHE_MODES as CACHE_MODES
from kvcourse.kernels.engine.cache_modes import CacheFactory, CacheRequest, ModelRunningCache
from kvcourse.kernels.engine.sampling import SamplingParams, make_generator, sample
from kvcourse.kernels.engine.threads import thread_policy
from kvcourse.kernels.model.transformer import Transformer


class Phase(StrEnum):
    """Prefill reads the whole prompt at once; decode adds one token per step (lesson 06)."""

    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True)
class StepStats:
    """What one forward pass did (lessons 01-06 plot these)."""

    step: int
    phase: Phase
    num_tokens_processed: int
    context_len: int
    flops: int
    weight_bytes: int
    kv_cache_bytes: int
    score_cells: int
    seconds: float


@dataclass
class GenerationResult:
    """The new tokens and one StepStats per forward pass."""

    tokens: list[int]
    stats: list[StepStats] = field(default_factory=list)
    prompt_len: int = 0
    stopped_on_eos: bool = False
    backend: Any = None  # the cache object, for inspection (e.g. the int8 cache's .error)
    converted: bool = False  # True when a Hugging Face model was converted for this call

    @property
    def decode_seconds(self) -> float:
        return sum(s.seconds for s in self.stats if s.phase is Phase.DECODE)

    @property
    def num_decode_steps(self) -> int:
        return sum(1 for s in self.stats if s.phase is Phase.DECODE)


def as_transformer(model: Any, fast_paths: str | None = None) -> Transformer:
    """Our Transformer; a Hugging Face model converted now, into a new copy (Transformer.from_hf).

    ``fast_paths`` "auto" or "off" sets the model's CPU fast paths first (Transformer.accelerate,
    which changes the model you pass); None keeps ours as it is and accelerates a conversion.
    Nothing is remembered on the Hugging Face model: convert once yourself and pass the result
    to reuse one conversion across calls.
    """
    if isinstance(model, Transformer):
        return model if fast_paths is None else model.accelerate(fast_paths)
    if not hasattr(model, "config") or not hasattr(model, "state_dict"):
        raise TypeError(f"expected a kvcourse Transformer or a transformers Llama/Qwen2 model, got {type(model)}")
    return Transformer.from_hf(model).accelerate(fast_paths or "auto")


def _prompt_ids(ids: Any) -> list[int]:
    if isinstance(ids, torch.Tensor):
        if ids.dim() == 2:
            if ids.shape[0] != 1:
                raise ValueError(f"a 2-D prompt must have exactly one row, got shape {tuple(ids.shape)}")
            ids = ids[0]
        if ids.dim() != 1:
            raise ValueError(f"the prompt must be a list of ids or a 1-D / (1, T) tensor, got {tuple(ids.shape)}")
        ids = ids.tolist()
    token_ids = [int(i) for i in ids]
    if not token_ids:
        raise ValueError("the prompt is empty: give at least one token id")
    return token_ids


def _eos_ids(eos_token_id: int | list[int] | None, model: Transformer) -> set[int]:
    if eos_token_id is None:
        return set(model.config.eos_token_ids)
    return {int(eos_token_id)} if isinstance(eos_token_id, int) else {int(i) for i in eos_token_id}


def _check_sampling(sampling: SamplingParams) -> None:
    """Refuse settings that generate would otherwise silently ignore."""
    if sampling.max_new_tokens is not None:
        raise ValueError(
            "generate takes max_new_tokens as its own argument; SamplingParams.max_new_tokens "
            "is LLMEngine's budget and would be ignored here"
        )
    if sampling.n != 1:
        raise ValueError(f"generate makes one sample; for n = {sampling.n} samples use LLMEngine")


def generate(
    model: Any,
    ids: Any,
    max_new_tokens: int,
    cache: str | CacheFactory = "contiguous",
    sampling: SamplingParams | None = None,
    window: int | None = None,
    eos_token_id: int | list[int] | None = None,
    attention: str = "auto",
    num_threads: int | None = None,
    fast_paths: str | None = None,
) -> GenerationResult:
    """Generate up to max_new_tokens after the prompt `ids` (lessons 02, 05, 06, 16).

    cache: "none" reruns the whole sequence every step; "contiguous" keeps K/V; "int8" keeps
    them quantised, "fp8" as E4M3 and "kivi2" in 2 bits (issue 45); "sliding" keeps the last
    `window` tokens; "local_global" keeps them on five layers in six and every token on the sixth
    (Gemma 3's pattern, issue 45); "paged" runs the paged engine; or
    a CacheFactory (CacheRequest -> cache) for a cache of your own.
    sampling: None means greedy. EOS (from the argument, else the model's config) stops early
    when sampling.stop_on_eos; the EOS token itself is included in .tokens. A Hugging Face model
    is converted for this call (result.converted says so; see as_transformer). num_threads is
    the CPU thread policy for this call (None: torch's current setting). fast_paths "auto" or
    "off" sets the model's CPU fast paths (Transformer.accelerate); None leaves them as they are.
    """
    transformer = as_transformer(model, fast_paths)
    prompt = _prompt_ids(ids)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    context = transformer.config.max_position_embeddings
    if len(prompt) > context:
        raise ValueError(f"the prompt has {len(prompt)} tokens, longer than the model's context of {context}")
    if len(prompt) + max_new_tokens > context:
        raise ValueError(
            f"prompt ({len(prompt)}) + max_new_tokens ({max_new_tokens}) exceeds the model's "
            f"context of {context} positions; ask for at most {context - len(prompt)} new tokens"
        )
    if not callable(cache) and cache not in CACHE_MODES:
        raise ValueError(f"unknown cache {cache!r}; choose one of {sorted(CACHE_MODES)}, or pass a CacheFactory")
    if window is not None and cache not in ("sliding", "local_global") and not callable(cache):
        raise ValueError(f"window only applies to cache='sliding' or 'local_global', not {cache!r}")
    sampling = sampling or SamplingParams()
    _check_sampling(sampling)
    eos = _eos_ids(eos_token_id, transformer) if sampling.stop_on_eos else set()
    factory = cache if callable(cache) else CACHE_MODES[cache]
    backend = factory(CacheRequest(transformer, len(prompt) + max_new_tokens, window, attention))
    windows = getattr(backend, "windows", window)  # a cache with a window per layer says which
    with thread_policy(num_threads):
        result = _run(transformer, backend, prompt, max_new_tokens, sampling, eos, windows)
    result.converted = transformer is not model
    return result


def _forward(
    model: Transformer,
    backend: SequenceCache | ModelRunningCache,
    buffer: torch.Tensor,
    positions: torch.Tensor,
    start: int,
    end: int,
) -> torch.Tensor:
    """Logits (1, vocab) of token end - 1 after feeding tokens start .. end - 1."""
    if isinstance(backend, ModelRunningCache):
        return backend.forward(buffer[:end].tolist())
    backend.begin_step(StepMetadata(start, end - start))
    last = torch.tensor([end - start - 1], device=buffer.device)  # logits for the final row only
    logits: torch.Tensor = model(buffer[start:end], positions[start:end], backend, logits_index=last)
    backend.end_step()
    return logits


def _run(
    model: Transformer,
    backend: SequenceCache | ModelRunningCache,
    prompt: list[int],
    max_new_tokens: int,
    sampling: SamplingParams,
    eos: set[int],
    window: int | None | Sequence[int | None],
) -> GenerationResult:
    device = model.device
    generator = make_generator(sampling, device)
    weight_bytes = model.weight_bytes_read_per_pass()
    seq = torch.tensor(prompt, dtype=torch.long, device=device)
    buffer = torch.empty(len(prompt) + max_new_tokens, dtype=torch.long, device=device)
    buffer[: len(prompt)] = seq
    positions_all = torch.arange(len(buffer), device=device)
    result = GenerationResult(tokens=[], prompt_len=len(prompt), backend=backend)
    length = len(prompt)
    with torch.inference_mode():
        for step in range(max_new_tokens):
            start = backend.num_computed_tokens
            cells_before = backend.num_score_cells
            tic = time.perf_counter()
            logits = _forward(model, backend, buffer, positions_all, start, length)
            token = int(sample(logits[0], sampling, generator))
            seconds = time.perf_counter() - tic
            result.stats.append(
                StepStats(
                    step=step,
                    phase=Phase.PREFILL if step == 0 else Phase.DECODE,
                    num_tokens_processed=length - start,
                    context_len=length,
                    flops=costs.forward_flops(model.config, length - start, length, num_logits=1, window=window),
                    weight_bytes=weight_bytes,
                    kv_cache_bytes=backend.kv_cache_bytes,
                    score_cells=backend.num_score_cells - cells_before,
                    seconds=seconds,
                )
            )
            result.tokens.append(token)
            buffer[length] = token
            length += 1
            if token in eos:
                result.stopped_on_eos = True
                break
    return result
