"""What the weights cost: parameters, the bytes they fill, the bytes a pass reads (lesson 01; costs re-exports them)."""

from __future__ import annotations

from typing import Any

from kvcourse.kernels.cost_checks import config_count, count


def layer_parameters(config: Any) -> int:
    """Parameters of one decoder layer: attention projections (and biases), SwiGLU MLP, two norms."""
    hidden, head_dim = config_count(config, "hidden_size"), config_count(config, "head_dim")
    q_size = config_count(config, "num_heads") * head_dim
    kv_size = config_count(config, "num_kv_heads") * head_dim
    attention = hidden * (q_size + 2 * kv_size) + q_size * hidden
    if getattr(config, "attention_bias", False):
        attention += q_size + 2 * kv_size
    if getattr(config, "attention_out_bias", False):
        attention += hidden
    mlp = 3 * hidden * config_count(config, "intermediate_size")
    return attention + mlp + 2 * hidden


def num_parameters(config: Any) -> int:
    """All parameters: embedding, layers, final norm, and the lm_head unless tied to the embedding."""
    hidden, vocab = config_count(config, "hidden_size"), config_count(config, "vocab_size")
    embedding = vocab * hidden
    lm_head = 0 if getattr(config, "tie_word_embeddings", False) else vocab * hidden
    return embedding + config_count(config, "num_layers") * layer_parameters(config) + hidden + lm_head


def weight_bytes(config: Any, bytes_per_value: int = 2) -> int:
    """Bytes the weights occupy in memory (lesson 01)."""
    return num_parameters(config) * count("bytes_per_value", bytes_per_value)


def weight_bytes_read_per_pass(config: Any, bytes_per_value: int = 2) -> int:
    """Weight bytes one forward pass streams from memory, whatever its number of tokens (lesson 01).

    Everything except an untied embedding table, which is gathered only at the input rows.
    """
    bpv = count("bytes_per_value", bytes_per_value)
    untied_table = (
        0
        if getattr(config, "tie_word_embeddings", False)
        else (config_count(config, "vocab_size") * config_count(config, "hidden_size"))
    )
    return (num_parameters(config) - untied_table) * bpv
