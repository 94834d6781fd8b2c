"""The controls a simulator view is made of (lessons 01-17): typed boxes, dropdowns, and presets.

Boxes let a learner type anything; the model decides what is valid and the view says why not.
A ``Preset`` ties a dropdown of named presets (a card, a model) to the controls it fills in:
picking one fills them, and where the dropdown has a "custom" entry, typing another value into
one of them turns the dropdown to it, so the name shown always describes the figures shown.
Views call ``Preset.sync`` from ``SimulatorView.on_change``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets

from kvcourse.kernels import MODEL_CONFIGS
from kvcourse.simulators.labels import ModelFact, bytes_per_value_choices, model_label

CUSTOM = "custom"  # a preset dropdown's entry for figures typed by hand

# Widths in px that JupyterLab's 13 px widget font needs: a generous average character, the input's
# padding, and a dropdown's arrow; the browser test measures that nothing is cut off.
CHAR_PX = 7.6
NUMBER_BOX_PX = 118  # the typed part of a number box: "999,999,999" or "10000.5" in full
DROPDOWN_PAD_PX = 44


class WholeNumberText(widgets.FloatText):
    """A typed box for a whole number that shows exactly what was typed (2.5 stays 2.5, and the model
    refuses it with a message); an IntText would show "25" while it used 2 (issue 32)."""

    whole_number = True  # SimulatorView.values turns a whole value back into an int


def _width(description: str, content_px: float, given: str | None) -> str:
    """The wider of ``given`` and what the description in full and ``content_px`` of content need."""
    needed = round(len(description) * CHAR_PX + 12 + content_px)
    if given and given.endswith("px") and float(given[:-2]) >= needed:
        return given
    return f"{needed}px"


def int_control(description: str, value: int, width: str | None = None) -> WholeNumberText:
    """A typed whole-number box: learners may type anything, the model decides what is valid."""
    return WholeNumberText(
        value=value,
        description=description,
        style={"description_width": "initial"},
        layout=widgets.Layout(width=_width(description, NUMBER_BOX_PX, width)),
    )


def float_control(description: str, value: float, width: str | None = None) -> widgets.FloatText:
    """A typed number box; out-of-range values become a message, not a traceback."""
    return widgets.FloatText(
        value=value,
        description=description,
        style={"description_width": "initial"},
        layout=widgets.Layout(width=_width(description, NUMBER_BOX_PX, width)),
    )


def dropdown_control(
    description: str, options: Sequence[tuple[str, Any]], value: Any, width: str | None = None
) -> widgets.Dropdown:
    """A dropdown of (label, value) options, its description and its longest option shown in full."""
    longest = max((len(str(label)) for label, _ in options), default=8)
    layout = widgets.Layout(width=_width(description, longest * CHAR_PX + DROPDOWN_PAD_PX, width))
    return widgets.Dropdown(
        options=list(options),
        value=value,
        description=description,
        style={"description_width": "initial"},
        layout=layout,
    )


def model_dropdown(
    value: str,
    fact: ModelFact,
    description: str = "Model",
    width: str | None = None,
) -> widgets.Dropdown:
    """Every preset model, each labelled with the fact its lesson turns on; ValueError for an unknown name."""
    if value not in MODEL_CONFIGS:
        raise ValueError(f"unknown model {value!r}; choose one of {sorted(MODEL_CONFIGS)}")
    return dropdown_control(description, [(model_label(n, fact), n) for n in sorted(MODEL_CONFIGS)], value, width)


def bytes_per_value_dropdown(
    value: int, values: Sequence[int] = (2, 4, 1), description: str = "Bytes per value", width: str | None = None
) -> widgets.Dropdown:
    """The bytes a stored number takes, in the one label style (``labels.bytes_per_value_choices``)."""
    return dropdown_control(description, bytes_per_value_choices(*values), value, width)


class Preset:
    """A dropdown of named presets and the controls each one fills in (lessons 07, 08, 14, 15)."""

    def __init__(self, control: str, table: Mapping[str, Mapping[str, Any]], custom: str | None = CUSTOM) -> None:
        self.control = control  # the dropdown's name among the view's controls
        self.table = table  # preset -> {control name: the value the preset puts there}
        self.custom = custom  # the dropdown's entry for typed figures; None: typing leaves the dropdown alone

    def start(self, picked: str | None, given: Mapping[str, Any], default: str, what: str) -> tuple[str, dict]:
        """The preset a view opens on and its filled controls' first values (``given``, else the preset's).

        With no preset named, a given figure means custom and none means ``default``.
        """
        if picked is None:
            picked = self.custom if any(value is not None for value in given.values()) else default
        if picked != self.custom and picked not in self.table:
            raise ValueError(f"unknown {what} {picked!r}; choose one of {sorted(self.table)} or {self.custom!r}")
        figures = self.table.get(picked, self.table[default])
        return picked, {name: figures[name] if value is None else value for name, value in given.items()}

    def options(self, label: Callable[[str], str], custom_label: str) -> list[tuple[str, str]]:
        """The dropdown's options: each preset as ``label(name)``, then the custom entry."""
        return [(label(name), name) for name in self.table] + [(custom_label, self.custom)]

    def sync(self, controls: Mapping[str, widgets.ValueWidget], changed: str) -> None:
        """After the learner changed control ``changed``: a picked preset fills its controls, and a typed
        figure that is no longer the preset's turns the dropdown to custom."""
        picked = controls[self.control].value
        if picked not in self.table:
            return
        figures = self.table[picked]
        if changed == self.control:
            for name, value in figures.items():
                controls[name].value = value
        elif (
            changed in figures
            and self.custom is not None
            and any(controls[name].value != value for name, value in figures.items())
        ):
            controls[self.control].value = self.custom
