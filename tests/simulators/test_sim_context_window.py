"""Lesson 15's simulator: the window a card affords, against the cost model, by hand, and on the engine.

The engine checks run the tiny model: a pool sized in bytes admits a request of exactly the
simulator's window and refuses one token more; many users sharing a prefix (prefix caching on)
all run to the simulator's window at once without a preemption, and one block more each does
not fit.
"""

from __future__ import annotations

import re

import pytest
from factories import make_tiny_model
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import (
    MODEL_CONFIGS,
    EngineConfig,
    EventKind,
    LLMEngine,
    MemoryBudget,
    SamplingParams,
    Transformer,
    costs,
    num_blocks_for_budget,
)
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.context_window import (
    MEMORY,
    MODEL,
    ContextWindow,
    ContextWindowConfig,
    ContextWindowView,
    shared_tokens,
    window_for,
)
from kvcourse.simulators.controls import CUSTOM
from kvcourse.simulators.hardware import GPU_PRESETS

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread


def _sim(card_gib=80.0, model="llama-3-8b", **kw) -> ContextWindow:
    return ContextWindow(ContextWindowConfig(card_gib, model, **kw))


def _text(view) -> str:
    return re.sub("<[^>]+>", "", view.message.value)


# -- the model against the cost model and by hand -------------------------------------------------
def test_one_user_is_the_cost_models_window_on_every_card_and_model():
    for name, shape in MODEL_CONFIGS.items():
        for gpu, gb in GPU_PRESETS.items():
            free = round(gb * 2**30) - costs.weight_bytes(shape, 2)
            if free < costs.kv_bytes_per_token(shape, 2) * 16:
                continue
            sim = _sim(gb, name)
            assert sim.memory_window == costs.context_window(shape, free, 2, block_size=16), (name, gpu)
            assert sim.num_blocks == num_blocks_for_budget(shape, MemoryBudget.for_model(shape, round(gb * 2**30)), 16)
            assert sim.window == min(sim.memory_window, shape.max_position_embeddings)


def test_llama_3_8b_on_an_80_gb_card_by_hand():
    sim = _sim()
    weights = 8_030_261_248 * 2  # Meta-Llama-3-8B's parameters, 16-bit
    assert sim.budget.weight_bytes == weights and sim.bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    # 80 GiB = 85,899,345,920 bytes; 69,838,823,424 left = 33,301 blocks of 16 x 131,072 bytes
    assert sim.num_blocks == (80 * 2**30 - weights) // (131_072 * 16) == 33_301
    assert sim.memory_window == 33_301 * 16  # one user: the whole pool
    assert (sim.window, sim.limit) == (8192, MODEL)  # but the model reads 8,192
    still_model = _sim(num_users=64)  # 520 blocks each = 8,320 tokens: still more than the model reads
    assert (still_model.window, still_model.limit) == (8192, MODEL)
    many = _sim(num_users=128)
    assert many.window == (33_301 // 128) * 16 == 4160 and many.limit == MEMORY


def test_a_shared_prefix_is_stored_once_in_whole_blocks():
    # 1,000 blocks of 16, 100 users, half of each conversation shared: k blocks each need
    # floor(k / 2) shared blocks + 100 x the rest; 18 blocks fit (9 + 900), 19 do not (9 + 1000).
    assert window_for(1000, 16, 100, 50) == 18 * 16
    assert window_for(1000, 16, 100, 0) == 10 * 16
    assert shared_tokens(288, 50) == 144 and shared_tokens(100, 12.5) == 12
    assert window_for(99, 16, 100, 50) == 0  # not one block each


@pytest.mark.parametrize("num_blocks, users, percent", [(40, 3, 30.0), (97, 5, 62.5), (500, 7, 99.0), (12, 1, 50.0)])
def test_window_for_is_the_longest_context_whose_blocks_fit(num_blocks, users, percent):
    def fits(tokens):
        return costs.kv_blocks_needed(tokens, 16, users, shared_tokens(tokens, percent)) <= num_blocks

    window = window_for(num_blocks, 16, users, percent)
    assert window % 16 == 0 and fits(window)
    assert not any(fits(k * 16) for k in range(window // 16 + 1, num_blocks + 2))


def test_sharing_half_of_every_conversation_nearly_doubles_the_window_of_many_users():
    alone, shared = _sim(model="qwen2.5-7b", num_users=512), _sim(model="qwen2.5-7b", num_users=512, shared_percent=50)
    assert 1.9 < shared.window / alone.window <= 2.0
    assert shared.unshared_window == alone.window


def test_the_budget_terms_fill_the_card_and_blocks_waste_less_than_one_per_user():
    for kw in (dict(num_users=64), dict(num_users=100, shared_percent=30.0), dict(num_users=30, block_size=256)):
        sim = _sim(model="qwen2.5-7b", **kw)
        terms = sim.budget_terms()
        assert sum(terms.values()) == sim.config.total_bytes and sim.limit == MEMORY
        assert terms["left over"] < (sim.num_users + 1) * sim.block_bytes
        # whole blocks cost each window at most its last block and the prefix's partly filled one
        assert 0 <= sim.exact_window - sim.window < 2 * sim.config.block_size / (1 - sim.config.shared_percent / 100)


def test_step_doubles_the_users_and_reset_restores():
    sim = _sim(num_users=64)
    sim.step()
    assert sim.num_users == 128 and sim.window == (33_301 // 128) * 16
    sim.reset()
    assert sim.num_users == 64


@pytest.mark.parametrize(
    "field, bad, name",
    [
        ("card_gib", 0, "Card memory"),
        ("card_gib", float("nan"), "Card memory"),
        ("model", "gpt-5", "Model"),
        ("bytes_per_value", 3, "Bytes per value"),
        ("num_users", 0, "Users"),
        ("num_users", 2.5, "Users"),
        ("shared_percent", -1.0, "Shared prefix"),
        ("shared_percent", 101.0, "Shared prefix"),
        ("block_size", 0, "Block size"),
        ("card_gib", 12.0, "nothing is left"),
    ],
)
def test_invalid_inputs_name_the_control(field, bad, name):
    values = dict(card_gib=80.0, model="llama-3-8b", bytes_per_value=2, num_users=1, shared_percent=0.0, block_size=16)
    values[field] = bad
    with pytest.raises(InvalidInput, match=name):
        ContextWindowConfig(**values)


# -- the engine admits what the simulator says ------------------------------------------------------
@pytest.fixture(scope="module")
def tiny() -> Transformer:
    return make_tiny_model(max_position_embeddings=4096)


def _tiny_card(model: Transformer, room_tokens: int, block_size: int, **kw) -> ContextWindow:
    config = model.config
    total = costs.weight_bytes(config, 4) + room_tokens * costs.kv_bytes_per_token(config, 4)
    return ContextWindow(
        ContextWindowConfig(total / 2**30, "custom", 4, block_size=block_size, model_config=config, **kw)
    )


@pytest.mark.parametrize("room_tokens, block_size", [(200, 16), (208, 16), (100, 1), (130, 64)])
def test_a_pool_sized_in_bytes_admits_the_window_and_refuses_one_token_more(tiny, room_tokens, block_size):
    sim = _tiny_card(tiny, room_tokens, block_size)
    assert sim.budget.total_bytes == sim.config.total_bytes  # the card survived the trip through GB
    engine = LLMEngine(tiny, EngineConfig(block_size=block_size, memory_budget=sim.budget))
    assert engine.num_blocks * block_size == sim.window == (room_tokens // block_size) * block_size
    prompt = list(range(3, 40))
    fits = SamplingParams(max_new_tokens=sim.window - len(prompt), stop_on_eos=False)
    served, refused = engine.generate([prompt, prompt], [fits, SamplingParams(max_new_tokens=fits.max_new_tokens + 1)])
    assert served.refusal is None and served.finish_reasons == ("length",)
    assert len(prompt) + len(served.tokens) == sim.window
    assert refused.refusal is not None and "could never fit, even alone" in refused.refusal


def _serve_together(model, num_blocks, block_size, users, context, prefix):
    """users requests of context tokens opening with the same prefix; the first computes it first."""
    engine = LLMEngine(
        model,
        EngineConfig(block_size=block_size, num_blocks=num_blocks, max_num_seqs=users, enable_prefix_caching=True),
    )
    shared = [3 + i % 40 for i in range(prefix)]
    prompts = [shared + [50 + u, 90] for u in range(users)]  # each user's own message starts differently
    params = [SamplingParams(max_new_tokens=context - len(p), stop_on_eos=False) for p in prompts]
    engine.add_request(prompts[0], params[0])
    engine.step()  # the first user's prompt, prefix included, is computed and cached
    for p, sp in zip(prompts[1:], params[1:], strict=True):
        engine.add_request(p, sp)
    peak, most_running = 0, 0
    while engine.has_unfinished_requests:
        engine.step()
        peak = max(peak, engine.kv_cache_manager.num_used_blocks)
        most_running = max(most_running, len(engine.scheduler.running))
    return engine, peak, most_running


@pytest.mark.parametrize("room_tokens, users, percent", [(400, 4, 50.0), (640, 6, 30.0), (300, 3, 0.0)])
def test_many_users_sharing_a_prefix_reach_the_window_together_and_not_one_block_more(
    tiny, room_tokens, users, percent
):
    sim = _tiny_card(tiny, room_tokens, 4, num_users=users, shared_percent=percent)
    window, prefix, n = sim.window, sim.shared_tokens, sim.num_blocks
    assert window > prefix + 2 and sim.limit == MEMORY
    engine, peak, most_running = _serve_together(tiny, n, 4, users, window, prefix)
    assert not engine.events.of_kind(EventKind.PREEMPT) and most_running == users
    assert peak == costs.kv_blocks_needed(window, 4, users, prefix) <= n
    longer = window + 4
    engine, _, _ = _serve_together(tiny, n, 4, users, longer, shared_tokens(longer, percent))
    assert engine.events.of_kind(EventKind.PREEMPT)  # one block more each: someone must give way


# -- the view ---------------------------------------------------------------------------------------
def test_view_starts_on_an_h100_where_the_model_not_memory_sets_one_users_window():
    view = ContextWindowView()
    assert view.error is None and shows_png(view)
    text = _text(view)
    assert "33,301 blocks of 16 tokens" in text and "set by the positions the model's config declares" in text
    card_ax, curve_ax = view.axes
    assert "1 user at 8,192 tokens:" in card_ax.get_title() and "half the window" in curve_ax.get_title()


def test_view_every_control_redraws_and_changes_the_status():
    view = ContextWindowView(num_users=64)
    assert_each_control_redraws(
        view,
        {
            "gpu": "H200",
            "card_gib": 100.0,
            "model": "qwen2.5-7b",
            "bytes_per_value": 1,
            "num_users": 256,
            "shared_percent": 25.0,
            "block_size": 64,
        },
    )
    assert view.controls["gpu"].value == CUSTOM  # a typed size is no longer the preset's
    assert "set by memory" in _text(view) and "25 % of each conversation shared" in _text(view)
    view.step_button.click()
    assert view.model.num_users == 512 and "512 users" in _text(view)
    view.reset_button.click()
    assert view.controls["num_users"].value == 64 and view.controls["gpu"].value == "H100 80GB"


@pytest.mark.parametrize(
    "name, bad",
    [("card_gib", -1.0), ("card_gib", 10.0), ("num_users", 0), ("shared_percent", 150.0), ("block_size", 0)],
)
def test_view_bad_input_shows_a_message(name, bad):
    assert_bad_input_is_shown(ContextWindowView(), name, bad)


def test_view_says_when_the_pool_cannot_give_each_user_a_block():
    view = ContextWindowView("RTX 4090", model="llama-2-7b", num_users=50_000)
    assert view.error is None and "no window" in _text(view) and view.model.window == 0
    assert "not one block each" in view.axes[0].get_title()


def test_view_int8_says_its_scales_are_not_counted_and_applies_to_weights_and_cache():
    view = ContextWindowView(bytes_per_value=1)
    labels = [label for label, _ in view.controls["bytes_per_value"].options]
    assert "8-bit (int8, scales not counted)" in labels
    assert view.model.bytes_per_token == costs.kv_bytes_per_token(MODEL_CONFIGS["llama-3-8b"], 1)
    assert view.model.budget.weight_bytes == costs.weight_bytes(MODEL_CONFIGS["llama-3-8b"], 1)
