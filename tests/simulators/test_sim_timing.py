"""Lesson 17's simulator: the timing lab's time model as a pure model and as a view."""

from __future__ import annotations

import math

import pytest
from sim_checks import assert_bad_input_is_shown, shows_png

from kvcourse.kernels import MODEL_CONFIGS, costs
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.labels import format_seconds
from kvcourse.simulators.timing import (
    MAX_NEW_TOKENS,
    TimingConfig,
    TimingModel,
    TimingView,
)
from kvcourse.timing_lab import HF_CACHE, HF_NO_CACHE
from kvcourse.timing_lab.predict import PassCostModel, generation_work, predict_sweep

SMOL = MODEL_CONFIGS["smollm2-135m"]


def _sim(prompt_len=8, num_new_tokens=64, ms_per_pass=15.0, ms_per_gflop=10.0, model_config=None):
    return TimingModel(TimingConfig(prompt_len, num_new_tokens, ms_per_pass, ms_per_gflop, model_config))


# -- the model -----------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt_len, num_new_tokens", [(1, 1), (8, 16), (40, 64), (200, 7)])
def test_simulator_equals_the_timing_labs_prediction(prompt_len, num_new_tokens):
    cost_model = PassCostModel(seconds_per_pass=0.015, seconds_per_flop=10e-12)
    sim = _sim(prompt_len, num_new_tokens, ms_per_pass=15.0, ms_per_gflop=10.0, model_config=SMOL)
    lengths = [1, max(1, num_new_tokens // 2), num_new_tokens]
    predicted = predict_sweep(cost_model, SMOL, prompt_len, lengths)
    for name, use_cache in ((HF_CACHE, True), (HF_NO_CACHE, False)):
        curve = sim.seconds_curve(use_cache)
        assert [curve[n - 1] for n in lengths] == pytest.approx(predicted[name], rel=1e-12)
        assert sim.flops(use_cache) == generation_work(SMOL, prompt_len, num_new_tokens, use_cache).flops
    assert sim.num_passes == num_new_tokens


def test_work_ratio_is_the_ratio_of_tokens_processed():
    sim = _sim(prompt_len=12, num_new_tokens=50)
    for n, ratio in enumerate(sim.work_ratio_curve(), start=1):
        expected = costs.tokens_processed(12, n, use_cache=False) / costs.tokens_processed(12, n, use_cache=True)
        assert ratio == pytest.approx(expected)
    assert sim.work_ratio == pytest.approx(sim.work_ratio_curve()[-1])


def test_the_fixed_cost_per_pass_keeps_the_speedup_below_the_work_ratio():
    sim = _sim(ms_per_pass=15.0)
    assert 1 < sim.speedup < sim.work_ratio
    speedups = sim.seconds_curve(False) / sim.seconds_curve(True)
    assert list(speedups) == sorted(speedups)  # the gap widens with length, as lesson 17 measures
    assert _sim(ms_per_pass=0.0).speedup > sim.speedup  # less fixed cost, more of the saving shows
    assert _sim(ms_per_gflop=0.0).speedup == pytest.approx(1.0)  # passes alone: the same either way
    assert 0 < sim.fixed_share_with_cache < 1


def test_units_of_the_two_costs():
    sim = _sim(prompt_len=1, num_new_tokens=1, ms_per_pass=20.0, ms_per_gflop=0.0)
    assert sim.seconds_with_cache == pytest.approx(0.020)
    sim = _sim(prompt_len=1, num_new_tokens=1, ms_per_pass=0.0, ms_per_gflop=1000.0)  # 1 s per GFLOP
    assert sim.seconds_with_cache == pytest.approx(sim.flops(True) / 1e9)


def test_step_doubles_the_output_until_the_limit_and_reset_restores_it():
    sim = _sim(num_new_tokens=MAX_NEW_TOKENS // 4)
    sim.step()
    assert sim.num_new_tokens == MAX_NEW_TOKENS // 2 and len(sim.seconds_curve(True)) == MAX_NEW_TOKENS // 2
    sim.step()
    with pytest.raises(InvalidInput, match="Reset"):
        sim.step()
    sim.reset()
    assert sim.num_new_tokens == MAX_NEW_TOKENS // 4


@pytest.mark.parametrize(
    "field, bad",
    [
        ("prompt_len", 0),
        ("prompt_len", -3),
        ("prompt_len", 1.5),
        ("prompt_len", 10**9),
        ("num_new_tokens", 0),
        ("num_new_tokens", MAX_NEW_TOKENS + 1),
        ("num_new_tokens", float("nan")),
        ("ms_per_pass", -1.0),
        ("ms_per_pass", float("nan")),
        ("ms_per_pass", float("inf")),
        ("ms_per_pass", 1e12),
        ("ms_per_gflop", -0.5),
        ("ms_per_gflop", float("nan")),
        ("ms_per_gflop", "fast"),
    ],
)
def test_bad_input_is_an_invalid_input_naming_the_control(field, bad):
    values = {"prompt_len": 8, "num_new_tokens": 64, "ms_per_pass": 15.0, "ms_per_gflop": 10.0, field: bad}
    label = {
        "prompt_len": "Prompt length (tokens)",
        "num_new_tokens": "Output length (new tokens)",
        "ms_per_pass": "Fixed cost per pass (ms)",
        "ms_per_gflop": "Cost per GFLOP (ms)",
    }[field]
    with pytest.raises(InvalidInput) as err:
        TimingConfig(**values)
    assert str(err.value).startswith(label)


def test_two_zero_costs_are_refused():
    with pytest.raises(InvalidInput, match="both 0 ms"):
        TimingConfig(8, 64, 0.0, 0.0)


def test_format_seconds_picks_a_readable_unit():
    assert [format_seconds(s) for s in (5e-4, 0.0123, 4.567, 300.0)] == ["500 µs", "12.3 ms", "4.57 s", "5.0 min"]


# -- the view ------------------------------------------------------------------------------------
def test_view_shows_both_times_their_ratio_and_units_in_every_label():
    view = TimingView(SMOL, prompt_len=8, num_new_tokens=64)
    assert view.error is None and shows_png(view)
    for control in view.controls.values():
        assert "(" in control.description and control.description.endswith(")")  # a unit in every label
    sim = view.model
    summary = view.message.value
    assert format_seconds(sim.seconds_with_cache) in summary and format_seconds(sim.seconds_without_cache) in summary
    assert f"{sim.speedup:.2f}×" in summary and "64 passes either way" in summary
    time_ax, ratio_ax = view.axes
    assert time_ax.get_ylabel() == "predicted time (s)" and "new tokens" in time_ax.get_xlabel()
    assert f"{sim.speedup:.1f}× slower at 64 new tokens" in time_ax.get_title()
    assert "only" in ratio_ax.get_title() and ratio_ax.get_yscale() == "log"


@pytest.mark.parametrize(
    "name, bad",
    [
        ("prompt_len", 0),
        ("num_new_tokens", -5),
        ("num_new_tokens", 10**7),
        ("ms_per_pass", float("nan")),
        ("ms_per_gflop", -2.0),
        ("ms_per_pass", float("inf")),
    ],
)
def test_invalid_input_shows_a_message_not_a_traceback(name, bad):
    assert_bad_input_is_shown(TimingView(), name, bad)


def test_both_costs_zero_in_the_view_is_a_message():
    view = TimingView()
    view.controls["ms_per_pass"].value = 0.0
    assert view.error is None
    view.controls["ms_per_gflop"].value = 0.0
    assert "both 0 ms" in view.message.value


def test_double_button_redraws_in_place_and_stops_at_the_limit():
    view = TimingView(num_new_tokens=MAX_NEW_TOKENS // 2)
    figure, axes, image, before = view.figure, list(view.axes), view.image, view.num_renders
    view.step_button.click()
    assert view.model.num_new_tokens == MAX_NEW_TOKENS and view.num_renders == before + 1
    assert view.figure is figure and view.axes == axes and view.image is image and len(figure.axes) == 2
    view.step_button.click()
    assert view.error is None and "Reset" in view.message.value  # information, not an input error


def test_from_cost_model_starts_with_the_fitted_costs():
    view = TimingView.from_cost_model(PassCostModel(0.012, 2.5e-12), SMOL, prompt_len=20, num_new_tokens=32)
    assert view.controls["ms_per_pass"].value == pytest.approx(12.0)
    assert view.controls["ms_per_gflop"].value == pytest.approx(2.5)
    predicted = predict_sweep(PassCostModel(0.012, 2.5e-12), SMOL, 20, [32])
    assert view.model.seconds_with_cache == pytest.approx(predicted[HF_CACHE][0])
    assert view.model.seconds_without_cache == pytest.approx(predicted[HF_NO_CACHE][0])
    assert not math.isnan(view.model.speedup)
