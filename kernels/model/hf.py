"""Hugging Face conversion: a transformers Llama/Qwen2 model's config and weights, read for our Transformer.

``Transformer.from_hf(hf_model)`` (lessons 01, 04) builds the model from ``hf_model_config`` and fills it with
``copy_hf_weights``; this module names the Transformer as a type only, so the two never import each other.

The copy is explicit and new each time: nothing is stored on the Hugging Face model, so an
in-place weight update there is never hidden behind a stale converted copy. q, k and v are
stacked into one projection and gate and up into another, as the Transformer expects.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

import torch

from kvcourse.kernels.model.config import ModelConfig
from kvcourse.kernels.model.layers import Linear

if TYPE_CHECKING:  # the Transformer imports this module to convert (Transformer.from_hf)
    from kvcourse.kernels.model.transformer import DecoderLayer, Transformer


def hf_model_config(hf_model: Any) -> ModelConfig:
    """The model's ModelConfig; its stop tokens from the generation config when it names them."""
    config = ModelConfig.from_hf(hf_model.config)
    eos = getattr(getattr(hf_model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return config
    eos_ids = (int(eos),) if isinstance(eos, int) else tuple(int(t) for t in eos)
    return dataclasses.replace(config, eos_token_ids=eos_ids)


def copy_hf_weights(model: Transformer, state: dict[str, torch.Tensor]) -> None:
    """Copy a Hugging Face model's weights (its state dict) into ``model``, a Transformer of its config."""
    config = model.config
    with torch.no_grad():
        model.embed_tokens.weight.copy_(state["model.embed_tokens.weight"])
        model.norm.weight.copy_(state["model.norm.weight"])
        if not config.tie_word_embeddings:
            model.lm_head.weight.copy_(state["lm_head.weight"])
        for i, layer in enumerate(model.layers):
            _copy_layer(cast("DecoderLayer", layer), state, f"model.layers.{i}.", config)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight


def _copy_layer(layer: DecoderLayer, state: dict[str, torch.Tensor], prefix: str, config: ModelConfig) -> None:
    attn = prefix + "self_attn."
    layer.input_layernorm.weight.copy_(state[prefix + "input_layernorm.weight"])
    layer.post_attention_layernorm.weight.copy_(state[prefix + "post_attention_layernorm.weight"])
    layer.self_attn.qkv_proj.weight.copy_(torch.cat([state[attn + f"{p}_proj.weight"] for p in "qkv"], dim=0))
    if config.attention_bias:
        _bias(layer.self_attn.qkv_proj).copy_(torch.cat([state[attn + f"{p}_proj.bias"] for p in "qkv"], dim=0))
    layer.self_attn.o_proj.weight.copy_(state[attn + "o_proj.weight"])
    if config.attention_out_bias:
        _bias(layer.self_attn.o_proj).copy_(state[attn + "o_proj.bias"])
    mlp = prefix + "mlp."
    layer.mlp.gate_up_proj.weight.copy_(torch.cat([state[mlp + "gate_proj.weight"], state[mlp + "up_proj.weight"]]))
    layer.mlp.down_proj.weight.copy_(state[mlp + "down_proj.weight"])


def _bias(linear: Linear) -> torch.Tensor:
    """The bias of a projection the config gives one (attention_bias, attention_out_bias)."""
    assert linear.bias is not None, "the config says this projection has a bias"
    return linear.bias
