"""Regression tests for issue 32: controls that kept or hid state, messages in the wrong voice, labels
too small to read, boxes too narrow for their own limits."""

from __future__ import annotations

import pytest
from sim_checks import build_view, text_outside_figure

from kvcourse.feedback import ERROR_COLOUR, SUCCESS_COLOUR
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.cache_growth import CacheGrowthView
from kvcourse.simulators.controls import CHAR_PX, NUMBER_BOX_PX, int_control
from kvcourse.simulators.labels import LABEL_PT, named
from kvcourse.simulators.memory_wall import MemoryWallView
from kvcourse.simulators.prefix_cache import PrefixCacheView
from kvcourse.simulators.throughput import Throughput, ThroughputConfig, ThroughputView, readable_budget

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(autouse=True)
def _fast_png(monkeypatch):
    monkeypatch.setattr(SimulatorView, "render_dpi", 30)


# -- a button that changes a value writes it into its control ---------------------------------------------
@pytest.mark.parametrize("lesson", ["03", "04", "07", "08", "14", "15", "17"])
def test_regression_a_stepped_value_is_shown_in_its_box_and_kept_by_the_next_change(lesson):
    """14: "Double the batch" left the Batch box at 1, and the next change to any control went back to 1."""
    view = build_view(lesson)
    if lesson == "04":
        view.controls["position"].value = 0
    view.step_button.click()
    stepped = dict(view.stepped) or {"num_tokens": "num_tokens"}  # lesson 07 writes its own
    for name, attribute in stepped.items():
        assert view.values[name] == getattr(view.model, attribute), (lesson, name)
    other = next(
        n
        for n, c in view.controls.items()
        if n not in stepped and type(c).__name__ == "Dropdown" or n not in stepped and hasattr(c, "whole_number")
    )
    shown = {name: view.values[name] for name in stepped}
    control = view.controls[other]
    control.value = control.options[-1][1] if hasattr(control, "options") else control.value + 1
    for name, attribute in stepped.items():  # the next change keeps what the button did
        assert view.values[name] == shown[name] == getattr(view.model, attribute), (lesson, name, other)


def test_regression_double_the_batch_shows_64_in_the_batch_box():
    view = ThroughputView("H100 SXM", model="llama-2-13b", batch_size=32)
    view.step_button.click()
    assert view.values["batch_size"] == 64 and "Batch 64" in view.message.value
    view.controls["overhead_ms"].value = 1.0
    assert view.model.batch_size == 64 and "Batch 64" in view.message.value


def test_memory_wall_one_more_user_goes_into_the_users_box():
    view = MemoryWallView("A100 80GB", num_users=3)
    view.step_button.click()
    view.controls["context_tokens"].value = 2048
    assert view.values["num_users"] == view.model.num_users == 4


# -- lesson 06: Reset restarts the run; a box shows what the simulator uses ----------------------------
def test_regression_reset_restarts_the_request_and_keeps_the_learners_settings():
    view = CacheGrowthView(prompt_len=30, num_new_tokens=24, bytes_per_value=4)
    view.controls["num_new_tokens"].value = 100
    view.controls["bytes_per_value"].value = 2
    for _ in range(5):
        view.step_button.click()
    assert view.model.num_steps_done == 6
    view.reset_button.click()
    assert view.values == {"prompt_len": 30, "num_new_tokens": 100, "bytes_per_value": 2}
    assert view.model.num_steps_done == 1 and "Step 1 of 100" in view.message.value
    assert "settings above" in view.reset_button.tooltip  # the button says what it does


def test_regression_a_fraction_in_a_whole_number_box_is_refused_not_silently_truncated():
    """06: typing 2.5 left "25" in the box while the simulator used 2 tokens."""
    view = CacheGrowthView(prompt_len=30)
    model = view.model
    view.controls["prompt_len"].value = 2.5
    assert view.values["prompt_len"] == 2.5 and view.model is model  # the box and the state agree
    assert view.error is not None and "whole number" in view.message.value and ERROR_COLOUR in view.message.value
    view.controls["prompt_len"].value = 3
    assert view.values["prompt_len"] == 3 and isinstance(view.values["prompt_len"], int)
    assert view.model.config.prompt_len == 3 and view.error is None


def test_a_box_is_wide_enough_for_its_description_and_a_nine_digit_number():
    box = int_control("Prompt length (tokens)", 999_999_999)
    assert float(box.layout.width[:-2]) >= len(box.description) * CHAR_PX + NUMBER_BOX_PX
    assert float(int_control("Seed", 1, width="500px").layout.width[:-2]) == 500  # a wider one is kept


# -- messages: error red, information in the page's colour, one pattern -------------------------------
@pytest.mark.parametrize(
    "make, clicks",
    [(lambda: CacheGrowthView(prompt_len=4, num_new_tokens=2), 3), (lambda: PrefixCacheView(num_served=0), 5)],
)
def test_regression_pressing_on_after_the_run_ended_is_information_not_an_error(make, clicks):
    """06 and 13: Next/Serve after the end showed "Check the input" in red though nothing typed was wrong."""
    view = make()
    for _ in range(clicks):
        view.step_button.click()
    text = view.message.value
    assert view.error is None and "Reset" in text
    assert "Check the input" not in text and ERROR_COLOUR not in text and SUCCESS_COLOUR not in text


def test_the_summary_is_information_and_a_bad_value_an_error():
    view = CacheGrowthView()
    assert "color" not in view.message.value  # the page's own colour
    view.controls["prompt_len"].value = -1
    assert view.message.value.startswith(f"<span style='color:{ERROR_COLOUR}'><b>Check the input:</b>")


def test_regression_evictions_are_counted_in_proper_plurals():
    """13: "evicted 19 cached block(s) of request(s) 3"."""
    assert named("request", [3]) == "request 3" and named("request", [1, 2, 4]) == "requests 1, 2 and 4"
    view = PrefixCacheView(num_blocks=8, num_served=0)
    texts = []
    for _ in range(4):
        view.step_button.click()
        texts.append(view.message.value)
    assert any("It evicted" in t for t in texts), texts
    assert not any("(s)" in t for t in texts)


# -- lesson 13: every label readable, or left out; a refusal drawn alone -----------------------------------
def _texts(ax):
    return [t for t in ax.texts if t.get_text().strip()]


def test_regression_prefix_cache_labels_are_8_pt_or_left_out():
    for kw in ({}, {"block_size": 1}, {"block_size": 2, "num_blocks": 200}):
        view = PrefixCacheView(**kw)
        for ax in view.axes:
            assert all(t.get_fontsize() >= LABEL_PT for t in _texts(ax)), kw
            legend = ax.get_legend()
            assert legend is None or all(t.get_fontsize() >= LABEL_PT for t in legend.get_texts())
        assert not text_outside_figure(view)


def test_regression_a_refused_request_is_written_where_no_block_is_drawn():
    """13: with Pool = 1 the red "refused" text was drawn over the blocks and arrows."""
    view = PrefixCacheView(num_blocks=1)
    req_ax = view.axes[0]
    refused = [t for t in _texts(req_ax) if "refused" in t.get_text()]
    assert refused
    rows = {round(t.get_position()[1]) for t in refused}
    for patch in req_ax.patches:  # no block on a refused row
        assert round(patch.get_y() + patch.get_height() / 2) not in rows
    for line in req_ax.lines:  # no chain arrow either
        assert not rows & {round(y) for y in line.get_ydata()}


# -- lesson 14: a readable budget, no cut-off labels ----------------------------------------------------
def test_regression_the_kv_budget_box_shows_a_readable_figure_with_the_same_blocks():
    """14: the KV budget box printed 0.02359296."""

    def blocks(gb):
        return Throughput(ThroughputConfig("smollm2-135m", 4, 50.0, 1.0, gb, 32, 1)).num_blocks

    shown = readable_budget(0.02359296, blocks)
    assert len(f"{shown:g}") <= 7 and blocks(shown) == blocks(0.02359296)
    view = ThroughputView(
        model="smollm2-135m",
        bytes_per_value=4,
        kv_budget_gb=0.02359296,
        bandwidth_gbs=50.0,
        tflops=1.0,
        context_tokens=32,
    )
    assert view.values["kv_budget_gb"] == shown and view.model.num_blocks == blocks(0.02359296)


def test_regression_throughput_labels_stay_inside_at_large_values():
    view = ThroughputView("H200 SXM", model="smollm2-135m", context_tokens=16)
    for name, value in (
        ("batch_size", 65_536),
        ("bandwidth_gbs", 100_000.0),
        ("tflops", 100_000.0),
        ("overhead_ms", 1000.0),
        ("context_tokens", 1),
    ):
        view.controls[name].value = value
        assert view.error is None, view.message.value
        assert not text_outside_figure(view), (name, text_outside_figure(view))
    rate_ax, time_ax = view.axes
    assert len([t for t in time_ax.get_xticklabels() if t.get_text()]) <= 10  # not one label per power of 2
    for ax in view.axes:  # the legend sits below the panel, never on the curves
        assert ax.get_legend().get_bbox_to_anchor().y0 < ax.bbox.y0
