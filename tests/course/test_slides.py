"""Slides from the lessons (issue 47, item 2): every notebook marks its cells with the standard slide metadata, so
one notebook teaches in class, and `kvcourse slides` writes reveal.js decks that load nothing from the network.

The size rule is a room's: a slide (a `slide` or `subslide` cell and the `-` and `fragment` cells after it) holds
at most PROSE lines of prose, CODE lines of code in sight and one figure. Prose longer than that is what the
teacher says (`notes`); set-up code, solutions and the quick check are `skip`.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from kvcourse.syllabus import REPO_ROOT

LESSONS = sorted((REPO_ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))
SLIDE_TYPES = {"slide", "subslide", "fragment", "skip", "notes", "-"}
PROSE, CODE, WRAP = 12, 15, 100  # lines of prose (wrapped at WRAP characters), lines of code in sight
# A cell that draws a figure or a simulator (plots.panels / mark / plain_ticks only shape the next one).
FIGURE = re.compile(r"\bplots\.(?!panels|mark|plain_ticks)\w+\(|\b[A-Z]\w*View\(|\bshow_\w+\(")


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _slide_type(cell: dict) -> str | None:
    return cell["metadata"].get("slideshow", {}).get("slide_type")


def _prose_lines(text: str) -> int:
    return sum(max(1, math.ceil(len(line) / WRAP)) for line in text.splitlines() if line.strip())


def _code_lines(cell: dict) -> int:
    if "hide-input" in cell["metadata"].get("tags", []):
        return 0  # folded: only its output is on the slide
    return sum(1 for line in _source(cell).splitlines() if line.strip())


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def slides_of(cells: list[dict]) -> list[list[int]]:
    """The cells in sight on each slide and subslide, by index (notes and skipped cells left out)."""
    slides: list[list[int]] = []
    for i, cell in enumerate(cells):
        kind = _slide_type(cell)
        if kind in ("slide", "subslide") or not slides:
            slides.append([i])
        elif kind in ("-", "fragment"):
            slides[-1].append(i)
    return slides


def oversized(cells: list[dict]) -> list[str]:
    """Each slide over the size rule, said in words."""
    found = []
    for slide in slides_of(cells):
        shown = [cells[i] for i in slide]
        prose = sum(_prose_lines(_source(c)) for c in shown if c["cell_type"] == "markdown")
        code = sum(_code_lines(c) for c in shown if c["cell_type"] == "code")
        figures = sum(1 for c in shown if c["cell_type"] == "code" and FIGURE.search(_source(c)))
        if prose > PROSE or code > CODE or figures > 1:
            found.append(f"cells {slide}: {prose} lines of prose, {code} of code, {figures} figures")
    return found


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_cell_says_how_it_shows_on_a_slide(path: Path) -> None:
    cells = _cells(path)
    unmarked = [i for i, c in enumerate(cells) if _slide_type(c) not in SLIDE_TYPES]
    assert not unmarked, f"{path.name}: cells {unmarked} lack metadata.slideshow.slide_type (one of {SLIDE_TYPES})"
    assert _slide_type(cells[0]) == "slide", f"{path.name}: the title cell opens no slide"
    sections = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and _source(c).startswith("## ")]
    loose = [i for i in sections if _slide_type(cells[i]) not in ("slide", "subslide")]
    assert not loose, f"{path.name}: sections {loose} open no slide"
    code = [i for i, c in enumerate(cells) if c["cell_type"] == "code"]
    hidden = [i for i in code if cells[i]["metadata"].get("jupyter", {}).get("source_hidden")]
    checks = [i for i in code if "quick_check(" in _source(cells[i])]
    shown = [i for i in [code[0], *hidden, *checks] if _slide_type(cells[i]) != "skip"]
    assert not shown, f"{path.name}: set-up, solution or quick-check cells {shown} are on a slide (want skip)"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_slide_reads_from_the_back_of_a_room(path: Path) -> None:
    found = oversized(_cells(path))
    assert not found, f"{path.name}: slides over the rule ({PROSE} lines of prose, {CODE} of code, one figure): {found}"


def test_the_size_rule_catches_a_crowded_slide() -> None:
    prose = {"cell_type": "markdown", "metadata": {"slideshow": {"slide_type": "-"}}, "source": ["x\n"] * 8}
    figure = {"cell_type": "code", "metadata": {"slideshow": {"slide_type": "-"}}, "source": ["plots.lines(a)\n"]}
    title = {"cell_type": "markdown", "metadata": {"slideshow": {"slide_type": "slide"}}, "source": ["# T\n"]}
    assert not oversized([title, prose, figure])
    assert oversized([title, prose, prose])  # 17 lines of prose
    assert oversized([title, figure, figure])  # two figures
    notes = dict(prose, metadata={"slideshow": {"slide_type": "notes"}})
    assert not oversized([title, prose, notes, figure])  # notes are said, not shown
