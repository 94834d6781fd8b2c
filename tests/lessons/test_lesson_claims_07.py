"""Lesson 07's table of real models: every cell is the cost model's, and its one-user verdicts are right."""

from __future__ import annotations

from kvcourse.kernels import MODEL_CONFIGS, costs
from kvcourse.kernels.model.memory_table import memory_table


def test_memory_table_is_the_cost_model_row_by_row():
    table = memory_table(MODEL_CONFIGS, 2)
    assert list(table.index) == list(MODEL_CONFIGS)
    for name, cfg in MODEL_CONFIGS.items():
        row = table.loc[name]
        assert (row["query heads"], row["KV heads"]) == (cfg.num_heads, cfg.num_kv_heads)
        assert row["KV bytes per token"] == costs.kv_bytes_per_token(cfg, 2)
        assert row["weights (GB)"] == round(costs.weight_bytes(cfg, 2) / 1e9, 1)
        crossover = costs.kv_crossover_tokens(cfg, 1, 2)
        assert row["one user's cache = weights at (tokens)"] == crossover
        assert row["crossover within the context"] == (crossover <= cfg.max_position_embeddings)


def test_the_seeds_half_megabyte_is_llama_2_7b_and_gqa_cuts_it():
    table = memory_table(MODEL_CONFIGS, 2)
    assert table.loc["llama-2-7b", "KV bytes per token"] == 2 * 32 * 32 * 128 * 2 == 524_288
    assert table.loc["llama-2-7b", "KV bytes per token"] // table.loc["llama-3-8b", "KV bytes per token"] == 4


def test_a_step_without_the_cache_reruns_the_whole_prefix():
    """Lesson 07's check yourself: what the cache saves is the prefix's forward pass through every layer,
    over ten times a cached SmolLM2 step at the run's 43 tokens, thousands of times a 13B step at 4,000."""
    cfg = MODEL_CONFIGS["smollm2-135m"]
    held = 43  # the 36-token chat prompt and 8 new tokens: 36 + 8 - 1 fed
    rerun, step = costs.forward_flops(cfg, held, held, num_logits=1), costs.forward_flops(cfg, 1, held, num_logits=1)
    assert 10 * step < rerun <= held * step
    cfg13 = MODEL_CONFIGS["llama-2-13b"]
    rerun13 = costs.forward_flops(cfg13, 4000, 4000, num_logits=1)
    assert rerun13 > 1000 * costs.forward_flops(cfg13, 1, 4000, num_logits=1)
