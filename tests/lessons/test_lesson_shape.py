"""The shape of a lesson's code (docs/lessons.md, "Code cells show the idea"), checked on the source.

Short cells, no matplotlib in front of the learner (drawing lives in kvcourse.plots), none of the idioms a
reader has to decode, and one short solution snippet per exercise that at least compiles. The snippets
also *run*: `solution()` executes them under the notebook harness (tests/lessons/test_notebooks.py).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from kvcourse.syllabus import REPO_ROOT

NOTEBOOKS = sorted((REPO_ROOT / "lessons").glob("*.ipynb"))
MAX_CELL_LINES = 15
MAX_SOLUTION_LINES = 12
_CEIL_IDIOM = re.compile(r"-\s*\(\s*-")  # -(-n // b): say math.ceil or a helper's name instead


def _code_cells(path: Path) -> list[tuple[int, str]]:
    cells = json.loads(path.read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "code"]


def _solution_snippets(source: str) -> list[str]:
    """The literal `code=` strings of every solution(...) call in a cell."""
    snippets = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "solution":
            code = [k.value for k in node.keywords if k.arg == "code"] + node.args[1:2]
            snippets += [ast.literal_eval(value) for value in code]
    return snippets


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_cells_are_short(path: Path) -> None:
    long = [(i, len(src.splitlines())) for i, src in _code_cells(path) if len(src.splitlines()) > MAX_CELL_LINES]
    assert not long, f"{path.name}: cells (index, lines) over {MAX_CELL_LINES} lines: {long}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_matplotlib_in_a_lesson(path: Path) -> None:
    drawing = [i for i, src in _code_cells(path) if re.search(r"^\s*(import|from)\s+matplotlib", src, re.M)]
    assert not drawing, f"{path.name}: cells {drawing} import matplotlib; put the figure in kvcourse.plots"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_idiom_a_reader_must_decode(path: Path) -> None:
    found = [i for i, src in _code_cells(path) if _CEIL_IDIOM.search(src)]
    assert not found, f"{path.name}: cells {found} use the -(-n // b) idiom; name the rounding instead"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_solution_is_one_short_snippet_that_compiles(path: Path) -> None:
    for i, src in _code_cells(path):
        for snippet in _solution_snippets(src):
            lines = len(snippet.strip("\n").splitlines())
            assert lines <= MAX_SOLUTION_LINES, f"{path.name} cell {i}: a {lines}-line solution snippet"
            compile(snippet, f"{path.name} cell {i} solution", "exec")  # raises SyntaxError, naming the cell
