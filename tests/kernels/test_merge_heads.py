"""Regrouping KV heads after training (lesson 16): repeating is exact, pooling averages each group."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from factories import make_tiny_model

from kvcourse.kernels import costs, generate
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.model.merge_heads import regroup_kv_heads, regroup_kv_projection

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

PROMPT = [5, 17, 33, 42, 61, 8, 90, 12]


def logits(model, ids=PROMPT):
    with torch.inference_mode():
        return model(torch.tensor(ids), torch.arange(len(ids)), NoCacheBackend())


def kv_rows(model, layer=0):
    """(K, V) rows of one layer's fused projection, each (num_kv_heads, head_dim, hidden)."""
    c = model.config
    w = model.layers[layer].self_attn.qkv_proj.weight.detach()
    k = w[c.q_size : c.q_size + c.kv_size].reshape(c.num_kv_heads, c.head_dim, -1)
    v = w[c.q_size + c.kv_size :].reshape(c.num_kv_heads, c.head_dim, -1)
    return k, v


def test_repeating_kv_heads_changes_no_logit_and_no_token(tiny_model):
    mha = regroup_kv_heads(tiny_model, tiny_model.config.num_heads)
    assert mha.config.num_kv_heads == 4 and mha.config.num_heads == 4
    torch.testing.assert_close(logits(mha), logits(tiny_model), rtol=0, atol=1e-5)
    assert generate(mha, PROMPT, 12).tokens == generate(tiny_model, PROMPT, 12).tokens


def test_pooling_averages_the_group_and_keeps_the_queries(tiny_model):
    mqa = regroup_kv_heads(tiny_model, 1)
    k, v = kv_rows(tiny_model)
    k1, v1 = kv_rows(mqa)
    torch.testing.assert_close(k1[0], k.mean(0))
    torch.testing.assert_close(v1[0], v.mean(0))
    q_size = tiny_model.config.q_size
    assert torch.equal(
        mqa.layers[0].self_attn.qkv_proj.weight[:q_size], tiny_model.layers[0].self_attn.qkv_proj.weight[:q_size]
    )
    assert torch.equal(mqa.layers[1].mlp.down_proj.weight, tiny_model.layers[1].mlp.down_proj.weight)


def test_first_keeps_the_first_head_of_each_group(tiny_model):
    k, _ = kv_rows(tiny_model)
    k1, _ = kv_rows(regroup_kv_heads(tiny_model, 1, method="first"))
    assert torch.equal(k1[0], k[0])


def test_pooling_heads_that_are_already_equal_is_exact(tiny_model):
    """Repeat 2 -> 4, pool 4 -> 2: the original weights, and so the original answers."""
    back = regroup_kv_heads(regroup_kv_heads(tiny_model, 4), 2)
    for a, b in zip(back.state_dict().values(), tiny_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)


def test_pooling_is_pooling_the_keys_rope_included(tiny_model):
    """Mean-pooled projections give the mean of the heads' rotated keys: projection and RoPE are linear."""
    from kvcourse.simulators.qkv import record_qkv

    ref, _ = record_qkv(tiny_model, PROMPT)
    pooled, _ = record_qkv(regroup_kv_heads(tiny_model, 1), PROMPT)
    assert pooled.k.shape[1] == 1
    # Layer 0's keys depend only on the embeddings, which pooling leaves alone.
    torch.testing.assert_close(
        torch.from_numpy(pooled.k[0, 0]), torch.from_numpy(ref.k[0].mean(0)), rtol=1e-5, atol=1e-5
    )


def test_the_regrouped_cache_holds_the_bytes_the_cost_model_counts(tiny_model):
    for heads in (1, 2, 4):
        regrouped = regroup_kv_heads(tiny_model, heads)
        result = generate(regrouped, PROMPT, 4)
        last = result.stats[-1]
        assert last.kv_cache_bytes == last.context_len * costs.kv_bytes_per_token(regrouped.config, 4)
        assert regrouped.config == dataclasses.replace(tiny_model.config, num_kv_heads=heads)


def test_biases_are_regrouped_too():
    qwen = make_tiny_model(arch="qwen2")
    c = qwen.config
    bias = qwen.layers[0].self_attn.qkv_proj.bias.detach()
    pooled = regroup_kv_heads(qwen, 1).layers[0].self_attn.qkv_proj.bias.detach()
    k = bias[c.q_size : c.q_size + c.kv_size].reshape(c.num_kv_heads, c.head_dim)
    torch.testing.assert_close(pooled[c.q_size : c.q_size + c.head_dim], k.mean(0))
    torch.testing.assert_close(logits(regroup_kv_heads(qwen, 4)), logits(qwen), rtol=0, atol=1e-5)


def test_tied_embeddings_stay_tied_and_the_original_is_untouched():
    tied = make_tiny_model(tie_word_embeddings=True)
    before = {k: v.clone() for k, v in tied.state_dict().items()}
    new = regroup_kv_heads(tied, 1)
    assert new.lm_head.weight is new.embed_tokens.weight
    assert all(torch.equal(before[k], v) for k, v in tied.state_dict().items())
    assert tied.config.num_kv_heads == 2


def test_projection_helper_on_a_hand_example():
    # 2 query heads, 2 KV heads of 1 dim, hidden 1: rows q0 q1 k0 k1 v0 v1.
    w = torch.tensor([[1.0], [2.0], [3.0], [5.0], [7.0], [11.0]])
    assert regroup_kv_projection(w, 2, 2, 1, 1).flatten().tolist() == [1.0, 2.0, 4.0, 9.0]
    assert regroup_kv_projection(w, 2, 2, 1, 1, "first").flatten().tolist() == [1.0, 2.0, 3.0, 7.0]


@pytest.mark.parametrize("bad", [0, 3, -1, 2.0, True, 8])
def test_impossible_groupings_are_refused_with_the_reason(tiny_model, bad):
    with pytest.raises(ValueError, match="num_kv_heads|regroup"):
        regroup_kv_heads(tiny_model, bad)


def test_unknown_method_is_refused(tiny_model):
    with pytest.raises(ValueError, match="method"):
        regroup_kv_heads(tiny_model, 1, method="median")
