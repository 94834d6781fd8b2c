"""`kvcourse grade autograde`: each submission graded in a sandbox, its points decided outside it.

For every student (or one, with --student), from submitted/<student>/<assignment>/:
1. read the notebook, damaged or not, and find its answer cells (recovery.py);
2. build a grading notebook: the locked set-up cell, the collector (collector.py), the student's own
   code cells in their order, and after each answer a call that hands the answer over as plain JSON;
3. run it in a throw-away copy inside a bubblewrap sandbox, with a time limit per cell, a cap on
   each cell's output, and caps on memory, processes, CPU and disk (sandbox.py, sandbox_runner.py,
   caps.py, confine.py); with --jobs N, N submissions at once, each within its own caps;
4. read the plain values back and decide the points here, with the instructor's own code and the
   right answers computed here (decide.py);
5. write autograded/<student>/<assignment>/<assignment>.ipynb (verdicts, never hidden cases or right
   values), the scores into nbgrader's gradebook, and the outcome into instructor/status/.
A submission that cannot be read at all is reported in one line and marked "not graded", never 0.
"""

from __future__ import annotations

import json
import queue
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import nbformat

from ..bank import load_quiz
from ..model import Kind
from .caps import GiB, size_text
from .confine import available_cores, memory_available
from .decide import Course, decide, decide_free
from .gradebook import check_assignment, read_timestamp, save_status, write_gradebook
from .nbgrader_export import answer_name, lesson_of
from .notebook import (
    fed_records,
    feeder_plan,
    graded_notebook,
    grading_notebook,
    limit_notes,
    read_outputs,
    read_records,
    student_code,
)
from .recovery import NotGradable, match_cells, read_cells, shown_student_id, template_cells
from .sandbox import INSIDE, Limits, feeder_address, preflight, run_submission

_STORE = threading.Lock()  # the gradebook and instructor/status/ are written by one submission at a time
SPARE_MEMORY = 2 * GiB  # what --jobs leaves the machine beside the memory caps of the submissions at once
LAB_CELL_TIMEOUT_S = 180.0  # the least time limit of a lab's cells (its runs take about 2 s on a quiet core)


@dataclass
class Result:
    """One student's outcome, as printed, exported and kept in instructor/status/."""

    student: str
    status: str  # "graded" or "not graded"
    reason: str = ""
    score: float = 0.0  # automatic points
    max_score: float = 0.0  # all points, the hand-graded ones included
    auto_max: float = 0.0  # the points decided automatically
    manual_points: float = 0.0  # points waiting for a human (free responses)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    verdicts: dict[str, str] = field(default_factory=dict)
    # Instructor-only, for `kvcourse grade report` (report.py); a status file written before has none of them.
    points: dict[str, float | None] = field(default_factory=dict)  # per question; None: to grade by hand
    answers: dict[str, Any] = field(default_factory=dict)  # the plain value handed over: "b", 8, "3.2 GB"
    details: dict[str, dict] = field(default_factory=dict)  # a Decision's details (a lab's traces), as JSON

    def line(self) -> str:
        if self.status != "graded":
            return f"could not grade {self.student}: {self.reason}"
        manual = f", {self.manual_points:g} to grade by hand" if self.manual_points else ""
        return (
            f"graded {self.student}: {self.score:g} of {self.auto_max:g} automatic points"
            f"{manual} ({self.seconds:.1f} s)"
        )


MAX_KEPT_CHARS = 200  # an answer kept for the report: a letter, a number, "3.2 GB"; not an essay


def kept_answers(records: dict[str, dict], question_ids: list[str]) -> dict[str, Any]:
    """The plain value each question's answer handed over (None, a bool, a number or a short string);
    a missing, unreadable or list answer (a function's results) is not kept."""
    kept = {}
    for qid in question_ids:
        record = records.get(qid) or {}
        value = record.get("value")
        if "value" not in record or "missing" in record or not isinstance(value, (str, int, float, type(None))):
            continue
        kept[qid] = value[:MAX_KEPT_CHARS] if isinstance(value, str) else value
    return kept


def plain_details(decision: Any) -> dict | None:
    """A Decision's optional `details` (a lab's traces) as plain JSON, or None where it has none."""
    details = getattr(decision, "details", None)
    if not isinstance(details, dict):
        return None
    return json.loads(json.dumps(details, default=str))  # a value JSON cannot hold is kept as its text


# What travels with a graded notebook, as nbgrader's own autograde copies it: above all
# submission_secret.txt, which release_feedback needs to file the feedback where the student's
# fetch_feedback finds it, and timestamp.txt. Links are never followed; nbgrader's ignored names stay.
IGNORED = (".ipynb_checkpoints", "__pycache__", "feedback")


def copy_companions(submitted: Path, graded: Path) -> None:
    """Copy the submission's plain files other than notebooks (timestamp, secret, data) beside the graded one."""
    for path in sorted(submitted.rglob("*")):
        relative = path.relative_to(submitted)
        if (
            any(part in IGNORED for part in relative.parts)
            or path.suffix in (".ipynb", ".pyc")
            or path.is_symlink()
            or not path.is_file()
        ):  # rglob itself never enters a linked folder
            continue
        target = graded / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


# -- one student, and the whole command ------------------------------------------------------------


def grade_student(
    course: Course, assignment: str, student: str, limits: Limits, *, sandbox: bool = True, slot: int = 0
) -> Result:
    """Grade one submission (see the module docstring); never raises for anything in the submission.
    `slot` tells the submissions graded at once apart (--jobs)."""
    start = time.monotonic()
    quiz = load_quiz(lesson_of(assignment))
    if any(q.kind is Kind.LAB for q in quiz.questions):  # a lab's cell serves six traces: a slow machine needs time
        limits = replace(
            limits,
            cell_timeout_s=max(limits.cell_timeout_s, LAB_CELL_TIMEOUT_S),
            submission_timeout_s=max(limits.submission_timeout_s, LAB_CELL_TIMEOUT_S),
        )
    source = course.directory / "source" / assignment / f"{assignment}.ipynb"
    template = template_cells(source)
    folder = course.directory / "submitted" / student / assignment
    graded_dir = course.directory / "autograded" / student / assignment
    result = Result(
        student,
        "graded",
        max_score=float(quiz.total_points),
        auto_max=float(sum(q.points for q in quiz.questions if q.auto_graded)),
    )
    timestamp = read_timestamp(folder, result.notes)
    grade_cells = {f"test_{q.id}": q for q in quiz.questions if q.auto_graded}
    grade_cells |= {f"free_{q.id}": q for q in quiz.questions if not q.auto_graded}

    def not_graded(reason: str) -> Result:  # scores left empty for a human, never a 0
        result.status, result.reason = "not graded", reason
        shutil.rmtree(graded_dir, ignore_errors=True)
        with _STORE:
            write_gradebook(course, assignment, student, timestamp, dict.fromkeys(grade_cells), {})
            result.seconds = time.monotonic() - start
            save_status(course, assignment, result)
        return result

    try:
        raw_cells, notes = read_cells(folder / f"{assignment}.ipynb")
    except NotGradable as err:
        return not_graded(str(err))
    names = {q.id: answer_name(q) for q in quiz.questions if q.auto_graded}
    sub = match_cells(raw_cells, template, names)
    result.notes += notes + sub.notes
    shown = shown_student_id(raw_cells)
    if shown is not None and shown != student and any(q.kind is Kind.PARAMETERISED for q in quiz.questions):
        result.notes.append(
            f"check by hand: its values were drawn for student id {shown!r}, but it was "
            f"collected as {student!r} and is graded on {student!r}'s values"
        )
    with tempfile.TemporaryDirectory(prefix="kvgrade-") as scratch:
        copy = Path(scratch) / "copy"
        copy.mkdir()
        results_file = (INSIDE if sandbox else copy) / "results.jsonl"
        plan = feeder_plan(quiz, course, student)  # labs B and C: their traces go to the feeder, not the notebook
        feeder = feeder_address(copy, sandbox) if plan else ""
        nb, origin = grading_notebook(sub, template, quiz, course, student, results_file, feeder)
        nbformat.write(nb, copy / "grading.ipynb")
        hidden = [course.directory, Path(course.exchange)]
        run = run_submission(copy, student, limits, hidden, sandbox=sandbox, slot=slot, feeder_plan=plan)
        started = (copy / "out.ipynb").is_file() and (copy / "out.ipynb").stat().st_size > 0
        records, fed_notes = fed_records(read_records(copy / "results.jsonl"), plan, run.fed)
        result.notes += fed_notes
        executed = read_outputs(copy / "out.ipynb", len(nb.cells), limits.output_cap_bytes)
    if not started:  # the machine passed the preflight, so this is the submission's doing (it deleted it?)
        result.notes.append("the run left no outputs; graded on the answers it handed over")
    if run.returncode is None:
        result.notes.append(f"stopped at the time limit of {limits.submission_timeout_s:g} s per submission")
    result.notes += limit_notes(executed, limits.cell_timeout_s, limits.output_cap_bytes)
    if run.reached.get("memory") and run.returncode != 0 and not any("memory limit" in n for n in result.notes):
        result.notes.append(f"{limits.caps.memory_text()} reached: the run stopped there")
    outputs = {index: executed[i] for i, index in enumerate(origin) if index is not None}
    code = student_code(sub, template)  # a lab's answer is read for the engine's own implementation
    decisions = {
        q.id: decide(q, records.get(q.id), course, student, code if q.kind is Kind.LAB else "")
        for q in quiz.questions
        if q.auto_graded
    }
    stub = next((c.source for c in template if c.role == "free"), "")
    for q in quiz.questions:
        if not q.auto_graded:
            decisions[q.id] = decide_free(q, sub.free.get(q.id), stub)
    graded = graded_notebook(source, sub, outputs, decisions, quiz, course, student)
    shutil.rmtree(graded_dir, ignore_errors=True)
    graded_dir.mkdir(parents=True)
    nbformat.write(graded, graded_dir / f"{assignment}.ipynb")
    copy_companions(folder, graded_dir)
    scores = {grade_id: decisions[q.id].points for grade_id, q in grade_cells.items()}
    answered = {f"answer_{q}": q in sub.answers for q in names} | {
        f"free_{q.id}": decisions[q.id].points is None for q in quiz.questions if not q.auto_graded
    }
    result.score = sum(d.points or 0.0 for d in decisions.values())
    result.manual_points = sum(d.max_points for d in decisions.values() if d.points is None)
    result.verdicts = {qid: d.verdict for qid, d in decisions.items()}
    result.points = {qid: d.points for qid, d in decisions.items()}
    result.answers = kept_answers(records, list(names))
    result.details = {qid: kept for qid, d in decisions.items() if (kept := plain_details(d)) is not None}
    with _STORE:
        write_gradebook(course, assignment, student, timestamp, scores, answered)
        result.seconds = time.monotonic() - start
        save_status(course, assignment, result)
    return result


def submitted_students(course: Course, assignment: str) -> list[str]:
    """The students with a folder for this assignment under submitted/."""
    root = course.directory / "submitted"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / assignment).is_dir() and not p.is_symlink())


def jobs_that_fit(jobs: int | None, limits: Limits, log=print) -> int:
    """How many submissions to grade at once: `jobs` (default: this machine's cores), fewer where their memory
    caps together would not leave SPARE_MEMORY of what the machine has available now."""
    wanted = jobs if jobs is not None else len(available_cores())
    if wanted < 1:
        raise ValueError(f"--jobs must be at least 1, got {wanted}")
    available, cap = memory_available(), limits.caps.memory_bytes
    if cap is None or available is None or wanted == 1:
        return wanted
    fit = max(1, (available - SPARE_MEMORY) // cap)
    if fit < wanted:
        log(
            f"grading {fit} at a time, not {wanted}: {wanted} memory caps of {size_text(cap)} and "
            f"{size_text(SPARE_MEMORY)} to spare need more than the {size_text(available)} available"
        )
    return min(wanted, fit)


def autograde(
    course_dir: Path,
    assignment: str,
    students: list[str] | None = None,
    limits: Limits | None = None,
    *,
    sandbox: bool = True,
    jobs: int | None = 1,
    log=print,
) -> list[Result]:
    """Grade every submission of an assignment (or the named students'), `jobs` at a time (None: one per
    core); one line per student to `log`, in the order they finish, and the results in the students' order."""
    course = Course.load(course_dir)
    limits = limits or Limits()
    lesson_of(assignment)
    if not (course.directory / "source" / assignment / f"{assignment}.ipynb").is_file():
        raise ValueError(f"no source/{assignment}/{assignment}.ipynb in {course.directory}")
    if sandbox:
        from .sandbox import MISSING_BWRAP, bwrap_path

        if bwrap_path() is None:
            raise RuntimeError(MISSING_BWRAP)
    check_assignment(course, assignment)
    how = preflight(limits, sandbox=sandbox)  # a machine that cannot run a notebook must not hand out zeros
    for line in how.lines():
        log(line)
    everyone = submitted_students(course, assignment)
    if students:
        unknown = [s for s in students if s not in everyone]
        if unknown:
            raise ValueError(
                f"no submission of {assignment} from {', '.join(unknown)} under submitted/ "
                "(run `nbgrader collect` first?)"
            )
    todo = students or everyone
    if not todo:
        log(f"no submissions of {assignment} under {course.directory / 'submitted'} (run `nbgrader collect` first?)")
        return []
    workers = min(jobs_that_fit(jobs, limits, log), len(todo))
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(workers):
        slots.put(slot)
    printing = threading.Lock()

    def one(student: str) -> Result:
        slot = slots.get()
        try:
            result = grade_student(course, assignment, student, limits, sandbox=sandbox, slot=slot)
        finally:
            slots.put(slot)
        with printing:
            log(result.line())
            for note in result.notes:
                log(f"  {student}: {note}")
        return result

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kvgrade") as pool:
        results = list(pool.map(one, todo))
    if len(todo) > 1:
        log(f"{len(todo)} submissions graded in {time.monotonic() - start:.0f} s, {workers} at a time")
    return results


REFUSAL = (
    "nbgrader autograde is switched off for this course and changed nothing: grade with "
    "`kvcourse grade autograde {assignment}` (sandboxed; see quizzes/INSTRUCTORS.md)."
)

try:  # the refusal nbgrader_config.py installs; nbgrader is a dependency, but keep this module importable without
    from nbconvert.exporters import NotebookExporter
    from nbgrader.converters.base import NbGraderException
    from nbgrader.preprocessors import NbGraderPreprocessor

    class RefuseAutogradeExporter(NotebookExporter):
        """nbgrader_config.py's `c.Autograde.exporter_class`: stops `nbgrader autograde` before it touches a folder.

        nbgrader's Autograde converter makes its exporter before any submission is looked at
        (BaseConverter.start), so `nbgrader autograde`, with or without --force, and formgrader's
        Autograde button stop here with one line: --force would otherwise delete autograded/ first.
        """

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            coursedir = getattr(self.parent, "coursedir", None)
            message = REFUSAL.format(assignment=getattr(coursedir, "assignment_id", "") or "ASSIGNMENT")
            self.log.error(message)
            raise NbGraderException(message)

    class RefuseNbgraderAutograde(NbGraderPreprocessor):
        """Stops `nbgrader autograde` on a course written by `kvcourse grade init` (it would grade nothing)."""

        def preprocess(self, nb, resources):
            raise NbGraderException(
                "this course is graded by `kvcourse grade autograde ASSIGNMENT` (sandboxed; see "
                "quizzes/INSTRUCTORS.md): its notebooks hold no tests for nbgrader's own autograde."
            )
except ImportError:  # pragma: no cover
    pass
