"""The simulator framework: a pure model behind an ipywidgets view (used from lesson 01 on).

A simulator has two halves. The *model* is a plain Python object (state, ``step()``, derived
numbers) that knows nothing about widgets and is tested with pytest. The *view* turns control
values into a model, draws it on one matplotlib figure that lives as long as the view, and shows
any input problem as a message instead of a traceback.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import ipywidgets as widgets
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kvcourse.kernels import MODEL_CONFIGS, ModelConfig


class InvalidInput(ValueError):
    """A learner-fixable input problem; views show its message next to the controls (lesson 01)."""


def check_int(name: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int in [low, high], or InvalidInput naming the control and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{name} must be a whole number, got {value!r}.")
    if isinstance(value, float) and (math.isnan(value) or not value.is_integer()):
        raise InvalidInput(f"{name} must be a whole number, got {value!r}.")
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low:,} and {high:,}, got {value:,}.")
    return int(value)


def model_shape(model: str, model_config: ModelConfig | None = None) -> ModelConfig:
    """The shape a simulator counts with: one of its own (SmolLM2 as loaded), else the named preset."""
    if model_config is not None:
        return model_config
    if model not in MODEL_CONFIGS:
        raise InvalidInput(f"Model must be one of {', '.join(sorted(MODEL_CONFIGS))}, got {model!r}.")
    return MODEL_CONFIGS[model]


def check_choice(name: str, value: Any, choices: Sequence[tuple[str, Any]]) -> Any:
    """``value`` if it is one of a dropdown's (label, value) choices, else InvalidInput listing them."""
    allowed = [v for _, v in choices]
    if value not in allowed:
        listed = ", ".join(str(v) for v in allowed[:-1]) + f" or {allowed[-1]}" if len(allowed) > 1 else str(allowed[0])
        raise InvalidInput(f"{name} must be {listed}, got {value!r}.")
    return value


def check_float(name: str, value: Any, low: float, high: float) -> float:
    """``value`` as a finite float in [low, high], or InvalidInput naming the control and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{name} must be a number, got {value!r}.")
    if math.isnan(value) or math.isinf(value):
        raise InvalidInput(f"{name} must be a finite number, got {value!r}.")
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low:g} and {high:g}, got {value:g}.")
    return float(value)


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
    InvalidInput) and ``draw`` (model -> the figure's axes). Changing a control rebuilds the
    model; Step advances it; Reset restores the starting control values.
    """

    render_dpi: float = 100  # resolution of the PNG shown; tests lower it to run faster

    def __init__(self, controls: Mapping[str, widgets.ValueWidget], *, figsize: tuple[float, float] = (10, 3.8),
                 num_axes: int = 1, step_label: str | None = "Step") -> None:
        self.controls = dict(controls)
        self._defaults = {name: control.value for name, control in self.controls.items()}
        self.message = widgets.HTML()
        self.reset_button = widgets.Button(description="Reset", icon="undo")
        self.reset_button.on_click(lambda _button: self.reset())
        buttons = [self.reset_button]
        self.step_button: widgets.Button | None = None
        if step_label is not None:
            self.step_button = widgets.Button(description=step_label, icon="step-forward")
            self.step_button.on_click(lambda _button: self.step())
            buttons.insert(0, self.step_button)
        # One figure for the life of the view; it is rendered to PNG into an Image widget,
        # which works the same in JupyterLab, in a headless test and in exported HTML.
        self.figure = Figure(figsize=figsize, dpi=100, layout="constrained")
        FigureCanvasAgg(self.figure)
        self.axes = [self.figure.add_subplot(1, num_axes, i + 1) for i in range(num_axes)]
        self.image = widgets.Image(format="png")
        self.model: Any = None
        self.num_renders = 0
        self._error: str | None = None
        self._holding = False
        for control in self.controls.values():
            control.observe(self._on_control_change, names="value")
        self.widget = widgets.VBox([
            widgets.HBox(list(self.controls.values()), layout=widgets.Layout(flex_flow="row wrap")),
            widgets.HBox(buttons),
            self.message,
            self.image,
        ])
        self.update()

    # -- what subclasses provide -------------------------------------------------------------
    def build(self, values: dict[str, Any]) -> Any:
        """Control values -> a fresh model; raise InvalidInput for bad values."""
        raise NotImplementedError

    def draw(self, model: Any) -> str:
        """Redraw ``self.axes`` for ``model``; return the one-line summary shown under the controls."""
        raise NotImplementedError

    def advance(self, model: Any) -> None:
        """What the Step button does; by default the model's own ``step()``."""
        model.step()

    # -- behaviour -----------------------------------------------------------------------------
    @property
    def values(self) -> dict[str, Any]:
        """The current control values by name."""
        return {name: control.value for name, control in self.controls.items()}

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
        self._redraw()

    def step(self) -> None:
        """Advance the model one step and redraw; does nothing while the inputs are invalid."""
        if self.model is None or self._error is not None:
            return
        try:
            self.advance(self.model)
        except InvalidInput as err:
            self._show_error(str(err))
            return
        self._redraw()

    def reset(self) -> None:
        """Put every control back to its starting value and rebuild."""
        with self._hold():
            for name, value in self._defaults.items():
                self.controls[name].value = value
        self.update()

    def _redraw(self) -> None:
        summary = self.draw(self.model)
        self._error = None
        self.message.value = f"<span style='color:#1b5e20'>{summary}</span>"
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=self.render_dpi)
        if self.num_renders == 0:
            # Lay the panels out once; solving the layout again on every redraw doubled its cost.
            self.figure.set_layout_engine("none")
        self.image.value = buffer.getvalue()
        self.num_renders += 1

    def _show_error(self, text: str) -> None:
        self._error = text
        self.message.value = f"<span style='color:#b71c1c'><b>Check the input:</b> {text}</span>"

    def _on_control_change(self, _change: dict) -> None:
        if not self._holding:
            self.update()

    @contextmanager
    def _hold(self) -> Iterator[None]:
        """Set several controls without one rebuild per change."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def int_control(description: str, value: int, width: str = "210px") -> widgets.IntText:
    """A typed integer box: learners may type anything, the model decides what is valid."""
    return widgets.IntText(value=value, description=description, style={"description_width": "initial"},
                           layout=widgets.Layout(width=width))


def float_control(description: str, value: float, width: str = "230px") -> widgets.FloatText:
    """A typed number box; out-of-range values become a message, not a traceback."""
    return widgets.FloatText(value=value, description=description, style={"description_width": "initial"},
                             layout=widgets.Layout(width=width))


MAX_BARS = 400  # beyond this many steps a bar chart is slow to draw and unreadable: draw a line


def draw_per_step(ax: Any, values: list[int], num_done: int, colour: str) -> None:
    """Per-step values as bars (steps 1..n), those not yet run in grey; a line when there are many steps."""
    steps = np.arange(1, len(values) + 1)
    if len(values) <= MAX_BARS:
        ax.bar(steps, values, color=[colour if s <= num_done else "0.85" for s in steps],
               width=1.0 if len(values) > 60 else 0.8)
    else:
        ax.plot(steps, values, color="0.75", lw=2)
        ax.plot(steps[:num_done], values[:num_done], color=colour, lw=2)
    ax.set_xlim(0.5, len(values) + 0.5)


def format_bytes(num_bytes: float) -> str:
    """Bytes in the largest unit that keeps the number >= 1 (decimal units: 1 GB = 1e9 bytes)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(num_bytes) >= size:
            return f"{num_bytes / size:,.2f} {unit}"
    return f"{num_bytes:,.0f} B"


def format_count(value: float) -> str:
    """A large count with a word-free SI suffix (k, M, G, T)."""
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f}"

