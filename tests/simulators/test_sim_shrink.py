"""Lesson 16's simulator: each technique on one budget, checked by hand, against the cost model and the engine."""

from __future__ import annotations

import pytest
from factories import make_tiny_model
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import (
    EngineConfig,
    EventKind,
    LLMEngine,
    SamplingParams,
    costs,
    first_difference,
    generate,
    regroup_kv_heads,
)
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.shrink import TECHNIQUES, KVHeads, Shrink, ShrinkConfig, ShrinkView

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

SMOL = dict(model="smollm2-135m", bytes_per_value=2)  # 30 layers, 9 query heads, 3 KV heads of 64


def shrink(**changes) -> Shrink:
    return Shrink(ShrinkConfig(**{**SMOL, **changes}))


@pytest.fixture(scope="module")
def tiny():
    """A tiny engine model: 2 layers, 4 query heads, 2 KV heads of 8, float32, 256 positions."""
    return make_tiny_model("auto", max_position_embeddings=256)


# -- bytes per token --------------------------------------------------------------------------------


def test_bytes_per_token_by_hand_for_each_head_choice_and_int8():
    assert shrink(kv_heads=KVHeads.MHA).bytes_per_token == 2 * 30 * 9 * 64 * 2 == 69_120
    assert shrink(kv_heads=KVHeads.SHIPPED).bytes_per_token == 2 * 30 * 3 * 64 * 2 == 23_040
    assert shrink(kv_heads=KVHeads.MQA).bytes_per_token == 2 * 30 * 1 * 64 * 2 == 7_680
    assert shrink(int8=True).bytes_per_token == 2 * 30 * 3 * (64 + 4) == 12_240  # codes plus one scale per head
    assert shrink(int8=True, kv_heads=KVHeads.MQA).bytes_per_token == 2 * 30 * 1 * 68
    assert shrink(bytes_per_value=4).bytes_per_token == 46_080


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3-8b", "qwen2.5-0.5b"])
def test_bytes_per_token_are_the_cost_model_s(name):
    m = Shrink(ShrinkConfig(name, kv_heads=KVHeads.MQA, int8=True))
    assert m.config.shape.num_kv_heads == 1
    assert m.bytes_per_token == costs.quantized_kv_bytes_per_token(m.config.shape, 1, 4)
    m = Shrink(ShrinkConfig(name, kv_heads=KVHeads.SHIPPED, bytes_per_value=4))
    assert m.bytes_per_token == costs.kv_bytes_per_token(m.config.base_shape, 4)


# -- users and the longest context --------------------------------------------------------------------


def test_without_paging_each_user_is_charged_at_the_filled_share():
    m = shrink(kv_budget_gb=1.0, context_tokens=1000, reservation_filled=0.25)
    assert m.users_fit == int(1e9 * 0.25 // (1000 * 23_040)) == 10
    assert m.longest_context == int(1e9 * 0.25 // 23_040)
    assert m.users_at(m.longest_context) >= 1 and m.users_at(m.longest_context + 1) == 0


def test_with_paging_users_hold_whole_blocks():
    m = shrink(kv_budget_gb=1.0, context_tokens=1000, paging=True)
    blocks = 10**9 // (23_040 * 16)
    assert m.num_blocks == blocks and m.users_fit == blocks // 63  # 1000 tokens = 62 full blocks + 1
    assert m.longest_context == blocks * 16
    assert m.users_at(m.longest_context) == 1 and m.users_at(m.longest_context + 1) == 0


def test_a_shared_prefix_is_stored_once_in_whole_blocks():
    m = shrink(kv_budget_gb=1.0, context_tokens=1000, paging=True, prefix=True, prefix_tokens=500)
    blocks, shared = 10**9 // (23_040 * 16), 500 // 16
    assert m.shared_blocks(1000) == shared == 31
    assert m.users_fit == (blocks - shared) // (63 - shared)
    for users in (1, 2, m.users_fit):  # the cost model's own count of the blocks these users hold
        assert costs.kv_blocks_needed(1000, 16, users, 500) <= blocks
    assert costs.kv_blocks_needed(1000, 16, m.users_fit + 1, 500) > blocks


def test_the_block_of_a_last_token_is_never_shared():
    m = shrink(paging=True, prefix=True, prefix_tokens=64, context_tokens=64)
    assert m.shared_blocks(64) == 3  # four blocks of prompt, the fourth holds the last token


def test_a_window_caps_what_each_user_holds_and_drops_the_shared_opening():
    m = shrink(
        kv_budget_gb=1.0,
        context_tokens=4000,
        paging=True,
        prefix=True,
        prefix_tokens=2000,
        window=True,
        window_tokens=1024,
    )
    assert m.held_tokens(4000) == 1024 and m.held_tokens(500) == 500
    assert m.shared_blocks(4000) == 0  # the opening has slid out of every window
    assert m.shared_blocks(1000) == 999 // 16  # shorter than the window: the opening is still shared
    assert m.users_at(4000) == m.users_at(100_000) == m.num_blocks // 64
    assert m.longest_context is None


def test_a_budget_below_one_window_leaves_the_longest_context_finite():
    m = shrink(kv_budget_gb=23_040 * 16 * 3 / 1e9, paging=True, window=True, window_tokens=1024, context_tokens=64)
    assert m.num_blocks == 3 and m.longest_context == 48 and m.users_fit == 0


def test_each_technique_adds_users_in_the_lesson_s_setting():
    m = shrink(
        kv_budget_gb=0.755,
        context_tokens=512,
        bytes_per_value=4,
        kv_heads=KVHeads.MHA,
        prefix_tokens=448,
        window_tokens=64,
    )
    names = []
    while m.next_technique:
        names.append(m.step())
    assert tuple(names) == TECHNIQUES
    users = [s.users_fit for _, s in m.stages()]
    assert users == sorted(users) and users[-1] > 100 * users[0]
    with pytest.raises(InvalidInput, match="Reset"):
        m.step()
    m.reset()
    assert m.config.kv_heads == KVHeads.MHA and not m.config.int8


def test_a_multi_head_model_skips_gqa_and_a_grouped_one_starts_from_mqa():
    assert Shrink(ShrinkConfig("llama-2-7b", kv_heads=KVHeads.MHA)).step() == "mqa"
    assert Shrink(ShrinkConfig("llama-3-8b", kv_heads=KVHeads.SHIPPED)).step() == "mqa"
    m = Shrink(ShrinkConfig("llama-2-7b", kv_heads=KVHeads.SHIPPED))
    assert [label for label, _ in m.stages()] == ["nothing on"]  # as shipped is multi-head already


@pytest.mark.parametrize(
    "changes, name",
    [
        (dict(kv_budget_gb=0.0), "KV memory"),
        (dict(kv_budget_gb=float("nan")), "KV memory"),
        (dict(context_tokens=0), "Context per user"),
        (dict(context_tokens=2.5), "Context per user"),
        (dict(prefix_tokens=600, context_tokens=512), "Shared prefix"),
        (dict(window_tokens=0), "Window"),
        (dict(bytes_per_value=3), "Values in"),
        (dict(kv_heads="two"), "Key/value heads"),
        (dict(model="gpt-5"), "Model"),
        (dict(prefix=True, paging=False), "needs paging"),
    ],
)
def test_invalid_inputs_name_the_control(changes, name):
    with pytest.raises(InvalidInput, match=name):
        ShrinkConfig(**{**SMOL, **changes})


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2, 3], [1, 2]) == 2


# -- the engine holds what the simulator counts ------------------------------------------------------


def test_int8_bytes_per_token_are_the_engine_s_int8_cache(tiny):
    run = generate(tiny, [5, 17, 33, 42], 6, cache="int8")
    m = Shrink(ShrinkConfig(model_config=tiny.config, int8=True, kv_heads=KVHeads.SHIPPED))
    assert run.backend.kv_cache_bytes == run.backend.num_tokens * m.bytes_per_token


@pytest.mark.parametrize("kv_heads, heads", [(KVHeads.MHA, 4), (KVHeads.SHIPPED, 2), (KVHeads.MQA, 1)])
def test_regrouped_caches_hold_the_simulated_bytes_per_token(tiny, kv_heads, heads):
    m = Shrink(ShrinkConfig(model_config=tiny.config, kv_heads=kv_heads, bytes_per_value=4))
    last = generate(regroup_kv_heads(tiny, heads), [5, 17, 33, 42], 3).stats[-1]
    assert last.kv_cache_bytes == last.context_len * m.bytes_per_token


def test_a_window_holds_window_tokens_of_the_simulated_bytes(tiny):
    m = Shrink(
        ShrinkConfig(
            model_config=tiny.config,
            kv_heads=KVHeads.SHIPPED,
            bytes_per_value=4,
            window=True,
            window_tokens=12,
            context_tokens=40,
        )
    )
    run = generate(tiny, list(range(3, 13)), 30, cache="sliding", window=12)
    held = {s.kv_cache_bytes for s in run.stats if s.context_len >= 12}
    assert held == {m.held_tokens(40) * m.bytes_per_token}


@pytest.mark.parametrize("num_blocks, context, prefix", [(32, 64, 0), (40, 64, 40), (30, 30, 16), (12, 50, 0)])
def test_the_engine_admits_the_users_the_simulator_fits(tiny, num_blocks, context, prefix):
    block_size = 16
    budget = num_blocks * costs.kv_bytes_per_token(tiny.config, 4) * block_size
    m = Shrink(
        ShrinkConfig(
            model_config=tiny.config,
            kv_heads=KVHeads.SHIPPED,
            bytes_per_value=4,
            kv_budget_gb=budget / 1e9,
            context_tokens=context,
            paging=True,
            prefix=prefix > 0,
            prefix_tokens=prefix,
        )
    )
    assert m.num_blocks == num_blocks
    engine = LLMEngine(
        tiny,
        EngineConfig(
            block_size=block_size, num_blocks=num_blocks, max_num_batched_tokens=8192, enable_prefix_caching=prefix > 0
        ),
    )
    opening = [3 + j % 80 for j in range(prefix)]
    if prefix:  # one earlier request leaves the opening's blocks in the prefix cache
        engine.generate([opening + [90] * (context - prefix)], SamplingParams(max_new_tokens=1))
    start = engine.num_steps
    for i in range(m.users_fit + 3):
        engine.add_request(
            opening + [4 + (i + j) % 80 for j in range(context - prefix)], SamplingParams(max_new_tokens=1)
        )
    engine.step()
    admitted = [e for e in engine.events.of_kind(EventKind.ADMIT) if e.step == start]
    assert len(admitted) == m.users_fit > 0


# -- the view -----------------------------------------------------------------------------------------


def lesson_view(**changes) -> ShrinkView:
    values = dict(
        kv_budget_gb=0.755,
        context_tokens=512,
        bytes_per_value=4,
        prefix_tokens=448,
        window_tokens=64,
        reservation_filled=0.311,
    )
    return ShrinkView("smollm2-135m", **{**values, **changes})


def test_the_view_starts_with_nothing_on_and_reports_three_numbers():
    view = lesson_view()
    assert view.error is None and shows_png(view)
    text = view.message.value
    assert "138.24 kB" in text and "Users at 512 tokens: <b>3</b>" in text and "Next technique: gqa" in text
    assert "Longest context for one user" in text


def test_next_technique_walks_the_table_and_the_controls_follow():
    view = lesson_view()
    seen = []
    for _ in TECHNIQUES:
        before, renders = view.message.value, view.num_renders
        view.step_button.click()
        assert view.num_renders == renders + 1 and view.message.value != before
        seen.append(view.model.config)
    assert view.controls["kv_heads"].value == KVHeads.MQA and all(
        view.controls[n].value for n in ("int8", "paging", "prefix", "window")
    )
    assert "Every technique is on" in view.message.value and "unlimited" in view.message.value
    view.step_button.click()
    assert view.error is None and "Reset" in view.message.value  # information, not an input error
    view.reset_button.click()
    assert view.error is None and view.controls["kv_heads"].value == KVHeads.MHA and not view.controls["window"].value


def test_every_control_redraws_and_changes_the_status():
    view = lesson_view()
    assert_each_control_redraws(
        view,
        {
            "model": "llama-3-8b",
            "bytes_per_value": 2,
            "kv_budget_gb": 64.0,
            "context_tokens": 8192,
            "kv_heads": KVHeads.SHIPPED,
            "int8": True,
            "paging": True,
            "prefix": True,
            "prefix_tokens": 1000,
            "window": True,
            "window_tokens": 4096,
        },
    )


@pytest.mark.parametrize(
    "name, bad",
    [("kv_budget_gb", 0.0), ("context_tokens", 0), ("window_tokens", -3), ("prefix_tokens", 10_000), ("prefix", True)],
)
def test_bad_input_shows_a_message_not_a_traceback(name, bad):
    assert_bad_input_is_shown(lesson_view(), name, bad)


def test_the_curve_marks_the_longest_context_and_the_model_s_limit():
    view = lesson_view(kv_heads=KVHeads.MQA, int8=True, paging=True)
    labels = [t.get_text() for t in view.axes[1].get_legend().get_texts()]
    assert any("one user at most" in t for t in labels) and any("reads at most 8,192" in t for t in labels)
    assert "of memory (the model reads at most 8,192)" in view.message.value


def test_unknown_model_is_refused_at_construction():
    with pytest.raises(ValueError, match="unknown model"):
        ShrinkView("gpt-5")
