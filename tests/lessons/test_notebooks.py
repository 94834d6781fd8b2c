"""Every lesson notebook runs top to bottom offline, and is committed clean (no outputs)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from kvcourse.syllabus import REPO_ROOT, load_syllabus

LESSONS_DIR = REPO_ROOT / "lessons"
NOTEBOOKS = sorted(LESSONS_DIR.glob("*.ipynb"))
DTYPES = ("float32", "bfloat16")


def _committed_notebooks() -> list[Path]:
    """Notebooks git tracks under lessons/ (all present ones when git is unavailable)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "lessons/*.ipynb"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return NOTEBOOKS
    return [REPO_ROOT / line for line in out.splitlines() if line and (REPO_ROOT / line).exists()]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_without_errors(path: Path, dtype: str, lesson_runs, record_property) -> None:
    # Executed here, or, where the site test (tests/course/test_site.py) has already run it in this test run,
    # that same run is the one checked: a lesson runs once per dtype per run (tests/conftest.py: LessonRuns).
    # Raises CellExecutionError, naming the cell, on any error; a float32 run is kept for `make site`.
    run = lesson_runs.run(path, dtype)
    record_property("seconds", round(run.seconds, 1))
    print(f"{path.name} ({dtype}): {run.seconds:.1f} s" + ("" if run.here else ", executed earlier in this run"))


FAST_PATHS_OFF_LESSON = LESSONS_DIR / "05_the_kv_cache.ipynb"  # the engine against no cache, token for token


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_lesson_runs_on_the_textbook_model_with_the_fast_paths_off(
    dtype: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, lesson_runs
) -> None:
    """KVCOURSE_FAST_PATHS=0, as on a CPU where a fast path cannot run: the lesson's claims hold on the textbook."""
    monkeypatch.setenv("KVCOURSE_FAST_PATHS", "0")
    nb = nbformat.read(FAST_PATHS_OFF_LESSON, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("print(sorted({type(m).__name__ for m in model.modules()}))"))
    executed = lesson_runs.execute(nb, tmp_path, dtype)  # a notebook of its own: not one of the shared runs
    modules = executed.cells[-1].outputs[0]["text"]
    assert "'Linear'" in modules and "'RMSNorm'" in modules and "Packed" not in modules and "Fused" not in modules


@pytest.mark.slow
def test_kernel_is_this_python(tmp_path: Path, lesson_runs) -> None:
    """The "python3" kernel must be the venv's interpreter, or the notebooks would test another install."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys; print(sys.executable)")])
    executed = lesson_runs.execute(nb, tmp_path, "float32")
    printed = executed.cells[0].outputs[0]["text"].strip()
    assert Path(printed).resolve() == Path(sys.executable).resolve()


@pytest.mark.parametrize("path", _committed_notebooks(), ids=lambda p: p.stem)
def test_committed_notebook_has_no_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} cell {i} has outputs; commit notebooks cleared"
            assert cell.execution_count is None, f"{path.name} cell {i} has an execution count"


def test_syllabus_notebooks_are_valid_nbformat() -> None:
    for lesson in load_syllabus():
        if lesson.notebook_path.exists():
            nbformat.validate(nbformat.read(lesson.notebook_path, as_version=4))  # raises ValidationError


def test_every_lesson_notebook_is_in_the_syllabus() -> None:
    listed = {Path(lesson.notebook).name for lesson in load_syllabus()}
    stray = [p.name for p in NOTEBOOKS if p.name not in listed]
    assert not stray, f"notebooks missing from course/syllabus.toml: {stray}"


def _code_sources(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_bare_assert_in_front_of_the_learner(path: Path) -> None:
    """A learner-visible assert is a crash with no explanation: lessons use expect() (docs/lessons.md)."""
    bad = [line.strip() for src in _code_sources(path) for line in src.splitlines() if re.match(r"\s*assert\b", line)]
    assert not bad, f"{path.name}: use kvcourse.notebook.expect instead of {bad}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_lesson_predicts_before_it_measures(path: Path) -> None:
    """The lesson shape: at least one predict() cell, and reveal() only for keys predicted earlier."""
    if path.stem.startswith("00_"):
        return  # lesson 00 measures nothing; it shows how predict works by example instead
    sources = _code_sources(path)
    predicted: set[str] = set()
    for src in sources:
        for key in re.findall(r"reveal\(\s*['\"]([^'\"]+)['\"]", src):
            assert key in predicted, f"{path.name}: reveal({key!r}) comes before predict({key!r})"
        predicted |= set(re.findall(r"predict\(\s*['\"]([^'\"]+)['\"]", src))
    assert predicted, f"{path.name}: no predict() before a measurement"


_LESSON_MENTION = re.compile(r"[Ll]essons? (\d\d)(?:\s*(?:–|-|and|to)\s*(\d\d))?|\((\d\d)_[a-z_]+\.ipynb\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_lessons_refer_only_to_lessons_that_exist(path: Path) -> None:
    """A learner who follows "see lesson 09" must find lesson 09 (docs/lessons.md: link only to lessons that exist)."""
    existing = {p.name[:2] for p in NOTEBOOKS}
    cells = json.loads(path.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells)
    missing = set()
    for first, last, linked in _LESSON_MENTION.findall(text):
        numbers = {linked} if linked else {f"{n:02d}" for n in range(int(first), int(last or first) + 1)}
        missing |= numbers - existing
    assert not missing, f"{path.name} refers to lessons {sorted(missing)}, which have no notebook yet"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_solutions_are_hidden_until_asked_for(path: Path) -> None:
    """A cell that builds a "show a solution" toggle keeps its source collapsed, or the code gives the answer away."""
    cells = json.loads(path.read_text())["cells"]
    shown = [
        c["id"]
        for c in cells
        if c["cell_type"] == "code"
        and "solution(" in "".join(c["source"])
        and not c["metadata"].get("jupyter", {}).get("source_hidden")
    ]
    assert not shown, f"{path.name}: set metadata.jupyter.source_hidden on solution cells {shown}"
