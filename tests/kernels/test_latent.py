"""Latent attention without training (issue 45 item 2): the factorisation, the twin, the bytes, absorption."""

from __future__ import annotations

import pytest
import torch

from kvcourse.kernels import costs
from kvcourse.kernels.measure.agreement import all_logits, next_token_agreement
from kvcourse.kernels.measure.perplexity import perplexity
from kvcourse.kernels.model.config_table import MODEL_CONFIGS
from kvcourse.kernels.model.latent import (
    absorbed_attention,
    factorise,
    full_rank,
    latent_bytes_per_token,
    latent_twin,
    layer_factors,
)


def _text(n: int = 48) -> list[int]:
    return [int(t) for t in torch.randint(1, 90, (n,), generator=torch.Generator().manual_seed(5))]


def test_at_full_rank_the_factors_rebuild_the_projections_and_the_error_shrinks_with_rank():
    gen = torch.Generator().manual_seed(0)
    w_k, w_v = torch.randn(16, 40, generator=gen), torch.randn(16, 40, generator=gen)
    exact = factorise(w_k, w_v, 32)
    assert torch.allclose(exact.up_k @ exact.down, w_k, atol=1e-5) and torch.allclose(
        exact.up_v @ exact.down, w_v, atol=1e-5
    )
    errors = [
        float((torch.cat([f.up_k, f.up_v]) @ f.down - torch.cat([w_k, w_v])).norm())
        for f in (factorise(w_k, w_v, r) for r in (4, 8, 16, 32))
    ]
    assert errors == sorted(errors, reverse=True) and errors[-1] < 1e-4
    with pytest.raises(ValueError, match="exceeds 32"):
        factorise(w_k, w_v, 33)
    with pytest.raises(ValueError, match="rank"):
        factorise(w_k, w_v, 0)


def test_the_twin_at_full_rank_is_the_model_and_leaves_the_model_as_it_was(tiny_model):
    before = {name: p.clone() for name, p in tiny_model.named_parameters()}
    ids = _text()
    twin = latent_twin(tiny_model, full_rank(tiny_model.config))
    assert torch.allclose(all_logits(twin, ids), all_logits(tiny_model, ids), atol=1e-4)
    assert all(torch.equal(p, before[name]) for name, p in tiny_model.named_parameters())
    assert twin.layers[0].mlp.down_proj.weight is tiny_model.layers[0].mlp.down_proj.weight  # shared, not copied


def test_quality_falls_as_the_rank_shrinks(tiny_model):
    ids = _text(64)
    top = full_rank(tiny_model.config)
    agreement = [next_token_agreement(tiny_model, latent_twin(tiny_model, r), [ids]).top1 for r in (2, top // 2, top)]
    assert agreement[-1] == 1.0 and agreement[0] < agreement[-1]
    assert perplexity(latent_twin(tiny_model, top), ids) == pytest.approx(perplexity(tiny_model, ids), rel=1e-4)
    with pytest.raises(ValueError, match="two tokens"):
        perplexity(tiny_model, [3])


def test_absorption_equals_decompressing_to_rounding_on_the_models_own_weights(tiny_model):
    attention = tiny_model.layers[1].self_attn
    x = tiny_model.embed_tokens.weight[torch.tensor(_text(12))].detach()
    for rank in (4, full_rank(tiny_model.config)):
        both = absorbed_attention(attention, layer_factors(attention, rank), x)
        assert both.largest_difference < 1e-4 * float(both.decompressed.abs().max())


def test_latent_bytes_are_rank_values_per_layer():
    config = MODEL_CONFIGS["llama-2-7b"]  # 32 layers, 32 KV heads of 128: 512 KiB per token in 16 bits
    assert latent_bytes_per_token(config, 64, 2) == config.num_layers * 64 * 2
    assert latent_bytes_per_token(config, full_rank(config), 2) == costs.kv_bytes_per_token(config, 2) // 2
    with pytest.raises(ValueError, match="rank"):
        latent_bytes_per_token(config, 0, 2)
