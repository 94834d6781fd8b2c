"""Checks every simulator view must pass, shared by the per-simulator test files."""

from __future__ import annotations

import html
from typing import Any

from kvcourse.simulators.base import SimulatorView


def assert_bad_input_is_shown(view: SimulatorView, name: str, bad: Any) -> None:
    """A bad value in one control shows a message, keeps the last good figure and model, and reset clears it."""
    renders, model = view.num_renders, view.model
    view.controls[name].value = bad
    assert view.error is not None and "Check the input" in view.message.value
    assert view.num_renders == renders and view.model is model
    view.step_button.click()  # stepping while the input is invalid does nothing, quietly
    view.reset_button.click()
    assert view.error is None and "Check the input" not in view.message.value


def assert_each_control_redraws(view: SimulatorView, changes: dict[str, Any]) -> None:
    """Setting each control in turn is accepted, redraws once, and changes the status text."""
    for name, value in changes.items():
        before, renders = view.message.value, view.num_renders
        view.controls[name].value = value
        assert view.error is None, (name, view.message.value)
        assert view.num_renders == renders + 1 and view.message.value != before, name


def shows_png(view: SimulatorView) -> bool:
    """Whether the view shows a rendered PNG (the signature), as an <img> with a text alternative."""
    return view.png.startswith(b"\x89PNG") and f'alt="{html.escape(view.alt_text)}"' in view.image.value


# -- every simulator of the syllabus, built as a learner's notebook cell builds it -----------------------
# Lesson -> (simulator module, the one cell that shows it). The browser suite runs these cells in one
# notebook (tests/browser/test_browser_simulators.py); tests/simulators/test_sim_every_view.py builds them here.
VIEW_CELLS: dict[str, tuple[str, str]] = {
    "01": ("word_cost", "WordCostView(2e8, 5e8)"),
    "02": ("rereading", "RereadingView()"),
    "03": ("score_grid", "ScoreGridView(30, 9, 64, 2.7e8)"),
    "04": (
        "qkv",
        "QKVView(QKV(*(np.random.default_rng(1).standard_normal((2, h, 4, 8)) for h in (3, 1, 1)),\n"
        "                (' The', ' cat', ' sat', '.')))",
    ),
    "05": ("kv_cache", "KVCacheView()"),
    "06": ("cache_growth", "CacheGrowthView()"),
    "07": ("kv_size", "KVSizeView()"),
    "08": ("memory_wall", 'MemoryWallView("A100 80GB")'),
    "09": ("fragmentation", "FragmentationView()"),
    "10": ("block_table", "BlockTableView()"),
    "11": ("paging", "PagingView()"),
    "12": ("sharing", "SharingView()"),
    "13": ("prefix_cache", "PrefixCacheView()"),
    "14": ("throughput", 'ThroughputView("H100 SXM", model="llama-2-13b")'),
    "15": ("context_window", "ContextWindowView()"),
    "16": ("shrink", "ShrinkView()"),
    "17": ("timing", "TimingView()"),
    # the labs: each lesson's simulator replaying the reference solution, as a learner's skeleton does
    "18": ("sharing", 'SharingView(10, 4, 3, num_blocks=18, block_manager=reference("block_manager"))'),
    "19": ("prefix_cache", 'PrefixCacheView(eviction=reference("eviction")())'),
    "20": ("paging", 'PagingView(steps_per_click=50, scheduling_policy=reference("scheduler")())'),
    "21": ("serving_budget", "ServingBudgetView()"),
    "22": ("hybrid_memory", "HybridMemoryView()"),
    "23": ("latent_rank", "LatentRankView()"),
    "24": ("local_global", "LocalGlobalView()"),
    "25": ("low_bit", "LowBitView()"),
    "26": ("radix_chat", "RadixChatView()"),
    "27": ("tier", "TierView()"),
    "28": ("speculation", "SpeculationView()"),
}
LAB_VIEWS = ("18", "19", "20")  # the lab lessons' views: a lesson's simulator with the learner's policy
VIEW_IMPORTS = (
    "import numpy as np\nfrom kvcourse.quizzes.labs import reference\nfrom kvcourse.simulators.qkv import QKV\n"
    + "\n".join(f"from kvcourse.simulators.{module} import *" for module, _ in VIEW_CELLS.values())
)


def build_view(lesson: str) -> SimulatorView:
    """Lesson ``lesson``'s simulator view, built from its ``VIEW_CELLS`` cell."""
    namespace: dict[str, Any] = {}
    exec(VIEW_IMPORTS, namespace)  # noqa: S102 - the test's own fixed source
    return eval(VIEW_CELLS[lesson][1], namespace)  # noqa: S307


def text_outside_figure(view: SimulatorView) -> list[str]:
    """The panels (by title) whose drawn text (tick labels, axis labels, title, legend) reaches past the
    figure's edges, measured with matplotlib's tight bounding boxes on the figure as last drawn."""
    figure = view.figure
    renderer = figure.canvas.get_renderer()
    out = []
    for ax in figure.axes:
        box = ax.get_tightbbox(renderer)
        if box is None or not ax.get_visible():
            continue
        if box.x0 < -2 or box.y0 < -2 or box.x1 > figure.bbox.width + 2 or box.y1 > figure.bbox.height + 2:
            out.append(f"{ax.get_title()!r}: {box.bounds} outside {figure.bbox.bounds}")
    return out
