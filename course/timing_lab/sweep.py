"""The use_cache timing lab: time generation with and without the KV cache (lesson 17).

The same prompt is generated greedily to each output length in a sweep, once per backend and
repeat: Hugging Face ``generate(use_cache=True)``, ``generate(use_cache=False)`` and, when asked,
the course's own engine. Every run is forced to the full length (end-of-sequence does not stop
it), so all backends do the same number of steps, and every run's tokens are compared with the
first cached run's: a speedup only counts when the answer is the same.
"""

from __future__ import annotations

import gc
import platform
import statistics
import time
from dataclasses import dataclass, field

import torch

from kvcourse.kernels.measure.agreement import first_difference  # the timing lab's name for it too
from kvcourse.timing_lab.config import (
    DEFAULT_LENGTHS,
    DEFAULT_PROMPT,
    HF_CACHE,
    HF_NO_CACHE,
    Backend,
    Runner,
    SweepConfig,
)
from kvcourse.timing_lab.runners import make_runners


@dataclass
class Timing:
    """Wall-clock seconds of every repeat of one backend at one output length (lesson 17)."""

    num_new_tokens: int
    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def spread(self) -> float:
        """Max minus min over the repeats: how noisy this measurement was."""
        return max(self.seconds) - min(self.seconds)

    @property
    def tokens_per_second(self) -> float:
        return self.num_new_tokens / self.median


@dataclass(frozen=True)
class Mismatch:
    """A run whose tokens differ from the first cached run's (lesson 17)."""

    backend: str
    num_new_tokens: int
    position: int  # index of the first differing new token
    expected: int | None  # None: the run ended before this position
    got: int | None

    def describe(self) -> str:
        return (
            f"{self.backend} at length {self.num_new_tokens}: first difference at new token "
            f"#{self.position} (expected id {self.expected}, got {self.got})"
        )


@dataclass
class SweepResult:
    """Everything a sweep measured, complete or interrupted (lesson 17)."""

    config: SweepConfig
    header: dict
    timings: dict[int, dict[str, Timing]] = field(default_factory=dict)  # length -> backend -> Timing
    reference_tokens: dict[int, list[int]] = field(default_factory=dict)  # length -> HF cached tokens
    mismatches: list[Mismatch] = field(default_factory=list)
    interrupted: bool = False

    @property
    def backends(self) -> tuple[Backend, ...]:
        return self.config.backends

    @property
    def completed_lengths(self) -> list[int]:
        """Lengths where every backend finished every repeat."""
        done = []
        for n, by_backend in self.timings.items():
            if all(len(by_backend.get(b.name, Timing(n)).seconds) == self.config.num_repeats for b in self.backends):
                done.append(n)
        return sorted(done)

    @property
    def tokens_match(self) -> bool:
        return not self.mismatches

    def median(self, length: int, backend: str) -> float:
        return self.timings[length][backend].median

    def speedup(self, length: int, slow: str = HF_NO_CACHE, fast: str = HF_CACHE) -> float:
        """How many times faster ``fast`` was than ``slow`` at this length (median over repeats)."""
        return self.median(length, slow) / self.median(length, fast)

    def to_json(self) -> dict:
        """Raw figures: header metadata plus every repeat of every backend at every length."""
        rows = []
        for n in sorted(self.timings):
            for b in self.backends:
                t = self.timings[n].get(b.name)
                if t is None or not t.seconds:
                    continue
                rows.append(
                    {
                        "num_new_tokens": n,
                        "backend": b.name,
                        "label": b.label,
                        "seconds": t.seconds,
                        "median_s": t.median,
                        "spread_s": t.spread,
                        "tokens_per_s": t.tokens_per_second,
                        "complete": len(t.seconds) == self.config.num_repeats,
                    }
                )
        return {
            "header": self.header,
            "interrupted": self.interrupted,
            "tokens_match": self.tokens_match,
            "mismatches": [vars(m) for m in self.mismatches],
            "completed_lengths": self.completed_lengths,
            "reference_tokens": {str(n): ids for n, ids in sorted(self.reference_tokens.items())},
            "runs": rows,
        }


def environment_header(model, config: SweepConfig, prompt_len: int) -> dict:
    """Model, device, dtype, threads and library versions: what makes results comparable."""
    import transformers

    import kvcourse

    param = next(model.parameters())
    info = getattr(model, "kvcourse_load_info", None)
    name = info.name if info else getattr(model.config, "name_or_path", None) or type(model).__name__
    return {
        "model": name,
        "model_class": type(model).__name__,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "device": str(param.device),
        "device_name": _device_name(param.device),
        "dtype": str(param.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "kvcourse": kvcourse.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "prompt": config.prompt,
        "prompt_tokens": prompt_len,
        "lengths": list(config.lengths),
        "repeats": config.num_repeats,
        "warmup": config.num_warmup,
        "backends": [b.name for b in config.backends],
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def _timed(run: Runner, num_new_tokens: int, device: torch.device) -> tuple[float, list[int]]:
    # A garbage collection inside the timed region would be charged to whichever side triggered it.
    gc.disable()
    try:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        tokens = run(num_new_tokens)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start, tokens
    finally:
        gc.enable()


def encode_prompt(tokenizer, prompt: str, device: torch.device) -> torch.Tensor:
    """The prompt as a (1, prompt_len) tensor of token ids on ``device``."""
    ids = tokenizer(prompt, return_tensors="pt").input_ids  # (1, prompt_len)
    if ids.shape[1] == 0:
        raise ValueError(f"the prompt {prompt!r} encodes to no tokens")
    return ids.to(device)


def run_sweep(
    model,
    tokenizer,
    lengths: tuple[int, ...] | list[int] = DEFAULT_LENGTHS,
    num_repeats: int = 3,
    *,
    num_warmup: int = 1,
    prompt: str = DEFAULT_PROMPT,
    engine_modes: tuple[str, ...] | list[str] = (),
    engine_model=None,
    runners: dict[str, Runner] | None = None,
    progress: bool = True,
) -> SweepResult:
    """Time every backend at every length, checking tokens; Ctrl-C returns what was measured (lesson 17).

    Repeats are interleaved (cache, no cache, cache, ...) so a slow patch on a shared machine
    hits both sides rather than one. ``runners`` replaces the built-in backends (tests use it).
    """
    config = SweepConfig(tuple(lengths), num_repeats, num_warmup, prompt, tuple(engine_modes))
    device = next(model.parameters()).device
    prompt_ids = encode_prompt(tokenizer, prompt, device)
    _check_context(model, prompt_ids.shape[1] + config.lengths[-1])
    if runners is None:
        runners = make_runners(model, tokenizer, prompt_ids, config, engine_model)
    result = SweepResult(config, environment_header(model, config, prompt_ids.shape[1]))
    bar = _progress_bar(config, progress)
    try:
        for backend in config.backends:  # warm-up: first-call costs (allocations, lazy init) are not the lab
            for _ in range(config.num_warmup):
                bar.set_postfix_str(f"warm-up {backend.name}")
                runners[backend.name](config.lengths[0])
        for n in config.lengths:
            result.timings[n] = {b.name: Timing(n) for b in config.backends}
            for _ in range(config.num_repeats):
                for backend in config.backends:
                    bar.set_postfix_str(f"{n} tokens, {backend.name}")
                    seconds, tokens = _timed(runners[backend.name], n, device)
                    _check_tokens(result, backend.name, n, tokens)
                    result.timings[n][backend.name].seconds.append(seconds)
                    bar.update(n)
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        bar.close()
    return result


def _check_tokens(result: SweepResult, backend: str, n: int, tokens: list[int]) -> None:
    reference = result.reference_tokens.setdefault(n, tokens)
    if len(reference) != n:
        raise RuntimeError(f"{backend} generated {len(reference)} tokens instead of {n}: it stopped early")
    position = first_difference(reference, tokens)
    if position is not None and not any(m.backend == backend and m.num_new_tokens == n for m in result.mismatches):
        expected = reference[position] if position < len(reference) else None
        got = tokens[position] if position < len(tokens) else None
        result.mismatches.append(Mismatch(backend, n, position, expected, got))


def _check_context(model, total_tokens: int) -> None:
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and total_tokens > limit:
        raise ValueError(
            f"prompt plus the longest output is {total_tokens} tokens, but this model "
            f"handles at most {limit}; use shorter lengths"
        )


def _progress_bar(config: SweepConfig, enabled: bool):
    from tqdm.auto import tqdm

    total = sum(config.lengths) * config.num_repeats * len(config.backends)
    return tqdm(total=total, desc="timing sweep", unit="tok", disable=not enabled, leave=False)
