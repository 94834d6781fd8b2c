"""nbgrader's gradebook and kvcourse's status file: where autograde's outcomes are kept and exported.

Scores go into nbgrader's gradebook (gradebook.db), so formgrader, manual grading and nbgrader's
feedback work as usual. What nbgrader cannot say, that a submission could not be graded at all
and why, is kept per assignment in instructor/status/<assignment>.json, and `export_grades`
writes both into grades.csv with a status column ("not graded" is never a 0) and a reason column
(why not graded, what waits for a human, what autograde noted), leaving out lessons never released.
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
from .course import INSTRUCTOR_DIR, Course
from .decide import expected_answer
from .nbgrader_export import lesson_of
from .recovery import NotGradable, read_bytes


def _db_url(course: Course) -> str:
    return f"sqlite:///{course.directory / 'gradebook.db'}"


def check_assignment(course: Course, assignment: str) -> None:
    """ValueError, before anything runs, when nbgrader's gradebook does not know the assignment."""
    from nbgrader.api import Gradebook, MissingEntry

    if not (course.directory / "gradebook.db").is_file():
        raise ValueError(
            f"{course.directory} has no gradebook.db yet: run `nbgrader generate_assignment {assignment}` there first"
        )
    with warnings.catch_warnings(), Gradebook(_db_url(course), course.course_id) as gb:
        warnings.simplefilter("ignore")
        try:
            gb.find_assignment(assignment)
        except MissingEntry:
            raise ValueError(
                f"{assignment} is not in the gradebook: run `nbgrader generate_assignment "
                f"{assignment}` in {course.directory} first"
            ) from None


def write_gradebook(
    course: Course, assignment: str, student: str, timestamp, scores: dict[str, float | None], answered: dict[str, bool]
) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    with warnings.catch_warnings(), Gradebook(_db_url(course), course.course_id) as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's own session use, not ours to fix
        try:
            gb.find_assignment(assignment)
        except MissingEntry:
            raise ValueError(
                f"{assignment} is not in the gradebook: run `nbgrader generate_assignment {assignment}` "
                f"in {course.directory} first"
            ) from None
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


def _exchange_folder(course: Course, *parts: str) -> Path:
    return Path(course.exchange) / course.course_id / Path(*parts)


def released(course: Course, assignment: str) -> bool:
    """Whether `nbgrader release_assignment` put the assignment in the exchange (and it is still there)."""
    try:
        return _exchange_folder(course, "outbound", assignment).is_dir()
    except OSError:
        return False


def exchange_submitters(course: Course, assignment: str) -> set[str]:
    """Who submitted the assignment to the exchange (inbound/<student>+<assignment>+<time>[+<random>]),
    read as `nbgrader collect` reads it; empty when the inbound folder cannot be listed."""
    try:
        names = [path.name for path in _exchange_folder(course, "inbound").iterdir()]
    except OSError:
        return set()
    parts = [name.rsplit("+", 3) for name in names]
    return {p[0] for p in parts if len(p) >= 3 and p[1] == assignment}


def _collected(course: Course, student: str, assignment: str) -> bool:
    folder = course.directory / "submitted" / student / assignment
    return folder.is_dir() and not folder.is_symlink()


def _by_hand(submission) -> list[str]:
    """What of a graded submission waits for, or was given, a human's points (from nbgrader's gradebook)."""
    todo, review, done = [], [], []
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            question = grade.name.split("_", 1)[-1]
            if grade.needs_manual_grade and grade.manual_score is None:
                todo.append(f"{question} ({grade.max_score:g} point{'' if grade.max_score == 1 else 's'})")
            elif grade.needs_manual_grade:
                review.append(question)
            elif grade.manual_score is not None:
                done.append(question)
    parts = []
    if todo:
        parts.append("to grade by hand: " + ", ".join(todo))
    if review:
        parts.append("to review in formgrader (regraded after your points): " + ", ".join(review))
    if done:
        parts.append("graded by hand: " + ", ".join(done))
    return parts


def _row(course: Course, gb, assignment, student: str, status: dict[str, dict], waiting: set[str]) -> dict:
    """One line of grades.csv: a status that tells 'not graded' from a 0, and the reason for it."""
    from nbgrader.api import MissingEntry

    row = {
        "assignment": assignment.name,
        "student_id": student,
        "status": "",
        "score": "",
        "max_score": assignment.max_score,
        "reason": "",
    }
    autograde = f"kvcourse grade autograde {assignment.name}"
    try:
        submission = gb.find_submission(assignment.name, student)
    except MissingEntry:
        submission = None
    known = status.get(student, {}) if submission is not None else {}
    if submission is None and _collected(course, student, assignment.name):
        row.update(status="not graded", reason=f"collected, not autograded yet: run `{autograde}`")
    elif submission is None and student in waiting:
        row.update(
            status="not graded",
            reason=f"submitted to the exchange, not collected yet: run "
            f"`nbgrader collect {assignment.name}`, then `{autograde}`",
        )
    elif submission is None:
        row.update(status="not submitted", reason="nothing collected under submitted/, nothing waiting in the exchange")
    elif known.get("status") == "not graded":
        row.update(status="not graded", reason=known.get("reason", ""))
    elif not known:
        row.update(status="not graded", reason=f"not autograded yet: run `{autograde}`")
    else:
        row["score"] = submission.score
        row["status"] = "to grade by hand" if submission.needs_manual_grade else "graded"
        parts = _by_hand(submission) + list(known.get("notes", []))
        row["reason"] = "; ".join(parts or [f"autograded {known.get('graded_at', '')}".strip()])
    return row


def export_grades(course_dir: Path, to: Path, log=print) -> list[dict]:
    """grades.csv: one row per student and released assignment, with a status and its reason.

    An assignment nobody submitted and that is not in the exchange was never released: it is left
    out (and `log` says so), not listed as "not submitted" for everyone.
    """
    from nbgrader.api import Gradebook

    course = Course.load(course_dir)
    rows = []
    submitted = course.directory / "submitted"
    collected = (
        {p.name for p in submitted.iterdir() if p.is_dir() and not p.is_symlink()} if submitted.is_dir() else set()
    )
    left_out = []
    with warnings.catch_warnings(), Gradebook(_db_url(course), course.course_id) as gb:
        warnings.simplefilter("ignore")
        waiting = {a.name: exchange_submitters(course, a.name) for a in gb.assignments}
        students = sorted({s.id for s in gb.students} | collected | set().union(*waiting.values()))
        for assignment in gb.assignments:
            if not (
                released(course, assignment.name)
                or assignment.num_submissions
                or waiting[assignment.name]
                or any(_collected(course, s, assignment.name) for s in students)
            ):
                left_out.append(assignment.name)
                continue
            status = load_status(course, assignment.name)
            rows += [_row(course, gb, assignment, student, status, waiting[assignment.name]) for student in students]
    with open(to, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["assignment", "student_id", "status", "score", "max_score", "reason"])
        writer.writeheader()
        writer.writerows(rows)
    if left_out:
        log(
            f"left out, never released (not in the exchange {_exchange_folder(course, 'outbound')}, nothing "
            f"submitted): {', '.join(left_out)}"
        )
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
