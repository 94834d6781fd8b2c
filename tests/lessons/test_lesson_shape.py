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
# The test harness or the drawing's plumbing in sight (docs/lessons.md, "No harness in sight"): a sweep's short path
# comes from a course helper that asks kvcourse.kernel_env.running_headless() (simulators, timing_lab), and a
# figure is sized in kvcourse.plots, never in a cell the learner reads.
_PLUMBING = re.compile(
    r"headless\(|KVCOURSE_HEADLESS|NBGRADER_EXECUTION|set_size_inches|plt\.figure\(\s*figsize|\bfig\.set_"
)


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
def test_every_cell_has_its_own_id(path: Path) -> None:
    """nbformat 4.5 gives each cell an id, unique in its notebook: JupyterLab, nbgrader and links rely on it."""
    ids = [cell.get("id") for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]]
    assert None not in ids, f"{path.name}: cells without an id at {[i for i, x in enumerate(ids) if x is None]}"
    assert len(set(ids)) == len(ids), f"{path.name}: ids used twice: {sorted({x for x in ids if ids.count(x) > 1})}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_matplotlib_in_a_lesson(path: Path) -> None:
    drawing = [i for i, src in _code_cells(path) if re.search(r"^\s*(import|from)\s+matplotlib", src, re.M)]
    assert not drawing, f"{path.name}: cells {drawing} import matplotlib; put the figure in kvcourse.plots"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_test_harness_or_figure_sizing_in_sight(path: Path) -> None:
    found = [i for i, src in _code_cells(path) if _PLUMBING.search(src)]
    assert not found, f"{path.name}: cells {found} branch on the test harness or size a figure; move it to a helper"


@pytest.mark.parametrize(
    "source",
    [
        "quick = headless()\nlengths = [8, 16] if quick else [8, 16, 32]",
        "from kvcourse.kernel_env import running_headless\nn = 2 if running_headless() else 5",
        'quick = os.environ.get("KVCOURSE_HEADLESS") == "1"',
        'quick = "NBGRADER_EXECUTION" in os.environ',
        "ax.figure.set_size_inches(8, 3)",
        "fig = plt.figure(figsize=(8, 3))",
        "fig.set_figwidth(8)",
    ],
)
def test_the_plumbing_check_fails_on_a_planted_cell(source: str, tmp_path: Path) -> None:
    """The check above fails on each kind of plumbing it names, planted in a copy of a clean lesson."""
    lesson = json.loads(NOTEBOOKS[0].read_text())
    test_no_test_harness_or_figure_sizing_in_sight(NOTEBOOKS[0])  # clean as committed
    lesson["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "source": source.splitlines(True)})
    planted = tmp_path / NOTEBOOKS[0].name
    planted.write_text(json.dumps(lesson))
    with pytest.raises(AssertionError, match=rf"cells \[{len(lesson['cells']) - 1}\] branch on the test harness"):
        test_no_test_harness_or_figure_sizing_in_sight(planted)


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
