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
from html.parser import HTMLParser
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


def test_every_section_heading_begins_a_cell() -> None:
    """A `## ` line inside a cell would open no slide: each begins its own cell (outside fenced code)."""
    for path in LESSONS:
        inside = []
        for i, cell in enumerate(_cells(path)):
            fenced = False
            for line in _source(cell).splitlines()[1:]:
                fenced ^= line.startswith("```")
                if cell["cell_type"] == "markdown" and not fenced and line.startswith(("## ", "### ")):
                    inside.append(i)
        assert not inside, f"{path.name}: cells {inside} hold a heading after their first line; split them there"


# ---------------------------------------------------------------- the decks `kvcourse slides` writes


class _Refs(HTMLParser):
    """Every src and href, with its tag."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.refs += [(tag, value or "") for name, value in attrs if name in ("src", "href")]


@pytest.fixture(scope="module")
def decks(run_tmp: Path, lesson_runs) -> Path:
    from slides_build import built_slides

    return built_slides(run_tmp, lesson_runs)


@pytest.mark.slow
def test_the_decks_load_nothing_from_the_network(decks: Path) -> None:
    from slides_build import DECKS

    names = sorted(p.name for p in decks.glob("*.slides.html"))
    assert [name[:2] for name in names] == list(DECKS)
    for name in ["index.html", *names]:
        parser = _Refs()
        parser.feed((decks / name).read_text(encoding="utf-8"))
        remote = [(tag, ref) for tag, ref in parser.refs if re.match(r"(https?:)?//", ref) and tag != "a"]
        assert not remote, f"{name} loads from the network: {remote}"
        local = [ref for tag, ref in parser.refs if tag != "a" and not ref.startswith(("#", "data:"))]
        missing = [ref for ref in local if not (decks / ref.split("#")[0]).exists()]
        assert not missing, f"{name} refers to files the folder lacks: {missing}"
    index = (decks / "index.html").read_text(encoding="utf-8")
    assert all(f"href='{name}'" in index for name in names), "the index links every deck"


@pytest.mark.slow
def test_a_deck_shows_slides_and_hides_answers(decks: Path) -> None:
    text = (decks / "13_prefix_caching.slides.html").read_text(encoding="utf-8")
    lesson = _cells(REPO_ROOT / "lessons" / "13_prefix_caching.ipynb")
    opened = sum(1 for c in lesson if _slide_type(c) in ("slide", "subslide"))
    assert text.count("<section") >= opened  # one per slide and subslide, plus one around each slide's column
    assert "data:image/png;base64," in text, "the lesson's figures are in the deck"
    assert "solution(" not in text and "quick_check(" not in text, "a solution or the quick check's call shows"
    assert '<aside class="notes">' in text or not any(_slide_type(c) == "notes" for c in lesson)


def test_slides_never_replace_a_folder_they_did_not_write(tmp_path: Path) -> None:
    from kvcourse.site.slides import build_slides

    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a folder written by `kvcourse slides`"):
        build_slides(tmp_path, reuse=None)
    assert (tmp_path / "mine.txt").read_text() == "keep me"
