"""Lesson 22's claims: the engine's caches weigh what cache_layout says (checked on the tiny model, both dtypes), and
what its prose and exercises state about the 2026 tables, which are arithmetic on published configs and so hold on
any machine: they are checked here, so that a change to a layout, a weight or a rule that breaks a sentence fails."""

from __future__ import annotations

import pytest
import torch
from factories import make_tiny_model

from kvcourse.kernels import generate
from kvcourse.kernels.cache_layout import CacheLayout, latent, layout_of
from kvcourse.kernels.measure.cache_tensors import held_bytes, kv_tensors, latent_cache
from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.kernels.model.latent import latent_twin
from kvcourse.simulators.hybrid_memory_model import (
    HybridMemory,
    HybridMemoryConfig,
    cache_passes_weights,
    crossover_table,
    fit_table,
    parts_table,
    per_gpu_bytes,
    per_gpu_table,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

MODELS = ["llama-3.1-8b", "deepseek-v3", "gemma-3-27b", "gpt-oss-120b", "qwen3-next-80b"]  # the lesson's five
PROMPT = list(range(3, 40))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_engines_kv_tensors_weigh_the_layout(dtype):
    tiny = make_tiny_model(dtype=dtype)
    run = generate(tiny, PROMPT, 6, cache="contiguous", eos_token_id=[])
    held = kv_tensors(run.backend)
    assert (
        len(held) == 2 * tiny.config.num_layers
        and held[0].element_size() == torch.tensor([], dtype=dtype).element_size()
    )
    n = run.backend.num_tokens
    assert n == len(PROMPT) + 6 - 1
    assert held_bytes(held) == layout_of(tiny.config, held[0].element_size()).bytes_at(n).total


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_latent_cache_weighs_the_latent_formula_and_holds_the_twins_values(dtype):
    tiny = make_tiny_model(dtype=dtype)
    rank = 4
    cache = latent_cache(latent_twin(tiny, rank), PROMPT, rank)
    width = cache.latents[0].element_size()
    assert [tuple(t.shape) for t in cache.latents] == [(len(PROMPT), rank)] * tiny.config.num_layers
    assert (
        held_bytes(cache.latents)
        == CacheLayout((latent(tiny.config.num_layers, rank, 0),), width).bytes_at(len(PROMPT)).total
    )
    assert cache.largest_value_difference < 0.02 * cache.largest_value  # the lesson's expect, with room


def test_gemma_grows_a_little_under_ten_times_and_its_windows_weigh_most_at_short_contexts():
    parts = parts_table(MODELS, [1_024, 100_000, 1_000_000])
    gemma = parts.loc["gemma-3-27b"]
    growth = gemma["total (GB)"][1_000_000] / gemma["total (GB)"][100_000]
    assert 2.0 < growth < 9.95  # the reveal's "a little under ten times"
    assert gemma["bounded (GB)"][1_024] > gemma["growing (GB)"][1_024]
    assert gemma["bounded (GB)"][100_000] == gemma["bounded (GB)"][1_000_000]


def test_at_long_contexts_bytes_per_token_order_the_models():
    totals = parts_table(MODELS, [2**20])["total (GB)"]
    by_total = sorted(MODELS, key=lambda m: totals[(m, 2**20)])
    assert by_total == sorted(MODELS, key=lambda m: LAYOUTS_2026[m].per_token_bytes)


def test_who_passes_the_weights_within_the_declared_positions():
    crossover = crossover_table(list(LAYOUTS_2026))
    assert list(crossover.index[crossover["within its positions"]]) == ["llama-3.1-8b", "llama-4-scout"]
    # Qwen3-8B: past its declared 40,960 positions, within YaRN's 131,072 (lesson 15)
    assert 40_960 < cache_passes_weights("qwen3-8b") <= 131_072


def test_tensor_parallelism_as_the_lesson_says():
    per_gpu = per_gpu_table(["llama-3.1-70b", "deepseek-v3", "qwen3-next-80b"], 131_072, [1, 2, 8, 16])
    assert per_gpu.loc["deepseek-v3", "TP 8"] == per_gpu.loc["deepseek-v3", "TP 1"]
    llama = per_gpu.loc["llama-3.1-70b"]
    assert llama["TP 1"] / llama["TP 8"] == pytest.approx(8, rel=1e-3) and llama["TP 16"] == llama["TP 8"]
    # Qwen3-Next: its 2 KV heads stop dividing at two GPUs; only the linear states divide further
    nxt2, nxt8 = (per_gpu_bytes("qwen3-next-80b", 131_072, 1, tp) for tp in (2, 8))
    assert nxt2.growing == nxt8.growing and nxt8.state < nxt2.state


def test_which_models_fit_the_lessons_cards():
    one = fit_table(list(LAYOUTS_2026), "H100 80GB", 32_768, 8)
    pair = one.loc[["gpt-oss-120b", "qwen3-32b"]]
    assert pair["fits"].tolist() == [True, False]
    assert abs(pair.iloc[0, 0] - pair.iloc[1, 0]) < 1.0  # weights of about the same size
    assert not one.loc[one["weights per GPU (GB)"] > 80 * 2**30 / 1e9, "fits"].any()  # weights decide first
    eight = fit_table(list(LAYOUTS_2026), "H200", 32_768, 32, tp=8)
    assert list(eight.index[~eight["fits"]]) == ["deepseek-v3", "kimi-k2"]  # the latent models
    # the simulator opens on half those users, where DeepSeek-V3 fits
    assert HybridMemory(HybridMemoryConfig("deepseek-v3", "H200", 8, 32_768, 16)).fits


def test_the_exercises_answers():
    fp16, fp8 = (
        HybridMemory(HybridMemoryConfig("deepseek-v3", "H200", 8, 32_768, 32, cache_bytes_per_value=w)).largest_context
        for w in (2, 1)
    )
    assert fp8 in (2 * fp16, 2 * fp16 + 1)  # exactly double, to the token
    llama = [fit_table(["llama-3.1-70b"], "H100 80GB", 32_768, 16, tp=tp).iloc[0] for tp in (8, 16)]
    assert llama[0]["cache per GPU (GB)"] == llama[1]["cache per GPU (GB)"]
    assert llama[1]["largest context per user"] > llama[0]["largest context per user"]
