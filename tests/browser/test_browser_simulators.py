"""Every simulator of the syllabus in Chromium, in the student's lab, moved as a learner would (issue 32).

One lab (started as `make lab` starts it) and one notebook (in the git-ignored tmp/) that holds only the
simulators' construction cells (``sim_checks.VIEW_CELLS``). For each simulator, every control is set
in the page to the far end of its range and to one bad value; the status line must change (or name the
problem in red), the box must show what was typed, and no input, dropdown or label may cut its text
off. At the end one cell prints every view's control values, which must be what the page shows. Tab
walks through every control of every simulator (nothing traps the focus), and axe-core finds no
serious or critical violation in our widgets (JupyterLab's own are listed, not failed).
"""

from __future__ import annotations

import json
import os
import re
import shutil

import ipywidgets as widgets
import nbformat
import pytest
from browser_lab import (
    chromium_page,
    error_outputs,
    needs_chromium,
    open_notebook,
    run_all_cells,
    running_lab,
    wait_image_decoded,
    wait_kernel_idle,
    wait_until,
)
from sim_checks import LAB_VIEWS, VIEW_CELLS, VIEW_IMPORTS, build_view

from kvcourse.simulators.controls import WholeNumberText
from kvcourse.syllabus import REPO_ROOT

pytestmark = [pytest.mark.slow, needs_chromium]

# Simulators a lesson shows beside the one the syllabus names for it: key -> (module, the cell that shows it).
MORE_VIEW_CELLS: dict[str, tuple[str, str]] = {"21 apart": ("disaggregation", "DisaggregationView()")}
ALL_VIEW_CELLS = {**VIEW_CELLS, **MORE_VIEW_CELLS}
ALL_IMPORTS = VIEW_IMPORTS + "".join(f"\nfrom kvcourse.simulators.{m} import *" for m, _ in MORE_VIEW_CELLS.values())

LADDER = (1, 64, 4096, 10**6, 10**9)
BAD = "-1.5"  # negative and not whole: wrong in every number box
REPORT = "print('VALUES', json.dumps({n: v.values for n, v in views.items()}, default=str))"
SERIOUS = ("serious", "critical")

# Measure every control of one simulator: text cut off in inputs, dropdowns (any option) and labels.
OVERFLOW_JS = """root => {
  const ctx = document.createElement('canvas').getContext('2d');
  const out = [];
  for (const el of root.querySelectorAll('input[type=text], input[type=number], textarea, label, .widget-label')) {
    if (el.offsetParent !== null && el.scrollWidth > el.clientWidth + 1) out.push((el.innerText || el.value));
  }
  for (const sel of root.querySelectorAll('select')) {
    const style = getComputedStyle(sel);
    ctx.font = `${style.fontSize} ${style.fontFamily}`;
    const room = sel.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    for (const option of sel.options) {
      if (ctx.measureText(option.text).width > room) out.push(option.text);
    }
  }
  return out;
}"""


def _plan(view) -> list[tuple[str, str, str, list[str], str]]:
    """(description, kind, what to do, values, name) for every control of a simulator view, found in Python."""
    view._redraw = lambda: None  # probing builds models only
    plan = []
    for name, control in view.controls.items():
        if isinstance(control, (widgets.FloatText, WholeNumberText)):
            start, accepted = control.value, []
            for value in LADDER:
                control.value = value
                if view.error is None:
                    accepted.append(value)
            control.value = start
            plan.append((control.description, "number", "fill", [f"{(accepted or [start])[-1]:g}", BAD], name))
        elif isinstance(control, widgets.Dropdown):
            # the far end that changes something: "custom" keeps the figures the boxes already hold
            far = next(
                label
                for label, value in reversed(control.options)
                if value != control.value and not str(label).startswith("custom")
            )
            plan.append((control.description, "dropdown", "select", [far], name))
        elif isinstance(control, widgets.Checkbox):
            plan.append((control.description, "checkbox", "click", ["toggle"], name))
        elif isinstance(control, (widgets.IntSlider, widgets.FloatSlider)):
            plan.append((control.description, "slider", "key", ["End"], name))
        elif isinstance(control, widgets.Text):
            plan.append((control.description, "text", "fill", ["not a number"], name))
    return plan


def _build(key: str):
    """A view of ``ALL_VIEW_CELLS``, built as its cell builds it."""
    if key in VIEW_CELLS:
        return build_view(key)
    namespace: dict = {}
    exec(ALL_IMPORTS, namespace)  # noqa: S102 - the test's own fixed source
    return eval(MORE_VIEW_CELLS[key][1], namespace)  # noqa: S307


def _notebook(path) -> None:
    cells = [nbformat.v4.new_code_cell(ALL_IMPORTS + "\nimport json\nviews = {}")]
    for lesson, (_, source) in ALL_VIEW_CELLS.items():
        cells.append(nbformat.v4.new_code_cell(f"views['{lesson}'] = {source}\nviews['{lesson}']"))
    cells.append(nbformat.v4.new_code_cell(REPORT))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, path)


def _exact(text: str) -> re.Pattern:
    return re.compile(f"^{re.escape(text)}$")


def _control(view, description: str, kind: str):
    """The element a learner types into, picks from or presses, found by the label a screen reader reads."""
    if kind == "checkbox":
        return view.locator(".widget-checkbox", has_text=description).locator("input[type=checkbox]").first
    label = view.page.locator("label.widget-label", has_text=_exact(description))
    box = view.locator(".widget-inline-hbox", has=label).first
    if kind == "number" or kind == "text":
        return box.locator("input, textarea").first
    if kind == "dropdown":
        return box.locator("select")
    return box.locator(".noUi-handle, .slider-handle, [role=slider]").first


def _status_after(page, status, before: str, what: str = "") -> str:
    """The status line once the kernel's reply to a change has landed.

    The new status comes on the kernel's output channel after its "busy" and before its "idle", so once
    it has changed, the status bar's idle means the whole reply (figure included) is in the page.
    """
    wait_until(status.inner_text, lambda now: now != before, f"{what}: the status line did not change")
    wait_kernel_idle(page)
    return status.inner_text()


def _move_every_control(page, view, lesson: str, plan, restarts_run: bool) -> list[str]:
    """Set each control to its far end and to a bad value in the page; return what overflowed.

    Reset puts every control back to its start, or, for a view that ``restarts_run``, to the last values that
    worked: the status line it leads to is known before pressing it, so the test waits for that line.
    """
    status = view.locator(":scope > .widget-html").first
    reset = view.get_by_role("button", name="Reset")
    overflow: list[str] = []
    for description, kind, action, values, _ in plan:
        element = _control(view, description, kind)
        wait_kernel_idle(page)
        start = last_good = status.inner_text()
        for value in values:
            wait_kernel_idle(page)  # the reply to the last change has landed: `before` is its status, not an older one
            before = status.inner_text()
            if kind == "number" and float(element.input_value() or "nan") == float(value):
                continue  # already at its far end: nothing would change
            if action == "fill":
                element.fill(value)
                element.press("Enter")
            elif action == "select":
                element.select_option(label=value)
            elif action == "click":
                element.click()
            else:
                element.focus()
                page.keyboard.press(value)
            after = _status_after(page, status, before, f"{lesson} {description}={value}")
            if value == BAD or kind == "text":
                assert "Check the input" in after, (lesson, description, value, after)
            elif kind == "checkbox" and "Check the input" in after:
                assert "tick" in after, (lesson, description, after)  # a combination refused says what to tick
            else:
                assert "Check the input" not in after, (lesson, description, value, after)
                last_good = after
            if action == "fill":  # the box shows what was typed, not a truncated or rounded figure
                shown = element.input_value()
                assert float(shown) == float(value) if kind == "number" else shown == value, (
                    lesson,
                    description,
                    shown,
                )
            overflow += [f"{lesson} {description}={value}: {text!r}" for text in view.evaluate(OVERFLOW_JS)]
        wait_kernel_idle(page)
        before = status.inner_text()
        expected = last_good if restarts_run else start
        reset.click()
        # The reply to Reset has landed once the line changed or reads what Reset leads to; where that is the line
        # already shown (a restart with the settings shown), the reply changes nothing in the page, and the kernel
        # answers the next change only after it.
        wait_until(
            status.inner_text,
            lambda now, old=before, new=expected: (now != old or now == new) and "Check the input" not in now,
            f"{lesson} Reset after {description}: the status line did not become {expected[:120]!r}",
        )
        wait_kernel_idle(page)
        after = status.inner_text()
        assert "Check the input" not in after, (lesson, description, "Reset left", after)
    return overflow


def _tab_reaches_every_control(page, view, plan) -> None:
    """Tab from the view's first control: every control and button gets the focus in turn, none keeps it."""
    first = _control(view, plan[0][0], plan[0][1])
    first.focus()
    reached = set()
    for _ in range(4 * len(plan) + 8):
        reached.add(
            page.evaluate(
                "() => { const a = document.activeElement;"
                " const box = a.closest('.widget-inline-hbox, .widget-checkbox, .widget-button, button');"
                " if (!box) return a.tagName; const label = box.querySelector('label');"
                # a checkbox's indent label is a zero-width space
                " const clean = s => (s || '').replace(/\\u200b/g, '').trim();"
                " return clean(label && label.textContent) || clean(box.textContent); }"
            )
        )
        page.keyboard.press("Tab")
    missing = {description for description, *_ in plan} - {text.strip() for text in reached}
    assert not missing, f"Tab never reached {sorted(missing)}; it reached {sorted(reached)}"
    assert "Reset" in reached, reached


def _axe(page) -> tuple[list[dict], list[dict]]:
    """axe-core's serious and critical violations on the page: (in our widgets, in JupyterLab's own markup)."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page).response
    ours, theirs = [], []
    for violation in results["violations"]:
        if violation["impact"] not in SERIOUS:
            continue
        for node in violation["nodes"]:
            entry = {
                "id": violation["id"],
                "impact": violation["impact"],
                "target": node["target"],
                "html": node["html"][:160],
            }
            inside = page.evaluate(
                "t => { const el = document.querySelector(t); return !!(el && el.closest('.jp-OutputArea-output')); }",
                node["target"][-1],
            )
            (ours if inside else theirs).append(entry)
    return ours, theirs


@pytest.fixture
def simulators_notebook():
    """The notebook of construction cells, in the repository's git-ignored tmp/ (the lab's root is the
    repository, as `make lab` serves it), removed afterwards."""
    folder = REPO_ROOT / "tmp" / f"browser-simulators-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    _notebook(folder / "simulators.ipynb")
    yield (folder / "simulators.ipynb").relative_to(REPO_ROOT).as_posix()
    shutil.rmtree(folder, ignore_errors=True)


def test_every_simulator_in_the_students_lab(tmp_path, simulators_notebook):
    built = {lesson: _build(lesson) for lesson in ALL_VIEW_CELLS}
    plans = {lesson: _plan(view) for lesson, view in built.items()}
    with running_lab(tmp_path) as lab, chromium_page(1440, 900) as page:
        open_notebook(page, lab, simulators_notebook)
        run_all_cells(page)
        assert not error_outputs(page), error_outputs(page)[0][:2000]
        outputs = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell-outputArea")
        views = {lesson: outputs.nth(i + 1).locator(".widget-vbox").first for i, lesson in enumerate(ALL_VIEW_CELLS)}
        for view in views.values():
            wait_image_decoded(view.locator(".kv-sim-figure img"))  # drawn by the view after the cell's output

        ours, theirs = _axe(page)
        (tmp_path / "axe.json").write_text(json.dumps({"ours": ours, "jupyterlab": theirs}, indent=1))
        print(f"axe-core, serious or critical: {len(ours)} in our widgets, {len(theirs)} in JupyterLab's markup")
        for entry in theirs:
            print("  JupyterLab:", entry["id"], entry["target"], entry["html"][:100])
        assert not ours, f"axe-core: our widgets have serious or critical violations: {ours}"

        overflow = []
        for lesson, view in views.items():
            view.scroll_into_view_if_needed()
            overflow += [f"{lesson} at start: {text!r}" for text in view.evaluate(OVERFLOW_JS)]
            if lesson in LAB_VIEWS:  # lessons 12, 13 and 11's views with a policy: their controls are moved there
                continue
            _tab_reaches_every_control(page, view, plans[lesson])
            overflow += _move_every_control(page, view, lesson, plans[lesson], built[lesson].restarts_run)
        assert not overflow, f"text cut off: {overflow}"

        # What the page shows is what the kernel uses.
        report = page.locator(
            ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell",
            has=page.locator(".jp-InputArea-editor", has_text="VALUES"),
        ).first
        prompt = report.locator(".jp-InputArea-prompt")
        ran_before = prompt.inner_text()
        report.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+Enter")  # run it in place (Shift+Enter would add a cell below)
        # numbered anew: the reply and the idle after the cell's output have both arrived
        wait_until(
            prompt.inner_text,
            lambda now: now != ran_before and "*" not in now and re.search(r"\d", now),
            "the report cell did not run again",
        )
        output = report.locator(".jp-OutputArea-output").first
        output.wait_for()
        values = json.loads(output.inner_text().split("VALUES", 1)[1])
        for lesson, view in views.items():
            for description, kind, _, _, name in plans[lesson]:
                if kind in ("number", "text"):
                    shown = _control(view, description, kind).input_value()
                    kernel = values[lesson][name]
                    assert (float(shown) == float(kernel)) if kind == "number" else shown == kernel, (
                        lesson,
                        description,
                        shown,
                        kernel,
                    )
