"""Lesson 25's simulator: its bytes equal the engine's 2-bit cache (scales and recent tokens) at every length and its
per-token count the cost model's, the 2026 shapes the cache layouts', quality read only where the engine measured,
the halving step, its refusals, and the view."""

from __future__ import annotations

import pytest
from factories import make_tiny_model
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import costs
from kvcourse.kernels.measure import low_bit
from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.kernels.model.config_table import MODEL_CONFIGS
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.low_bit import LowBit, LowBitConfig, LowBitView, formats_from_sweep
from kvcourse.simulators.low_bit_model import (
    GROUP_CHOICES,
    MODEL_CHOICES,
    SHAPES_2026,
    SMOLLM2_FORMATS,
    low_bit_bytes_per_token,
    shape_of,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

SMOLLM2 = MODEL_CONFIGS["smollm2-135m"]


def test_smollm2_by_hand_two_bits_in_groups_of_32():
    # per layer and KV head: codes 2 x 64 / 4 = 32 bytes, keys' low and step per channel over 32 tokens 8, values'
    # per 32 channels 8: 48 bytes x 30 layers x 3 heads
    assert low_bit_bytes_per_token(SMOLLM2, 2, 32) == 48 * 90 == costs.kivi_kv_bytes_per_token(SMOLLM2, 32)
    assert low_bit_bytes_per_token(SMOLLM2, 2, 16) == costs.kivi_kv_bytes_per_token(SMOLLM2, 16) == 64 * 90
    assert low_bit_bytes_per_token(SMOLLM2, 8, 32) == (128 + 16) * 90
    sim = LowBit(LowBitConfig(model="smollm2-135m", bits=2, context=1000, bytes_per_value=2))
    assert sim.bytes_at(1000) == 960 * 4320 + 40 * 23040  # 40 recent tokens in 16 bits


def test_the_2026_shapes_are_the_cache_layouts():
    for name in SHAPES_2026:
        assert costs.kv_bytes_per_token(shape_of(name), 2) == LAYOUTS_2026[name].per_token_bytes


@pytest.mark.parametrize("tokens", [5, 64, 150])
def test_the_simulators_bytes_are_the_engines_two_bit_cache(tokens):
    model = make_tiny_model(hidden_size=128, num_heads=4, num_kv_heads=2, max_position_embeddings=256)
    _, cache = low_bit.read_through(model, [i % 90 + 3 for i in range(tokens)], "kivi2", 32)
    sim = LowBit(LowBitConfig(model="smollm2-135m", bits=2, bytes_per_value=4))
    assert (sim.config.residual, sim.config.group) == (low_bit.RESIDUAL, low_bit.GROUP)  # the engine's defaults
    quantised, recent = low_bit.kivi_split(tokens)
    per_token = low_bit_bytes_per_token(model.config, 2, 32)
    assert cache.kv_cache_bytes == per_token * quantised + costs.kv_bytes_per_token(model.config, 4) * recent
    assert sim.bytes_at(tokens) == low_bit.format_bytes(SMOLLM2, "kivi2", tokens, 4).total


def test_quality_only_where_the_engine_measured():
    assert LowBit(LowBitConfig(bits=2)).quality == SMOLLM2_FORMATS.points["kivi2"][1]
    assert LowBit(LowBitConfig(bits=16)).quality == SMOLLM2_FORMATS.points["as computed"][1]
    for changed in ({"bits": 4}, {"bits": 8}, {"group": 64}, {"residual": 128}):
        assert LowBit(LowBitConfig(**{"bits": 2, **changed})).quality is None


def test_the_measured_points_from_the_engines_sweep():
    model = make_tiny_model(hidden_size=128, num_heads=4, num_kv_heads=2, max_position_embeddings=256)
    table = low_bit.format_sweep(model, [(5 * i) % 90 + 3 for i in range(100)])
    measured = formats_from_sweep(table)
    assert measured.tokens == 100 and list(measured.points) == list(low_bit.FORMATS)
    per_token, quality = measured.points["kivi2"]
    assert per_token == table.loc["kivi2", "bytes per token at this length"]
    assert quality.perplexity == table.loc["kivi2", "perplexity"]


def test_step_halves_the_bits_down_to_two_and_reset_goes_back():
    sim = LowBit(LowBitConfig(bits=16))
    assert [sim.step() for _ in range(3)] == [8, 4, 2]
    with pytest.raises(InvalidInput, match="fewest"):
        sim.step()
    sim.reset()
    assert sim.bits == 16


@pytest.mark.parametrize(
    "changes", [{"bits": 3}, {"group": 128, "model": "smollm2-135m"}, {"context": 0}, {"residual": -1}, {"model": "x"}]
)
def test_bad_input_is_refused(changes):
    with pytest.raises(InvalidInput):
        LowBitConfig(**changes)


def test_the_view_draws_redraws_and_says_where_nothing_was_measured():
    view = LowBitView()
    assert view.error is None and shows_png(view) and "perplexity" in view.message.value
    view.step_button.click()
    assert view.controls["bits"].value == 8 and view.model.bits == 8
    assert "not measured" in view.message.value
    view.reset_button.click()
    assert_each_control_redraws(
        view, {"bits": 2, "group": 64, "residual": 100, "context": 131072, "bytes_per_value": 4, "model": "qwen3-8b"}
    )
    view.controls["group"].value = 32
    view.controls["residual"].value = 32
    assert "measured on SmolLM2, not on this model" in view.message.value


@pytest.mark.parametrize(("name", "bad"), [("context", 0), ("residual", -5), ("context", float("nan"))])
def test_the_view_shows_bad_input_instead_of_a_traceback(name, bad):
    assert_bad_input_is_shown(LowBitView(), name, bad)


def test_every_group_on_offer_divides_every_models_head():
    for name in MODEL_CHOICES:
        assert all(shape_of(name).head_dim % group == 0 for _, group in GROUP_CHOICES)
