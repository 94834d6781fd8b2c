"""Exact claims lessons 01-03 make, checked here rather than in front of the learner (docs/lessons.md).

Each test names the lesson and the cell whose prose or expect() relies on it. They use the real
model's configuration (no weights) or the tiny factory model, so they run in a second or two.
"""

from __future__ import annotations

import math

import pytest
import torch

from kvcourse.kernels import (
    MODEL_CONFIGS,
    AttentionStats,
    costs,
    generate,
    naive_attention,
    tiled_attention,
)
from kvcourse.simulators.score_grid import ScoreGrid, ScoreGridConfig
from kvcourse.simulators.word_cost import WordCost, WordCostConfig

SMOLLM2 = MODEL_CONFIGS["smollm2-135m"]


# ---------------------------------------------------------------- lesson 01


def test_01_one_token_is_two_flops_per_weight_plus_a_sliver_of_attention():
    """01-06: forward_flops(1 token) = the matmuls (2 per weight) + one score cell per head and layer."""
    flops = costs.forward_flops(SMOLLM2, 1, 1)
    attention = flops - costs.matmul_flops_per_token(SMOLLM2)
    assert attention == 4 * SMOLLM2.head_dim * SMOLLM2.num_heads * SMOLLM2.num_layers
    assert 1.99 < flops / costs.num_parameters(SMOLLM2) < 2.01


def test_01_exercise_2_a_prompt_pass_scores_its_last_position_only_as_in_lesson_02():
    """01-33: a T-token prompt's pass, counted as the engine runs it (the output layer at the last position, as
    lesson 02 counts it), costs less than T single tokens while T is short, and more once attention's square
    takes over."""
    one = costs.forward_flops(SMOLLM2, 1, 1)
    ratios = [costs.forward_flops(SMOLLM2, t, t, num_logits=1) / (t * one) for t in (10, 1_000, 10_000)]
    assert ratios[0] < ratios[1] < 1 < ratios[2]
    output_layer = 2 * SMOLLM2.hidden_size * SMOLLM2.vocab_size
    assert costs.forward_flops(SMOLLM2, 10, 10) - costs.forward_flops(SMOLLM2, 10, 10, num_logits=1) == 9 * output_layer


@pytest.mark.parametrize("bytes_per_value", [4, 2])
def test_01_simulator_with_the_measured_costs_and_the_one_second_bandwidth(bytes_per_value):
    """01-24 and exercise 3 (01-35): the simulator takes the lesson's values; the solution's bandwidth gives 1 s."""
    num_words, num_passes = 200, 233
    per_pass = costs.weight_bytes_read_per_pass(SMOLLM2, bytes_per_value)
    one_second = num_passes * per_pass / 1e9
    sim = WordCost(
        WordCostConfig(num_words, num_passes / num_words, costs.forward_flops(SMOLLM2, 1, 1), per_pass, one_second)
    )
    assert sim.config.num_passes == num_passes
    assert sim.total_weight_bytes == num_passes * per_pass
    assert math.isclose(sim.min_total_seconds, 1.0)


# ---------------------------------------------------------------- lesson 02


@pytest.mark.parametrize("prompt_len, num_new", [(7, 9), (1, 1), (12, 5)])
def test_02_a_cache_feeds_every_token_once_except_the_last(tiny_model, prompt_len, num_new):
    """02-07/02-08: P + n - 1 tokens with a cache (the last token written is never fed); the triangle without."""
    prompt = [(3 * i + 5) % tiny_model.config.vocab_size for i in range(prompt_len)]
    fed = {
        cache: [
            s.num_tokens_processed for s in generate(tiny_model, prompt, num_new, cache=cache, eos_token_id=[]).stats
        ]
        for cache in ("none", "contiguous")
    }
    assert sum(fed["contiguous"]) == costs.tokens_processed(prompt_len, num_new, True) == prompt_len + num_new - 1
    assert sum(fed["none"]) == costs.tokens_processed(prompt_len, num_new, False)
    assert sum(fed["none"]) == num_new * prompt_len + num_new * (num_new - 1) // 2


def test_02_exercise_2_triangle_overtakes_rectangle_at_2p_plus_2():
    """02-28: for P = 50 the triangle n(n-1)/2 first exceeds n * P at n = 102 (equal at 101)."""
    p = 50
    assert next(n for n in range(1, 1000) if n * (n - 1) // 2 > n * p) == 2 * p + 2
    assert 101 * p == 101 * 100 // 2


@pytest.mark.parametrize("tokens_per_word", [1.01, 1.17, 1.99])
def test_02_big_part_a_200_word_answer_rereads_itself_more_than_the_prompt(tokens_per_word):
    """02-15/02-16 (02.big_part): for the 50-token prompt, any answer of 200 words at 1-2 tokens per word (lesson
    01's range) is past n = 2P + 2, so the triangle is the larger part, by more than the reveal's 1.25 band."""
    p, n = 50, round(200 * tokens_per_word)
    rectangle, triangle = n * p, n * (n - 1) // 2
    assert rectangle + triangle == costs.tokens_processed(p, n, use_cache=False)
    assert triangle / rectangle > 1.25


# ---------------------------------------------------------------- lesson 03


def _random_qkv(t: int, dtype: torch.dtype):
    make = lambda heads: torch.randn(heads, t, SMOLLM2.head_dim, dtype=dtype)  # noqa: E731
    return make(SMOLLM2.num_heads), make(SMOLLM2.num_kv_heads), make(SMOLLM2.num_kv_heads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_03_simulator_grid_bytes_equal_naive_attention_in_either_dtype(dtype):
    """03-24 and 03-15: scores are float32 whatever the model's dtype; the simulator predicts the measured grid."""
    torch.manual_seed(0)
    sim = ScoreGrid(
        ScoreGridConfig(
            1, SMOLLM2.num_layers, SMOLLM2.num_heads, SMOLLM2.head_dim, 4, costs.matmul_flops_per_token(SMOLLM2)
        )
    )
    measured = []
    for t in (32, 64, 128):
        stats = AttentionStats()
        naive_attention(*_random_qkv(t, dtype), 0, stats=stats)
        measured.append(stats.peak_score_bytes)
        assert stats.peak_score_bytes == sim.grid_bytes_at(t) == costs.score_grid_bytes(t, t, SMOLLM2.num_heads, 4)
    assert measured[1] == 4 * measured[0] and measured[2] == 4 * measured[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_03_tiled_attention_holds_one_tile_and_agrees_to_the_last_bit(dtype):
    """03-13: one tile of `block` keys instead of the grid; the same cells; outputs equal up to the dtype's rounding."""
    torch.manual_seed(0)
    t, block = 256, 64
    q, k, v = _random_qkv(t, dtype)
    naive, tiled = AttentionStats(), AttentionStats()
    plain = naive_attention(q, k, v, 0, stats=naive)
    tiles = tiled_attention(q, k, v, 0, stats=tiled, block_size=block)
    assert naive.peak_score_bytes == (t // block) * tiled.peak_score_bytes
    assert naive.num_score_cells == tiled.num_score_cells
    half = AttentionStats()  # 03.tiled_growth: every query against one block, so twice the length, twice the bytes
    tiled_attention(*_random_qkv(t // 2, dtype), 0, stats=half, block_size=block)
    assert tiled.peak_score_bytes == 2 * half.peak_score_bytes
    tolerance = 2 * max(torch.finfo(dtype).eps, 1e-5)
    assert torch.allclose(tiles.float(), plain.float(), rtol=tolerance, atol=tolerance)


def test_03_simulator_crossover_is_where_the_cost_model_splits_half_and_half():
    """03-10: the simulator's crossover and attention's share from costs.forward_flops agree."""
    sim = ScoreGrid(
        ScoreGridConfig(
            1, SMOLLM2.num_layers, SMOLLM2.num_heads, SMOLLM2.head_dim, 4, costs.matmul_flops_per_token(SMOLLM2)
        )
    )
    for t in (1, 100, 4_000, 100_000):
        attention = costs.forward_flops(SMOLLM2, t, t) - t * costs.matmul_flops_per_token(SMOLLM2)
        assert math.isclose(sim.attention_flops_at(t), attention)
    crossover = round(sim.crossover_tokens)
    whole = costs.forward_flops(SMOLLM2, crossover, crossover)
    assert abs(sim.attention_flops_at(crossover) / whole - 0.5) < 0.01


def test_03_attention_costs_four_head_dims_per_score_cell_and_the_crossover_formula_holds():
    """03-25 and 03-36: forward_flops counts 4 x head_dim per causal cell on top of M per token;
    T + 1 = 2M / (4d x H x L)."""
    per_token, per_cell = costs.matmul_flops_per_token(SMOLLM2), 4 * SMOLLM2.head_dim
    heads_layers = SMOLLM2.num_heads * SMOLLM2.num_layers
    for t in (1, 77, 4_096):
        attention = costs.forward_flops(SMOLLM2, t, t) - t * per_token
        assert attention == per_cell * heads_layers * t * (t + 1) // 2
    crossover = ScoreGrid(
        ScoreGridConfig(1, SMOLLM2.num_layers, SMOLLM2.num_heads, SMOLLM2.head_dim, 4, per_token)
    ).crossover_tokens
    assert math.isclose(crossover + 1, 2 * per_token / (per_cell * heads_layers))
    full_square = per_token / (per_cell * heads_layers)  # the reveal's "about half that"
    assert abs(full_square - crossover / 2) < 1
    prefill = ScoreGrid(
        ScoreGridConfig(
            1,
            SMOLLM2.num_layers,
            SMOLLM2.num_heads,
            SMOLLM2.head_dim,
            4,
            costs.matmul_flops_per_token(SMOLLM2, with_lm_head=False),
        )
    ).crossover_tokens
    assert prefill < crossover  # the output layer at the last position only: a smaller M, an earlier crossover


def test_03_ten_times_the_length_is_between_10x_and_100x_for_the_whole_pass():
    """03-27: attention's part grows about 100x, the whole pass less; bigger models cross later."""
    whole = costs.forward_flops(SMOLLM2, 10_000, 10_000) / costs.forward_flops(SMOLLM2, 1_000, 1_000)
    attention = costs.score_cells(SMOLLM2, 10_000, 10_000) / costs.score_cells(SMOLLM2, 1_000, 1_000)
    assert 10 < whole < attention < 100.1
    share = lambda cfg, t: 1 - t * costs.matmul_flops_per_token(cfg) / costs.forward_flops(cfg, t, t)  # noqa: E731
    assert share(MODEL_CONFIGS["llama-2-7b"], 10_000) < share(SMOLLM2, 10_000)


def test_03_ten_times_nearer_10x_than_100x_for_smollm2_and_llama_2_70b():
    """03-27: 03.ten_times_nearer is revealed as 'closer to 10x for both' (the log scale's middle is 10^1.5)."""
    ratios = [
        costs.forward_flops(cfg, 10_000, 10_000) / costs.forward_flops(cfg, 1_000, 1_000)
        for cfg in (SMOLLM2, MODEL_CONFIGS["llama-2-70b"])
    ]
    assert all(10 < r < 10**1.5 for r in ratios), ratios
