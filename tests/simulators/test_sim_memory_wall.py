"""Lesson 08's simulator and claims: the memory wall as a pure model, as a view, and on the engine.

The 80 GB card's pool itself is checked in tests/kernels/test_paged_fragmentation.py
(test_the_80_gb_card_of_lesson_08); here the simulator must split the card the same way and
count the users that fit, and the engine must admit exactly that many.
"""

from __future__ import annotations

import copy

import pytest
import torch
from factories import make_config
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import (
    EXAMPLE_13B,
    MODEL_CONFIGS,
    EngineConfig,
    EventKind,
    LLMEngine,
    MemoryBudget,
    SamplingParams,
    Transformer,
    costs,
    num_blocks_for_budget,
    occupancy,
    request_stories,
)
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.hardware import GPU_PRESETS
from kvcourse.simulators.memory_wall import (
    Admission,
    MemoryWall,
    MemoryWallConfig,
    MemoryWallView,
    users_that_fit,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread


def _wall(card_gib=80.0, model="llama-2-13b", context_tokens=4096, num_users=16, **kw) -> MemoryWall:
    return MemoryWall(MemoryWallConfig(card_gib, model, context_tokens=context_tokens, num_users=num_users, **kw))


# -- the model -----------------------------------------------------------------------------------
def test_the_80_gb_card_splits_as_the_engine_sizes_its_pool():
    wall = _wall()
    budget = MemoryBudget.for_model(EXAMPLE_13B, 80 * 2**30, 2)
    assert wall.budget == budget and wall.weight_bytes == costs.weight_bytes(EXAMPLE_13B, 2)
    assert wall.kv_budget_bytes == 80 * 2**30 - wall.weight_bytes
    assert wall.num_blocks == num_blocks_for_budget(EXAMPLE_13B, budget, 16, 2)
    assert wall.block_bytes == 819_200 * 16 and wall.pool_tokens == wall.num_blocks * 16
    assert wall.bytes_per_user == costs.kv_cache_bytes(EXAMPLE_13B, 4096, 1, 2) == 819_200 * 4096


def test_users_at_1k_4k_16k_on_an_80_gb_card():
    wall = _wall()
    tokens = costs.max_cached_tokens(EXAMPLE_13B, wall.kv_budget_bytes, 2)  # the cost model, token by token
    # 80 GiB = 85,899,345,920 bytes - 26,031,728,640 of weights = 59,867,617,280 for K and V:
    # 4,567 blocks of 16 x 819,200 bytes; 64, 256 and 1,024 blocks a user
    assert wall.num_blocks == 59_867_617_280 // 13_107_200 == 4567
    for context, expected in ((1024, 71), (4096, 17), (16384, 4)):
        assert wall.users_at(context) == expected == tokens // context  # these contexts are whole blocks
    assert wall.users_fit == 17 and wall.num_running == 16 and wall.num_waiting == 0
    assert wall.next_action == Admission.ADMIT  # the 17th user still fits
    assert _wall(num_users=17).next_action == Admission.QUEUE  # the 18th would wait


def test_partial_blocks_cost_a_whole_block():
    wall = _wall(context_tokens=4097)
    assert wall.blocks_per_user == 257
    assert wall.users_fit == wall.num_blocks // 257
    assert users_that_fit(EXAMPLE_13B, wall.budget, 4097, 16, 2) == wall.users_fit


def test_step_brings_users_until_they_queue_and_reset_restores():
    wall = _wall(num_users=15)
    assert wall.next_action == Admission.ADMIT
    wall.step()
    wall.step()
    assert (wall.num_users, wall.num_running, wall.num_waiting) == (17, 17, 0)
    wall.step()
    assert (wall.num_running, wall.num_waiting, wall.next_action) == (17, 1, Admission.QUEUE)
    assert wall.used_bytes == 17 * 256 * wall.block_bytes <= wall.kv_budget_bytes
    assert wall.context_each(18) == (4567 // 18) * 16 == 4048 < 4096  # all at once: each cut short
    wall.reset()
    assert wall.num_users == 15


def test_a_conversation_longer_than_the_pool_or_the_model_is_refused():
    too_long_for_the_model = _wall(context_tokens=16384)
    assert (
        too_long_for_the_model.next_action == Admission.REFUSE
        and "4,096 this model reads" in too_long_for_the_model.refusal
    )
    too_big_for_the_pool = _wall(card_gib=27.0, model="llama-2-13b", context_tokens=4096)
    assert too_big_for_the_pool.users_fit == 0 and "even alone" in too_big_for_the_pool.refusal
    assert too_big_for_the_pool.num_running == too_big_for_the_pool.num_waiting == 0


def test_a_reserve_and_fewer_bytes_per_value_move_the_wall():
    # 8 GB held back (about a tenth of the card, as vLLM's default): 51,867,617,280 bytes = 3,957 blocks
    assert _wall(reserve_gb=8.0).users_fit == 3957 // 256 == 15
    assert _wall(bytes_per_value=1).users_fit > 2 * _wall().users_fit  # half the weights and half the cache


def test_a_shape_of_ones_own_replaces_the_preset():
    config = make_config()
    budget = MemoryBudget.for_model(config, costs.weight_bytes(config, 4) + 1_000_000, 4)
    wall = MemoryWall(
        MemoryWallConfig(budget.total_bytes / 2**30, "custom", 4, context_tokens=40, block_size=4, model_config=config)
    )
    assert wall.budget == budget and wall.users_fit == users_that_fit(config, budget, 40, 4, 4)


@pytest.mark.parametrize(
    "field, bad, name",
    [
        ("card_gib", 0, "Card memory"),
        ("card_gib", float("nan"), "Card memory"),
        ("model", "gpt-5", "Model"),
        ("bytes_per_value", 3, "Bytes per value"),
        ("reserve_gb", -1.0, "Reserve"),
        ("context_tokens", 0, "Context per user"),
        ("context_tokens", 2.5, "Context per user"),
        ("num_users", -1, "Users"),
        ("block_size", 0, "Block size"),
        ("card_gib", 24.0, "nothing is left"),
        ("reserve_gb", 60.0, "nothing is left"),
    ],
)
def test_invalid_inputs_name_the_control(field, bad, name):
    values = dict(
        card_gib=80.0, model="llama-2-13b", bytes_per_value=2, reserve_gb=0.0, context_tokens=4096, num_users=16
    )
    values[field] = bad
    with pytest.raises(InvalidInput, match=name):
        MemoryWallConfig(**values)


def test_every_preset_model_on_every_card_agrees_with_the_engines_sizing():
    for name, shape in MODEL_CONFIGS.items():
        for gpu, gb in GPU_PRESETS.items():
            if costs.weight_bytes(shape, 2) >= gb * 2**30:
                continue
            wall = _wall(gb, name, context_tokens=2048, num_users=0)
            budget = MemoryBudget.for_model(shape, round(gb * 2**30), 2)
            assert wall.num_blocks == num_blocks_for_budget(shape, budget, 16, 2), (name, gpu)
            assert wall.users_fit == wall.num_blocks // 128


# -- the view ------------------------------------------------------------------------------------
def test_view_draws_the_box_and_reports_the_wall():
    view = MemoryWallView("A100 80GB", context_tokens=4096, num_users=17)
    assert view.error is None and shows_png(view)
    assert "26.03 GB of weights" in view.message.value and "17 fit at once" in view.message.value
    assert "85.90 GB card" in view.message.value  # 80 GiB
    assert "<b>queue</b>" in view.message.value
    box_ax, curve_ax = view.axes
    assert "17 users" in box_ax.get_title() and "halve" in curve_ax.get_title()


def test_every_control_changes_the_status_and_the_figure_stays():
    view = MemoryWallView("A100 80GB", context_tokens=4096, num_users=4)
    figure, axes = view.figure, list(view.axes)
    changes = {
        "card_gib": 60.0,
        "model": "llama-3-8b",
        "bytes_per_value": 1,
        "reserve_gb": 4.0,
        "context_tokens": 1000,
        "num_users": 200,
        "gpu": "H200",
    }
    assert_each_control_redraws(view, changes)
    assert view.controls["card_gib"].value == 141.0  # the preset put its memory in the box
    assert view.figure is figure and view.axes == axes and len(figure.axes) == 2


def test_step_adds_a_user_until_the_wall_and_reset_restores():
    view = MemoryWallView("A100 80GB", context_tokens=4096, num_users=16)
    assert "<b>admit</b>" in view.message.value
    view.step_button.click()
    assert view.model.num_users == 17 and "<b>queue</b>" in view.message.value
    assert view.values["num_users"] == 17  # the Users box shows the user Step brought
    view.step_button.click()
    assert "18 at once, each would be cut short at" in view.message.value
    assert "1 wait" in view.axes[0].get_title()
    view.reset_button.click()
    assert view.model.num_users == 16 and view.values["num_users"] == 16


def test_refusal_is_shown_as_the_next_action():
    view = MemoryWallView("A100 80GB", context_tokens=16384, num_users=1)
    assert view.error is None and "<b>refuse</b>" in view.message.value and "this model reads" in view.message.value
    view.controls["model"].value = "mistral-7b"  # reads 32k: the 16k conversation fits now
    assert "<b>refuse</b>" not in view.message.value


@pytest.mark.parametrize(
    "name, bad",
    [("card_gib", -5.0), ("card_gib", 10.0), ("context_tokens", 0), ("num_users", -3), ("reserve_gb", 79.0)],
)
def test_bad_input_shows_a_message_not_a_traceback(name, bad):
    assert_bad_input_is_shown(MemoryWallView("A100 80GB"), name, bad)


def test_a_tiny_card_in_megabytes_draws():
    view = MemoryWallView(card_gib=0.55, model="smollm2-135m", bytes_per_value=4, context_tokens=62, num_users=6)
    assert view.error is None and "MB" in view.axes[0].get_ylabel()


# -- the simulator against the engine ------------------------------------------------------------
def _admitted_per_step(engine: LLMEngine) -> dict[int, int]:
    admitted: dict[int, int] = {}
    for event in engine.events.of_kind(EventKind.ADMIT):
        admitted[event.step] = admitted.get(event.step, 0) + 1
    return admitted


@pytest.mark.parametrize("context, block_size", [(12, 4), (13, 4), (30, 8)])
def test_the_engine_runs_exactly_the_users_the_simulator_says_fit(tiny_model, context, block_size):
    model, config = tiny_model, tiny_model.config
    budget = MemoryBudget.for_model(config, costs.weight_bytes(config, 4) + 30 * block_size * 512, 4)
    fit = users_that_fit(config, budget, context, block_size, 4)
    engine = LLMEngine(model, EngineConfig(block_size=block_size, memory_budget=budget, eos_token_id=0))
    prompts = [[3 + i] * context for i in range(fit + 3)]  # the whole context is there at admission
    outputs = engine.generate(prompts, SamplingParams(max_new_tokens=1))
    admitted = _admitted_per_step(engine)
    assert 1 < fit < len(prompts) and admitted[0] == fit == max(admitted.values())
    assert sum(admitted.values()) == len(prompts) and all(o.finished and not o.refusal for o in outputs)


PRESSURE_PROMPTS = [[5 + i, 6, 7, 8, 9, 10, 11, 12, 13] for i in range(6)]  # 3 blocks of 4: four start at once
PRESSURE_PARAMS = [SamplingParams(max_new_tokens=12)] * 6 + [SamplingParams(max_new_tokens=60)]  # 69 tokens: 18 blocks


def test_under_pressure_every_request_ends_finished_or_refused_with_the_same_tokens(tiny_model):
    prompts, params = PRESSURE_PROMPTS, PRESSURE_PARAMS[0]
    tight = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=12, eos_token_id=0))
    plenty = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=64, eos_token_id=0))
    out = tight.generate([*prompts, prompts[0]], PRESSURE_PARAMS)
    ref = plenty.generate(prompts, params)
    counts = tight.events.counts()
    assert counts["preempt"] >= 1 and counts["refuse"] == 1 and _admitted_per_step(tight)[0] == 4
    assert "could never fit, even alone" in out[-1].refusal and out[-1].tokens == []
    assert [o.tokens for o in out[:-1]] == [o.tokens for o in ref]
    assert all(o.finished for o in out)


def test_request_stories_and_occupancy_read_the_trace_back(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=12, eos_token_id=0))
    for prompt, params in zip([*PRESSURE_PROMPTS, PRESSURE_PROMPTS[0]], PRESSURE_PARAMS, strict=True):
        engine.add_request(prompt, params)
    live: tuple[list[int], list[int], list[int]] = ([], [], [])
    lost = 0
    while engine.has_unfinished_requests:
        computed = {s.seq_id: s.num_computed_tokens for s in engine.scheduler.running}
        engine.step()
        lost += sum(
            computed[e.seq_id] for e in engine.events.of_kind(EventKind.PREEMPT) if e.step == engine.num_steps - 1
        )
        for series, value in zip(
            live,
            (engine.kv_cache_manager.num_used_blocks, len(engine.scheduler.running), len(engine.scheduler.waiting)),
            strict=True,
        ):
            series.append(value)
    assert occupancy(engine) == live
    stories = request_stories(engine)
    assert sum(s.recomputed_tokens for s in stories) == lost > 0
    assert [s.request_id for s in stories] == list(range(7)) and stories[-1].finish_reason == "refused"
    assert stories[-1].admitted == () and stories[-1].finished is None
    for s in stories[:-1]:
        assert len(s.admitted) == len(s.preempted) + 1 and s.finished >= s.admitted[-1]
        assert s.tokens == tuple(engine.requests[s.request_id].output().tokens)
    assert any(s.waited_steps > 0 for s in stories)


# -- the lesson's claims on the real model (float32) ---------------------------------------------
LESSON_QUESTIONS = [
    "What is the capital of France?",
    "Name a fruit that is yellow.",
    "Why is the sky blue?",
    "Write a haiku about rain.",
    "What is two plus two?",
    "Give me a tip for sleeping well.",
]


@pytest.mark.slow
def test_lesson_08_tight_pool_on_smollm2_in_float32(real_model):
    hf_model, tokenizer = real_model
    model = Transformer.from_hf(copy.deepcopy(hf_model).to(torch.float32))
    config, bpv = model.config, 4
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)["input_ids"]
        for q in LESSON_QUESTIONS
    ]
    budget = MemoryBudget.for_model(
        config, costs.weight_bytes(config, bpv) + 256 * costs.kv_bytes_per_token(config, bpv), bpv
    )
    assert sum(p.nbytes for p in hf_model.parameters()) == budget.weight_bytes
    params = [SamplingParams(max_new_tokens=24)] * 6 + [SamplingParams(max_new_tokens=300)]
    tight = LLMEngine(model, EngineConfig(block_size=16, memory_budget=budget))
    out = tight.generate([*prompts, prompts[0]], params)
    plenty = LLMEngine(model, EngineConfig(block_size=16, num_blocks=64)).generate(prompts, params[:6])
    assert tight.num_blocks == 16 and all(o.finished for o in out) and out[-1].refusal
    assert [o.tokens for o in out[:6]] == [o.tokens for o in plenty]  # exact in float32
    counts = tight.events.counts()
    assert counts["preempt"] >= 1 and counts["admit"] == 6 + counts["preempt"]
    longest = max(len(p) for p in prompts) + 24
    assert users_that_fit(config, budget, longest, 16, bpv) == 4
