"""The backends the timing lab runs: Hugging Face generate and the course engine, timed (lesson 17)."""

from __future__ import annotations

import torch

from kvcourse.timing_lab.config import (
    ENGINE_MODES,
    HF_CACHE,
    HF_NO_CACHE,
    Runner,
    SweepConfig,
    engine_backend,
)


def engine_cache_modes() -> tuple[str, ...]:
    """The exact cache modes the course engine has, in the order none, contiguous, paged."""
    try:
        from kvcourse.kernels import CACHE_MODES
    except ImportError as err:
        raise RuntimeError(f"the course engine (kvcourse.kernels.generate) is not available here ({err})") from None
    return tuple(mode for mode in ENGINE_MODES if mode in CACHE_MODES)


def hf_runner(model, prompt_ids: torch.Tensor, use_cache: bool, pad_token_id: int | None) -> Runner:
    """Greedy Hugging Face generate to exactly n new tokens, with or without its KV cache."""
    from transformers import GenerationConfig

    attention_mask = torch.ones_like(prompt_ids)

    def run(num_new_tokens: int) -> list[int]:
        # eos_token_id=[] (not None, which generate refills from the model's defaults) turns off
        # stopping at end-of-sequence without touching the logits: both sides run every step.
        gen = GenerationConfig(
            max_new_tokens=num_new_tokens,
            do_sample=False,
            use_cache=use_cache,
            eos_token_id=[],
            pad_token_id=pad_token_id,
        )
        with torch.inference_mode():
            out = model.generate(prompt_ids, attention_mask=attention_mask, generation_config=gen)
        return out[0, prompt_ids.shape[1] :].tolist()

    return run


def engine_runner(model, prompt_ids: torch.Tensor, cache: str) -> Runner:
    """Greedy generation with the course's engine (kvcourse.kernels.generate) in one cache mode."""
    from kvcourse.kernels import SamplingParams, generate

    greedy_full_length = SamplingParams(temperature=0.0, stop_on_eos=False)  # like the HF side: no early stop

    def run(num_new_tokens: int) -> list[int]:
        with torch.inference_mode():
            result = generate(model, prompt_ids, num_new_tokens, cache=cache, sampling=greedy_full_length)
        return list(result.tokens)

    return run


def make_runners(
    model, tokenizer, prompt_ids: torch.Tensor, config: SweepConfig, engine_model=None
) -> dict[str, Runner]:
    """One runner per backend in ``config``; the engine gets ``engine_model`` (default: converted once)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    runners = {HF_CACHE: hf_runner(model, prompt_ids, True, pad), HF_NO_CACHE: hf_runner(model, prompt_ids, False, pad)}
    if config.engine_modes:
        if engine_model is None:
            engine_model = to_engine_model(model)
        for mode in config.engine_modes:
            runners[engine_backend(mode).name] = engine_runner(engine_model, prompt_ids, mode)
    return runners


def to_engine_model(model):
    """The course engine's own model built from the Hugging Face one, converted once, not per run."""
    from kvcourse.kernels.engine.generate import as_transformer

    return as_transformer(model)
