"""Real model shapes, copied from each model's public config.json, to compare caches (lessons 07, 15, 16)."""

from __future__ import annotations

from kvcourse.kernels.model.config import ModelConfig

MODEL_CONFIGS: dict[str, ModelConfig] = {
    # meta-llama/Llama-2-7b-hf: multi-head attention (32 KV heads).
    "llama-2-7b": ModelConfig(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=4096,
    ),
    # meta-llama/Llama-2-13b-hf: chapter 003's example (40 layers, 40 heads of 128).
    "llama-2-13b": ModelConfig(
        vocab_size=32000,
        hidden_size=5120,
        intermediate_size=13824,
        num_layers=40,
        num_heads=40,
        num_kv_heads=40,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=4096,
    ),
    # meta-llama/Llama-2-70b-hf: grouped-query attention, 8 KV heads for 64 query heads.
    "llama-2-70b": ModelConfig(
        vocab_size=32000,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=4096,
    ),
    # meta-llama/Meta-Llama-3-8B
    "llama-3-8b": ModelConfig(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
    ),
    # meta-llama/Meta-Llama-3-70B
    "llama-3-70b": ModelConfig(
        vocab_size=128256,
        hidden_size=8192,
        intermediate_size=28672,
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
    ),
    # mistralai/Mistral-7B-v0.1 (its 4,096-token sliding window is not part of this config).
    "mistral-7b": ModelConfig(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=14336,
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=32768,
    ),
    # Qwen/Qwen2.5-0.5B: q/k/v biases, tied embeddings, 2 KV heads for 14 query heads.
    "qwen2.5-0.5b": ModelConfig(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_layers=24,
        num_heads=14,
        num_kv_heads=2,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        attention_bias=True,
    ),
    # Qwen/Qwen2.5-7B
    "qwen2.5-7b": ModelConfig(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=131072,
        attention_bias=True,
    ),
    # HuggingFaceTB/SmolLM2-135M(-Instruct): the course's own model.
    "smollm2-135m": ModelConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    ),
    # HuggingFaceTB/SmolLM2-1.7B: multi-head attention (32 KV heads).
    "smollm2-1.7b": ModelConfig(
        vocab_size=49152,
        hidden_size=2048,
        intermediate_size=8192,
        num_layers=24,
        num_heads=32,
        num_kv_heads=32,
        rope_theta=130000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    ),
}

# Chapter 003's worked example: "a 13B model, 40 layers, 40 heads of 128". Llama-2-13B has exactly these.
EXAMPLE_13B: ModelConfig = MODEL_CONFIGS["llama-2-13b"]


def get_model_config(name: str) -> ModelConfig:
    """Look up a real model's config by its short name, e.g. "llama-3-8b" (lesson 07)."""
    key = name.strip().lower()
    if key not in MODEL_CONFIGS:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(sorted(MODEL_CONFIGS))}")
    return MODEL_CONFIGS[key]
