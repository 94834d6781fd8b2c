"""Latent attention without training (issue 45 item 2): the factorisation, the twin, the bytes, absorption, and what
absorption saves per decode step."""

from __future__ import annotations

import pytest
import torch

from kvcourse.kernels import costs
from kvcourse.kernels.measure.agreement import all_logits, next_token_agreement
from kvcourse.kernels.measure.perplexity import perplexity
from kvcourse.kernels.model.config_table import MODEL_CONFIGS
from kvcourse.kernels.model.latent import (
    absorbed_attention,
    decode_work,
    factorise,
    full_rank,
    joint_svd,
    latent_bytes_per_token,
    latent_twin,
    layer_factors,
    layer_svds,
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


def test_one_decomposition_serves_every_rank_and_rebuilds_the_weights_exactly_at_full_rank(tiny_model):
    svds = layer_svds(tiny_model)
    assert len(svds) == tiny_model.config.num_layers and svds[0].full_rank == full_rank(tiny_model.config)
    attention = tiny_model.layers[0].self_attn
    for rank in (2, 5, svds[0].full_rank):
        once, again = svds[0].factors(rank), layer_factors(attention, rank)
        assert torch.allclose(once.up_k @ once.down, again.up_k @ again.down, atol=1e-5)
    stacked = attention.qkv_proj.weight[attention.q_size :].detach()
    assert torch.allclose(svds[0].rebuilt(svds[0].full_rank), stacked, atol=1e-5)
    kept = svds[0].energy_kept()
    assert bool((kept[1:] >= kept[:-1]).all()) and float(kept[-1]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="exceeds"):
        svds[0].factors(svds[0].full_rank + 1)


def test_a_bfloat16_projection_is_rebuilt_bit_for_bit_at_full_rank():
    gen = torch.Generator().manual_seed(1)
    w_k, w_v = (torch.randn(16, 40, generator=gen).to(torch.bfloat16) for _ in range(2))
    svd = joint_svd(w_k, w_v)
    assert svd.rebuilt(svd.full_rank).dtype == torch.bfloat16
    assert torch.equal(svd.rebuilt(svd.full_rank), torch.cat([w_k, w_v]))


def test_the_twin_from_given_decompositions_is_the_twin_from_scratch_and_the_threads_come_back(tiny_model):
    threads = torch.get_num_threads()
    svds = layer_svds(tiny_model)
    assert torch.get_num_threads() == threads
    ids = _text(24)
    given, fresh = latent_twin(tiny_model, 3, svds), latent_twin(tiny_model, 3)
    assert torch.equal(all_logits(given, ids), all_logits(fresh, ids))
    with pytest.raises(ValueError, match="decompositions"):
        latent_twin(tiny_model, 3, svds[:1])


def test_decode_work_counts_the_multiply_adds_by_hand():
    config = MODEL_CONFIGS["smollm2-135m"]  # 9 heads of 64, 3 KV heads (kv_size 192), hidden 576
    work = decode_work(config, 192, 1000)
    assert work.decompressed == 1000 * 192 * 2 * 192 + 9 * 1000 * 64 * 2 + 576 * 9 * 64
    assert work.absorbed == 9 * 64 * 192 + 9 * 1000 * 192 * 2 + 576 * 9 * 192
    assert decode_work(config, 192, 100_000).ratio > work.ratio > 1  # the rebuild grows with the context
    with pytest.raises(ValueError, match="context"):
        decode_work(config, 192, 0)
