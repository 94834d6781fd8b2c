"""Every simulator of the syllabus, each control moved to the ends of its range and to one bad value (issue 32).

The views are built from the same cells the browser suite runs (``sim_checks.VIEW_CELLS``). Each
control's value and the model's agree, a bad value is a red message that names the control, the
figure's text stays inside the figure (matplotlib's tight bounding boxes), and every drawn text is
readable (8 pt or more where the view promises it).
"""

from __future__ import annotations

import ipywidgets as widgets
import pytest
from sim_checks import VIEW_CELLS, build_view, text_outside_figure

from kvcourse.feedback import ERROR_COLOUR
from kvcourse.simulators.base import SimulatorView
from kvcourse.simulators.controls import WholeNumberText
from kvcourse.syllabus import load_syllabus

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

LADDER = (1, 2, 64, 4096, 10**6, 10**9)  # a number box's candidates; the largest one accepted is its far end


@pytest.fixture(autouse=True)
def _fast_png(monkeypatch):
    monkeypatch.setattr(SimulatorView, "render_dpi", 30)


def test_every_simulator_of_the_syllabus_is_covered():
    listed = {lesson.number: lesson.simulator for lesson in load_syllabus() if lesson.simulator}
    assert {number: f"kvcourse.simulators.{module}" for number, (module, _) in VIEW_CELLS.items()} == listed


def _agree(view: SimulatorView, name: str) -> None:
    """The control shows what the view uses: valid values built the model shown, invalid ones are named."""
    if view.error is None:
        assert view._good_values == {n: c.value for n, c in view.controls.items()}, name
        assert not text_outside_figure(view), (name, view.values[name], text_outside_figure(view))
    else:
        assert ERROR_COLOUR in view.message.value and "Check the input" in view.message.value


def _far_ends(view: SimulatorView, name: str, control: widgets.ValueWidget) -> list:
    """The values to try: for a number box the smallest and largest of ``LADDER`` it accepts."""
    if isinstance(control, (widgets.IntSlider, widgets.FloatSlider)):
        return [control.min, control.max]
    if isinstance(control, widgets.Dropdown):
        return [value for _, value in control.options]
    if isinstance(control, widgets.Checkbox):
        return [not control.value, control.value]
    if isinstance(control, (widgets.FloatText, WholeNumberText)):
        start, accepted, redraw = control.value, [], view._redraw
        view._redraw = lambda: None  # probing builds models only
        try:
            for value in LADDER:
                control.value = value
                if view.error is None:
                    accepted.append(value)
        finally:
            view._redraw = redraw
        control.value = start
        return accepted[:1] + accepted[-1:]
    return []


@pytest.mark.parametrize("lesson", sorted(VIEW_CELLS))
def test_every_control_at_its_ends_and_one_bad_value(lesson):
    view = build_view(lesson)
    assert view.error is None
    for name, control in view.controls.items():
        assert control.description, f"{name} has no label"  # what a screen reader reads
        start = control.value
        for value in _far_ends(view, name, control):
            control.value = value
            _agree(view, name)
        if isinstance(control, (widgets.FloatText, WholeNumberText)):
            control.value = -1.5  # negative and not whole: wrong for every box
            assert view.error is not None, (name, view.message.value)
            _agree(view, name)
            assert view.values[name] == -1.5  # the box and the state agree: nothing silently rounded
        view.reset_button.click()
        control.value = start
        assert view.error is None, (name, view.message.value)
    view.step_button.click()  # a step after all that: a figure, never a traceback
    _agree(view, "step")
