"""The engine on the real SmolLM2-135M: equal to Hugging Face, equal across cache modes (lessons 01-07, 16)."""

from __future__ import annotations

import pytest
import torch

from kvcourse.kernels import MODEL_CONFIGS, Transformer, costs, generate
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Explain in detail why the sky is blue, and what a KV cache is."}]


@pytest.fixture(scope="module")
def prompt(real_model):
    _, tok = real_model
    return tok.apply_chat_template(MESSAGES, add_generation_prompt=True, return_tensors="pt")["input_ids"][0]


@pytest.fixture(scope="module", params=["auto", "off"], ids=["fast", "textbook"])
def ours(real_model, request):
    return Transformer.from_hf(real_model[0]).accelerate(request.param)


def test_fp32_logits_match_hf_on_a_64_token_prompt(real_model, ours, prompt):
    hf, _ = real_model
    ids = torch.cat([prompt, prompt])[:64]
    with torch.no_grad():
        ref = hf(ids[None]).logits[0]
        out = ours(ids, torch.arange(64), NoCacheBackend())
    assert (out - ref).abs().max().item() <= 1e-4
    # A prompt runs the same BLAS calls and the same norm arithmetic as Hugging Face, fast paths on or
    # off (layers.py; cpu_fast's twins send a prompt down the same calls): not just close, the same bits.
    assert torch.equal(out, ref)


def test_greedy_tokens_equal_across_cache_modes_and_hf(real_model, ours, prompt):
    hf, tok = real_model
    cached = generate(ours, prompt, 16, cache="contiguous", eos_token_id=[])
    # Without a cache every step reruns the whole prompt: 8 steps keep this test quick.
    assert generate(ours, prompt, 8, cache="none", eos_token_id=[]).tokens == cached.tokens[:8]
    with torch.no_grad():
        ref = hf.generate(prompt[None], max_new_tokens=16, do_sample=False, use_cache=True)
    assert ref[0, len(prompt) :].tolist() == cached.tokens
    assert "sky" in tok.decode(cached.tokens).lower()


def test_real_kv_bytes_and_flops_per_token(ours, prompt):
    result = generate(ours, prompt, 3, eos_token_id=[])
    config = MODEL_CONFIGS["smollm2-135m"]
    assert costs.kv_bytes_per_token(config, 4) == 46_080  # fp32: 2 x 30 x 3 x 64 x 4
    assert [s.kv_cache_bytes for s in result.stats] == [46_080 * (len(prompt) + i) for i in range(3)]
    decode = result.stats[1]
    # One decode token costs about 2 FLOPs per parameter (the embedding gather is free, attention is small).
    assert decode.flops == pytest.approx(2 * costs.num_parameters(config), rel=0.02)


def test_int8_cache_keeps_the_answer_on_the_real_model(ours, prompt):
    exact = generate(ours, prompt, 12, eos_token_id=[])
    int8 = generate(ours, prompt, 12, cache="int8", eos_token_id=[])
    assert int8.tokens[:6] == exact.tokens[:6]
    assert int8.backend.error.relative_rms_error < 0.02  # about 1% measured
    assert int8.stats[-1].kv_cache_bytes < 0.27 * exact.stats[-1].kv_cache_bytes  # vs fp32: ~1/4 + scales
