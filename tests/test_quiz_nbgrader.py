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
    "main_cost": 'answer_main_cost = "B"',
    "per_token_gqa": f'answer_per_token_gqa = "{solve("07", "per_token_gqa", "alice") / 1e3} kB"',
    "users_to_outweigh_13b": "answer_users_to_outweigh_13b = 8",
    "cache_bytes_param": f'answer_cache_bytes_param = "{solve("07", "cache_bytes_param", "alice") / 1e6} MB"',
    "formula_code": "    return 2 * num_layers * num_kv_heads * head_dim * num_tokens * num_users * bytes_per_value",
}
BOB = {  # one right, the rest wrong or malformed
    "main_cost": 'answer_main_cost = "b"',                     # right: 1 point
    "per_token_gqa": 'answer_per_token_gqa = "abc"',            # malformed: 0 (and bob deletes its test cell)
    "users_to_outweigh_13b": "answer_users_to_outweigh_13b = None",  # malformed: 0 (and bob edits its test cell)
    # alice's values, not bob's: the hidden test recomputes bob's own from his id
    "cache_bytes_param": f"answer_cache_bytes_param = {solve('07', 'cache_bytes_param', 'alice'):.0f}",
    "formula_code": "    return 1 / 0",                        # raises: 0
}
FREE_TEXT = "Weights are stored once; the cache multiplies per-token bytes by tokens and by users."


def _student_works(env, students: Path, name: str, answers: dict, tamper: bool) -> None:
    folder = students / name
    folder.mkdir(parents=True)
    (folder / "nbgrader_config.py").write_text((students / "nbgrader_config.py").read_text())
    _nbgrader(env, folder, "fetch_assignment", "lesson07")
    path = folder / "lesson07" / "lesson07.ipynb"
    nb = nbformat.read(path, as_version=4)
    for qid, code in answers.items():
        _answer(nb, qid, code)
    _cell(nb, "free_outgrow_weights").source = FREE_TEXT
    if tamper:
        nb.cells.remove(_cell(nb, "test_per_token_gqa"))
        _cell(nb, "test_users_to_outweigh_13b").source = "pass  # nothing to see here"
    nbformat.write(nb, path)
    _nbgrader(env, folder, "submit", "lesson07", f"--student={name}")


@pytest.mark.slow
def test_full_nbgrader_pipeline(tmp_path):
    env = _env(tmp_path)
    course, exchange, students = tmp_path / "course", tmp_path / "exchange", tmp_path / "students"
    exchange.mkdir()
    students.mkdir()
    init_course(course, ["07"], course_id="kvtest", exchange=str(exchange))
    (students / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = 'kvtest'\nc.Exchange.root = {str(exchange)!r}\n")

    _nbgrader(env, course, "generate_assignment", "lesson07")
    released = course / "release" / "lesson07" / "lesson07.ipynb"
    out = _nbgrader(env, course, "validate", "--invert", str(released))
    assert "Success! The notebook does not pass any tests." in out
    _nbgrader(env, course, "release_assignment", "lesson07")

    # Released notebooks: no answer, no hidden test, no gradebook anywhere students can reach.
    shipped = [released, *exchange.rglob("*.ipynb")]
    assert len(shipped) == 2
    for path in shipped:
        text = path.read_text()
        for secret in ("HIDDEN TESTS", "BEGIN SOLUTION", "grade_choice(", "grade_numeric(", "grade_function(",
                       "grade_parameterised(", "answer_users_to_outweigh_13b = 8", "answer_main_cost = 'b'", "solve('07'",
                       "num_tokens * num_users", "The weights are stored once, whatever the traffic"):
            assert secret not in text, f"{secret!r} leaked into {path}"
    assert (course / "gradebook.db").exists()
    assert not list(exchange.rglob("*.db")) and not list((course / "release").rglob("*.db"))

    assert solve("07", "cache_bytes_param", "alice") != solve("07", "cache_bytes_param", "bob")
    _student_works(env, students, "alice", ALICE, tamper=False)
    _student_works(env, students, "bob", BOB, tamper=True)
    for command in ("collect", "autograde", "generate_feedback"):
        _nbgrader(env, course, command, "lesson07")
    _nbgrader(env, course, "export")

    with open(course / "grades.csv", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert {name: float(r["score"]) for name, r in rows.items()} == {"alice": 8.0, "bob": 1.0}
    assert float(rows["alice"]["max_score"]) == 10.0  # the free response (2 points) waits for a human
    assert (course / "feedback" / "bob" / "lesson07" / "lesson07.html").exists()
    # bob's deleted test cell was put back, and his edited one restored, before grading
    graded = nbformat.read(course / "autograded" / "bob" / "lesson07" / "lesson07.ipynb", as_version=4)
    restored = _cell(graded, "test_per_token_gqa")
    assert "grade_parameterised(" in restored.source and "missing from the submission" in restored.source
    assert "grade_numeric(" in _cell(graded, "test_users_to_outweigh_13b").source

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
