"""Static HTML for what a live lab draws with widgets: simulators, solution toggles, quick checks (`make site`).

An executed notebook keeps its widgets as state (notebook metadata) plus one view per output. A
static page has no kernel, so each view is drawn here as plain HTML from that state: a
simulator's figure as the PNG it last rendered, its controls greyed out at their values. The
content of a collapsed toggle (an exercise's solution) is left out, not hidden. Quick checks are
drawn from the public half of the question bank: prompts, options and units, never an answer.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any

import nbformat

from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.checking import prompt_for
from kvcourse.quizzes.model import Kind, Question
from kvcourse.quizzes.units import DESCRIPTIONS

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
QUIZ_SEED = "static site"  # parameterised questions show the values this seed draws
_QUICK_CHECK_CALL = re.compile(r"quick_check\(\s*['\"]?(\d{1,2})['\"]?\s*\)")
_TEXT_INPUTS = {
    "TextModel",
    "IntTextModel",
    "FloatTextModel",
    "BoundedIntTextModel",
    "BoundedFloatTextModel",
    "PasswordModel",
    "ComboboxModel",
}
_SLIDERS = {"IntSliderModel", "FloatSliderModel", "FloatLogSliderModel"}
_SELECTIONS = {"DropdownModel", "SelectModel", "ToggleButtonsModel", "SelectionSliderModel"}


def _e(text: Any) -> str:
    return html.escape(str(text))


class WidgetRenderer:
    """Draws widget views of one executed notebook from its saved widget state."""

    def __init__(self, state: Mapping[str, Any]) -> None:
        self.models = state.get("state", {})

    def _state(self, ref: str) -> dict:
        return self.models.get(ref.removeprefix("IPY_MODEL_"), {}).get("state", {})

    def _hidden(self, state: dict) -> bool:
        layout = self._state(state.get("layout") or "")
        return layout.get("display") == "none" or layout.get("visibility") == "hidden"

    def render(self, model_id: str) -> str:
        """HTML for the widget ``model_id`` and everything inside it."""
        model = self.models.get(model_id.removeprefix("IPY_MODEL_"))
        if model is None:
            return "<i>(a widget whose state was not saved)</i>"
        state, name = model.get("state", {}), model.get("model_name", "")
        if self._hidden(state):
            return ""
        label = f"<span class='kv-label'>{_e(state['description'])}</span> " if state.get("description") else ""
        if name in ("VBoxModel", "BoxModel", "GridBoxModel", "HBoxModel"):
            direction = "row" if name == "HBoxModel" else "column"
            inner = "".join(self.render(child) for child in state.get("children", []))
            return f"<div class='kv-box kv-{direction}'>{inner}</div>"
        if name in ("HTMLModel", "HTMLMathModel"):
            return f"<div class='kv-html'>{label}{state.get('value', '')}</div>"
        if name == "LabelModel":
            return f"<span>{_e(state.get('value', ''))}</span>"
        if name == "ImageModel":
            return self._image(model)
        if name in ("ButtonModel", "ToggleButtonModel"):
            return f"<button disabled>{_e(state.get('description', ''))}</button>"
        if name in _TEXT_INPUTS:
            value = state.get("value", "")
            if isinstance(value, float) and value.is_integer():
                value = int(value)  # a whole-number box keeps a float (30.0); show it as typed (30)
            return f"<label class='kv-control'>{label}<input value='{_e(value)}' disabled></label>"
        if name == "TextareaModel":
            return (
                f"<label class='kv-control'>{label}<textarea disabled>{_e(state.get('value', ''))}</textarea></label>"
            )
        if name in _SLIDERS:
            return (
                f"<label class='kv-control'>{label}<input type='range' min='{_e(state.get('min', 0))}' "
                f"max='{_e(state.get('max', 100))}' value='{_e(state.get('value', 0))}' disabled> "
                f"{_e(state.get('value', ''))}</label>"
            )
        if name == "CheckboxModel":
            checked = " checked" if state.get("value") else ""
            description = _e(state.get("description", ""))
            return f"<label class='kv-control'><input type='checkbox' disabled{checked}> {description}</label>"
        if name == "RadioButtonsModel":
            return label + self._radio(state)
        if name in _SELECTIONS:
            labels, index = state.get("_options_labels", []), state.get("index")
            shown = labels[index] if isinstance(index, int) and 0 <= index < len(labels) else ""
            return f"<label class='kv-control'>{label}<select disabled><option>{_e(shown)}</option></select></label>"
        if name in ("FloatProgressModel", "IntProgressModel"):
            return (
                f"<label class='kv-control'>{label}<progress value='{_e(state.get('value', 0))}' "
                f"max='{_e(state.get('max', 100))}'></progress></label>"
            )
        if name in ("AccordionModel", "TabModel", "StackModel"):
            return self._toggles(state)
        if name == "OutputModel":
            return "".join(_output_html(output) for output in state.get("outputs", []))
        children = "".join(self.render(child) for child in state.get("children", []))
        return f"<div class='kv-box kv-column'>{label}{children}</div>"

    def _image(self, model: dict) -> str:
        state = model.get("state", {})
        buffers = [b for b in model.get("buffers", []) if b.get("path") == ["value"]]
        if not buffers:
            return ""
        fmt = state.get("format", "png")
        mime = "image/svg+xml" if fmt == "svg" else f"image/{fmt}"
        alt = "The simulator's figure as the lesson left it; its controls and status line are beside it"
        return f"<img class='kv-figure' alt=\"{_e(alt)}\" src='data:{mime};base64,{buffers[0]['data']}'>"

    def _radio(self, state: dict) -> str:
        index = state.get("index")
        items = [
            f"<li><label><input type='radio' disabled{' checked' if i == index else ''}> {_e(text)}</label></li>"
            for i, text in enumerate(state.get("_options_labels", []))
        ]
        return f"<ul class='kv-options'>{''.join(items)}</ul>"

    def _toggles(self, state: dict) -> str:
        # Only an open panel is drawn; a collapsed one (a solution) is left out of the page.
        titles, open_index = state.get("titles", []), state.get("selected_index")
        parts = []
        for i, child in enumerate(state.get("children", [])):
            title = titles[i] if i < len(titles) and titles[i] else f"Panel {i + 1}"
            if i == open_index:
                parts.append(f"<details open><summary>{_e(title)}</summary>{self.render(child)}</details>")
            else:
                parts.append(f"<div class='kv-closed'>▸ {_e(title)} <i>(open it in the live lab)</i></div>")
        return "".join(parts)


def _output_html(output: Mapping[str, Any]) -> str:
    """One output of an Output widget (streams, images, HTML, text)."""
    if output.get("output_type") == "stream":
        return f"<pre>{_e(output.get('text', ''))}</pre>"
    data = output.get("data", {})
    if "image/png" in data:
        alt = _e(output.get("metadata", {}).get("image/png", {}).get("alt", "A figure the lesson drew"))
        return f"<img class='kv-figure' alt=\"{alt}\" src='data:image/png;base64,{data['image/png'].strip()}'>"
    if "text/html" in data:
        value = data["text/html"]
        return value if isinstance(value, str) else "".join(value)
    if "text/plain" in data:
        return f"<pre>{_e(data['text/plain'])}</pre>"
    return ""


# ---------------------------------------------------------------- quick checks


def question_html(question: Question, number: int = 1, total: int = 1) -> str:
    """One question from its public fields only: prompt, options, unit, starter."""
    q = question
    points = f"{q.points} point{'s' if q.points != 1 else ''}"
    parts = [f"<p><b>Question {number} of {total}</b> ({points}): {_e(prompt_for(q, QUIZ_SEED))}</p>"]
    if q.kind is Kind.CHOICE:
        items = "".join(f"<li>({key}) {_e(text)}</li>" for key, text in zip(q.option_keys, q.options, strict=True))
        parts.append(f"<ul class='kv-options'>{items}</ul>")
    elif q.kind in (Kind.NUMERIC, Kind.PARAMETERISED):
        parts.append(f"<p class='kv-hint'>Answer with {_e(DESCRIPTIONS[q.unit])}.</p>")
    elif q.kind is Kind.CODE:
        parts.append(f"<p class='kv-hint'>Write <code>{_e(q.function)}</code>:</p><pre>{_e(q.starter.strip())}</pre>")
    else:
        parts.append(f"<p class='kv-hint'>Answer in a few sentences (at least {q.min_chars} characters).</p>")
    return f"<div class='kv-question'>{''.join(parts)}</div>"


def quiz_html(lesson: str, notebook: str) -> str:
    """A lesson's quick check as questions to read; answering (and the answers) need the live lab."""
    quiz = load_quiz(lesson)
    total = len(quiz.questions)
    questions = "".join(question_html(q, i + 1, total) for i, q in enumerate(quiz.questions))
    return (
        f"<div class='kv-quiz'><h3>Quick check: lesson {_e(quiz.lesson)}, {_e(quiz.title)}</h3>"
        f"<p class='kv-hint'>To answer and get feedback on every option, run <code>make lab</code> and "
        f"open <code>{_e(notebook)}</code>. The answers are not on this page.</p>{questions}</div>"
    )


# ---------------------------------------------------------------- the notebook


def _widget_html(inner: str) -> str:
    note = ""
    if " disabled" in inner:  # it has controls: say where they work
        note = "<p class='kv-hint'>A snapshot as the lesson drew it: the controls work in the live lab.</p>"
    return f"<div class='kv-widget'>{inner}{note}</div>"


_SENTENCE = re.compile(r"(.+?[.!?:])(?:\s|$)", re.DOTALL)


def figure_alt(markdown: str, number: int, section: str = "") -> str:
    """A figure's text alternative: its number, its section, and what the text just before it says."""
    text = re.sub(r"<[^>]+>|[`*]|\$+", "", markdown)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's words, not its address
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n") if p.strip() and not p.lstrip().startswith("#")]
    said = ""
    if paragraphs:
        match = _SENTENCE.match(paragraphs[-1])
        said = " " + (match.group(1) if match else paragraphs[-1])[:220]
    where = f" (section: {section})" if section else ""
    return f"Figure {number}{where}, drawn by the code cell above it.{said}"


def _heading(markdown: str, current: str) -> str:
    """The last heading a markdown cell opens, or the current one."""
    found = re.findall(r"^#{1,4}\s+(.+?)\s*#*\s*$", markdown, re.MULTILINE)
    return re.sub(r"[`*]", "", found[-1]) if found else current


_SCROLLING = re.compile(r"<(pre|div|table)(\s[^>]*overflow(?:-x|-y)?\s*:\s*(?:auto|scroll)[^>]*)>", re.IGNORECASE)


def focusable_scrolling(markup: str) -> str:
    """HTML whose scrolling boxes (a wide table, a long line) take keyboard focus, so they scroll without a mouse."""
    return _SCROLLING.sub(
        lambda m: m.group(0) if "tabindex" in m.group(2) else f'<{m.group(1)} tabindex="0"{m.group(2)}>', markup
    )


def _joined(value: Any) -> str:
    return value if isinstance(value, str) else "".join(value)


def _hides_source(cell: nbformat.NotebookNode) -> bool:
    hidden = cell.metadata.get("jupyter", {}).get("source_hidden", False)
    return bool(hidden) or (cell.cell_type == "code" and "solution(" in cell.source)


def _tag(cell: nbformat.NotebookNode, tag: str) -> None:
    tags = cell.metadata.setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


def make_static(nb: nbformat.NotebookNode, notebook: str) -> nbformat.NotebookNode:
    """A copy of an executed notebook ready for a page: widget views drawn as HTML, hidden sources gone.

    The widget state is dropped from the copy, so the page carries no script, no state and no
    collapsed content. A solution cell's source is replaced, not hidden, and tagged remove-input, as
    is the quick check's call; ``notebook`` is the lesson's path, named in the quick check's note.
    """
    nb = nbformat.from_dict(nb)  # a deep copy: the cached notebook stays as executed
    renderer = WidgetRenderer(nb.metadata.pop("widgets", {}).get(WIDGET_STATE, {}))
    before, section, figures = "", "", 0  # the text just above a figure describes it: its alt text
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            before, section = cell.source, _heading(cell.source, section)
        if cell.cell_type != "code":
            continue
        quiz = _QUICK_CHECK_CALL.search(cell.source)
        if _hides_source(cell):  # a solution: its text goes; a cell with no source is not shown at all
            cell.source = "# the solution: open the lesson in the live lab"
        if _hides_source(cell) or quiz:  # nor is the call that draws the quick check (its questions are)
            _tag(cell, "remove-input")
        if cell.metadata.get("jupyter", {}).get("outputs_hidden"):
            cell.outputs = []
        for output in cell.outputs:
            if "text/html" in output.get("data", {}):
                output["data"]["text/html"] = focusable_scrolling(_joined(output["data"]["text/html"]))
            if "image/png" in output.get("data", {}):
                figures += 1
                alt = figure_alt(before, figures, section)
                output.setdefault("metadata", {}).setdefault("image/png", {})["alt"] = alt
                # myst-nb takes an image's alt text from the cell (one for all of a cell's figures)
                image = cell.metadata.setdefault("mystnb", {}).setdefault("image", {})
                image["alt"] = f"{image['alt']} / {alt}" if "alt" in image else alt
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                continue
            if quiz:
                drawn = quiz_html(f"{int(quiz.group(1)):02d}", notebook)
            else:
                drawn = _widget_html(renderer.render(view["model_id"]))
            output["data"] = {"text/html": drawn}
    return nb
