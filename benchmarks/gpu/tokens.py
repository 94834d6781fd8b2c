"""Check 3: the engine on CUDA (Triton decode) writes Hugging Face's greedy tokens (lessons 05, 10).

Both sides run SmolLM2-135M in float32, where greedy ids are expected to be identical; the
engine is also compared with our own contiguous-cache generate. The stop token is ignored on
every side (``eos_token_id=[]``, ``stop_on_eos=False``), so every answer has the same length.
"""

from __future__ import annotations

import time

import torch

QUESTIONS = ("What is a KV cache?", "Name three colours.", "Why do we batch requests?")


def hf_greedy(hf_model, prompt: list[int], num_new_tokens: int, pad_token_id: int) -> list[int]:
    """Hugging Face's own ``generate(do_sample=False)``: the new token ids."""
    ids = torch.tensor([prompt], device=hf_model.device)  # (1, P)
    with torch.no_grad():
        out = hf_model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            eos_token_id=[],
            pad_token_id=pad_token_id,
            max_new_tokens=num_new_tokens,
        )
    return out[0, len(prompt) :].tolist()


def check_tokens(device: torch.device, num_new_tokens: int) -> dict:
    """Matching prompts: engine vs Hugging Face generate, and engine vs generate(cache="contiguous")."""
    from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams, generate
    from kvcourse.kernels.engine.generate import as_transformer
    from kvcourse.models import load_model

    hf_model, tok = load_model(dtype=torch.float32, device=device)
    model = as_transformer(hf_model)
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, return_tensors="pt")[
            "input_ids"
        ][0].tolist()
        for q in QUESTIONS
    ]
    hf = [hf_greedy(hf_model, p, num_new_tokens, tok.eos_token_id) for p in prompts]
    contiguous = [generate(model, p, num_new_tokens, cache="contiguous", eos_token_id=[]).tokens for p in prompts]
    engine = LLMEngine(model, EngineConfig(enable_prefix_caching=True, use_triton=True))  # the kernel of check 1
    start = time.perf_counter()
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=num_new_tokens, stop_on_eos=False))
    seconds = time.perf_counter() - start
    vs_hf = sum(o.tokens == h for o, h in zip(outs, hf, strict=True))
    vs_contiguous = sum(o.tokens == c for o, c in zip(outs, contiguous, strict=True))
    print(
        f"  engine on {device} (Triton decode, float32): {vs_hf}/{len(prompts)} prompts give Hugging Face's "
        f"greedy tokens, {vs_contiguous}/{len(prompts)} the contiguous generate's; {seconds:.2f} s",
        flush=True,
    )
    return {
        "dtype": "float32",
        "decode_kernel": "triton",
        "prompts": len(prompts),
        "new_tokens": num_new_tokens,
        "matching_hf_generate": vs_hf,
        "matching_contiguous": vs_contiguous,
        "engine_seconds": seconds,
        "ok": vs_hf == vs_contiguous == len(prompts),
    }
