"""The table of real model configs: bytes per token against hand-computed constants."""

from __future__ import annotations

import pytest

from kvcourse.kernels import costs
from kvcourse.kernels.model.config_table import EXAMPLE_13B, MODEL_CONFIGS, get_model_config

# 2 (K and V) x layers x kv_heads x head_dim x 2 bytes (bf16), worked out by hand.
EXPECTED_BF16_BYTES_PER_TOKEN = {
    "llama-2-7b": 524_288,  # 2 * 32 * 32 * 128 * 2
    "llama-2-13b": 819_200,  # 2 * 40 * 40 * 128 * 2
    "llama-2-70b": 327_680,  # 2 * 80 * 8 * 128 * 2
    "llama-3-8b": 131_072,  # 2 * 32 * 8 * 128 * 2
    "llama-3-70b": 327_680,  # 2 * 80 * 8 * 128 * 2
    "mistral-7b": 131_072,  # 2 * 32 * 8 * 128 * 2
    "qwen2.5-0.5b": 12_288,  # 2 * 24 * 2 * 64 * 2
    "qwen2.5-7b": 57_344,  # 2 * 28 * 4 * 128 * 2
    "smollm2-135m": 23_040,  # 2 * 30 * 3 * 64 * 2
    "smollm2-1.7b": 196_608,  # 2 * 24 * 32 * 64 * 2
}

# Parameter counts the model cards state, to one significant figure of slack.
APPROX_PARAMETERS = {
    "llama-2-7b": 6.7e9,
    "llama-2-13b": 13.0e9,
    "llama-2-70b": 69.0e9,
    "llama-3-8b": 8.0e9,
    "llama-3-70b": 70.6e9,
    "mistral-7b": 7.2e9,
    "qwen2.5-0.5b": 0.49e9,
    "qwen2.5-7b": 7.6e9,
    "smollm2-135m": 0.135e9,
    "smollm2-1.7b": 1.7e9,
}


def test_table_has_exactly_the_promised_models():
    assert set(MODEL_CONFIGS) == set(EXPECTED_BF16_BYTES_PER_TOKEN)


@pytest.mark.parametrize("name", sorted(EXPECTED_BF16_BYTES_PER_TOKEN))
def test_bytes_per_token(name):
    assert costs.kv_bytes_per_token(MODEL_CONFIGS[name], 2) == EXPECTED_BF16_BYTES_PER_TOKEN[name]


@pytest.mark.parametrize("name", sorted(APPROX_PARAMETERS))
def test_parameter_counts_are_plausible(name):
    assert costs.num_parameters(MODEL_CONFIGS[name]) == pytest.approx(APPROX_PARAMETERS[name], rel=0.05)


def test_example_13b_is_chapter_003s_shape():
    assert (EXAMPLE_13B.num_layers, EXAMPLE_13B.num_kv_heads, EXAMPLE_13B.head_dim) == (40, 40, 128)


def test_get_model_config_and_clear_key_error():
    assert get_model_config("Llama-3-8B") is MODEL_CONFIGS["llama-3-8b"]
    with pytest.raises(KeyError, match="known models: .*smollm2-135m"):
        get_model_config("gpt-5")


@pytest.mark.slow
def test_smollm2_entry_matches_the_real_model_config(real_model):
    from kvcourse.kernels.model.config import ModelConfig

    hf_model, _ = real_model
    real = ModelConfig.from_hf(hf_model.config)
    entry = MODEL_CONFIGS["smollm2-135m"]
    assert real.num_layers == entry.num_layers and real.num_kv_heads == entry.num_kv_heads
    assert real.head_dim == entry.head_dim and real.vocab_size == entry.vocab_size
    assert real.rope_theta == entry.rope_theta
