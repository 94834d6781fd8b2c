"""The nbgrader export: generated metadata, and the whole real nbgrader pipeline in a temporary course."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.graded import solve
from kvcourse.quizzes.nbgrader_export import build_notebook, init_course, parse_lessons

NBGRADER = str(Path(sys.executable).parent / "nbgrader")
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


def test_parse_lessons():
    assert parse_lessons("01-03") == ["01", "02", "03"]
    assert parse_lessons("7,16, 3") == ["03", "07", "16"]
    with pytest.raises(ValueError, match="backwards"):
        parse_lessons("05-01")
    with pytest.raises(KeyError):
        parse_lessons("18")


def test_source_notebooks_have_valid_nbgrader_metadata():
    from nbgrader.nbgraderformat import MetadataValidator

    for lesson in ("05", "07", "16"):
        nb = build_notebook(load_quiz(lesson))
        MetadataValidator().validate_nb(nb)  # raises on invalid nbgrader v3 metadata
        meta = [c.metadata["nbgrader"] for c in nb.cells if "nbgrader" in c.metadata]
        assert all(m["schema_version"] == 3 for m in meta)
        graded = {m["grade_id"]: m["points"] for m in meta if m["grade"]}
        assert sum(graded.values()) == load_quiz(lesson).total_points
        ids = [m["grade_id"] for m in meta]
        assert len(ids) == len(set(ids))


def test_init_refuses_a_non_empty_folder(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(ValueError, match="not empty"):
        init_course(tmp_path, ["01"])


# ---------------------------------------------------------------------------------------------
# The whole pipeline, with the real nbgrader CLI.

def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
               JUPYTER_DATA_DIR=str(home / ".local/share/jupyter"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               KVCOURSE_PROGRESS=str(tmp / "progress"))
    env.pop("NBGRADER_EXECUTION", None)
    env.pop("KVCOURSE_STUDENT_ID", None)
    return env


def _nbgrader(env: dict, cwd: Path, *args: str) -> str:
    done = subprocess.run([NBGRADER, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{out}"
    return out


def _cell(nb, grade_id: str):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _answer(nb, qid: str, code: str) -> None:
    """Write an answer where the released stub stands, as a student would."""
    cell = _cell(nb, f"answer_{qid}")
    assert STUB in cell.source or STUB.replace("\n", "\n    ") in cell.source
    if "    raise NotImplementedError()" in cell.source:  # a function body
        cell.source = cell.source.replace("    # YOUR CODE HERE\n    raise NotImplementedError()", code)
    else:
        cell.source = cell.source.replace(STUB, code)


ALICE = {  # everything right, with and without units
    "lesson07": {
        "main_cost": 'answer_main_cost = "b"',
        "per_token_13b": 'answer_per_token_13b = "0.8 MB"',
        "users_13b": "answer_users_13b = 104857600000",
        "cache_bytes_param": f"answer_cache_bytes_param = {solve('07', 'cache_bytes_param', 'alice'):.0f}",
        "formula_code": "    return 2 * num_layers * num_kv_heads * head_dim * num_tokens * num_users * bytes_per_value",
    },
    "lesson06": {
        "growth_shape": 'answer_growth_shape = "B"',
        "cache_size": f'answer_cache_size = "{solve("06", "cache_size", "alice") / 1e6} MB"',
        "double_tokens": 'answer_double_tokens = "2x"',
    },
}
BOB = {  # one right per lesson, the rest wrong or malformed
    "lesson07": {
        "main_cost": 'answer_main_cost = "b"',                       # right: 1
        "per_token_13b": 'answer_per_token_13b = "abc"',              # malformed: 0 (and its test cell deleted)
        "users_13b": "answer_users_13b = None",                      # malformed: 0 (and its test cell edited)
        "cache_bytes_param": "answer_cache_bytes_param = [1, 2]",    # wrong type: 0
        "formula_code": "    return 1 / 0",                          # raises: 0
    },
    "lesson06": {
        "growth_shape": 'answer_growth_shape = "a"',                 # wrong: 0
        # alice's values, not bob's: the hidden test recomputes bob's from his id
        "cache_size": f"answer_cache_size = {solve('06', 'cache_size', 'alice'):.0f}",
        "double_tokens": "answer_double_tokens = 2",                 # right: 1
    },
}
FREE_TEXT = "The cache grows by one key and value per token in every layer, so each step attends over more."


def _student_works(env, students: Path, name: str, answers: dict, tamper: bool) -> None:
    folder = students / name
    folder.mkdir(parents=True)
    (folder / "nbgrader_config.py").write_text((students / "nbgrader_config.py").read_text())
    for assignment, by_question in answers.items():
        _nbgrader(env, folder, "fetch_assignment", assignment)
        path = folder / assignment / f"{assignment}.ipynb"
        nb = nbformat.read(path, as_version=4)
        for qid, code in by_question.items():
            _answer(nb, qid, code)
        if assignment == "lesson06":
            _cell(nb, "free_long_conversation").source = FREE_TEXT
        if tamper and assignment == "lesson07":
            nb.cells.remove(_cell(nb, "test_per_token_13b"))
            _cell(nb, "test_users_13b").source = "pass  # nothing to see here"
        nbformat.write(nb, path)
        _nbgrader(env, folder, "submit", assignment, f"--student={name}")


@pytest.mark.slow
def test_full_nbgrader_pipeline(tmp_path):
    env = _env(tmp_path)
    course, exchange, students = tmp_path / "course", tmp_path / "exchange", tmp_path / "students"
    exchange.mkdir()
    init_course(course, ["06", "07"], course_id="kvtest", exchange=str(exchange))
    students.mkdir()
    (students / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = 'kvtest'\nc.Exchange.root = {str(exchange)!r}\n")

    for assignment in ("lesson06", "lesson07"):
        _nbgrader(env, course, "generate_assignment", assignment, "--force")
        released = course / "release" / assignment / f"{assignment}.ipynb"
        out = _nbgrader(env, course, "validate", "--invert", str(released))
        assert "Success! The notebook does not pass any tests." in out
        _nbgrader(env, course, "release_assignment", assignment, "--force")

    # Released notebooks: no answer, no hidden test, no gradebook anywhere students can reach.
    for released in list((course / "release").rglob("*.ipynb")) + list(exchange.rglob("*.ipynb")):
        text = released.read_text()
        for secret in ("HIDDEN TESTS", "BEGIN SOLUTION", "grade_choice(", "grade_numeric(", "grade_function(",
                       "grade_parameterised(", "104857600000", "answer_main_cost = 'b'", "solve('07'",
                       "The cache gains one key and one value per token"):
            assert secret not in text, f"{secret!r} leaked into {released}"
    assert (course / "gradebook.db").exists()
    assert not list(exchange.rglob("*.db")) and not list((course / "release").rglob("*.db"))

    assert solve("06", "cache_size", "alice") != solve("06", "cache_size", "bob")
    for name in ("alice", "bob"):
        _student_works(env, students, name, ALICE if name == "alice" else BOB, tamper=name == "bob")
    for assignment in ("lesson06", "lesson07"):
        _nbgrader(env, course, "collect", assignment)
        _nbgrader(env, course, "autograde", assignment)
        _nbgrader(env, course, "generate_feedback", assignment)
    _nbgrader(env, course, "export")

    with open(course / "grades.csv", newline="") as f:
        rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(f)}
    scores = {key: float(r["score"]) for key, r in rows.items()}
    assert scores == {("alice", "lesson07"): 7.0, ("alice", "lesson06"): 4.0,
                      ("bob", "lesson07"): 1.0, ("bob", "lesson06"): 1.0}
    assert float(rows[("alice", "lesson06")]["max_score"]) == 6.0  # the free response waits for a human
    feedback = course / "feedback" / "bob" / "lesson07" / "lesson07.html"
    assert feedback.exists()
    # the deleted test cell was put back and run
    graded = nbformat.read(course / "autograded" / "bob" / "lesson07" / "lesson07.ipynb", as_version=4)
    restored = _cell(graded, "test_per_token_13b")
    assert "grade_numeric(" in restored.source and "missing from the submission" in restored.source


def _run_cells(nb) -> dict[str, bool]:
    """Run a notebook's code cells in one namespace, in process; test cell grade_id -> passed."""
    namespace: dict = {}
    results = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        try:
            exec(compile(cell.source, grade_id or "<cell>", "exec"), namespace)
            ok = True
        except Exception:
            ok = False
        if grade_id.startswith("test_"):
            results[grade_id] = ok
        elif not ok and not grade_id.startswith("answer_"):
            raise AssertionError(f"cell {grade_id or cell.source[:40]!r} failed")
    return results


def test_every_source_notebook_passes_and_its_release_fails(capsys):
    """What `nbgrader validate` and `validate --invert` check, for all 18 lessons, in process."""
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    for lesson in parse_lessons("00-17"):
        nb = build_notebook(load_quiz(lesson))
        source_results = _run_cells(nb)
        assert source_results and all(source_results.values()), (lesson, source_results)
        released, _ = ClearSolutions().preprocess(nb, {})
        released, _ = ClearHiddenTests().preprocess(released, {})
        assert not any(_run_cells(released).values()), lesson
