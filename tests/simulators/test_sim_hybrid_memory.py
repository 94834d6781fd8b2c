"""Lesson 22's simulator: its bytes against kernels/cache_layout.py and hand computations, its rules under tensor
parallelism (KV heads split, then replicated; a latent whole on every GPU), its refusals, and the view."""

from __future__ import annotations

import math

import pytest
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png, text_outside_figure

from kvcourse.kernels.cache_layout import CacheLayout
from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.kernels.model.context_windows import PUBLISHED_2026
from kvcourse.simulators.base import InvalidInput, SimulatorView
from kvcourse.simulators.hardware import CARDS
from kvcourse.simulators.hybrid_memory import HybridMemoryView
from kvcourse.simulators.hybrid_memory_model import (
    HEADS,
    MODELS,
    WEIGHT_BYTES,
    HybridMemory,
    HybridMemoryConfig,
    cache_passes_weights,
    crossover_table,
    fit_table,
    largest_context,
    parts_table,
    per_gpu_bytes,
    per_gpu_table,
)

GIB = 2**30


@pytest.fixture(autouse=True)
def _fast_png(monkeypatch):
    monkeypatch.setattr(SimulatorView, "render_dpi", 30)


def test_every_model_of_the_2026_table_has_heads_and_weights():
    assert set(MODELS) == set(LAYOUTS_2026) == set(HEADS) == set(WEIGHT_BYTES)
    for name in MODELS:
        for group in LAYOUTS_2026[name].groups:
            if group.kind in ("full", "window", "chunked"):  # 2 x KV heads x head dim values per token
                assert group.values_per_token % (2 * HEADS[name].kv) == 0, name
    for name, shipped in PUBLISHED_2026.items():  # lesson 15's weights, as published
        assert WEIGHT_BYTES[name] == shipped.weight_bytes


# -- one GPU: the model equals cache_layout ------------------------------------------------------------------
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("context", [0, 1, 127, 1024, 8192, 131_072])
@pytest.mark.parametrize("width", [2, 1])
def test_on_one_gpu_the_cache_is_cache_layouts(name, context, width):
    users = 3
    gpu = per_gpu_bytes(name, context, users, 1, width)
    at = LAYOUTS_2026[name].with_bytes_per_value(width).bytes_at(context)
    assert (gpu.growing, gpu.bounded, gpu.state) == (users * at.growing, users * at.bounded, users * at.state)
    assert gpu.weights == WEIGHT_BYTES[name]
    sim = HybridMemory(HybridMemoryConfig(name, "H200", 1, context, users, width))
    assert sim.gpu == gpu and sim.layout == CacheLayout(LAYOUTS_2026[name].groups, width)


def test_hand_computations():
    # DeepSeek-V3: (512 + 64) x 61 x 2 bytes = 70,272 per token; Gemma-3-27B: 10 global layers x 2 x 16 x 128 x 2 =
    # 81,920 per token, and 52 local layers x 2 x 16 x 128 x 2 x 1,024 tokens bounded
    assert per_gpu_bytes("deepseek-v3", 1000, 1, 1).growing == 70_272 * 1000
    gemma = per_gpu_bytes("gemma-3-27b", 100_000, 1, 1)
    assert gemma.growing == 81_920 * 100_000 and gemma.bounded == 52 * 2 * 16 * 128 * 2 * 1024 and gemma.state == 0
    # Qwen3-Next: 12 full layers of 2 KV heads of 256, and 36 linear layers' states
    nxt = per_gpu_bytes("qwen3-next-80b", 10, 1, 1)
    assert nxt.growing == 12 * 2 * 2 * 256 * 2 * 10
    assert nxt.state == 36 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2


# -- tensor parallelism ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_kv_heads_split_then_replicate_and_a_latent_stays_whole(tp):
    context = 65_536
    one = {name: per_gpu_bytes(name, context, 1, 1) for name in ("llama-3.1-70b", "deepseek-v3", "qwen3-next-80b")}
    # Llama-3.1-70B: 8 KV heads; each GPU keeps max(1, 8 // tp) of them (vLLM replicates past 8)
    llama = per_gpu_bytes("llama-3.1-70b", context, 1, tp)
    assert llama.growing * 8 == one["llama-3.1-70b"].growing * max(1, 8 // tp)
    assert llama.weights == WEIGHT_BYTES["llama-3.1-70b"] // tp
    # DeepSeek-V3: the latent has no head axis: every GPU keeps all of it
    assert per_gpu_bytes("deepseek-v3", context, 1, tp).growing == one["deepseek-v3"].growing
    # Qwen3-Next: 2 KV heads for the full layers, 16 head groups for the linear states
    nxt = per_gpu_bytes("qwen3-next-80b", context, 1, tp)
    assert nxt.growing * 2 == one["qwen3-next-80b"].growing * max(1, 2 // tp)
    assert nxt.state * 16 == pytest.approx(one["qwen3-next-80b"].state * max(1, 16 // tp), abs=16)


def test_per_gpu_table_and_shares():
    table = per_gpu_table(["llama-3.1-70b", "deepseek-v3"], 131_072, [1, 8, 16])
    assert (
        table.loc["deepseek-v3", "TP 1"]
        == table.loc["deepseek-v3", "TP 16"]
        == pytest.approx(70_272 * 131_072 / 1e9, abs=1e-3)
    )
    assert table.loc["llama-3.1-70b", "TP 8"] == table.loc["llama-3.1-70b", "TP 16"]
    sim = HybridMemory(HybridMemoryConfig("gemma-3-27b", tp=16))
    assert sim.shares == {"window": 1 / 16, "full": 1 / 16}
    assert HybridMemory(HybridMemoryConfig("deepseek-v3", tp=8)).shares == {"latent": 1.0}


# -- what fits --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "card", "users", "tp"),
    [
        ("gemma-3-27b", "H100 80GB", 8, 1),
        ("deepseek-v3", "H200", 16, 8),
        ("qwen3-next-80b", "H100 80GB", 4, 2),
        ("gpt-oss-20b", "L4", 2, 1),
    ],
)
def test_largest_context_is_where_the_card_is_exactly_full(name, card, users, tp):
    card_bytes = round(CARDS[card].memory_gib * GIB)
    n = largest_context(name, card_bytes, users, tp)
    assert n > 0
    assert per_gpu_bytes(name, n, users, tp).total <= card_bytes < per_gpu_bytes(name, n + 1, users, tp).total


def test_weights_that_do_not_fit_leave_no_context():
    sim = HybridMemory(HybridMemoryConfig("deepseek-v3", "H100 80GB", 1, 1000, 1))
    assert not sim.weights_fit and not sim.fits and sim.largest_context == 0


def test_cache_passes_weights_at_the_first_such_token():
    for name in MODELS:
        for tp in (1, 8):
            n = cache_passes_weights(name, tp)
            gpu, before = per_gpu_bytes(name, n, 1, tp), per_gpu_bytes(name, n - 1, 1, tp)
            assert gpu.cache > gpu.weights >= before.cache, (name, tp)
    # Llama-3.1-8B: 131,072 bytes per token against 16.06 GB of weights
    assert cache_passes_weights("llama-3.1-8b") == WEIGHT_BYTES["llama-3.1-8b"] // 131_072 + 1
    # a latent is not split, the weights are: 8 GPUs bring DeepSeek-V3's crossover 8 times closer
    assert cache_passes_weights("deepseek-v3", 8) == pytest.approx(cache_passes_weights("deepseek-v3") / 8, abs=1)


def test_tables_are_the_functions():
    parts = parts_table(["gemma-3-27b"], [100_000])
    assert parts.loc[("gemma-3-27b", 100_000), "total (GB)"] == pytest.approx(
        LAYOUTS_2026["gemma-3-27b"].bytes_at(100_000).total / 1e9, abs=1e-3
    )
    cross = crossover_table(["llama-3.1-8b", "deepseek-v3"])
    assert (
        bool(cross.loc["llama-3.1-8b", "within its positions"]) and not cross.loc["deepseek-v3", "within its positions"]
    )
    fits = fit_table(["gpt-oss-120b", "qwen3-32b"], "H100 80GB", 32_768, 8)
    assert fits["fits"].tolist() == [True, False]
    assert fits.loc["gpt-oss-120b", "largest context per user"] == largest_context("gpt-oss-120b", 80 * GIB, 8, 1)


# -- refusals ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("model", "llama-2-7b", "Model must be"),
        ("card", "B300", "GPU must be"),
        ("tp", 3, "GPUs \\(tensor parallel\\) must be"),
        ("context_tokens", -1, "Context per user"),
        ("context_tokens", 2.5, "whole number"),
        ("num_users", 0, "Users must be"),
        ("num_users", math.nan, "whole number"),
        ("cache_bytes_per_value", 4, "Cache bytes per value"),
    ],
)
def test_bad_controls_say_which_and_why(field, value, message):
    with pytest.raises(InvalidInput, match=message):
        HybridMemoryConfig(**{field: value})


def test_a_tp_degree_that_does_not_divide_the_heads_is_refused_with_a_reason():
    with pytest.raises(InvalidInput, match="40 query heads.*divides 40"):
        HybridMemoryConfig("llama-4-scout", tp=16)


def test_step_doubles_the_context_until_the_limit():
    sim = HybridMemory(HybridMemoryConfig(context_tokens=0))
    sim.step()
    assert sim.context_tokens == 1024
    sim.step()
    assert sim.context_tokens == 2048
    sim.context_tokens = 60_000_000
    with pytest.raises(InvalidInput, match="press Reset"):
        sim.step()
    sim.reset()
    assert sim.context_tokens == 0


# -- the view ---------------------------------------------------------------------------------------------------
def test_view_draws_says_the_bytes_and_reacts_to_every_control():
    view = HybridMemoryView()
    assert shows_png(view) and view.error is None and not text_outside_figure(view)
    sim = view.model
    assert f"{sim.layout.per_token_bytes:,} bytes per token" in view.message.value
    assert f"{sim.largest_context:,} tokens each" in view.message.value
    assert_each_control_redraws(
        view,
        {
            "model": "deepseek-v3",
            "card": "H200",
            "tp": 8,
            "context_tokens": 65_536,
            "num_users": 32,
            "cache_bytes_per_value": 1,
        },
    )
    assert "latent layers: all" in view.message.value
    assert not text_outside_figure(view)


def test_view_steps_writes_back_and_shows_bad_input():
    view = HybridMemoryView(context_tokens=4096)
    view.step_button.click()
    assert view.controls["context_tokens"].value == 8192 and view.model.context_tokens == 8192
    assert_bad_input_is_shown(view, "num_users", 0)
    view.controls["model"].value = "llama-4-scout"
    view.controls["tp"].value = 16
    assert view.error is not None and "40 query heads" in view.message.value


def test_view_says_when_the_weights_alone_do_not_fit():
    view = HybridMemoryView("kimi-k2", card="T4")
    assert view.error is None and "weights alone do not fit" in view.message.value
    assert "larger than the card" in view.axes[1].get_title()
