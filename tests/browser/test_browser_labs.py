"""A build-it lab in Chromium, as a learner meets it: lesson 18 (lab A) run from the menu.

The skeleton's check fails with the rule it stopped at, the passing run waits behind its toggle, and the
simulator (run on the reference solution until the skeleton is written) shows its figure and steps.
"""

from __future__ import annotations

import re

import pytest
from browser_lab import (
    chromium_page,
    error_outputs,
    lessons_untouched,
    needs_chromium,
    open_notebook,
    output_of,
    output_texts,
    run_all_cells,
    running_lab,
    wait_for_text,
    wait_image_decoded,
)

from kvcourse.syllabus import get_lesson

pytestmark = [pytest.mark.slow, needs_chromium]


def test_lab_a_runs_from_the_menu_fails_on_the_skeleton_and_shows_a_passing_run(tmp_path):
    notebook = get_lesson("18").notebook
    with lessons_untouched(notebook), running_lab(tmp_path) as lab, chromium_page() as page:
        open_notebook(page, lab, notebook)
        asked = run_all_cells(page, answer={"copied on write": "2"})
        errors = error_outputs(page)
        assert not errors, f"error output under a cell:\n{errors[0][:2000]}"
        lines = [line for text in output_texts(page) for line in text.splitlines()]
        assert not [line for line in lines if line.startswith("✘ Expected")], lines
        assert len(asked) == 1 and any(line.startswith("Your guess: 2 blocks. Measured: 2 blocks.") for line in lines)

        # The skeleton's check: every trace fails, and says at which call and why.
        failing = output_of(page, "Lab A: your block manager: 0 of 3 public traces pass")
        assert re.search(r"\[0%\] public 1: .*raised NotImplementedError", failing.inner_text())

        # The passing run is folded: its verdicts appear only once the learner opens the toggle.
        toggle = output_of(page, "Show what a passing run prints")
        assert "3 of 3 public traces pass" not in toggle.inner_text()
        toggle.get_by_text("Show what a passing run prints").click()
        wait_for_text(toggle, r"Lab A: your block manager: 3 of 3 public traces pass, score 100%")

        # The simulator runs the reference solution beside the engine's own manager, and moves.
        sim = output_of(page, "runs the reference solution")
        image = sim.locator(".kv-sim-figure img")
        wait_image_decoded(image)  # the simulator's figure: drawn by its view after the cell's output has landed
        status = sim.locator(".widget-html", has_text="Your manager").first
        sim.get_by_role("button", name="Fork").click()
        wait_for_text(status, r"Forked: 3 block tables")
        sim.get_by_role("button", name="Write tokens").click()
        wait_for_text(status, r"2 copied on write so far; the engine's own: 5 and 2 \(the same figures\)")
        assert not error_outputs(page)
        page.screenshot(path=str(tmp_path / "lab_a.png"))
