"""ModelConfig validation and conversion from Hugging Face configs."""

from __future__ import annotations

import dataclasses
import math

import pytest
from factories import hf_config_for, make_config, make_tiny_hf_llama

from kvcourse.kernels.model.config import ModelConfig


def test_head_dim_defaults_to_hidden_over_heads():
    assert make_config(hidden_size=48, num_heads=6, num_kv_heads=3).head_dim == 8


def test_heads_not_dividing_hidden_size_is_a_clear_error():
    with pytest.raises(ValueError, match="does not divide hidden_size"):
        make_config(hidden_size=30, num_heads=4, num_kv_heads=2)


def test_explicit_head_dim_allows_any_hidden_size():
    config = make_config(hidden_size=30, num_heads=4, num_kv_heads=2, head_dim=16)
    assert config.head_dim == 16 and config.q_size == 64


def test_kv_heads_must_divide_heads():
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        make_config(num_heads=4, num_kv_heads=3)


@pytest.mark.parametrize(
    "field",
    [
        "vocab_size",
        "hidden_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "intermediate_size",
        "max_position_embeddings",
    ],
)
@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None])
def test_sizes_must_be_positive_integers(field, bad):
    with pytest.raises(ValueError, match=field):
        make_config(**{field: bad})


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_rope_theta_and_eps_must_be_positive_finite(bad):
    with pytest.raises(ValueError, match="rope_theta"):
        make_config(rope_theta=bad)
    with pytest.raises(ValueError, match="rms_norm_eps"):
        make_config(rms_norm_eps=bad)


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        make_config().num_layers = 3


def test_gqa_group_size():
    assert make_config(num_heads=4, num_kv_heads=4).num_queries_per_kv == 1
    assert make_config(num_heads=4, num_kv_heads=1).num_queries_per_kv == 4


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_from_hf_round_trips_the_factory_config(arch):
    config = make_config(num_kv_heads=1, tie_word_embeddings=True, attention_bias=(arch == "qwen2"))
    assert ModelConfig.from_hf(hf_config_for(config, arch)) == config


def test_from_hf_reads_a_built_model():
    model = make_tiny_hf_llama(num_layers=3, rope_theta=500.0)
    config = ModelConfig.from_hf(model.config)
    assert (config.num_layers, config.rope_theta, config.head_dim) == (3, 500.0, 8)


def test_from_hf_rejects_rope_scaling():
    hf = hf_config_for(make_config())
    hf.rope_parameters = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0}
    with pytest.raises(ValueError, match="rope_type"):
        ModelConfig.from_hf(hf)


def test_from_hf_llama_attention_bias_includes_output_projection():
    hf = hf_config_for(make_config(attention_bias=True), "llama")
    config = ModelConfig.from_hf(hf)
    assert config.attention_bias and config.attention_out_bias


def test_from_hf_rejects_qwen2_sliding_window_layers():
    hf = hf_config_for(make_config(attention_bias=True), "qwen2")
    hf.use_sliding_window = True
    with pytest.raises(ValueError, match="sliding-window"):
        ModelConfig.from_hf(hf)
