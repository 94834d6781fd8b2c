"""One lesson-07 course for the hostile grading tests (test_grading_hostile.py, test_grading_caps.py): the
released notebook, honest answers for any student, a submission filed as `nbgrader collect` would, a
snapshot of every byte an innocent student owns, and one grading run shared by both xdist workers.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat

from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.grading.decide import Course, expected_answer
from kvcourse.quizzes.grading.gradebook import load_status
from kvcourse.quizzes.grading.nbgrader_export import init_course

ASSIGNMENT = "lesson07"
RIGHT_CODE = (
    "def kv_cache_bytes(num_layers, num_kv_heads, head_dim, num_tokens, num_users, bytes_per_value):\n"
    "    return 2 * num_layers * num_kv_heads * head_dim * num_tokens * num_users * bytes_per_value\n"
)
FREE_TEXT = "Weights are stored once; the cache grows with every token and every user, in 16 or 32 bits alike."


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
        JUPYTER_DATA_DIR=str(home / "data"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    env.pop("NBGRADER_EXECUTION", None)
    return env


def _release(course_dir: Path) -> nbformat.NotebookNode:
    return nbformat.read(course_dir / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)


def _role(cell) -> tuple[str, str]:
    meta = cell.metadata.get("kvcourse", {})
    return meta.get("role", ""), meta.get("question", "")


def right_answers(course: Course, student: str) -> dict[str, str]:
    """Honest, right answer cells for this student (their own parameterised values)."""
    answers = {}
    for q in load_quiz("07").questions:
        if q.kind.value == "code":
            answers[q.id] = RIGHT_CODE
        elif q.kind.value != "free":
            answers[q.id] = f"answer_{q.id} = {expected_answer(q, course, student)!r}"
    return answers


def notebook(
    course_dir: Path, answers: dict[str, str], free: str | None = FREE_TEXT, extra: dict[str, str] | None = None
) -> nbformat.NotebookNode:
    """The released notebook with these answer cells, and extra code cells after named cells."""
    nb = _release(course_dir)
    cells = []
    for cell in nb.cells:
        role, qid = _role(cell)
        if role == "answer" and qid in answers:
            cell.source = answers[qid]
        if role == "free" and free is not None:
            cell.source = free
        cells.append(cell)
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if extra and grade_id in extra:
            cells.append(nbformat.v4.new_code_cell(extra[grade_id]))
    nb.cells = cells
    return nb


def _submit(course_dir: Path, student: str, content: nbformat.NotebookNode | bytes | None) -> Path:
    folder = course_dir / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / "timestamp.txt").write_text("2026-05-04 09:00:00.000000 UTC")
    path = folder / f"{ASSIGNMENT}.ipynb"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        nbformat.write(content, path)
    return path


def _snapshot(course_dir: Path, students: list[str], course_id: str) -> dict:
    """Every byte of these students' files, their gradebook rows, and the instructor's own files."""
    files = {}
    for top in ("submitted", "autograded"):
        for student in students:
            for path in sorted((course_dir / top / student).rglob("*")):
                if path.is_file():
                    files[str(path.relative_to(course_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    for top in ("source", "release", "instructor/course.json", "nbgrader_config.py"):
        root = course_dir / top
        for path in sorted([root] if root.is_file() else root.rglob("*")):
            if path.is_file():
                files[str(path.relative_to(course_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    with sqlite3.connect(course_dir / "gradebook.db") as db:
        rows = db.execute(
            "select s.student_id, g.cell_id, g.auto_score, g.manual_score, g.needs_manual_grade "
            "from grade g join submitted_notebook n on g.notebook_id = n.id "
            "join submitted_assignment s on n.assignment_id = s.id order by 1, 2"
        ).fetchall()
        stamps = db.execute("select student_id, timestamp from submitted_assignment order by 1").fetchall()
        sources = db.execute("select name, source, checksum from source_cell order by 1").fetchall()
    status = load_status(Course.load(course_dir), ASSIGNMENT)
    return json.loads(
        json.dumps(
            {
                "files": files,
                "grades": [r for r in rows if r[0] in students],
                "stamps": [r for r in stamps if r[0] in students],
                "sources": sources,
                "status": {s: status.get(s) for s in students},
            }
        )
    )


def make_course(tmp: Path, course_id: str) -> tuple[Path, Course]:
    """A lesson-07 course in tmp/course, its exchange in tmp/exchange, generated by nbgrader as an instructor would."""
    course_dir = tmp / "course"
    init_course(course_dir, ["07"], course_id=course_id, exchange=str(tmp / "exchange"))
    (tmp / "exchange").mkdir()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "nbgrader"), "generate_assignment", ASSIGNMENT],
        cwd=course_dir,
        env=_env(tmp),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return course_dir, Course.load(course_dir)


def shared_run(tmp_path_factory, worker_id: str, name: str, grade: Callable[[Path], dict]) -> dict:
    """grade(folder) once per test session, its JSON-able result shared by every xdist worker."""
    if worker_id == "master":
        data = grade(tmp_path_factory.mktemp(name))
    else:
        shared = tmp_path_factory.getbasetemp().parent / name
        shared.mkdir(exist_ok=True)
        with open(shared / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = shared / "graded.json"
            if not done.exists():
                done.write_text(json.dumps(grade(shared)))
            data = json.loads(done.read_text())
    data["course"] = Path(data["course"])
    return data
