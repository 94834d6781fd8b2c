"""Simulators of lessons 01-05 predict what the engine measures: the two must agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvcourse.kernels import costs, generate
from kvcourse.kernels.attention.backends.contiguous import NoCacheBackend
from kvcourse.kernels.attention.reference import AttentionStats, naive_attention, tiled_attention
from kvcourse.simulators.kv_cache import KVCacheConfig, KVCacheSim
from kvcourse.simulators.qkv import QKVExplorer, record_qkv
from kvcourse.simulators.rereading import Rereading, RereadingConfig
from kvcourse.simulators.score_grid import ScoreGrid, ScoreGridConfig, causal_cells
from kvcourse.simulators.word_cost import WordCost, WordCostConfig

PROMPT = [5, 17, 33, 42, 61, 8, 90]
NUM_NEW = 9


@pytest.fixture(scope="module")
def runs(tiny_model):
    return {
        cache: generate(tiny_model, PROMPT, NUM_NEW, cache=cache, eos_token_id=[]) for cache in ("none", "contiguous")
    }


def test_word_cost_bytes_and_passes_match_generation(tiny_model, runs):
    result = runs["contiguous"]
    config = tiny_model.config
    sim = WordCost(
        WordCostConfig(
            num_words=NUM_NEW,
            tokens_per_word=1.0,
            flops_per_pass=costs.matmul_flops_per_token(config),
            weight_bytes_per_pass=tiny_model.weight_bytes_read_per_pass(),
            bandwidth_gb_per_s=1.0,
        )
    )
    assert sim.config.num_passes == len(result.stats) == len(result.tokens)
    assert sim.total_weight_bytes == sum(s.weight_bytes for s in result.stats)
    assert sim.config.weight_bytes_per_pass == costs.weight_bytes_read_per_pass(config, 4)
    for stats in result.stats[1:]:
        # A one-token pass: the simulator's per-token matmuls plus attention over the context so far.
        attention = 4 * config.head_dim * stats.context_len * config.num_heads * config.num_layers
        assert stats.flops == sim.config.flops_per_pass + attention


def test_rereading_predicts_tokens_processed_without_cache(runs):
    sim = Rereading(RereadingConfig(len(PROMPT), NUM_NEW))
    measured = [s.num_tokens_processed for s in runs["none"].stats]
    assert [sim.step() for _ in range(NUM_NEW)] == measured == sim.tokens_per_step
    assert sim.total_tokens_processed == sum(measured)


@pytest.mark.parametrize("use_cache", [False, True])
def test_kv_cache_sim_predicts_tokens_and_cache_entries(tiny_model, runs, use_cache):
    result = runs["contiguous" if use_cache else "none"]
    sim = KVCacheSim(KVCacheConfig(len(PROMPT), NUM_NEW, use_cache))
    per_token = costs.kv_bytes_per_token(tiny_model.config, 4)
    for stats in result.stats:
        assert sim.step() == stats.num_tokens_processed
        assert sim.cached_entries * per_token == stats.kv_cache_bytes
    assert runs["none"].tokens == runs["contiguous"].tokens


@pytest.mark.parametrize("num_tokens", [1, 5, 24])
def test_score_grid_predicts_naive_attention_memory_and_cells(tiny_model, num_tokens):
    config = tiny_model.config
    sim = ScoreGrid(
        ScoreGridConfig(
            num_tokens, config.num_layers, config.num_heads, config.head_dim, 4, costs.matmul_flops_per_token(config)
        )
    )
    backend = NoCacheBackend("naive")
    ids = torch.arange(num_tokens) % config.vocab_size
    with torch.inference_mode():
        tiny_model(ids, torch.arange(num_tokens), backend)
    assert backend.stats.peak_score_bytes == sim.grid_bytes
    assert backend.num_score_cells == causal_cells(num_tokens) * config.num_heads * config.num_layers
    assert sim.attention_flops_at(num_tokens) + sim.linear_flops_at(num_tokens) == costs.forward_flops(
        config, num_tokens, num_tokens
    )


def test_tiled_attention_never_holds_the_grid_and_agrees():
    torch.manual_seed(0)
    q, k, v = torch.randn(4, 200, 8), torch.randn(2, 200, 8), torch.randn(2, 200, 8)
    naive, tiled = AttentionStats(), AttentionStats()
    expected = naive_attention(q, k, v, 0, stats=naive)
    got = tiled_attention(q, k, v, 0, stats=tiled, block_size=32)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert naive.peak_score_bytes == costs.score_grid_bytes(200, 200, num_heads=4, bytes_per_value=4)
    assert tiled.peak_score_bytes == costs.score_grid_bytes(200, 32, num_heads=4, bytes_per_value=4)


def test_qkv_explorer_reproduces_the_engines_attention_output(tiny_hf):
    data, recorder = record_qkv(tiny_hf, PROMPT)
    assert data.q.shape == (2, 4, len(PROMPT), 8) and data.k.shape == (2, 2, len(PROMPT), 8)
    for layer in range(2):
        for head in range(4):
            for position in (0, 3, len(PROMPT) - 1):
                look = QKVExplorer(data, layer, head, position).lookup()
                np.testing.assert_allclose(look.output, recorder.out[layer][position, head].numpy(), atol=1e-5)
