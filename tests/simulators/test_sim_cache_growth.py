"""Lesson 06's simulator: bytes held per step, per layer and in total; equal to what the engine holds."""

from __future__ import annotations

import pytest
import torch
from factories import make_config, make_tiny_model
from sim_checks import assert_bad_input_is_shown, shows_png

from kvcourse.kernels import (
    MODEL_CONFIGS,
    EngineConfig,
    LLMEngine,
    SamplingParams,
    Transformer,
    costs,
    generate,
)
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.cache_growth import (
    DECODE,
    ENDED,
    PREFILL,
    CacheGrowth,
    CacheGrowthConfig,
    CacheGrowthView,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

SMOL = MODEL_CONFIGS["smollm2-135m"]


def _sim(prompt_len=30, num_new_tokens=24, bytes_per_value=4, model_config=SMOL) -> CacheGrowth:
    return CacheGrowth(CacheGrowthConfig(prompt_len, num_new_tokens, bytes_per_value, model_config))


# -- the model -----------------------------------------------------------------------------------
def test_bytes_per_token_come_from_the_cost_model_and_split_evenly_over_layers():
    for bpv in (4, 2, 1):
        sim = _sim(bytes_per_value=bpv)
        assert sim.bytes_per_token == costs.kv_bytes_per_token(SMOL, bpv)
        assert sim.bytes_per_token_per_layer == 2 * SMOL.num_kv_heads * SMOL.head_dim * bpv  # by hand
        assert sim.bytes_per_token_per_layer * SMOL.num_layers == sim.bytes_per_token
    assert _sim(bytes_per_value=4).bytes_per_token == 46_080  # 2 x 30 x 3 x 64 x 4


def test_a_burst_then_one_slot_per_token_a_straight_line():
    sim = _sim(prompt_len=50, num_new_tokens=20)
    assert sim.tokens_held_curve == list(range(50, 70))  # 50 at prefill, then +1 per decode step
    steps = [b - a for a, b in zip(sim.bytes_held_curve, sim.bytes_held_curve[1:], strict=False)]
    assert set(steps) == {sim.bytes_per_token}  # never shrinks, never jumps after the prefill
    assert sim.prefill_bytes == 50 * sim.bytes_per_token
    assert sim.peak_bytes == costs.kv_cache_bytes(SMOL, 69, bytes_per_value=4)
    assert sim.prefill_share == pytest.approx(50 / 69)
    assert sim.bytes_per_layer_curve == [b // SMOL.num_layers for b in sim.bytes_held_curve]


def test_twice_the_tokens_twice_the_cache():
    assert _sim(prompt_len=100, num_new_tokens=1).peak_bytes * 2 == _sim(prompt_len=200, num_new_tokens=1).peak_bytes


def test_stepping_through_prefill_decode_and_the_end_of_the_request():
    sim = _sim(prompt_len=5, num_new_tokens=3)
    assert sim.bytes_held == 0 and sim.phase == PREFILL
    sim.step()
    assert sim.phase == PREFILL and sim.tokens_held == 5 and sim.bytes_added_last_step == 5 * sim.bytes_per_token
    sim.step()
    assert sim.phase == DECODE and sim.tokens_held == 6 and sim.bytes_added_last_step == sim.bytes_per_token
    sim.step()
    assert sim.tokens_held == 7 and sim.bytes_held == sim.peak_bytes
    assert sim.bytes_per_layer == sim.peak_bytes // SMOL.num_layers
    sim.step()  # the request ends: everything is freed at once
    assert sim.phase == ENDED and sim.bytes_held == 0 and sim.bytes_per_layer == 0 and sim.bytes_added_last_step == 0
    with pytest.raises(InvalidInput, match="Reset"):
        sim.step()
    sim.reset()
    assert sim.num_steps_done == 0 and not sim.ended


@pytest.mark.parametrize(
    "field, value, name",
    [
        ("prompt_len", 0, "Prompt length"),
        ("prompt_len", 2.5, "Prompt length"),
        ("prompt_len", True, "Prompt length"),
        ("num_new_tokens", -1, "Answer length"),
        ("num_new_tokens", 10**7, "Answer length"),
        ("bytes_per_value", 3, "Bytes per number"),
    ],
)
def test_invalid_inputs_name_the_control(field, value, name):
    values = dict(prompt_len=10, num_new_tokens=10, bytes_per_value=4)
    values[field] = value
    with pytest.raises(InvalidInput, match=name):
        CacheGrowthConfig(**values)


def test_prompt_and_answer_must_fit_the_context():
    with pytest.raises(InvalidInput, match="context of 8,192"):
        CacheGrowthConfig(8000, 500)
    CacheGrowthConfig(8000, 192)  # exactly the context: fine


# -- simulator equals engine ---------------------------------------------------------------------
@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def tiny(request) -> Transformer:
    return make_tiny_model(dtype=request.param)


def test_simulator_equals_the_contiguous_cache_step_by_step_and_per_layer(tiny):
    prompt, new = [5, 6, 7, 8, 9, 10, 11], 9
    result = generate(tiny, prompt, new, cache="contiguous", eos_token_id=[])
    sim = _sim(len(prompt), new, tiny.dtype.itemsize, tiny.config)
    assert [s.kv_cache_bytes for s in result.stats] == sim.bytes_held_curve
    assert [s.phase.value for s in result.stats] == [PREFILL] + [DECODE] * (new - 1)
    cache = result.backend  # each layer's K and V buffers, measured on the tensors themselves
    per_layer = [
        k[:, : cache.num_tokens].nbytes + v[:, : cache.num_tokens].nbytes
        for k, v in zip(cache.k_cache, cache.v_cache, strict=True)
    ]
    assert per_layer == [sim.bytes_per_layer_curve[-1]] * tiny.config.num_layers


def test_simulator_equals_the_paged_engine_and_the_end_frees_everything(tiny):
    """With one-token blocks the engine's blocks in use are the tokens held; all come back at the end."""
    prompt, new = [5, 6, 7, 8, 9], 6
    engine = LLMEngine(tiny, EngineConfig(block_size=1, num_blocks=64))
    engine.add_request(prompt, SamplingParams(max_new_tokens=new))
    used = []
    while engine.has_unfinished_requests:
        engine.step()
        used.append(engine.kv_cache_manager.num_used_blocks)
    sim = _sim(len(prompt), new, tiny.dtype.itemsize, tiny.config)
    assert used[:-1] == sim.tokens_held_curve[:-1]  # the last pass finishes the request and frees it at once
    assert used[-1] == 0
    assert engine.pool.nbytes // engine.num_blocks == sim.bytes_per_token  # one slot: K and V, every layer


# -- the view ------------------------------------------------------------------------------------
def test_view_steps_to_the_end_and_shows_the_cache_freed():
    view = CacheGrowthView(prompt_len=4, num_new_tokens=2)
    assert view.error is None and shows_png(view)
    assert "Step 1 of 2 (prefill)" in view.message.value
    first = view.message.value
    view.step_button.click()
    assert "Step 2 of 2 (decode)" in view.message.value and view.message.value != first
    view.step_button.click()
    assert "freed" in view.message.value and view.model.bytes_held == 0
    assert all(bar.get_height() == 0 for bar in view.axes[1].patches)
    view.step_button.click()  # one click too many: information (nothing typed was wrong), not a traceback
    assert view.error is None and "Reset" in view.message.value
    assert "Check the input" not in view.message.value and "color" not in view.message.value
    view.reset_button.click()
    assert view.error is None and "Step 1 of 2" in view.message.value


def test_view_every_control_changes_the_figure():
    view = CacheGrowthView(prompt_len=30, num_new_tokens=24, bytes_per_value=4)
    assert len(view.axes[1].patches) == SMOL.num_layers
    titles = view.axes[0].get_title()
    for name, value in (("prompt_len", 60), ("num_new_tokens", 100), ("bytes_per_value", 2)):
        renders = view.num_renders
        view.controls[name].value = value
        assert view.error is None and view.num_renders == renders + 1
        assert view.axes[0].get_title() != titles or name == "num_new_tokens"
        titles = view.axes[0].get_title()
    assert view.model.config.bytes_per_value == 2 and "+23.04 kB per token" in view.axes[0].get_title()


@pytest.mark.parametrize("name, bad", [("prompt_len", 0), ("num_new_tokens", -3), ("num_new_tokens", 9000)])
def test_view_bad_input_shows_a_message(name, bad):
    assert_bad_input_is_shown(CacheGrowthView(), name, bad)


def test_view_takes_another_model_shape():
    config = make_config(num_layers=3, max_position_embeddings=64)
    view = CacheGrowthView(prompt_len=10, num_new_tokens=5, model_config=config)
    assert len(view.axes[1].patches) == 3
    view.controls["num_new_tokens"].value = 60
    assert "context of 64" in view.message.value
