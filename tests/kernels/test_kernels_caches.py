"""Shrinking the cache (lesson 16): int8 with measured error, a sliding window with constant memory."""

from __future__ import annotations

import pytest
import torch
from factories import make_config, make_tiny_model, run_chunks

from kvcourse.kernels import MODEL_CONFIGS, costs, generate
from kvcourse.kernels.attention.backend import StepMetadata
from kvcourse.kernels.attention.backends.contiguous import ContiguousKVBackend, NoCacheBackend
from kvcourse.kernels.attention.backends.int8 import Int8KVBackend, dequantize_int8, quantize_int8
from kvcourse.kernels.attention.backends.sliding import SlidingWindowBackend

PROMPT = [5, 17, 33, 42, 61, 8, 90, 12]


@pytest.fixture(scope="module", params=["auto", "off"], ids=["fast", "textbook"])
def model(request):
    return make_tiny_model(request.param, max_position_embeddings=256)


def test_int8_round_trip_error_is_at_most_half_a_step():
    x = torch.randn(3, 50, 16) * torch.logspace(-3, 2, 50)[None, :, None]
    q, scale = quantize_int8(x)
    assert q.dtype == torch.int8 and scale.shape == (3, 50)
    err = (dequantize_int8(q, scale, torch.float32) - x).abs()
    assert (err <= scale[..., None] / 2 + 1e-6 * x.abs()).all()
    zeros_q, _ = quantize_int8(torch.zeros(2, 4))
    assert (zeros_q == 0).all()


def test_int8_cache_logits_close_to_fp32_and_error_measured(model):
    ids = torch.arange(3, 43)
    chunks = [(0, 30)] + [(i, i + 1) for i in range(30, 40)]
    exact = run_chunks(model, ContiguousKVBackend(model.config, 40, torch.float32, "cpu"), ids, chunks)
    int8 = Int8KVBackend(model.config, 40, torch.float32, "cpu")
    approx = run_chunks(model, int8, ids, chunks)
    rel = ((approx - exact).norm() / exact.norm()).item()
    assert 0 < rel < 0.05
    assert 0 < int8.error.relative_rms_error < 0.02
    assert int8.error.max_abs_error > 0
    assert int8.kv_cache_bytes == 40 * costs.quantized_kv_bytes_per_token(model.config, 1, 4)


def test_int8_generation_mostly_agrees_with_fp32(model):
    exact = generate(model, PROMPT, 20, eos_token_id=[]).tokens
    result = generate(model, PROMPT, 20, cache="int8", eos_token_id=[])
    assert result.tokens[:2] == exact[:2]  # a random tiny model has flat logits; the real model agrees longer
    assert result.backend.error.relative_rms_error < 0.02


def test_int8_bytes_are_about_half_of_bf16_for_real_models():
    for config in MODEL_CONFIGS.values():
        ratio = costs.quantized_kv_bytes_per_token(config, 1, 4) / costs.kv_bytes_per_token(config, 2)
        assert 0.5 < ratio < 0.54  # int8 values plus one float32 scale per 64-128 values


@pytest.mark.parametrize(
    "window,chunks",
    [
        (5, [(0, 12), (12, 13), (13, 14), (14, 20)]),  # prefill longer than the window
        (8, [(0, 3)] + [(i, i + 1) for i in range(3, 20)]),  # short prefill, window fills while decoding
        (30, [(0, 20)]),  # window never bites
    ],
)
def test_sliding_window_equals_window_masked_full_attention(model, window, chunks):
    ids = torch.arange(3, 23)
    with torch.no_grad():
        ref = model(ids, torch.arange(20), NoCacheBackend(window=window))
    sliding = SlidingWindowBackend(model.config, window, torch.float32, "cpu")
    out = run_chunks(model, sliding, ids, chunks)
    assert (out - ref).abs().max().item() <= 1e-5
    assert sliding.num_held_tokens == min(20, window)


def test_sliding_tokens_match_until_the_window_bites_then_differ(model):
    window = 12
    full = generate(model, PROMPT, 40, eos_token_id=[])
    sliding = generate(model, PROMPT, 40, cache="sliding", window=window, eos_token_id=[])
    # New token n (0-based) comes from the query at position len(PROMPT) - 1 + n, which sees
    # min(position + 1, window) keys: identical while position + 1 <= window.
    safe = window - len(PROMPT) + 1
    assert sliding.tokens[:safe] == full.tokens[:safe]
    first_diff = next(i for i, (a, b) in enumerate(zip(full.tokens, sliding.tokens, strict=False)) if a != b)
    assert first_diff >= safe
    # Memory: grows during the prompt and the first steps, then flat at window tokens.
    held = [s.kv_cache_bytes for s in sliding.stats]
    assert max(held) == costs.kv_cache_bytes(model.config, window, bytes_per_value=4)
    assert held[-1] == held[safe] == max(held)


def test_sliding_window_with_room_for_everything_equals_contiguous(model):
    full = generate(model, PROMPT, 30, eos_token_id=[])
    assert generate(model, PROMPT, 30, cache="sliding", window=64, eos_token_id=[]).tokens == full.tokens


def test_sliding_window_must_be_positive():
    with pytest.raises(ValueError, match="window"):
        SlidingWindowBackend(make_config(), 0, torch.float32, "cpu")


def test_contiguous_cache_grows_and_keeps_its_contents(model):
    ids = torch.arange(3, 23)
    small = ContiguousKVBackend(model.config, 3, torch.float32, "cpu")
    out = run_chunks(model, small, ids, [(0, 5)] + [(i, i + 1) for i in range(5, 20)])
    with torch.no_grad():
        ref = model(ids, torch.arange(20), NoCacheBackend())
    assert (out - ref).abs().max().item() <= 1e-5
    assert small.capacity >= 20 and small.kv_cache_bytes == costs.kv_cache_bytes(model.config, 20, 1, 4)


def test_cache_refuses_out_of_order_steps(model):
    backend = ContiguousKVBackend(model.config, 8, torch.float32, "cpu")
    with pytest.raises(ValueError, match="expects 0"):
        backend.begin_step(StepMetadata(3, 1))


def test_gqa_mha_mqa_bytes_from_configs():
    mha = make_config(num_heads=4, num_kv_heads=4)
    gqa = make_config(num_heads=4, num_kv_heads=2)
    mqa = make_config(num_heads=4, num_kv_heads=1)
    sizes = [costs.kv_bytes_per_token(c) for c in (mha, gqa, mqa)]
    assert sizes == [2 * 2 * 4 * 8 * 2, 2 * 2 * 2 * 8 * 2, 2 * 2 * 1 * 8 * 2]
    # Real models: Llama-2-70B's 8 KV heads for 64 query heads cut the cache 8x against MHA.
    llama70 = MODEL_CONFIGS["llama-2-70b"]
    assert llama70.num_queries_per_kv == 8
