"""What a change to the model costs in answers (lesson 16): next-token agreement and the first difference.

``next_token_agreement`` compares a changed model's next-token predictions with the original's at
every position of some texts (``MERGE_TEXTS``, lesson 16's); ``first_difference`` finds where two
generations part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvcourse.kernels.attention.backend import StepMetadata
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.attention.backends.fp8 import FP8KVBackend
from kvcourse.kernels.attention.backends.int8 import Int8KVBackend
from kvcourse.kernels.attention.backends.kivi import Kivi2Backend
from kvcourse.kernels.checks import check_positive_int
from kvcourse.kernels.model.transformer import Transformer

# Lesson 16's texts for comparing a changed model's next-token predictions with the original's.
MERGE_TEXTS = (
    "The KV cache stores the keys and values of every token the model has read, so each new token "
    "needs only one forward pass instead of a pass over the whole text.",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who told stories "
    "to the children every evening.",
    "Water boils at 100 degrees Celsius at sea level. Higher up, the air pressure is lower, so water "
    "boils at a lower temperature.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
)


@dataclass(frozen=True)
class Agreement:
    """How often a changed model predicts the original's next token, and how far apart their distributions are."""

    num_positions: int
    num_same_top1: int
    mean_kl: float  # KL(original || changed) in nats, averaged over positions

    @property
    def top1(self) -> float:
        return self.num_same_top1 / self.num_positions


QUANTIZED_CACHES = ("int8", "fp8", "kivi2")  # the engine's quantised contiguous caches, by generate()'s names


def all_logits(model: Transformer, ids: Sequence[int], cache: str = "none", chunk: int | None = None) -> torch.Tensor:
    """The logits (T, vocab) after every prefix of ids, in float32.

    cache "none" attends to the keys and values as computed, in one forward pass; a quantised cache ("int8",
    "fp8", "kivi2") stores them first and attends to what it gives back, as every later step would, the text fed
    ``chunk`` tokens a step (all at once by default; a 2-bit cache keeps its newest tokens in full precision, so
    how the text arrives matters to it: a decode writes one token a step).
    """
    tokens = torch.tensor(list(ids), device=model.device)
    positions = torch.arange(len(tokens), device=model.device)
    if cache == "none":
        if chunk is not None:
            raise ValueError("cache 'none' reads the text in one pass: chunk applies to a quantised cache")
        with torch.inference_mode():
            return model(tokens, positions, NoCacheBackend()).float()
    check_positive_int("chunk", chunk, optional=True)
    return logits_in_steps(model, ids, _quantized(model, cache, len(tokens)), len(tokens) if chunk is None else chunk)


def logits_in_steps(
    model: Transformer, ids: Sequence[int], backend: Int8KVBackend | FP8KVBackend | Kivi2Backend, step: int
) -> torch.Tensor:
    """The logits (T, vocab, float32) after every prefix of ``ids``, the text written into ``backend``'s cache
    ``step`` tokens a forward pass, each pass begun and ended as generate() does."""
    check_positive_int("step", step)
    tokens = torch.tensor(list(ids), device=model.device)
    positions = torch.arange(len(tokens), device=model.device)
    logits = []
    with torch.inference_mode():
        for start in range(0, len(tokens), step):
            end = min(len(tokens), start + step)
            backend.begin_step(StepMetadata(start, end - start))
            logits.append(model(tokens[start:end], positions[start:end], backend).float())
            backend.end_step()
    return torch.cat(logits)


def _quantized(model: Transformer, cache: str, capacity: int) -> Int8KVBackend | FP8KVBackend | Kivi2Backend:
    config, dtype, device = model.config, model.dtype, model.device
    if cache == "int8":
        return Int8KVBackend(config, capacity, dtype, device, measure_error=False)
    if cache == "fp8":
        return FP8KVBackend(config, capacity, dtype, device, measure_error=False)
    if cache == "kivi2":
        return Kivi2Backend(config, dtype, device, measure_error=False)
    raise ValueError(f"cache must be 'none' or one of {QUANTIZED_CACHES}, got {cache!r}")


def next_token_agreement(
    reference: Transformer | Sequence[torch.Tensor],
    changed: Transformer,
    texts: Sequence[Sequence[int]],
    cache: str = "none",
) -> Agreement:
    """At every position of every text: does ``changed`` (its K/V kept as ``cache`` says) rank first
    the token that ``reference`` ranks first? And the mean KL divergence between their predictions.

    ``reference`` is a model, or its ``all_logits`` for each text, computed once and reused.
    """
    positions = same = 0
    kl = 0.0
    for i, ids in enumerate(texts):
        ref = all_logits(reference, ids) if isinstance(reference, Transformer) else reference[i]  # (T, vocab)
        new = all_logits(changed, ids, cache)  # (T, vocab)
        if ref.shape != new.shape:
            raise ValueError(f"reference logits {tuple(ref.shape)} do not match text {i} ({len(ids)} tokens)")
        positions += len(ids)
        same += int((ref.argmax(-1) == new.argmax(-1)).sum())
        log_p, log_q = ref.log_softmax(-1), new.log_softmax(-1)
        kl += float((log_p.exp() * (log_p - log_q)).sum())
    return Agreement(positions, same, kl / positions)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two token lists differ (one ending early counts), or None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):  # one may end early
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
