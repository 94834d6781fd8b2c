"""Exact claims lesson 05 makes, checked here rather than in front of the learner (docs/lessons.md)."""

from __future__ import annotations

import pytest

from kvcourse.kernels import costs, generate

MESSAGES = [{"role": "user", "content": "Describe a sunrise over the sea."}]  # lesson 05's chat prompt


@pytest.mark.slow
def test_05_the_cache_writes_the_same_tokens_in_fp32(real_model, smol_model):
    """05-08: "in float32 they write the same tokens"; the lesson prints the agreement in either dtype."""
    _, tokenizer = real_model
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_tensors="pt")["input_ids"]
    plain = generate(smol_model, prompt, 20, cache="none", eos_token_id=[])
    cached = generate(smol_model, prompt, 20, cache="contiguous", eos_token_id=[])
    assert plain.tokens == cached.tokens


def test_05_the_cache_holds_every_token_fed_and_the_fed_ratio_is_the_reveal():
    """05-06 and 05-10: P + n - 1 tokens fed with the cache; without it the prompt and t - 1 answer tokens at step t."""
    prompt_len, num_new = 37, 20
    with_cache = costs.tokens_processed(prompt_len, num_new, True)
    without = costs.tokens_processed(prompt_len, num_new, False)
    assert with_cache == prompt_len + num_new - 1
    assert without == sum(prompt_len + t for t in range(num_new))
