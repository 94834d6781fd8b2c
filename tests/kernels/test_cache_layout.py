"""Cache bytes by attention kind (kernels/cache_layout.py, model_layouts.py): every figure of a published model
equals the hand computation from its config.json fields, and the parts grow, stop or stay as their kind says."""

from __future__ import annotations

import pytest

from kvcourse.kernels.cache_layout import CacheLayout, LayerGroup, full, latent, layout_of, linear, window
from kvcourse.kernels.costs import kv_bytes_per_token
from kvcourse.kernels.model.cache_layouts import LAYOUTS_2023, LAYOUTS_2026, cache_table
from kvcourse.kernels.model.config_table import MODEL_CONFIGS

KIB = 1024


def test_deepseek_v3_caches_one_latent_vector_per_token_per_layer():
    layout = LAYOUTS_2026["deepseek-v3"]
    assert layout.per_token_bytes == (512 + 64) * 61 * 2 == 70_272
    at = layout.bytes_at(100_000)
    assert at.bounded == at.state == 0 and at.total == 70_272 * 100_000
    mha = 61 * 128 * ((128 + 64) + 128) * 2  # every head's key (nope 128 + rope 64) and value (128), bf16
    assert mha == 4_997_120 and round(mha / layout.per_token_bytes) == 71
    assert LAYOUTS_2026["kimi-k2"].per_token_bytes == 70_272


def test_gemma_3_27b_global_layers_grow_and_local_layers_stop_at_their_window():
    layout = LAYOUTS_2026["gemma-3-27b"]
    assert layout.num_layers == 62 and layout.layers_of("full") == 10
    assert layout.per_token_bytes == 10 * 2 * 16 * 128 * 2 == 80 * KIB
    per_local_token = 52 * 2 * 16 * 128 * 2
    assert layout.bytes_at(500).bounded == 500 * per_local_token
    assert layout.bytes_at(1024).bounded == layout.bytes_at(128_000).bounded == 1024 * per_local_token
    assert layout.bytes_at(128_000).total == 128_000 * 80 * KIB + 1024 * per_local_token


def test_gpt_oss_and_llama_4_scout():
    oss = LAYOUTS_2026["gpt-oss-120b"]
    assert oss.per_token_bytes == 18 * 2 * 8 * 64 * 2 == 36 * KIB
    assert oss.bytes_at(10_000).bounded == 18 * 2 * 8 * 64 * 2 * 128
    assert LAYOUTS_2026["gpt-oss-20b"].per_token_bytes == 12 * 2 * 8 * 64 * 2 == 24 * KIB
    scout = LAYOUTS_2026["llama-4-scout"]
    assert scout.per_token_bytes == 12 * 2 * 8 * 128 * 2 == 48 * KIB
    assert scout.bytes_at(1_000_000).bounded == 36 * 2 * 8 * 128 * 2 * 8192
    assert {g.kind for g in scout.groups} == {"chunked", "full"}


def test_qwen3_next_keeps_a_fixed_state_beside_its_attention_layers():
    layout = LAYOUTS_2026["qwen3-next-80b"]
    assert layout.per_token_bytes == 12 * 2 * 2 * 256 * 2 == 24 * KIB
    state = 36 * (32 * 128 * 128 + 3 * 8192) * 2
    assert layout.bytes_at(0).total == layout.bytes_at(0).state == state
    assert layout.bytes_at(1).state == layout.bytes_at(262_144).state == state


def test_a_full_attention_layout_agrees_with_the_2023_formula():
    for name, config in MODEL_CONFIGS.items():
        assert LAYOUTS_2023[name].per_token_bytes == kv_bytes_per_token(config, 2), name
        assert layout_of(config, 1).per_token_bytes == kv_bytes_per_token(config, 1)
    smol = layout_of(MODEL_CONFIGS["smollm2-135m"], 2, window_tokens=256)
    assert smol.per_token_bytes == 0 and smol.bytes_at(1000).bounded == 256 * kv_bytes_per_token(
        MODEL_CONFIGS["smollm2-135m"]
    )


def test_an_8_bit_cache_halves_every_part():
    layout = LAYOUTS_2026["gemma-3-27b"]
    half, whole = layout.with_bytes_per_value(1).bytes_at(4096), layout.bytes_at(4096)
    assert (half.growing * 2, half.bounded * 2) == (whole.growing, whole.bounded)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: LayerGroup("window", 4, 10), "needs window"),
        (lambda: LayerGroup("full", 4, 10, window=5), "takes no window"),
        (lambda: LayerGroup("linear", 4, 10, state_values=3), "cache no values per token"),
        (lambda: LayerGroup("full", 4, 10, state_values=3), "fixed state"),
        (lambda: LayerGroup("ring", 4, 10), "kind must be one of"),
        (lambda: full(0, 8, 64), "num_layers must be a positive integer"),
        (lambda: window(4, 8, 64, 0), "window must be a positive integer"),
        (lambda: latent(4, -1, 64), "kv_lora_rank"),
        (lambda: linear(4, 0), "fixed state"),
        (lambda: CacheLayout(()), "at least one layer group"),
    ],
)
def test_a_layout_that_cannot_be_is_refused_with_the_reason(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_the_table_lists_every_model_and_refuses_an_unknown_one():
    table = cache_table(32_768)
    assert set(table.index) == set(LAYOUTS_2023) | set(LAYOUTS_2026)
    deepseek = table.loc["deepseek-v3"]
    assert deepseek["bytes per token"] == 70_272 and deepseek["layers"] == "61 latent"
    assert deepseek["one user at 32,768 tokens (GB)"] == round(70_272 * 32_768 / 1e9, 2)
    assert table.loc["gemma-3-27b", "layers"] == "52 window (1,024), 10 full"
    with pytest.raises(KeyError, match="unknown model 'gpt-5'"):
        cache_table(1000, ["gpt-5"])
