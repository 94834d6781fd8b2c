"""nbgrader's gradebook and kvcourse's status file: where autograde's outcomes are kept and exported.

Scores go into nbgrader's gradebook (gradebook.db), so formgrader, manual grading and nbgrader's
feedback work as usual. What nbgrader cannot say, that a submission could not be graded at all
and why, is kept per assignment in instructor/status/<assignment>.json, and `export_grades`
writes both into grades.csv with a status column: "not graded" is never a 0.
"""

from __future__ import annotations

import csv
import json
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..bank import load_quiz
from ..model import Kind
from ..units import format_quantity
from .decide import Course, expected_answer
from .nbgrader_export import INSTRUCTOR_DIR, lesson_of
from .recovery import NotGradable, read_bytes


def _db_url(course: Course) -> str:
    return f"sqlite:///{course.directory / 'gradebook.db'}"


def check_assignment(course: Course, assignment: str) -> None:
    """ValueError, before anything runs, when nbgrader's gradebook does not know the assignment."""
    from nbgrader.api import Gradebook, MissingEntry

    if not (course.directory / "gradebook.db").is_file():
        raise ValueError(f"{course.directory} has no gradebook.db yet: run `nbgrader generate_assignment "
                         f"{assignment}` there first")
    with warnings.catch_warnings(), Gradebook(_db_url(course), course.course_id) as gb:
        warnings.simplefilter("ignore")
        try:
            gb.find_assignment(assignment)
        except MissingEntry:
            raise ValueError(f"{assignment} is not in the gradebook: run `nbgrader generate_assignment "
                             f"{assignment}` in {course.directory} first") from None


def write_gradebook(course: Course, assignment: str, student: str, timestamp, scores: dict[str, float | None],
                     answered: dict[str, bool]) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    with warnings.catch_warnings(), Gradebook(_db_url(course), course.course_id) as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's own session use, not ours to fix
        try:
            gb.find_assignment(assignment)
        except MissingEntry:
            raise ValueError(f"{assignment} is not in the gradebook: run `nbgrader generate_assignment {assignment}` "
                             f"in {course.directory} first") from None
        gb.update_or_create_student(student)
        if timestamp is not None:
            gb.update_or_create_submission(assignment, student, timestamp=timestamp)
        else:
            gb.update_or_create_submission(assignment, student)
        for grade_id, points in scores.items():
            try:
                grade = gb.find_grade(grade_id, assignment, assignment, student)
            except MissingEntry:
                continue  # a cell the gradebook does not know (the source changed after release)
            grade.auto_score = points
            grade.needs_manual_grade = points is None or grade.manual_score is not None
        for grade_id, given in answered.items():
            try:
                comment = gb.find_comment(grade_id, assignment, assignment, student)
            except MissingEntry:
                continue
            comment.auto_comment = None if given else "No response."
        gb.db.commit()


def status_path(course: Course, assignment: str) -> Path:
    return course.directory / INSTRUCTOR_DIR / "status" / f"{assignment}.json"


def load_status(course: Course, assignment: str) -> dict[str, dict]:
    """What the last autograde run said about each student of an assignment."""
    try:
        data = json.loads(status_path(course, assignment).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_status(course: Course, assignment: str, result: Any) -> None:
    path = status_path(course, assignment)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = load_status(course, assignment)
    data[result.student] = {**asdict(result), "graded_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


def read_timestamp(folder: Path, notes: list[str]):
    from nbgrader.utils import parse_utc

    try:
        text = read_bytes(folder / "timestamp.txt").decode("utf-8").strip()
        return parse_utc(text) if text else None
    except NotGradable:
        return None
    except (ValueError, UnicodeError):
        notes.append("timestamp.txt cannot be read; graded without a submission time")
        return None



def export_grades(course_dir: Path, to: Path) -> list[dict]:
    """grades.csv: one row per student and assignment, with a status that tells 'not graded' from a 0."""
    from nbgrader.api import Gradebook, MissingEntry

    course = Course.load(course_dir)
    rows = []
    with Gradebook(_db_url(course), course.course_id) as gb:
        for assignment in gb.assignments:
            status = load_status(course, assignment.name)
            for student in gb.students:
                row = {"assignment": assignment.name, "student_id": student.id, "status": "", "score": "",
                       "max_score": assignment.max_score, "reason": ""}
                try:
                    submission = gb.find_submission(assignment.name, student.id)
                except MissingEntry:
                    row["status"] = "not submitted"
                    rows.append(row)
                    continue
                known = status.get(student.id, {})
                if known.get("status") == "not graded":
                    row.update(status="not graded", reason=known.get("reason", ""))
                elif not known:
                    row.update(status="not graded", reason="not autograded yet (kvcourse grade autograde)")
                else:
                    row["score"] = submission.score
                    row["status"] = "to grade by hand" if submission.needs_manual_grade else "graded"
                rows.append(row)
    with open(to, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["assignment", "student_id", "status", "score", "max_score", "reason"])
        writer.writeheader()
        writer.writerows(rows)
    return rows


def expected_answers(course_dir: Path, assignment: str, student: str) -> list[str]:
    """One line per question: the right answer for this student (for an instructor checking a grade)."""
    course = Course.load(course_dir)
    lines = []
    for q in load_quiz(lesson_of(assignment)).questions:
        value = expected_answer(q, course, student)
        if q.kind in (Kind.NUMERIC, Kind.PARAMETERISED):
            value = format_quantity(value, q.unit)
        elif q.kind is Kind.CODE:
            value = "; ".join(f"{q.function}{tuple(args)!r} -> {got!r}" for args, got in value)
        elif q.kind is Kind.FREE:
            value = "(graded by hand) " + value[:120] + ("..." if len(value) > 120 else "")
        lines.append(f"{q.id}: {value}")
    return lines
