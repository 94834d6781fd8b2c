"""Checks every simulator view must pass, shared by the per-simulator test files."""

from __future__ import annotations

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
    """Whether the view's image holds a rendered PNG (its first bytes are the PNG signature)."""
    return bytes(view.image.value).startswith(b"\x89PNG")
