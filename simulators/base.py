"""The simulator framework: a pure model behind an ipywidgets view (used from lesson 01 on).

A simulator has two halves. The *model* is a plain Python object (state, ``step()``, derived
numbers) that knows nothing about widgets and is tested with pytest. The *view* turns control
values into a model, draws it on one matplotlib figure that lives as long as the view, and shows
any input problem as a message instead of a traceback.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

import ipywidgets as widgets
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kvcourse.feedback import error, info
from kvcourse.simulators.checks import InvalidInput


class GenerationSteps:
    """A generation stepped one new token at a time; subclasses give ``tokens_per_step`` (lessons 02, 05)."""

    def __init__(self, config: Any) -> None:
        self.config = config  # any validated config with num_new_tokens
        self.num_steps_done = 0

    @property
    def tokens_per_step(self) -> list[int]:
        """Tokens the model processes at each step of the whole generation."""
        raise NotImplementedError

    @property
    def done(self) -> bool:
        return self.num_steps_done >= self.config.num_new_tokens

    def step(self) -> int:
        """Run one step; return how many tokens it processed."""
        if self.done:
            raise InvalidInput("every new token has been generated; press Reset to start again.")
        processed = self.tokens_per_step[self.num_steps_done]
        self.num_steps_done += 1
        return processed

    def reset(self) -> None:
        self.num_steps_done = 0


class SimulatorView:
    """Controls, Step/Reset buttons, a message line and one figure redrawn in place (lesson 01).

    Subclasses give the controls and implement ``build`` (control values -> model, may raise
    InvalidInput) and ``draw`` (model -> the figure's axes, cleared before each draw); ``on_change``
    lets controls follow one another. Changing a control rebuilds the model; Step advances it, and a
    value Step changes (the batch it doubles) is written into its control (``stepped``), so the box
    shows what the figure shows and the next change keeps it. Reset restores the starting control
    values, or, where ``restarts_run``, starts the run again with the learner's last good settings.

    Messages follow course/feedback.py: the summary is information (the page's colour), a value the
    learner typed that cannot be used is an error (red), and a step that cannot go further (the run
    has ended) is information that says what to do next, never an error.
    """

    render_dpi: float = 100  # resolution of the PNG shown; tests lower it to run faster
    stepped: Mapping[str, str] = {}  # control name -> the model attribute Step changes (written back)
    restarts_run: bool = False  # Reset: True restarts the run with the learner's settings
    relayout: bool = True  # lay the panels out again when a redraw's text would pass the figure's edge

    def __init__(
        self,
        controls: Mapping[str, widgets.ValueWidget],
        *,
        figsize: tuple[float, float] = (10, 3.8),
        num_axes: int = 1,
        step_label: str | None = "Step",
    ) -> None:
        self.controls = dict(controls)
        self._defaults = {name: control.value for name, control in self.controls.items()}
        self.message = widgets.HTML()
        self.reset_button = widgets.Button(description="Reset", icon="undo", tooltip=self.reset_tooltip)
        self.reset_button.on_click(lambda _button: self.reset())
        buttons = [self.reset_button]
        self.step_button: widgets.Button | None = None
        if step_label is not None:
            self.step_button = widgets.Button(description=step_label, icon="step-forward")
            self.step_button.on_click(lambda _button: self.step())
            buttons.insert(0, self.step_button)
        # One figure for the life of the view; it is rendered to a PNG shown as an <img> with a text
        # alternative (ipywidgets' Image has no alt attribute), the same in JupyterLab, in a headless
        # test and in exported HTML.
        self.figure = Figure(figsize=figsize, dpi=100, layout="constrained")
        FigureCanvasAgg(self.figure)
        self.axes = [self.figure.add_subplot(1, num_axes, i + 1) for i in range(num_axes)]
        self.image = widgets.HTML()
        self.image.add_class("kv-sim-figure")
        self.png = b""  # the figure as last rendered
        self.model: Any = None
        self.num_renders = 0
        self._error: str | None = None
        self._good_values = dict(self._defaults)  # the last control values that built a model
        self._holding = False
        for control in self.controls.values():
            control.observe(self._on_control_change, names="value")
        self.widget = widgets.VBox(
            [
                widgets.HBox(list(self.controls.values()), layout=widgets.Layout(flex_flow="row wrap")),
                widgets.HBox(buttons),
                self.message,
                self.image,
            ]
        )
        self.update()

    # -- what subclasses provide -------------------------------------------------------------
    def build(self, values: dict[str, Any]) -> Any:
        """Control values -> a fresh model; raise InvalidInput for bad values."""
        raise NotImplementedError

    def draw(self, model: Any) -> str:
        """Draw ``model`` on ``self.axes`` (cleared already); return the one-line summary under the controls."""
        raise NotImplementedError

    def advance(self, model: Any) -> None:
        """What the Step button does; by default the model's own ``step()``."""
        model.step()

    def on_change(self, name: str) -> None:
        """The learner changed control ``name``; set other controls to follow it here (a preset fills
        its figures). They change without a rebuild of their own; the view rebuilds once afterwards."""

    # -- behaviour -----------------------------------------------------------------------------
    @property
    def reset_tooltip(self) -> str:
        """What Reset does, in words (the button's tooltip, read by a screen reader)."""
        if self.restarts_run:
            return "Start the run again with the settings above (the last ones that worked)"
        return "Put every control back to its starting value"

    @property
    def values(self) -> dict[str, Any]:
        """The current control values by name (a whole-number box's value as an int when it is whole)."""
        return {name: _typed(control) for name, control in self.controls.items()}

    @property
    def error(self) -> str | None:
        """The input problem shown now, or None when the inputs are valid."""
        return self._error

    def update(self) -> None:
        """Rebuild the model from the controls and redraw (or show why the inputs are invalid)."""
        try:
            model = self.build(self.values)
        except InvalidInput as err:
            self._show_error(str(err))
            return
        self.model = model
        self._good_values = {name: control.value for name, control in self.controls.items()}
        self._redraw()

    def step(self) -> None:
        """Advance the model one step and redraw; does nothing while the inputs are invalid."""
        if self.model is None or self._error is not None:
            return
        try:
            self.advance(self.model)
        except InvalidInput as err:  # the run cannot go further: information, the figure stays
            self.message.value = info(f"{_sentence(str(err))}", escape=True)
            return
        with self.hold():  # the boxes show what Step changed, so the next change keeps it
            for name, attribute in self.stepped.items():
                self.controls[name].value = getattr(self.model, attribute)
        self._good_values = {name: control.value for name, control in self.controls.items()}
        self._redraw()

    def reset(self) -> None:
        """Put every control back to its starting value (or, where ``restarts_run``, to the last values
        that worked, which starts the run again) and rebuild."""
        target = self._good_values if self.restarts_run else self._defaults
        with self.hold():
            for name, value in target.items():
                self.controls[name].value = value
        self.update()

    def _redraw(self) -> None:
        for ax in self.axes:
            ax.clear()
        summary = self.draw(self.model)
        self._error = None
        self.message.value = info(summary, escape=False)
        self.alt_text = figure_text(self.figure)  # the <img>'s text alternative
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=self.render_dpi)
        if self.relayout and self.num_renders > 0 and overflows(self.figure):
            # Longer tick labels or titles than the layout was made for: lay the panels out again
            # (measured after the render, whose text sizes matplotlib has cached).
            with suppress(RuntimeError):  # (not possible once a colorbar is drawn: keep the layout)
                self.figure.set_layout_engine("constrained")
                buffer = io.BytesIO()
                self.figure.savefig(buffer, format="png", dpi=self.render_dpi)
        if self.figure.get_layout_engine() is not None:
            # Lay the panels out once; solving the layout again on every redraw doubled its cost.
            self.figure.set_layout_engine("none")
        self.png = buffer.getvalue()
        self.image.value = figure_html(self.png, self.alt_text)
        self.num_renders += 1

    def _show_error(self, text: str) -> None:
        self._error = text
        self.message.value = error(f"<b>Check the input:</b> {html.escape(text)}", escape=False)

    def _on_control_change(self, change: dict) -> None:
        if self._holding:
            return
        name = next(name for name, control in self.controls.items() if control is change["owner"])
        with self.hold():
            self.on_change(name)
        self.update()

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Set several controls without one rebuild per change (``on_change`` and ``advance`` use it)."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def figure_text(figure: Figure) -> str:
    """A short text alternative for the figure: each panel's title and axis labels.

    It is the ``alt`` of the simulator's <img> (``figure_html``): a screen reader reads it, and the static
    site keeps it (issue 32).
    """
    panels = []
    for ax in figure.axes:
        parts = [ax.get_title().replace("\n", " "), ax.get_ylabel() and f"{ax.get_ylabel()} against {ax.get_xlabel()}"]
        panels.append("; ".join(part for part in parts if part))
    return "Figure: " + " | ".join(panel for panel in panels if panel) if any(panels) else "Figure"


def figure_html(png: bytes, alt: str) -> str:
    """The rendered figure as an <img> with its text alternative, scaled down to fit a narrow page."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}" style="max-width:100%;height:auto">'


def overflows(figure: Figure, tolerance_in: float = 0.02) -> bool:
    """Whether anything drawn (tick labels, axis labels, titles, legends) reaches past the figure's edges."""
    box = figure.get_tightbbox(figure.canvas.get_renderer())
    width, height = figure.get_size_inches()
    return (
        box.x0 < -tolerance_in
        or box.y0 < -tolerance_in
        or box.x1 > width + tolerance_in
        or box.y1 > height + tolerance_in
    )


def _typed(control: widgets.ValueWidget) -> Any:
    """A control's value; a whole-number box (``controls.int_control``) gives an int when the value is whole."""
    value = control.value
    if getattr(control, "whole_number", False) and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _sentence(text: str) -> str:
    """A message as a sentence: its first letter capitalised."""
    return text[:1].upper() + text[1:]


MAX_BARS = 400  # beyond this many steps a bar chart is slow to draw and unreadable: draw a line


def draw_per_step(ax: Any, values: list[int], num_done: int, colour: str) -> None:
    """Per-step values as bars (steps 1..n), those not yet run in grey; a line when there are many steps."""
    steps = np.arange(1, len(values) + 1)
    if len(values) <= MAX_BARS:
        ax.bar(
            steps,
            values,
            color=[colour if s <= num_done else "0.85" for s in steps],
            width=1.0 if len(values) > 60 else 0.8,
        )
    else:
        ax.plot(steps, values, color="0.75", lw=2)
        ax.plot(steps[:num_done], values[:num_done], color=colour, lw=2)
    ax.set_xlim(0.5, len(values) + 0.5)
