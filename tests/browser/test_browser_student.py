"""The student's lab in Chromium, used as a learner would: lessons 00 and 07 (issue 16).

Each test starts its own `kvcourse lab` (own port, token and tmp Jupyter/progress folders), so the
tests are safe on two xdist workers; none of them writes into the repository.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from browser_lab import (
    cell_with_source,
    chromium_page,
    error_outputs,
    lessons_untouched,
    menu,
    needs_chromium,
    open_notebook,
    output_of,
    output_texts,
    run_all_cells,
    running_lab,
    wait_for_figures,
    wait_for_text,
    wait_image_decoded,
    wait_kernel_idle,
    wait_until,
)

from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.checking import expected_number
from kvcourse.quizzes.model import Kind
from kvcourse.syllabus import get_lesson, load_syllabus

pytestmark = [pytest.mark.slow, needs_chromium]

START = get_lesson("00").notebook


def _clean_run(page, asked: list[str], num_predictions: int) -> list[str]:
    """Check a Run All: no tracebacks or stderr, no failed expectation, every prediction asked."""
    errors = error_outputs(page)
    assert not errors, f"error output under a cell:\n{errors[0][:2000]}"
    texts = output_texts(page)
    failed = [line for text in texts for line in text.splitlines() if line.startswith("✘ Expected")]
    assert not failed, f"a lesson's claim did not hold: {failed}"
    assert len(asked) == num_predictions, f"expected {num_predictions} predict boxes, got {asked}"
    return texts


def test_start_here_in_the_students_lab(tmp_path):
    """Lesson 00 as a learner meets it: the root lands on it, every lesson is listed, no nbgrader and no
    news; run it from the menu, guess and see the measurement beside the guess, answer the quick
    check wrong then right, reload and find the progress kept; a quiet terminal throughout."""
    with lessons_untouched(START), running_lab(tmp_path) as lab, chromium_page() as page:
        page.goto(lab.url("/"))
        page.locator(".jp-Notebook").first.wait_for()
        assert page.url.split("?")[0].endswith(f"/lab/tree/{START}"), f"the root landed on {page.url}"
        wait_kernel_idle(page)

        # The file browser, opened on lessons/, lists every lesson notebook of this copy.
        page.locator(".jp-FileBrowser .jp-BreadCrumbs-item", has_text="lessons").wait_for()
        names = set(page.locator(".jp-FileBrowser .jp-DirListing-itemText").all_inner_texts())
        expected = {lesson.notebook_path.name for lesson in load_syllabus() if lesson.notebook_path.exists()}
        assert expected <= names, f"missing from the file browser: {sorted(expected - names)}"

        # No nbgrader for a student: no menu, no Create Assignment panel, no formgrader; no news pop-up.
        menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
        assert "Run" in menus and "Nbgrader" not in menus, menus
        side_tabs = page.locator(".jp-SideBar .lm-TabBar-tab").evaluate_all("tabs => tabs.map(t => t.title)")
        assert not [t for t in side_tabs if "Assignment" in t or "nbgrader" in t.lower()], side_tabs
        assert lab.get("/formgrader") == 404

        # Run → Run All Cells; the predict box waits for a guess, the measurement is shown beside it.
        asked = run_all_cells(page, answer={"How many tokens": "8", "bits": "about 4"})
        texts = _clean_run(page, asked, num_predictions=2)
        assert re.search(r"Your guess: 4 bits\. Measured: [\d.]+ bits\.", "\n".join(texts)), (
            "no reveal of the bits guess"
        )
        reveal = next(text for text in texts if "Your guess:" in text and "tokens" in text)
        assert re.search(r"Your guess: 8 tokens\. Measured: \d+ tokens\.", reveal), reveal
        toasts = page.locator(".Toastify__toast").all_inner_texts()
        assert not [t for t in toasts if "news" in t.lower()], f"a pop-up: {toasts}"
        page.screenshot(path=str(tmp_path / "student_lab.png"))

        # The quick check: a wrong number first, then the right one; each shows its verdict.
        question = next(q for q in load_quiz("00").questions if q.kind is Kind.NUMERIC)
        right = f"{expected_number(question):g}"
        box = output_of(page, "Quick check: lesson 00").locator(".widget-vbox", has_text=question.id).last
        answer_box = box.locator("input[type='text']")
        feedback = box.locator(".widget-html").last
        answer_box.fill(f"{float(right) * 10 + 1:g}")  # far outside any tolerance
        box.get_by_role("button", name="Check").click()
        wait_for_text(feedback, r"Not quite")
        answer_box.fill(right)
        box.get_by_role("button", name="Check").click()
        wait_for_text(feedback, rf"Right: {right}")

        # Back later: reload the page, run the quick check and the progress table again.
        page.reload()
        page.locator(".jp-Notebook").first.wait_for()
        wait_kernel_idle(page)
        for source in ('quick_check("00")', "print(format_progress())"):
            cell_with_source(page, source).locator(".jp-InputArea-editor").click()
            menu(page, "Run", "Run Selected Cell")
        wait_for_text(output_of(page, "Quick check: lesson 00"), "Passed before")
        wait_for_text(output_of(page, "Progress ("), r"\n00 .*1/\d+ #")
        assert not error_outputs(page)

        # A quiet terminal: no language servers, no nbgrader.
        for noise in ("language server", "Skipped non-installed server", "nbgrader", "lsp/status"):
            assert noise.lower() not in lab.log.lower(), f"{noise!r} in the lab's terminal:\n{lab.log}"


def test_lesson_07_runs_from_the_menu_and_its_simulator_moves(tmp_path):
    """Run all of lesson 07 from the menu: figures, no errors, every guess beside its measurement;
    then press the simulator's step button and type a number of layers, and watch its summary follow."""
    notebook = get_lesson("07").notebook
    with lessons_untouched(notebook), running_lab(tmp_path) as lab, chromium_page() as page:
        open_notebook(page, lab, notebook)
        asked = run_all_cells(
            page, answer={"smallest": "d", "K and V": "a", "half the bytes per": "b", "32 users": "c", "main cost": "b"}
        )
        texts = _clean_run(page, asked, num_predictions=5)
        wait_for_figures(page, 1)  # lesson 07's figure: decoded by the browser after its output has landed
        lines = [line for text in texts for line in text.splitlines()]
        for guess in (
            "You chose: well under 1% of the weights",
            "You chose: at the same number of tokens in both",
            "You chose: several times as much as them",
            "You chose: keeping them",
            "You chose: gpt-oss-120b",
        ):
            assert any(line.startswith(guess) for line in lines), f"no line starting {guess!r}"

        sim = output_of(page, "Double the tokens")
        status = sim.locator(".widget-html", has_text="per token").first
        image = sim.locator(".kv-sim-figure img")
        wait_image_decoded(image)  # the simulator's first figure: its view is drawn after the cell's output lands
        wait_kernel_idle(page)  # nothing of the simulator's start is still on its way: `before` is its settled state
        before = status.inner_text()
        image_before = image.get_attribute("src")
        sim.get_by_role("button", name="Double the tokens").click()
        _changed(status.inner_text, before)
        _changed(lambda: image.get_attribute("src"), image_before)  # the figure is redrawn
        wait_kernel_idle(page)  # the whole reply to the click has landed
        after_step = status.inner_text()

        # The Layers box, with the keyboard alone: Tab to it, type, Enter (typed boxes: a slider's handle
        # has no name a screen reader reads).
        layers = sim.locator(".widget-text", has=page.locator("label", has_text=re.compile("^Layers$"))).locator(
            "input"
        )
        layers_after = int(float(layers.input_value())) - 3
        layers.focus()
        page.keyboard.press("Control+A")
        page.keyboard.type(str(layers_after))
        page.keyboard.press("Enter")
        wait_for_text(status, f"= 2 × {layers_after} × ")  # the cache formula, with the new number of layers
        assert float(layers.input_value()) == layers_after
        assert status.inner_text() != after_step
        page.screenshot(path=str(tmp_path / "lesson_07_simulator.png"))


def _changed(read: Callable[[], str | None], old: str | None) -> str | None:
    """Wait until ``read()`` (a text or an attribute in the page) differs from ``old``; return it."""
    return wait_until(read, lambda now: now != old, "unchanged")
