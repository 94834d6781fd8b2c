"""The instructor's lab in Chromium (`kvcourse lab --instructor`, quizzes/INSTRUCTORS.md; issue 16).

The course is created as the instructor guide says (`kvcourse grade init`), in the test's tmp folder.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser_lab import chromium_page, menu, needs_chromium, running_lab, wait_kernel_idle

pytestmark = [pytest.mark.slow, needs_chromium]


def test_instructor_lab_has_formgrader_and_create_assignment(tmp_path):
    """Formgrader lists the course's assignment; Create Assignment shows the nbgrader cell types."""
    course, exchange = tmp_path / "kv-course", tmp_path / "exchange"
    exchange.mkdir()
    kvcourse = str(Path(sys.executable).with_name("kvcourse"))
    subprocess.run(
        [kvcourse, "grade", "init", str(course), "--lessons", "00", "--exchange", str(exchange)],
        check=True,
        capture_output=True,
        text=True,
    )

    with running_lab(tmp_path, "--instructor", "--course", str(course)) as lab, chromium_page() as page:
        page.goto(lab.url("/"))
        page.locator(".jp-FileBrowser .jp-DirListing-itemText", has_text="nbgrader_config.py").wait_for()
        assert page.url.split("?")[0].endswith("/lab"), page.url
        listing = page.locator(".jp-FileBrowser .jp-DirListing-itemText").all_inner_texts()
        assert "source" in listing, f"the lab should be rooted at the course folder: {listing}"
        assert lab.get("/formgrader") == 200

        # Nbgrader → Formgrader: the course's assignment is listed, ready to generate.
        menu(page, "Nbgrader", "Formgrader")
        formgrader = page.frame_locator(".jp-MainAreaWidget iframe").first
        formgrader.get_by_role("heading", name="Manage Assignments").wait_for()
        formgrader.locator("tr", has_text="lesson00").wait_for()  # the page's default bound (browser_lab.WAIT_S)
        assert "exchange directory" not in formgrader.locator("body").inner_text()

        # Create Assignment on the source notebook: the cells carry their nbgrader types, ids and points.
        page.goto(lab.url("/lab/tree/source/lesson00/lesson00.ipynb"))
        page.locator(".jp-Notebook").first.wait_for()
        wait_kernel_idle(page)
        page.locator(".jp-SideBar.jp-mod-right .lm-TabBar-tab[title*='Create Assignment']").click()
        panel = page.locator(".nbgrader-CreateAssignmentWidget")
        panel.wait_for()
        types = panel.locator(".nbgrader-CellType select").evaluate_all(
            "selects => selects.map(s => s.options[s.selectedIndex].text)"
        )
        assert "Autograded answer" in types and "Autograded tests" in types, types
        ids = panel.locator(".nbgrader-CellId input").evaluate_all("inputs => inputs.map(i => i.value)")
        assert "answer_num_layers" in ids and "test_num_layers" in ids, ids
        page.screenshot(path=str(tmp_path / "instructor_lab.png"))

        toasts = page.locator(".Toastify__toast").all_inner_texts()
        assert not [t for t in toasts if "news" in t.lower()], toasts
        for noise in ("language server", "Skipped non-installed server", "No nbgrader_config.py", "not a subdirectory"):
            assert not re.search(re.escape(noise), lab.log, re.IGNORECASE), f"{noise!r} in the terminal:\n{lab.log}"
