"""The analytic cost model: hand-checked numbers, chapter 003's example, brute-force counts."""

from __future__ import annotations

import math

import pytest
from factories import make_config, make_tiny_hf_llama

from kvcourse.kernels import costs
from kvcourse.kernels.model.config_table import EXAMPLE_13B


def test_chapter_003_example_13b():
    assert costs.kv_bytes_per_token(EXAMPLE_13B, 2) == 819_200
    one_user = costs.kv_cache_bytes(EXAMPLE_13B, num_tokens=4000)
    assert one_user == 3_276_800_000  # ~3.2 GB
    assert costs.kv_cache_bytes(EXAMPLE_13B, num_tokens=4000, num_users=32) == 104_857_600_000  # ~100 GB


def test_kv_bytes_formula_on_tiny_config():
    config = make_config(num_layers=3, num_kv_heads=2, head_dim=8, num_heads=4)
    assert costs.kv_bytes_per_token(config, 4) == 2 * 3 * 2 * 8 * 4


def test_quantized_bytes_count_the_scales():
    config = make_config(num_layers=2, num_kv_heads=2, head_dim=8)
    assert costs.quantized_kv_bytes_per_token(config, 1, 4) == 2 * 2 * 2 * (8 + 4)


def test_max_cached_tokens_is_free_memory_over_bytes_per_token():
    assert costs.max_cached_tokens(EXAMPLE_13B, 80 * 10**9) == 80 * 10**9 // 819_200


@pytest.mark.parametrize("arch,tied", [("llama", False), ("llama", True), ("qwen2", False)])
def test_num_parameters_matches_real_tensors(arch, tied):
    from kvcourse.kernels.model.config import ModelConfig

    model = make_tiny_hf_llama(arch, tie_word_embeddings=tied)
    config = ModelConfig.from_hf(model.config)
    assert costs.num_parameters(config) == sum(p.numel() for p in model.parameters())
    assert costs.weight_bytes(config, 4) == sum(p.numel() * p.element_size() for p in model.parameters())


def test_weight_bytes_read_skips_only_an_untied_embedding_table():
    tied, untied = make_config(tie_word_embeddings=True), make_config(tie_word_embeddings=False)
    assert costs.weight_bytes_read_per_pass(tied, 2) == costs.weight_bytes(tied, 2)
    assert costs.weight_bytes_read_per_pass(untied, 2) == costs.weight_bytes(untied, 2) - 2 * 96 * 32


def brute_cells(num_new, context_len, window=None):
    cells = 0
    for p in range(context_len - num_new, context_len):
        cells += p + 1 if window is None else min(p + 1, window)
    return cells


@pytest.mark.parametrize("num_new,ctx", [(1, 1), (5, 5), (1, 10), (3, 10), (0, 4), (10, 10)])
@pytest.mark.parametrize("window", [None, 1, 3, 7, 20])
def test_score_cells_match_brute_force(num_new, ctx, window):
    assert costs.score_cells_per_head(num_new, ctx, window) == brute_cells(num_new, ctx, window)


def test_score_cells_total_and_prefill_is_quadratic():
    config = make_config()
    assert costs.score_cells(config, 8, 8) == 36 * config.num_heads * config.num_layers
    assert costs.score_cells_per_head(100, 100) == 5050


def test_forward_flops_decomposition():
    config = make_config()
    h, hd, inter, v = 32, 8, 64, 96
    per_layer_token = 2 * (h * (4 * hd + 2 * 2 * hd) + 4 * hd * h + 3 * h * inter)
    expected = 3 * 2 * per_layer_token + 2 * 1 * h * v + 4 * hd * costs.score_cells(config, 3, 5)
    assert costs.forward_flops(config, 3, 5, num_logits=1) == expected
    all_logits = costs.forward_flops(config, 3, 5)
    assert all_logits - expected == 2 * 2 * h * v


def test_flops_per_token_is_about_twice_the_parameters():
    config = EXAMPLE_13B
    ratio = costs.matmul_flops_per_token(config) / (2 * costs.num_parameters(config))
    assert 0.98 < ratio < 1.0


def test_score_grid_bytes():
    assert costs.score_grid_bytes(4, 6, num_heads=2, bytes_per_value=4) == 4 * 6 * 2 * 4


@pytest.mark.parametrize("bad", [0, -1, math.nan, 1.5, "2", True])
def test_bad_bytes_per_value(bad):
    with pytest.raises(ValueError, match="bytes_per_value"):
        costs.kv_bytes_per_token(EXAMPLE_13B, bad)


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, 2.5])
def test_bad_token_and_user_counts(bad):
    with pytest.raises(ValueError, match="num_tokens"):
        costs.kv_cache_bytes(EXAMPLE_13B, bad)
    with pytest.raises(ValueError, match="num_users"):
        costs.kv_cache_bytes(EXAMPLE_13B, 10, bad)


def test_new_tokens_cannot_exceed_context():
    with pytest.raises(ValueError, match="cannot exceed"):
        costs.score_cells_per_head(5, 4)


def test_duck_typed_config_and_missing_attribute():
    class Shape:
        num_layers, num_kv_heads, head_dim = 2, 1, 4

    assert costs.kv_bytes_per_token(Shape(), 1) == 16
    with pytest.raises(ValueError, match="config has no attribute"):
        costs.kv_bytes_per_token(object())


def test_tokens_processed_with_and_without_cache():
    # 5 new tokens after a 3-token prompt: 3 + 1 + 1 + 1 + 1 with a cache; 3 + 4 + 5 + 6 + 7 without.
    assert costs.tokens_processed(3, 5, use_cache=True) == 7
    assert costs.tokens_processed(3, 5, use_cache=False) == 25
    with pytest.raises(ValueError, match="num_new_tokens"):
        costs.tokens_processed(3, 0, use_cache=False)


def test_kv_crossover_tokens_chapter_003_example():
    weights = costs.weight_bytes(EXAMPLE_13B, 2)
    one_user = costs.kv_crossover_tokens(EXAMPLE_13B)
    assert one_user == math.ceil(weights / 819_200)
    assert costs.kv_cache_bytes(EXAMPLE_13B, one_user) >= weights > costs.kv_cache_bytes(EXAMPLE_13B, one_user - 1)
    thirty_two = costs.kv_crossover_tokens(EXAMPLE_13B, num_users=32)
    assert (
        costs.kv_cache_bytes(EXAMPLE_13B, thirty_two, 32)
        >= weights
        > costs.kv_cache_bytes(EXAMPLE_13B, thirty_two - 1, 32)
    )
    assert thirty_two < 4000 < one_user  # 32 users at 4,000 tokens outweigh the weights; one user does not
    # Weights stored like the cache: the bytes per value cancel. An int8 cache under 16-bit weights doubles it.
    assert costs.kv_crossover_tokens(EXAMPLE_13B, bytes_per_value=4) == one_user
    assert costs.kv_crossover_tokens(EXAMPLE_13B, bytes_per_value=1, weight_bytes_per_value=2) == math.ceil(
        weights / 409_600
    )
    with pytest.raises(ValueError):
        costs.kv_crossover_tokens(EXAMPLE_13B, num_users=0)


def test_kv_projection_flops_are_the_k_and_v_part_of_the_matmuls():
    config = make_config(num_layers=3, hidden_size=16, num_heads=4, num_kv_heads=2, head_dim=4)
    assert costs.kv_projection_flops_per_token(config) == 2 * 3 * 16 * (2 * 2 * 4)
    mha = make_config(num_layers=3, hidden_size=16, num_heads=4, num_kv_heads=4, head_dim=4)
    extra = costs.matmul_flops_per_token(mha, False) - costs.matmul_flops_per_token(config, False)
    assert extra == costs.kv_projection_flops_per_token(mha) - costs.kv_projection_flops_per_token(config)


def test_a_decode_step_reads_the_weights_once_and_every_sequences_cache():
    config = make_config()
    weights = costs.weight_bytes_read_per_pass(config, 2)
    assert costs.decode_step_bytes(config, 1, 10, 2) == weights + costs.kv_bytes_per_token(config, 2) * 10
    # 32 sequences: the weights still once, the caches 32 times
    assert costs.decode_step_bytes(config, 32, 10, 2) == weights + 32 * costs.kv_bytes_per_token(config, 2) * 10
    assert (
        costs.decode_step_bytes(EXAMPLE_13B, 16, 4096, 2)
        == costs.weight_bytes_read_per_pass(EXAMPLE_13B, 2) + 16 * 819_200 * 4096
    )
    with pytest.raises(ValueError, match="batch_size"):
        costs.decode_step_bytes(config, 0, 10)


def test_decode_step_flops_are_one_token_per_sequence_with_its_attention():
    config = make_config()
    one = costs.forward_flops(config, 1, 10, num_logits=1)
    assert one == costs.matmul_flops_per_token(config) + 4 * config.head_dim * config.num_heads * config.num_layers * 10
    assert costs.decode_step_flops(config, 8, 10) == 8 * one
    with pytest.raises(ValueError, match="batch_size"):
        costs.decode_step_flops(config, -1, 10)


def _step_seconds(config, batch, context, flops, bandwidth, bpv):
    """(compute seconds, memory seconds) of one decode step, straight from the cost model."""
    return (
        costs.decode_step_flops(config, batch, context) / flops,
        costs.decode_step_bytes(config, batch, context, bpv) / bandwidth,
    )


def test_compute_bound_batch_is_the_first_batch_past_the_ridge():
    config = make_config()
    flops, bandwidth, bpv = 1e11, 1e10, 2
    for context in (1, 4, 16):
        batch = costs.compute_bound_batch(config, context, flops, bandwidth, bpv)
        assert batch is not None and batch > 1  # 43 kB of weights, 43 kFLOP per sequence: about a dozen
        compute_s, memory_s = _step_seconds(config, batch, context, flops, bandwidth, bpv)
        assert compute_s >= memory_s
        compute_s, memory_s = _step_seconds(config, batch - 1, context, flops, bandwidth, bpv)
        assert compute_s < memory_s
    assert costs.compute_bound_batch(config, 64, flops, bandwidth, bpv) is None  # K/V outgrows the FLOPs
    assert costs.compute_bound_batch(config, 1, 1e9, 1e10, bpv) == 1  # slow math, fast memory


def test_a_long_context_keeps_the_step_memory_bound_at_any_batch():
    # H100 SXM spec-sheet figures: 989 TFLOP/s of dense bf16, 3.35 TB/s of HBM3
    h100 = dict(flops_per_second=989e12, bytes_per_second=3.35e12, bytes_per_value=2)
    assert costs.compute_bound_batch(EXAMPLE_13B, 4096, **h100) is None  # 3.4 GB of K/V per sequence
    # the weights alone: ridge near F / BW = 295 FLOP per byte, one multiply-add per 2-byte weight per row
    ridge = costs.compute_bound_batch(EXAMPLE_13B, 1, **h100)
    assert 280 < ridge < 320
    with pytest.raises(ValueError, match="bytes_per_second"):
        costs.compute_bound_batch(EXAMPLE_13B, 1, 1e12, 0)
    with pytest.raises(ValueError, match="flops_per_second"):
        costs.compute_bound_batch(EXAMPLE_13B, 1, math.nan, 1e9)


def test_kv_blocks_needed_counts_whole_blocks_and_a_shared_prefix_once():
    assert costs.kv_blocks_needed(100, 16) == 7  # six full blocks and one holding 4 tokens
    assert costs.kv_blocks_needed(100, 16, num_users=3) == 21
    # 40 shared tokens: 2 whole blocks stored once, the 8 left over sit in each user's own third block
    assert costs.kv_blocks_needed(100, 16, num_users=3, shared_prefix_tokens=40) == 2 + 3 * 5
    assert costs.kv_blocks_needed(32, 16, num_users=3, shared_prefix_tokens=32) == 1 + 3 * 1  # last block own
    assert costs.kv_blocks_needed(100, 16, num_users=0) == 0


def test_pool_window_is_the_longest_context_whose_blocks_fit():
    def brute(num_blocks, bs, users, prefix):
        fits = [k for k in range(1, num_blocks + 2) if costs.kv_blocks_needed(k * bs, bs, users, prefix) <= num_blocks]
        return max(fits, default=0) * bs

    for num_blocks in range(0, 30):
        for users in (1, 2, 3, 7):
            for prefix in (0, 5, 16, 40, 200):
                assert costs.pool_window(num_blocks, 16, users, prefix) == brute(num_blocks, 16, users, prefix), (
                    num_blocks,
                    users,
                    prefix,
                )


def test_context_window_one_user_token_by_token_is_max_cached_tokens():
    for free in (0, 819_199, 819_200, 80 * 10**9):
        assert costs.context_window(EXAMPLE_13B, free, 2) == costs.max_cached_tokens(EXAMPLE_13B, free, 2)


def test_context_window_rounds_down_to_whole_blocks_and_shares_the_prefix():
    block_bytes = 819_200 * 16
    free = 100 * block_bytes + block_bytes - 1  # 100 blocks and a bit, not a 101st
    assert costs.context_window(EXAMPLE_13B, free, 2, block_size=16) == 1600
    assert costs.context_window(EXAMPLE_13B, free, 2, num_users=3, block_size=16) == 33 * 16
    # a 20-block system prompt stored once: the other 80 blocks split three ways
    assert costs.context_window(EXAMPLE_13B, free, 2, 3, 16, shared_prefix_tokens=320) == (20 + 26) * 16
    with pytest.raises(ValueError, match="num_users"):
        costs.context_window(EXAMPLE_13B, free, 2, num_users=0)
