"""The simulator views of lessons 01-05, driven headless: set controls, click buttons, read the figure."""

from __future__ import annotations

import importlib
import importlib.util

import numpy as np
import pytest
from sim_checks import shows_png

from kvcourse.kernels import costs
from kvcourse.kernels.model.config_table import MODEL_CONFIGS
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.kv_cache import KVCacheView
from kvcourse.simulators.qkv import QKV, QKVView
from kvcourse.simulators.rereading import RereadingView
from kvcourse.simulators.score_grid import ScoreGridView
from kvcourse.simulators.word_cost import WordCostView
from kvcourse.syllabus import load_syllabus

SMOL = MODEL_CONFIGS["smollm2-135m"]


def _qkv_data():
    rng = np.random.default_rng(1)
    return QKV(
        rng.standard_normal((2, 3, 4, 8)),
        rng.standard_normal((2, 1, 4, 8)),
        rng.standard_normal((2, 1, 4, 8)),
        ("The", " cat", " sat", "."),
    )


VIEWS = {
    "word_cost": (lambda: WordCostView(2e8, 5e8), "num_words"),
    "rereading": (RereadingView, "prompt_len"),
    "score_grid": (
        lambda: ScoreGridView(SMOL.num_layers, SMOL.num_heads, SMOL.head_dim, costs.matmul_flops_per_token(SMOL)),
        "num_tokens",
    ),
    "qkv": (lambda: QKVView(_qkv_data(), position=0), "position"),
    "kv_cache": (KVCacheView, "prompt_len"),
}


@pytest.fixture(params=sorted(VIEWS))
def view_and_control(request):
    factory, control = VIEWS[request.param]
    return factory(), control


@pytest.mark.parametrize("bad", [0, -5, 10**13])
def test_invalid_input_shows_a_message_and_keeps_the_figure(view_and_control, bad):
    view, name = view_and_control
    assert view.error is None and shows_png(view)
    renders, figure, model = view.num_renders, view.figure, view.model
    view.controls[name].value = bad
    if view.error is None:  # a value valid for this control (e.g. token 0): nothing to report
        assert bad == 0
        return
    assert "Check the input" in view.message.value
    assert view.num_renders == renders and view.figure is figure and view.model is model
    view.step_button.click()  # stepping while invalid must not raise either
    view.reset_button.click()
    assert view.error is None and "Check the input" not in view.message.value


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1.0, 1e40])
@pytest.mark.parametrize("name", ["tokens_per_word", "bandwidth"])
def test_word_cost_float_boxes_reject_nan_inf_and_nonsense(name, bad):
    view = WordCostView(2e8, 5e8)
    view.controls[name].value = bad
    assert view.error is not None and "Check the input" in view.message.value


def test_reset_restores_controls_and_state(view_and_control):
    view, name = view_and_control
    start = view.controls[name].value
    view.controls[name].value = 2
    view.reset_button.click()
    assert view.controls[name].value == start
    assert view.error is None


def test_figure_is_redrawn_in_place(view_and_control):
    view, _ = view_and_control
    figure, axes, image = view.figure, list(view.axes), view.image
    before = view.num_renders
    view.step_button.click()
    assert view.figure is figure and view.axes == axes and view.image is image
    assert view.num_renders == before + 1 and len(figure.axes) == len(axes)


def test_word_cost_step_draws_the_passes_run():
    view = WordCostView(2e8, 5e8)
    view.controls["num_words"].value = 10
    view.controls["tokens_per_word"].value = 1.0
    for _ in range(3):
        view.step_button.click()
    line = view.axes[0].lines[1]
    assert list(line.get_xdata()) == [0, 3]
    assert line.get_ydata()[-1] == pytest.approx(3 * 0.5)  # GB
    assert "10 passes" in view.message.value


def test_word_cost_view_complains_after_the_last_pass():
    view = WordCostView(2e8, 5e8)
    view.controls["num_words"].value = 1
    view.controls["tokens_per_word"].value = 1.0
    view.step_button.click()
    view.step_button.click()
    assert view.error is None and "Reset" in view.message.value  # information, not an input error


def test_rereading_bars_grow_by_one():
    view = RereadingView(prompt_len=5, num_new_tokens=4)
    heights = [bar.get_height() for bar in view.axes[1].containers[0]]
    assert heights == [5, 6, 7, 8]
    view.step_button.click()
    assert "Step 2 of 4: this step processed 6 tokens" in view.message.value


def test_score_grid_step_doubles_and_reports_four_times_the_cells():
    view = ScoreGridView(
        SMOL.num_layers, SMOL.num_heads, SMOL.head_dim, costs.matmul_flops_per_token(SMOL), num_tokens=8
    )
    assert view.model.cells == 64
    view.step_button.click()
    assert view.model.cells == 256 and "16 × 16 = 256 cells" in view.axes[0].get_title()
    view.controls["num_tokens"].value = 100_000
    assert "too many to draw" in view.axes[0].get_title()


def test_qkv_weights_plot_sums_to_one_and_masks_the_future():
    view = QKVView(_qkv_data(), position=1)
    heights = [bar.get_height() for bar in view.axes[1].containers[0]]
    assert sum(heights) == pytest.approx(1.0) and heights[2:] == [0.0, 0.0]
    view.controls["head"].value = 3
    assert view.error is not None and "Query head" in view.message.value


def test_kv_cache_checkbox_switches_the_bars():
    view = KVCacheView(prompt_len=6, num_new_tokens=4, use_cache=True)
    assert [p.get_height() for p in view.axes[0].patches] == [6, 1, 1, 1]
    view.controls["use_cache"].value = False
    assert [p.get_height() for p in view.axes[0].patches] == [6, 7, 8, 9]


@pytest.mark.parametrize("factory", [RereadingView, KVCacheView])
def test_long_generations_draw_a_line_not_thousands_of_bars(factory):
    view = factory()
    view.controls["num_new_tokens"].value = 50_000
    assert view.error is None
    bar_ax = view.axes[1] if factory is RereadingView else view.axes[0]
    assert not bar_ax.containers and len(bar_ax.lines[0].get_xdata()) == 50_000


def test_every_syllabus_simulator_that_exists_offers_a_view():
    """Lessons name their simulator module in syllabus.toml; each such module must follow the framework."""
    found = 0
    for lesson in load_syllabus():
        if not lesson.simulator or importlib.util.find_spec(lesson.simulator) is None:
            continue
        module = importlib.import_module(lesson.simulator)
        views = [
            obj
            for obj in vars(module).values()
            if isinstance(obj, type) and issubclass(obj, SimulatorView) and obj is not SimulatorView
        ]
        assert views, f"{lesson.simulator} (lesson {lesson.number}) defines no SimulatorView subclass"
        found += 1
    assert found >= 5  # lessons 01-05 at least
