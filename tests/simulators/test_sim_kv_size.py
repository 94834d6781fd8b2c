"""Lesson 07's simulator: the cache's size as a chain of multipliers, as a pure model, as a view, and on the engine."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from factories import make_config
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import EXAMPLE_13B, MODEL_CONFIGS, Transformer, costs, generate
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.kv_size import KVSize, KVSizeConfig, KVSizeView


def _sim(model="llama-2-13b", bytes_per_value=2, num_tokens=4000, num_users=1, **shape):
    config = KVSizeConfig.from_preset(model, bytes_per_value, num_tokens, num_users)
    if shape:
        config = dataclasses.replace(config, **shape)
    return KVSize(config)


# -- the model -----------------------------------------------------------------------------------
def test_chapter_003_example_by_hand():
    sim = _sim("llama-2-13b", 2, 4000, 32)
    assert sim.bytes_per_token == 2 * 40 * 40 * 128 * 2 == 819_200
    assert sim.cache_bytes == 819_200 * 4000 * 32 == 104_857_600_000
    assert math.prod(value for _, value in sim.factors) == sim.cache_bytes
    assert sim.weight_bytes == costs.weight_bytes(EXAMPLE_13B, 2) and round(sim.weight_bytes / 1e9) == 26
    assert sim.cache_to_weights == pytest.approx(104_857_600_000 / sim.weight_bytes) and sim.cache_to_weights > 4
    assert (
        sim.crossover_tokens
        == costs.kv_crossover_tokens(EXAMPLE_13B, 32)
        == math.ceil(sim.weight_bytes / (819_200 * 32))
    )


@pytest.mark.parametrize("name", sorted(MODEL_CONFIGS))
@pytest.mark.parametrize("bytes_per_value", [1, 2, 4])
def test_every_preset_agrees_with_the_cost_model(name, bytes_per_value):
    config = MODEL_CONFIGS[name]
    sim = _sim(name, bytes_per_value, 1000, 3)
    assert sim.model_config == config
    assert sim.bytes_per_token == costs.kv_bytes_per_token(config, bytes_per_value)
    assert sim.cache_bytes == costs.kv_cache_bytes(config, 1000, 3, bytes_per_value)
    assert sim.weight_bytes == costs.weight_bytes(config, bytes_per_value)
    assert sim.max_context == config.max_position_embeddings
    # the crossover is the first token count at which the cache is at least the weights
    n = sim.crossover_tokens
    assert costs.kv_cache_bytes(config, n, 3, bytes_per_value) >= sim.weight_bytes
    assert costs.kv_cache_bytes(config, n - 1, 3, bytes_per_value) < sim.weight_bytes


def test_the_seeds_half_megabyte_is_a_7b_model_with_full_multi_head_attention():
    mha = _sim("llama-2-7b")
    assert mha.bytes_per_token == 2 * 32 * 32 * 128 * 2 == 2**19  # 0.52 MB: "about half a megabyte"
    gqa = _sim("llama-3-8b")
    assert gqa.bytes_per_token * 4 == mha.bytes_per_token  # 8 KV heads instead of 32


def test_the_factor_is_kv_heads_not_query_heads():
    smol = _sim("smollm2-135m", 4)
    full = _sim("smollm2-135m", 4, num_kv_heads=9)
    assert smol.bytes_per_token == 2 * 30 * 3 * 64 * 4 == 46_080
    assert full.bytes_per_token == 3 * smol.bytes_per_token
    assert not full.config.is_preset_shape and smol.config.is_preset_shape


def test_changing_the_shape_changes_the_weights_too():
    base, deeper = _sim("llama-2-13b"), _sim("llama-2-13b", num_layers=80)
    assert deeper.bytes_per_token == 2 * base.bytes_per_token
    assert deeper.weight_bytes - base.weight_bytes == 40 * costs.layer_parameters(EXAMPLE_13B) * 2


def test_one_users_crossover_lies_beyond_every_presets_context_but_32_users_reach_it():
    """Lesson 07's prose: in the config table, one user never outweighs the weights within the context."""
    for name in MODEL_CONFIGS:
        assert _sim(name, 2, 1, 1).crossover_tokens > MODEL_CONFIGS[name].max_position_embeddings, name
    assert _sim("llama-2-13b", 2, 1, 32).crossover_tokens < 4000


def test_crossover_does_not_depend_on_bytes_per_value():
    assert len({_sim("mistral-7b", b).crossover_tokens for b in (1, 2, 4)}) == 1


def test_step_doubles_the_tokens_and_reset_restores_them():
    sim = _sim(num_tokens=0)
    assert sim.cache_bytes == 0
    sim.step()
    assert sim.num_tokens == 1
    sim.step()
    sim.step()
    assert sim.num_tokens == 4 and sim.cache_bytes == 4 * 819_200
    sim.reset()
    assert sim.num_tokens == 0
    big = _sim(num_tokens=6_000_000)
    with pytest.raises(InvalidInput, match="Reset"):
        big.step()


@pytest.mark.parametrize(
    "field, bad, name",
    [
        ("num_layers", 0, "Layers"),
        ("num_kv_heads", 0, "KV heads"),
        ("head_dim", -4, "Head dim"),
        ("bytes_per_value", 0, "Bytes per value"),
        ("num_tokens", -1, "Tokens per user"),
        ("num_users", 0, "Users"),
        ("num_users", 1.5, "Users"),
        ("num_tokens", float("nan"), "Tokens per user"),
        ("num_kv_heads", 3, "KV heads"),
        ("num_kv_heads", 80, "KV heads"),
        ("model", "gpt-5", "Model"),
    ],
)
def test_invalid_inputs_name_the_control(field, bad, name):
    values = dict(
        model="llama-2-13b",
        num_layers=40,
        num_kv_heads=40,
        head_dim=128,
        bytes_per_value=2,
        num_tokens=4000,
        num_users=32,
    )
    values[field] = bad
    with pytest.raises(InvalidInput, match=name):
        KVSizeConfig(**values)


# -- the view ------------------------------------------------------------------------------------
def test_view_draws_and_reports_the_chain():
    view = KVSizeView("llama-2-13b", num_tokens=4000, num_users=32)
    assert view.error is None and shows_png(view)
    assert "2 × 40 × 40 × 128 × 2 × 4,000 × 32 = 104.86 GB" in view.message.value
    assert "26.03 GB" in view.message.value and "994 tokens" in view.message.value
    bar_ax, curve_ax = view.axes
    assert "outweighs" in bar_ax.get_title() and "994" in curve_ax.get_title()
    widths = [p.get_width() for p in bar_ax.patches]
    assert widths == pytest.approx([view.model.weight_bytes / 1e9, view.model.cache_bytes / 1e9])


def test_every_control_changes_the_status_and_the_figure_stays():
    view = KVSizeView("llama-2-13b", num_tokens=4000, num_users=32)
    figure, axes = view.figure, list(view.axes)
    changes = {
        "num_layers": 20,
        "num_kv_heads": 8,
        "head_dim": 64,
        "bytes_per_value": 1,
        "num_tokens": 100,
        "num_users": 2,
        "model": "llama-3-8b",
    }
    assert_each_control_redraws(view, changes)
    assert view.figure is figure and view.axes == axes and len(figure.axes) == 2


def test_regression_doubled_tokens_stay_when_another_control_moves():
    """Double the tokens, then move a slider: the doubling was lost when the rebuild read the old Tokens box."""
    view = KVSizeView("llama-2-13b", num_tokens=4000, num_users=32)
    view.step()
    assert view.controls["num_tokens"].value == 8000 and view.model.num_tokens == 8000
    view.controls["num_users"].value = 16
    assert view.model.num_tokens == 8000 and view.model.config.num_users == 16
    view.reset()
    assert view.controls["num_tokens"].value == 4000 and view.model.num_tokens == 4000


def test_a_preset_sets_its_own_shape_and_reset_restores_the_start():
    view = KVSizeView("smollm2-135m", bytes_per_value=4, num_tokens=50)
    view.controls["num_layers"].value = 3
    view.controls["model"].value = "llama-2-70b"
    assert (
        view.controls["num_layers"].value,
        view.controls["num_kv_heads"].value,
        view.controls["head_dim"].value,
    ) == (80, 8, 128)
    assert (
        view.model.config.is_preset_shape and "llama-2-70b: 655,360 bytes per token" in view.message.value
    )  # 4 bytes per value
    view.step_button.click()
    assert view.model.num_tokens == 100 and "× 100 ×" in view.message.value
    view.reset_button.click()
    assert view.values == {
        "model": "smollm2-135m",
        "num_layers": 30,
        "num_kv_heads": 3,
        "head_dim": 64,
        "bytes_per_value": 4,
        "num_tokens": 50,
        "num_users": 1,
    }
    assert "46,080 bytes per token" in view.message.value


@pytest.mark.parametrize("name, bad", [("num_tokens", -5), ("num_users", 0), ("num_users", 10**9), ("num_kv_heads", 7)])
def test_bad_input_shows_a_message_not_a_traceback(name, bad):
    assert_bad_input_is_shown(KVSizeView("llama-3-8b"), name, bad)


def test_tokens_past_the_context_are_pointed_out():
    view = KVSizeView("llama-2-7b", num_tokens=4096)
    assert "longer than" not in view.message.value
    view.step_button.click()
    assert "8,192 tokens is longer than the 4,096 this model reads" in view.message.value


# -- the simulator against the engine ------------------------------------------------------------
def _engine_cache_bytes(model, prompt: list[int], new_tokens: int) -> tuple[int, int]:
    """(bytes in the filled K and V tensors after a generation, tokens they hold)."""
    result = generate(model, prompt, new_tokens, cache="contiguous", eos_token_id=[])
    backend = result.backend
    filled = backend.num_computed_tokens
    nbytes = sum(t[:, :filled].nbytes for t in backend.k_cache + backend.v_cache)
    return nbytes, filled


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_simulator_bytes_equal_the_engines_cache_tensors_on_a_tiny_model(dtype):
    config = make_config(num_layers=3, num_heads=4, num_kv_heads=2, head_dim=8)
    model = Transformer(config).to(dtype)
    nbytes, filled = _engine_cache_bytes(model, [1, 2, 3, 4, 5], 6)
    per_token = costs.kv_bytes_per_token(config, torch.tensor([], dtype=dtype).element_size())
    assert filled == 5 + 6 - 1 and nbytes == per_token * filled


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_simulator_bytes_per_token_equal_smollm2s_real_cache(real_model, dtype):
    hf_model, tokenizer = real_model
    model = copy.deepcopy(hf_model).to(dtype)  # the session's model stays in float32
    prompt = tokenizer("The cat sat on the mat")["input_ids"]
    nbytes, filled = _engine_cache_bytes(model, prompt, 4)
    bpv = next(model.parameters()).element_size()
    sim = KVSize(KVSizeConfig.from_preset("smollm2-135m", bpv, filled, 1))
    assert nbytes == sim.cache_bytes == sim.bytes_per_token * filled
    assert sum(p.nbytes for p in model.parameters()) == sim.weight_bytes  # the weights, counted the same way


# -- lesson 07's quiz bank agrees with the cost model ---------------------------------------------
def test_quiz_bank_07_numbers_are_the_cost_models():
    from kvcourse.quizzes.bank import load_quiz

    quiz = load_quiz("07")
    weights = costs.weight_bytes(EXAMPLE_13B, 2)
    users = quiz.question("users_to_outweigh_13b")
    assert users.answer == math.ceil(weights / costs.kv_cache_bytes(EXAMPLE_13B, 4000, 1, 2))
    assert f"{weights / 1e9:.2f} GB" in users.prompt
    one_user = costs.kv_crossover_tokens(EXAMPLE_13B, 1, 2)
    assert f"about {round(one_user, -2):,} tokens" in quiz.question("outgrow_weights").prompt
    assert f"{EXAMPLE_13B.max_position_embeddings:,} tokens" in quiz.question("outgrow_weights").prompt
    gqa = quiz.question("per_token_gqa")
    assert gqa.formula == "kv_bytes_per_token"
    assert all(MODEL_CONFIGS[m].num_kv_heads < MODEL_CONFIGS[m].num_heads for m in dict(gqa.params)["model"])


def test_a_small_cache_is_shown_as_a_share_of_the_weights():
    view = KVSizeView("smollm2-135m", bytes_per_value=4, num_tokens=51)
    assert "is lighter than" in view.axes[0].get_title() and "0.44% of them" in view.axes[0].get_title()
    assert "beyond" in view.axes[1].get_title()
