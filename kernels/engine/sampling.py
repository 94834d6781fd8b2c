"""Turning logits into the next token: greedy, temperature, top-k, top-p (lessons 02, 05, 12)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from kvcourse.kernels.checks import check_positive_int

DEFAULT_MAX_NEW_TOKENS = 64  # LLMEngine's budget when SamplingParams.max_new_tokens is None


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. temperature 0 means greedy (argmax); seed makes sampling repeatable (lesson 05).

    ``max_new_tokens`` and ``n`` are for the serving engine (LLMEngine; None there means
    ``DEFAULT_MAX_NEW_TOKENS``); ``generate`` takes its own max_new_tokens argument and one sample,
    and refuses params that set them.
    """

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    max_new_tokens: int | None = None
    stop_on_eos: bool = True
    n: int = 1  # samples per prompt in LLMEngine, sharing the prompt's blocks; sample i uses seed + i (lesson 12)

    def __post_init__(self) -> None:
        if (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, (int, float))
            or not math.isfinite(self.temperature)
            or self.temperature < 0
        ):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}")
        check_positive_int("top_k", self.top_k, optional=True)
        if self.top_p is not None and (not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1] or None, got {self.top_p!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        if self.max_new_tokens is not None and (
            isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 0
        ):
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {self.max_new_tokens!r}")
        check_positive_int("n (samples per prompt)", self.n)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def params_for_sample(params: SamplingParams, index: int) -> SamplingParams:
    """What sample ``index`` of an n-sample request draws with: n = 1 and seed + index (lesson 12).

    As in vLLM's parallel sampling, every sample has its own random stream, so sample i of a
    request with ``seed=s`` is exactly the single request with ``seed=s + i``: it does not depend on
    how many siblings run beside it, in what order they draw, or when they stop.
    """
    if not 0 <= index < params.n:
        raise ValueError(f"sample index must be in [0, {params.n}), got {index!r}")
    return replace(params, n=1, seed=None if params.seed is None else params.seed + index)


def make_generator(params: SamplingParams, device: torch.device | str = "cpu") -> torch.Generator | None:
    """A torch.Generator seeded from params.seed (None when greedy: nothing random happens)."""
    if params.greedy:
        return None
    generator = torch.Generator(device=device)
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(params.seed)
    return generator


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature-scaled float32 logits with tokens outside top-k / top-p set to -inf."""
    logits = logits.float() / params.temperature
    if params.top_k is not None and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p is not None and params.top_p < 1:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens strictly before it already reach top_p (the first always stays).
        drop_sorted = probs.cumsum(dim=-1) - probs >= params.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The index of each row's largest logit: argmax's answer, ties to the first index, NaN wins, as argmax.

    Through ``max(dim).indices``, not ``argmax``: PyTorch's CPU argmax takes about 2 ms for a batch of 32 rows
    of SmolLM2's 49,152 logits in float32 and 5 ms in bfloat16 (one thread), where max with its indices takes
    0.7 and 1.1 ms and returns the same indices (tests/kernels/test_kernels_sampling.py): in bfloat16 that is 4 % of a
    batch-32 decode step (Intel Xeon with AMX; the same ratios with ATEN_CPU_CAPABILITY=avx2 and default).
    """
    return logits.max(dim=-1).indices


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None) -> torch.Tensor:
    """Next token ids from logits (vocab,) or (B, vocab): argmax when greedy, else a draw (lesson 05)."""
    if params.greedy:
        return greedy(logits)
    probs = torch.softmax(filter_logits(logits, params), dim=-1)
    flat = probs.reshape(-1, probs.shape[-1])  # (B, vocab)
    drawn = torch.multinomial(flat, 1, generator=generator)  # (B, 1)
    return drawn.reshape(probs.shape[:-1])
