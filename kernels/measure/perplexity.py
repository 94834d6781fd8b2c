"""Perplexity of a text under a model: how surprised it is by each next token, on average (issue 45).

exp of the mean negative log-likelihood of each token given the ones before it, from one forward pass
without a cache (``all_logits``). A model that always put probability 1 on the right token scores 1; one
that guessed uniformly over SmolLM2's 49,152 tokens would score 49,152.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from kvcourse.kernels.measure.agreement import all_logits
from kvcourse.kernels.model.transformer import Transformer


def perplexity(model: Transformer, ids: Sequence[int], cache: str = "none", chunk: int | None = None) -> float:
    """exp(mean over positions 1..T-1 of -log p(token | the tokens before it)), in float32; with ``cache`` a
    quantised cache ("int8", "fp8", "kivi2"), through it, the text fed ``chunk`` tokens a step (``all_logits``)."""
    if len(ids) < 2:
        raise ValueError(f"perplexity needs at least two tokens (one to predict from), got {len(ids)}")
    return perplexity_of(all_logits(model, ids, cache, chunk), ids)


def perplexity_of(logits: torch.Tensor, ids: Sequence[int]) -> float:
    """The perplexity of ``ids`` from logits (T, vocab) already computed for every prefix of them."""
    if len(ids) < 2 or logits.shape[0] != len(ids):
        raise ValueError(f"need the logits of every prefix of at least two tokens: {tuple(logits.shape)}, {len(ids)}")
    targets = torch.tensor(list(ids)[1:], device=logits.device)
    nll = torch.nn.functional.cross_entropy(logits[:-1].float(), targets)  # each prediction against the next token
    return math.exp(float(nll))
