"""On SmolLM2-135M: greedy tokens are identical across cache modes and the batched engine (lessons 10-14)."""

from __future__ import annotations

import pytest

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams, generate
from kvcourse.kernels.engine.generate import as_transformer

NEW = 8
QUESTIONS = ["What is a KV cache?", "Name three colours."]  # 32 and 29 tokens with the chat template


@pytest.mark.slow
@pytest.mark.parametrize("fast_paths", ["auto", "off"])
def test_real_model_greedy_tokens_identical_everywhere(real_model, fast_paths):
    hf_model, tok = real_model
    model = as_transformer(hf_model, fast_paths)
    system = {"role": "system", "content": "You are a concise assistant who answers in one sentence."}
    prompts = [
        tok.apply_chat_template(
            [system, {"role": "user", "content": q}], add_generation_prompt=True, return_tensors="pt"
        )["input_ids"][0].tolist()
        for q in QUESTIONS
    ]
    expected = []
    for p in prompts:
        contiguous = generate(model, p, NEW, cache="contiguous", eos_token_id=[]).tokens
        assert generate(model, p, NEW, cache="paged", eos_token_id=[]).tokens == contiguous
        expected.append(contiguous)
    params = SamplingParams(max_new_tokens=NEW, stop_on_eos=False)
    # a 4-block pool with prefix caching: the second prompt shares the first's system-prompt block,
    # the pool runs dry while both decode (preemption), and the repeated prompt hits the cache
    tight = LLMEngine(model, EngineConfig(num_blocks=4, enable_prefix_caching=True))
    pressured = tight.generate(prompts + prompts[:1], params)
    assert [o.tokens for o in pressured] == expected + expected[:1]
    counts = tight.events.counts()
    assert counts.get("prefix_hit", 0) > 0 and counts.get("preempt", 0) > 0, counts
