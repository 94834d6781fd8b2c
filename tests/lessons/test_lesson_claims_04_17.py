"""Exact claims lessons 04 and 17 make about SmolLM2's own numbers, checked here rather than in the lessons.

The lessons state these claims in words with ``expect`` and tolerances that hold in float32 and
bfloat16; the exact versions (a token, bitwise equality, agreement with the engine) live here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvcourse.kernels import costs
from kvcourse.simulators.qkv import QKVExplorer, record_qkv

SENTENCE = "The cat sat on the mat because it was warm."  # lesson 04's sentence
LAB_PROMPT = "Once upon a time in a distant land"  # lesson 17's prompt, from the source chapter's lab


@pytest.fixture(scope="module")
def bf16_model():
    """(hf_model, tokenizer) for SmolLM2-135M-Instruct in bfloat16 on the CPU."""
    from kvcourse.models import load_model

    return load_model("smollm2-135m", dtype=torch.bfloat16, device="cpu")


def _keys(model, tokenizer, text: str) -> np.ndarray:
    return record_qkv(model, tokenizer(text)["input_ids"])[0].k


# ---------------------------------------------------------------- lesson 04


@pytest.mark.slow
def test_04_it_attends_to_cat_and_the_simulator_matches_the_engine(real_model):
    """Layer 13, query head 8: ' it' gives most weight to ' cat'; the lookup is the engine's attention output."""
    hf_model, tokenizer = real_model
    qkv, recorder = record_qkv(hf_model, tokenizer(SENTENCE)["input_ids"], tokenizer)
    position = qkv.tokens.index(" it")
    look = QKVExplorer(qkv, 13, 8, position).lookup()
    assert qkv.tokens[int(np.argmax(look.weights))] == " cat"
    np.testing.assert_allclose(look.output, recorder.out[13][position, 8].numpy(), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_04_the_pronoun_is_not_the_only_token_that_looks_at_cat(dtype, real_model, request):
    """04-33/04-34: in layer 13, head 8, ' cat' gets the largest weight of several later tokens, not only of ' it'."""
    hf_model, tokenizer = real_model if dtype == "float32" else request.getfixturevalue("bf16_model")
    qkv, _ = record_qkv(hf_model, tokenizer(SENTENCE)["input_ids"], tokenizer)
    cat = qkv.tokens.index(" cat")
    favourites = [qkv.tokens[int(np.argmax(QKVExplorer(qkv, 13, 8, p).lookup().weights))]
                  for p in range(cat + 1, len(qkv.tokens))]
    others = [token for token, favourite in zip(qkv.tokens[cat + 1:], favourites) if favourite == " cat" and token != " it"]
    assert len(others) >= 3, others


@pytest.mark.slow
def test_04_earlier_keys_and_values_do_not_change_as_the_input_grows_fp32(real_model):
    """fp32 only: a longer input may round a sum differently, and bf16's rounding step is ~0.1 at these sizes."""
    hf_model, tokenizer = real_model
    ids = tokenizer(SENTENCE)["input_ids"]
    first = 6
    reference = record_qkv(hf_model, ids[:first])[0]
    for n in range(first + 1, len(ids) + 1):
        rec = record_qkv(hf_model, ids[:n])[0]
        np.testing.assert_allclose(rec.k[:, :, :first], reference.k[:, :, :first], atol=5e-4)
        np.testing.assert_allclose(rec.v[:, :, :first], reference.v[:, :, :first], atol=5e-4)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_04_keys_depend_on_earlier_tokens_and_never_on_later_ones(dtype, real_model, request):
    """Bitwise, in both dtypes: same shapes, and a masked key contributes exactly zero."""
    hf_model, tokenizer = real_model if dtype == "float32" else request.getfixturevalue("bf16_model")
    base = _keys(hf_model, tokenizer, SENTENCE)
    earlier = _keys(hf_model, tokenizer, SENTENCE.replace("cat", "dog"))
    later = _keys(hf_model, tokenizer, SENTENCE.replace("warm", "cold"))
    mat = 5  # " mat"
    assert np.array_equal(earlier[0, :, mat], base[0, :, mat])  # layer 0: the token and its position only
    assert np.abs(earlier[1:, :, mat] - base[1:, :, mat]).max(axis=(1, 2)).min() > 0.1
    assert np.array_equal(later[:, :, : mat + 1], base[:, :, : mat + 1])  # later tokens never matter


# ---------------------------------------------------------------- lesson 17


def test_17_token_counts_reproduce_the_chapter():
    """The closed forms equal the step-by-step sums; 1,000 new tokens without a cache cost ~500,000."""
    for prompt_len in (1, 8, 200):
        for n in (1, 8, 64):
            assert costs.tokens_processed(prompt_len, n, False) == sum(prompt_len + t for t in range(n))
            assert costs.tokens_processed(prompt_len, n, True) == prompt_len + n - 1
    assert costs.tokens_processed(1, 1000, False) == 500_500


@pytest.mark.slow
def test_17_hf_generate_writes_the_same_tokens_with_and_without_the_cache_fp32(real_model):
    """fp32: identical. In bf16 the two runs round differently and may part ways after some tokens."""
    hf_model, tokenizer = real_model
    ids = tokenizer(LAB_PROMPT, return_tensors="pt").input_ids
    settings = dict(attention_mask=torch.ones_like(ids), do_sample=False, eos_token_id=[],
                    pad_token_id=tokenizer.eos_token_id, max_new_tokens=32)
    with torch.no_grad():
        cached = hf_model.generate(ids, use_cache=True, **settings)
        uncached = hf_model.generate(ids, use_cache=False, **settings)
    assert cached.shape[1] == ids.shape[1] + 32
    assert torch.equal(cached, uncached)


@pytest.mark.slow
def test_17_the_cache_holds_prompt_plus_new_minus_one_tokens(real_model):
    """Lesson 17's 'price' line: P + n - 1 positions cached (the last new token is never fed back), as costs counts."""
    from kvcourse.kernels import ModelConfig

    hf_model, tokenizer = real_model
    ids = tokenizer(LAB_PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, eos_token_id=[],
                                pad_token_id=tokenizer.eos_token_id, max_new_tokens=8, return_dict_in_generate=True)
    cache = out.past_key_values
    assert cache.get_seq_length() == ids.shape[1] + 8 - 1
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert held == costs.kv_cache_bytes(ModelConfig.from_hf(hf_model.config), ids.shape[1] + 8 - 1, bytes_per_value=4)
