"""Partial RoPE beside a latent (issue 45 item 2, kernels/model/latent_rope.py): the pairs kept, the twin, the bytes,
absorption with RoPE, and the activation-aware factorisation it is built from (kernels/model/latent.py)."""

from __future__ import annotations

import pytest
import torch

from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.measure.agreement import all_logits
from kvcourse.kernels.measure.latent_rank import input_second_moments
from kvcourse.kernels.model.latent import joint_svd, latent_twin, layer_svds
from kvcourse.kernels.model.latent_rope import (
    absorbed_partial_attention,
    kept_pairs,
    partial_bytes_per_token,
    partial_svd,
    partial_twin,
    rotated_dims,
)


def _text(n: int = 48, seed: int = 7) -> list[int]:
    return [int(t) for t in torch.randint(1, 90, (n,), generator=torch.Generator().manual_seed(seed))]


def _partial(model, pairs: int, moments=None):
    layers = [layer.self_attn for layer in model.layers]
    moments = [None] * len(layers) if moments is None else moments
    rotated = [rotated_dims(kept_pairs(a, pairs, c), a.head_dim) for a, c in zip(layers, moments, strict=True)]
    return rotated, [partial_svd(a, r, c) for a, r, c in zip(layers, rotated, moments, strict=True)]


def test_every_pair_kept_at_full_rank_is_the_model_and_the_model_is_left_as_it_was(tiny_model):
    before = {name: p.clone() for name, p in tiny_model.named_parameters()}
    half = tiny_model.config.head_dim // 2
    rotated, svds = _partial(tiny_model, half)
    assert all(mask.all() for mask in rotated)
    twin = partial_twin(tiny_model, svds[0].full_rank, rotated, svds)
    ids = _text()
    assert torch.allclose(all_logits(twin, ids), all_logits(tiny_model, ids), atol=1e-4)
    assert all(torch.equal(p, before[name]) for name, p in tiny_model.named_parameters())
    with pytest.raises(ValueError, match="pairs"):
        kept_pairs(tiny_model.layers[0].self_attn, half + 1)


def test_the_rotation_taken_off_changes_the_answers_and_the_rotated_rows_stay_exact(tiny_model):
    rotated, svds = _partial(tiny_model, 1)
    assert all(int(mask.sum()) == 2 * tiny_model.config.num_kv_heads for mask in rotated)  # one pair per KV head
    twin = partial_twin(tiny_model, 2, rotated, svds)
    attention, original = twin.layers[0].self_attn, tiny_model.layers[0].self_attn
    keys = slice(attention.q_size, attention.q_size + attention.kv_size)
    kept = rotated[0].flatten()
    assert torch.equal(attention.qkv_proj.weight[keys][kept], original.qkv_proj.weight[keys][kept])
    ids = _text()
    full = partial_twin(tiny_model, svds[0].full_rank, rotated, svds)
    assert not torch.allclose(all_logits(full, ids), all_logits(tiny_model, ids), atol=1e-3)


def test_absorption_with_rope_equals_decompressing_and_the_twins_own_attention(tiny_model):
    rotated, svds = _partial(tiny_model, 2)
    twin = partial_twin(tiny_model, 3, rotated, svds)
    layer, ids = 1, _text(12)
    attention = tiny_model.layers[layer].self_attn
    x = tiny_model.embed_tokens.weight[torch.tensor(ids)].detach()
    positions = torch.arange(100, 100 + len(ids))  # far from 0, so the rotation is large
    rope = tiny_model.rotary.at(positions, x.dtype)
    both = absorbed_partial_attention(attention, svds[layer].factors(3), rotated[layer], x, rope)
    assert both.largest_difference < 1e-4 * float(both.decompressed.abs().max())
    with torch.no_grad():
        own = twin.layers[layer].self_attn(x, twin.rotary.at(positions, x.dtype), NoCacheBackend())
    assert torch.allclose(own, both.decompressed, atol=1e-5)


def test_partial_bytes_count_the_latent_and_the_rotated_dimensions():
    from kvcourse.kernels.model.config_table import MODEL_CONFIGS

    smol = MODEL_CONFIGS["smollm2-135m"]
    assert partial_bytes_per_token(smol, 168, 4, 4) == 30 * (168 + 3 * 8) * 4  # 23,040: half rank's bytes
    assert partial_bytes_per_token(smol, 360, 4, 2) == 30 * 384 * 2  # the full stack: the shipped cache


def test_activation_aware_rebuilds_the_calibrated_outputs_better_and_is_plain_svd_with_identity(tiny_model):
    ids = _text(64)
    moments = input_second_moments(tiny_model, ids)
    attention = tiny_model.layers[0].self_attn
    w = attention.qkv_proj.weight[attention.q_size :].detach()
    assert torch.allclose(joint_svd(w[:16], w[16:], torch.eye(w.shape[1])).s, joint_svd(w[:16], w[16:]).s)
    captured = {}

    def capture(module, args):
        captured["x"] = args[0].detach()

    handle = attention.register_forward_pre_hook(capture)
    all_logits(tiny_model, ids)
    handle.remove()
    x = captured["x"]
    assert torch.allclose(moments[0], (x.T @ x).double() / len(ids), atol=1e-6)
    plain, aware = layer_svds(tiny_model), layer_svds(tiny_model, moments)
    rank = 3
    errors = [float(((svd[0].rebuilt(rank) - w) @ x.T).norm()) for svd in (plain, aware)]
    assert errors[1] < errors[0]
    assert latent_twin(tiny_model, rank, aware) is not None
