"""The nbgrader export: generated metadata, and the whole real pipeline in a temporary course:
`kvcourse grade init` (its printed next step run as printed), nbgrader's release, fetch, submit and
collect, `kvcourse grade autograde` in the sandbox, nbgrader's feedback, and `kvcourse grade export`,
for a quick check (lesson 07) and a lab (lesson 18, graded on public and hidden traces)."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from guards import needs
from nbgrader_cli import NBGRADER, nbgrader_env

from kvcourse.cli import main
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.grading.decide import Course, code_cases, expected_answer, lab_traces
from kvcourse.quizzes.grading.nbgrader_export import build_notebook, parse_lessons
from kvcourse.quizzes.grading.sandbox import bwrap_path
from kvcourse.quizzes.labs import solution_source

STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


def test_parse_lessons():
    assert parse_lessons("01-03") == ["01", "02", "03"]
    assert parse_lessons("7,16, 3") == ["03", "07", "16"]
    with pytest.raises(ValueError, match="backwards"):
        parse_lessons("05-01")
    assert parse_lessons("17-20") == ["17", "18", "19", "20"]  # the three labs
    with pytest.raises(KeyError):
        parse_lessons("29")


def test_source_notebooks_have_valid_nbgrader_metadata():
    from nbgrader.nbgraderformat import MetadataValidator

    for lesson in ("05", "07", "16"):
        nb = build_notebook(load_quiz(lesson), "salt")
        MetadataValidator().validate_nb(nb)  # raises on invalid nbgrader v3 metadata
        meta = [c.metadata["nbgrader"] for c in nb.cells if "nbgrader" in c.metadata]
        assert all(m["schema_version"] == 3 for m in meta)
        graded = {m["grade_id"]: m["points"] for m in meta if m["grade"]}
        assert sum(graded.values()) == load_quiz(lesson).total_points
        ids = [m["grade_id"] for m in meta]
        assert len(ids) == len(set(ids)) and [c.id for c in nb.cells] == ids  # fixed cell ids, for recovery


# ---------------------------------------------------------------------------------------------
# The whole pipeline, with the real nbgrader CLI.


def _nbgrader(env: dict, cwd: Path, *args: str, ok: bool = True) -> str:
    done = subprocess.run([NBGRADER, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert (done.returncode == 0) == ok, f"nbgrader {' '.join(args)}:\n{out}"
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


def _alice(course: Course) -> dict[str, str]:  # everything right, with and without units
    quiz = load_quiz("07")
    per_token_gqa = expected_answer(quiz.question("per_token_gqa"), course, "alice")
    cache_bytes_param = expected_answer(quiz.question("cache_bytes_param"), course, "alice")
    return {
        "main_cost": 'answer_main_cost = "B"',
        "per_token_gqa": f'answer_per_token_gqa = "{per_token_gqa / 1e3} kB"',
        "users_to_outweigh_13b": "answer_users_to_outweigh_13b = 8",
        "cache_bytes_param": f"answer_cache_bytes_param = {cache_bytes_param}",
        "formula_code": "    return 2 * num_layers * num_kv_heads * head_dim"
        " * num_tokens * num_users * bytes_per_value",
    }


BOB = {  # one right, the rest wrong or malformed
    "main_cost": 'answer_main_cost = "b"',  # right: 1 point
    "per_token_gqa": 'answer_per_token_gqa = "abc"',  # malformed: 0 (and bob deletes its test cell)
    "users_to_outweigh_13b": "answer_users_to_outweigh_13b = None",  # malformed: 0 (and bob edits its test cell)
    "cache_bytes_param": "answer_cache_bytes_param = 12345",
    "formula_code": "    return 1 / 0",  # raises: 0
}
FREE_TEXT = "Weights are stored once; the cache multiplies per-token bytes by tokens and by users."


def _as_student(env: dict, students: Path, name: str) -> dict[str, str]:
    """``env`` for one student's account: their own Jupyter data folder, so their own nbgrader cache
    (submit keeps each submission's secret there; fetch_feedback reads it back)."""
    return {**env, "JUPYTER_DATA_DIR": str(students / name / ".jupyter-data")}


def _student_works(
    env, students: Path, name: str, answers: dict, tamper: bool, fetch: bool, shown_id: str | None = None
) -> None:
    env = _as_student(env, students, name)
    folder = students / name
    folder.mkdir(parents=True)
    (folder / "nbgrader_config.py").write_text((students / "nbgrader_config.py").read_text())
    path = folder / "lesson07" / "lesson07.ipynb"
    if fetch:
        _nbgrader(env, folder, "fetch_assignment", "lesson07")
        shutil.copy(path, students / "fetched.ipynb")
    else:  # a classmate's fetched copy: the same released notebook, without a second nbgrader start
        path.parent.mkdir()
        shutil.copy(students / "fetched.ipynb", path)
    nb = nbformat.read(path, as_version=4)
    for qid, code in answers.items():
        _answer(nb, qid, code)
    _cell(nb, "free_outgrow_weights").source = FREE_TEXT
    if shown_id:  # the set-up cell as it printed when run under another login
        _cell(nb, "setup").outputs = [
            nbformat.v4.new_output("stream", name="stdout", text=f"Your student id: {shown_id}\n")
        ]
    if tamper:
        nb.cells.remove(_cell(nb, "test_per_token_gqa"))
        _cell(nb, "test_users_to_outweigh_13b").source = "pass  # nothing to see here"
    nbformat.write(nb, path)
    _nbgrader(env, folder, "submit", "lesson07", f"--student={name}")


def _student_does_the_lab(env, students: Path, name: str) -> None:
    """Lesson 18 as a student does it: fetch, the reference's class in the lab's cell, right choices, submit."""
    env, folder = _as_student(env, students, name), students / name
    _nbgrader(env, folder, "fetch_assignment", "lesson18")
    path = folder / "lesson18" / "lesson18.ipynb"
    nb = nbformat.read(path, as_version=4)
    for q in load_quiz("18").questions:
        cell = _cell(nb, f"answer_{q.id}")
        assert "raise NotImplementedError()" in cell.source
        cell.source = solution_source(q.lab) if q.lab else f"answer_{q.id} = {q.correct!r}"
    nbformat.write(nb, path)
    _nbgrader(env, folder, "submit", "lesson18", f"--student={name}")


@pytest.mark.slow
@needs("needs bubblewrap (apt-get install bubblewrap)" if bwrap_path() is None else None)
def test_full_nbgrader_pipeline(tmp_path, capsys):
    env = nbgrader_env(tmp_path)
    course_dir, exchange, students = tmp_path / "course", tmp_path / "exchange", tmp_path / "students"
    exchange.mkdir()
    students.mkdir()
    assert (
        main(
            [
                "grade",
                "init",
                str(course_dir),
                "--lessons",
                "07,18",
                "--course-id",
                "kvtest",
                "--exchange",
                str(exchange),
            ]
        )
        == 0
    )
    hint = capsys.readouterr().out.strip().splitlines()[-1].strip()
    assert hint.startswith("cd ") and "nbgrader generate_assignment lesson07" in hint
    assert "nbgrader generate_assignment lesson18" in hint
    shell = {**env, "PATH": os.environ.get("PATH", "")}  # the shell `grade init` ran in
    done = subprocess.run(["bash", "-c", hint], env=shell, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr  # the printed next step works as printed
    (students / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = 'kvtest'\nc.Exchange.root = {str(exchange)!r}\n"
    )
    _nbgrader(env, course_dir, "release_assignment", "lesson07")
    _nbgrader(env, course_dir, "release_assignment", "lesson18")
    course = Course.load(course_dir)

    # Released notebooks: no answer, no secret, nothing imported from the course, no gradebook.
    shipped = [course_dir / "release" / "lesson07" / "lesson07.ipynb", *exchange.rglob("lesson07.ipynb")]
    assert len(shipped) == 2
    for path in shipped:
        text = path.read_text()
        for secret in (
            "BEGIN SOLUTION",
            "answer_users_to_outweigh_13b = 8",
            "answer_main_cost = 'b'",
            course.secret,
            "expected_number",
            "from kvcourse",
            "num_tokens * num_users",
            "The weights are stored once",
        ):
            assert secret not in text, f"{secret!r} leaked into {path}"
    assert not list(exchange.rglob("*.db")) and not list(exchange.rglob("course.json"))
    # The lab's: no solution, no hidden trace (they are drawn at grading time), only the lab's public check.
    lab_hidden = [t.to_plain() for t in lab_traces(load_quiz("18").question("block_manager"), course, "alice")[3:]]
    shipped = [course_dir / "release" / "lesson18" / "lesson18.ipynb", *exchange.rglob("lesson18.ipynb")]
    assert len(shipped) == 2
    for path in shipped:
        text = path.read_text()
        for secret in ("BEGIN SOLUTION", "self.free_list", "ref_counts", course.secret, "hidden 1", "record_runs"):
            assert secret not in text, f"{secret!r} leaked into {path}"
        assert "from kvcourse.labs import check" in text and "class MyBlockManager(BlockManagerBase)" in text

    _student_works(env, students, "alice", _alice(course), tamper=False, fetch=True)
    _student_works(env, students, "bob", BOB, tamper=True, fetch=False, shown_id="root")
    _student_does_the_lab(env, students, "alice")
    _nbgrader(env, course_dir, "collect", "lesson07")
    _nbgrader(env, course_dir, "collect", "lesson18")
    out = _nbgrader(
        env, course_dir, "autograde", "lesson07", "--student=bob", ok=False
    )  # nbgrader's own: refused, with the reason
    assert "kvcourse grade autograde" in out
    assert main(["grade", "autograde", "lesson07", "--course", str(course_dir)]) == 0
    log = capsys.readouterr().out
    assert "graded alice: 8 of 8 automatic points, 2 to grade by hand" in log
    assert "graded bob: 1 of 8 automatic points, 2 to grade by hand" in log
    assert "bob: 1 locked cells were missing" in log and "bob: 1 locked cells were edited" in log
    assert "bob: check by hand: its values were drawn for student id 'root', but it was collected as 'bob'" in log
    assert "alice:" not in log.replace("graded alice:", "")  # an untouched notebook logs no warnings
    assert main(["grade", "autograde", "lesson18", "--course", str(course_dir)]) == 0
    assert "graded alice: 13 of 13 automatic points" in capsys.readouterr().out

    _nbgrader(env, course_dir, "generate_feedback", "lesson07")
    feedback = (course_dir / "feedback" / "bob" / "lesson07" / "lesson07.html").read_text()
    assert "Right: (b)" in feedback and "test cases pass" in feedback
    hidden = code_cases(load_quiz("07").question("formula_code"), course, "bob")[5:]
    right = expected_answer(load_quiz("07").question("cache_bytes_param"), course, "bob")
    secrets = [", ".join(map(str, case)) for case in hidden] + [f"{right:,.0f}", f"{right:.0f}", "record_calls"]
    for secret in secrets:
        assert secret not in feedback, secret
    _nbgrader(env, course_dir, "generate_feedback", "lesson18")
    feedback = (course_dir / "feedback" / "alice" / "lesson18" / "lesson18.html").read_text()
    assert "Right: all 6 traces pass (3 public, 3 hidden)." in feedback and "record_lab" not in feedback
    for trace in lab_hidden:
        assert not any(str(prompt)[1:-1] in feedback for prompt, *_ in trace["requests"] if len(prompt) >= 6)

    # The feedback reaches the students: released to the exchange, fetched by each into their own folder.
    _nbgrader(env, course_dir, "release_feedback", "lesson07")
    for name, verdict in (("alice", "Right"), ("bob", "Right: (b)")):
        _nbgrader(_as_student(env, students, name), students / name, "fetch_feedback", "lesson07")
        fetched = list((students / name / "lesson07" / "feedback").glob("*/lesson07.html"))
        assert len(fetched) == 1, f"{name} fetched {fetched}"
        assert verdict in fetched[0].read_text()

    assert main(["grade", "export", "--course", str(course_dir), "--to", str(tmp_path / "grades.csv")]) == 0
    with open(tmp_path / "grades.csv", newline="") as f:
        every = list(csv.DictReader(f))
    rows = {r["student_id"]: r for r in every if r["assignment"] == "lesson07"}
    assert {name: float(r["score"]) for name, r in rows.items()} == {"alice": 8.0, "bob": 1.0}
    assert rows["alice"]["status"] == "to grade by hand" and float(rows["alice"]["max_score"]) == 10.0
    lab = next(r for r in every if r["assignment"] == "lesson18" and r["student_id"] == "alice")
    assert lab["status"] == "graded" and float(lab["score"]) == float(lab["max_score"]) == 13.0
