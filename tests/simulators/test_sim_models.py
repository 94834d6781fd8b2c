"""The pure simulator models of lessons 01-05: plain numbers, no widgets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvcourse.kernels import costs
from kvcourse.kernels.model.config_table import MODEL_CONFIGS
from kvcourse.simulators.checks import InvalidInput, check_float, check_int
from kvcourse.simulators.kv_cache import KVCacheConfig, KVCacheSim, tokens_processed_with_cache
from kvcourse.simulators.qkv import QKV, QKVExplorer, attend_one
from kvcourse.simulators.rereading import Rereading, RereadingConfig, tokens_processed_without_cache
from kvcourse.simulators.score_grid import ScoreGrid, ScoreGridConfig, causal_cells, grid_cells
from kvcourse.simulators.word_cost import WordCost, WordCostConfig

SMOL = MODEL_CONFIGS["smollm2-135m"]


@pytest.mark.parametrize("bad", [0, -3, 1.5, float("nan"), 10**12, "7", True])
def test_check_int_rejects_with_a_message(bad):
    with pytest.raises(InvalidInput, match="Length"):
        check_int("Length", bad, 1, 1000)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 1e30, None])
def test_check_float_rejects_with_a_message(bad):
    with pytest.raises(InvalidInput, match="Rate"):
        check_float("Rate", bad, 0.5, 100.0)


def test_check_int_accepts_integral_floats():
    assert check_int("n", 4.0, 1, 10) == 4


# -- lesson 01 ----------------------------------------------------------------------------------
def _word_cost(num_words=200, tokens_per_word=1.3):
    return WordCost(
        WordCostConfig(
            num_words, tokens_per_word, flops_per_pass=2e8, weight_bytes_per_pass=5e8, bandwidth_gb_per_s=100.0
        )
    )


def test_word_cost_200_words_is_260_passes():
    sim = _word_cost()
    assert sim.config.num_passes == 260
    assert sim.total_weight_bytes == 260 * 5e8
    assert sim.min_total_seconds == pytest.approx(260 * 5e8 / 100e9)


def test_word_cost_steps_accumulate_and_stop():
    sim = _word_cost(num_words=3, tokens_per_word=1.0)
    for _ in range(3):
        sim.step()
    assert sim.done and sim.bytes_so_far == 3 * 5e8 and sim.flops_so_far == 3 * 2e8
    with pytest.raises(InvalidInput):
        sim.step()
    sim.reset()
    assert sim.num_passes_done == 0


def test_word_cost_rounds_partial_tokens_up():
    assert _word_cost(num_words=10, tokens_per_word=1.25).config.num_passes == 13


# -- lesson 02 ----------------------------------------------------------------------------------
def test_rereading_grows_by_one_and_sums_to_the_triangle():
    sim = Rereading(RereadingConfig(prompt_len=50, num_new_tokens=4))
    assert [sim.step() for _ in range(4)] == [50, 51, 52, 53]
    assert sim.total_tokens_processed == sum(range(50, 54)) == sim.tokens_processed_so_far
    assert sim.prompt_token_reads == 4
    with pytest.raises(InvalidInput):
        sim.step()


@pytest.mark.parametrize(("p", "n"), [(1, 1), (7, 30), (100, 250)])
def test_rereading_total_matches_the_sum(p, n):
    sim = Rereading(RereadingConfig(p, n))
    assert sim.total_tokens_processed == sum(tokens_processed_without_cache(p, n))


@pytest.mark.parametrize(("p", "n"), [(0, 5), (5, 0), (-1, 5), (5, 10**9)])
def test_rereading_rejects_bad_lengths(p, n):
    with pytest.raises(InvalidInput):
        RereadingConfig(p, n)


# -- lesson 03 ----------------------------------------------------------------------------------
def _grid(num_tokens=1000):
    return ScoreGrid(
        ScoreGridConfig(
            num_tokens, SMOL.num_layers, SMOL.num_heads, SMOL.head_dim, 4, costs.matmul_flops_per_token(SMOL)
        )
    )


def test_doubling_the_length_quadruples_the_grid():
    sim = _grid(1000)
    cells, grid_bytes = sim.cells, sim.grid_bytes
    assert cells == 1_000_000
    sim.step()
    assert sim.cells == 4 * cells and sim.grid_bytes == 4 * grid_bytes
    assert grid_cells(10_000) == 100 * grid_cells(1000)


def test_grid_flops_agree_with_the_cost_model():
    sim = _grid()
    for t in (1, 17, 512, 4096):
        expected = costs.forward_flops(SMOL, t, t)
        assert sim.attention_flops_at(t) + sim.linear_flops_at(t) == pytest.approx(expected, rel=1e-12)
        assert causal_cells(t) == costs.score_cells_per_head(t, t)
        assert sim.grid_bytes_at(t) == costs.score_grid_bytes(t, t, SMOL.num_heads, 4)


def test_crossover_is_where_attention_equals_the_rest():
    sim = _grid()
    t = sim.crossover_tokens
    assert sim.attention_flops_at(t) == pytest.approx(sim.linear_flops_at(t), rel=1e-9)
    assert 1000 < t < 10_000


# -- lesson 04 ----------------------------------------------------------------------------------
def _qkv(num_tokens=5, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 4, num_tokens, 8))
    k = rng.standard_normal((2, 2, num_tokens, 8))
    v = rng.standard_normal((2, 2, num_tokens, 8))
    return QKV(q, k, v, tuple(f"t{i}" for i in range(num_tokens)))


def test_attend_one_masks_the_future_and_normalises():
    data = _qkv()
    look = attend_one(data.q[0, 0, 2], data.k[0, 0], data.v[0, 0], position=2)
    assert np.all(np.isinf(look.scores[3:])) and np.all(look.weights[3:] == 0)
    assert look.weights.sum() == pytest.approx(1.0)
    scores = data.k[0, 0, :3] @ data.q[0, 0, 2] / math.sqrt(8)
    weights = np.exp(scores) / np.exp(scores).sum()
    np.testing.assert_allclose(look.output, weights @ data.v[0, 0, :3], rtol=1e-12)


def test_grouped_heads_share_kv_heads():
    data = _qkv()
    assert [data.kv_head(h) for h in range(4)] == [0, 0, 1, 1]


def test_explorer_steps_and_validates():
    data = _qkv()
    explorer = QKVExplorer(data, layer=1, head=3, position=3)
    explorer.step()
    assert explorer.position == 4
    with pytest.raises(InvalidInput):
        explorer.step()
    with pytest.raises(InvalidInput, match="Layer"):
        QKVExplorer(data, layer=2)
    with pytest.raises(InvalidInput, match="Token"):
        QKVExplorer(data, position=-1)


def test_qkv_rejects_mismatched_shapes():
    data = _qkv()
    with pytest.raises(ValueError):
        QKV(data.q, data.k[:, :, :3], data.v[:, :, :3], data.tokens)
    with pytest.raises(ValueError):
        QKV(data.q, data.k[:, :1].repeat(3, axis=1), data.v[:, :1].repeat(3, axis=1), data.tokens)


# -- lesson 05 ----------------------------------------------------------------------------------
def test_cache_on_processes_the_prompt_once_then_one_token():
    sim = KVCacheSim(KVCacheConfig(prompt_len=20, num_new_tokens=5, use_cache=True))
    assert [sim.step() for _ in range(5)] == [20, 1, 1, 1, 1]
    assert sim.cached_entries == 24


def test_cache_off_is_the_rereading_staircase():
    sim = KVCacheSim(KVCacheConfig(prompt_len=20, num_new_tokens=5, use_cache=False))
    assert sim.tokens_per_step == [20, 21, 22, 23, 24] and sim.cached_entries == 0


def test_saving_matches_the_two_sums():
    sim = KVCacheSim(KVCacheConfig(8, 100, True))
    expected = sum(tokens_processed_without_cache(8, 100)) / sum(tokens_processed_with_cache(8, 100))
    assert sim.saving == pytest.approx(expected)
    assert sim.saving > 10
