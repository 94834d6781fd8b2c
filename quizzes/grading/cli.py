"""The instructor's `kvcourse grade init|autograde|export|answers|report` subcommands (quizzes/INSTRUCTORS.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .caps import Caps


def _grade_init(args: argparse.Namespace) -> int:
    from .decide import Course
    from .nbgrader_export import STUDENTS_DIR, ensure_exchange, init_course, next_steps, parse_lessons

    lessons = parse_lessons(args.lessons)
    directory = Path(args.directory)
    written = init_course(directory, lessons, course_id=args.course_id, exchange=args.exchange)
    exchange = Course.load(directory).exchange
    todo = ensure_exchange(exchange)
    print(
        f"nbgrader course written to {directory}: {len(written)} assignments ({', '.join(written)}).\n"
        f"Its secret is in {directory / 'instructor'}: never release or share that folder.\n"
        f"The exchange is {exchange}"
        + (f"; it does not exist yet, create it:\n  {todo}\n" if todo else ".\n")
        + f"Your students need {directory / STUDENTS_DIR / 'nbgrader_config.py'} as their "
        "~/.jupyter/nbgrader_config.py (the course id and the exchange).\n"
        f"Next, to create the gradebook and the released notebooks:\n  "
        f"{next_steps(directory, written)}"
    )
    return 0


def _bytes(text: str) -> int:
    from ..units import AnswerFormatError, parse_quantity

    try:
        return int(parse_quantity(text, "bytes"))
    except AnswerFormatError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _grade_autograde(args: argparse.Namespace) -> int:
    from .autograde import autograde
    from .caps import Caps
    from .sandbox import Limits

    try:
        caps = Caps(None if args.no_memory_cap else args.memory_cap, args.processes, args.cpus, args.disk_cap)
    except ValueError as err:
        raise SystemExit(f"kvcourse grade autograde: {err}") from None
    limits = Limits(args.timeout, args.output_cap, max(args.submission_timeout, args.timeout), caps)
    if args.unsafe_no_sandbox:
        print(
            "WARNING: --unsafe-no-sandbox: students' code runs with your rights and can read and change "
            "your files. Use it only for a trial with submissions you trust."
        )
    if args.no_memory_cap:
        print(
            "WARNING: --no-memory-cap: one submission can take all of this machine's memory. Use it only for "
            "a trial with submissions you trust."
        )
    try:
        results = autograde(
            Path(args.course), args.assignment, args.student, limits, sandbox=not args.unsafe_no_sandbox, jobs=args.jobs
        )
    except RuntimeError as err:
        raise SystemExit(f"kvcourse grade autograde: {err}") from None
    return 1 if any(r.status != "graded" for r in results) else 0


def _grade_export(args: argparse.Namespace) -> int:
    from .gradebook import export_grades

    rows = export_grades(Path(args.course), Path(args.to))
    not_graded = sum(r["status"] == "not graded" for r in rows)
    print(f"{len(rows)} rows written to {args.to} ({not_graded} not graded: see the status and reason columns)")
    return 0


def _grade_answers(args: argparse.Namespace) -> int:
    from .gradebook import expected_answers

    print("\n".join(expected_answers(Path(args.course), args.assignment, args.student)))
    return 0


def _grade_report(args: argparse.Namespace) -> int:
    from .decide import Course
    from .report import build_report
    from .report_page import check_html_path, default_html_path, render_text, write_html

    course = Course.load(Path(args.course))
    report = build_report(course, args.assignment)
    path = check_html_path(course, Path(args.html)) if args.html else default_html_path(course, args.assignment)
    print(render_text(report))
    print(f"\nHTML report (instructors only, never release it): {write_html(report, path)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `grade init|autograde|export|answers|report` to the kvcourse command line."""
    grade = sub.add_parser("grade", help="instructors: an nbgrader course from the question bank, graded safely")
    grade_sub = grade.add_subparsers(dest="grade_command", metavar="ACTION", required=True)
    p = grade_sub.add_parser("init", help="write nbgrader_config.py and one source assignment per lesson")
    p.add_argument("directory", help="the course folder to create (must be empty or absent)")
    p.add_argument(
        "--lessons",
        default="00-20",
        help='which lessons, e.g. "01-05" or "03,07,16" (default: all, 00-20, the labs 18-20 included)',
    )
    p.add_argument("--course-id", default="kvcourse", help="nbgrader course id (default kvcourse)")
    p.add_argument(
        "--exchange",
        default=None,
        help="exchange folder for release/fetch/submit, created if it can be (default: nbgrader's own, "
        "/usr/local/share/nbgrader/exchange)",
    )
    p.set_defaults(func=_grade_init)

    p = grade_sub.add_parser("autograde", help="grade collected submissions, each in a sandbox")
    p.add_argument("assignment", help="e.g. lesson07")
    p.add_argument(
        "--student",
        action="append",
        default=None,
        help="grade only this student (repeat for several; default: every submission)",
    )
    p.add_argument("--course", default=".", help="the course folder (default: the current one)")
    p.add_argument("--timeout", type=float, default=30.0, help="time limit per cell, in seconds (default 30)")
    p.add_argument(
        "--submission-timeout", type=float, default=300.0, help="time limit per submission, in seconds (default 300)"
    )
    p.add_argument(
        "--output-cap",
        type=_bytes,
        default=1_000_000,
        help='output kept per cell, e.g. "1 MB" or 1000000 (default 1 MB)',
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="submissions graded at once, each within its own caps (default: one per core)",
    )
    p.add_argument(
        "--memory-cap",
        type=_bytes,
        default=Caps.memory_bytes,
        help='memory per submission, all its processes together, e.g. "2 GiB" (default 2 GiB)',
    )
    p.add_argument(
        "--no-memory-cap",
        action="store_true",
        help="grade without a memory cap: only for a trial with submissions you trust",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=Caps.processes,
        help=f"processes and threads per submission at once (default {Caps.processes})",
    )
    p.add_argument(
        "--cpus", type=float, default=Caps.cpus, help=f"cores' worth of CPU time per submission (default {Caps.cpus:g})"
    )
    p.add_argument(
        "--disk-cap",
        type=_bytes,
        default=Caps.disk_bytes,
        help='what a submission may write, its folder and /tmp together, e.g. "512 MiB" (default 512 MiB)',
    )
    p.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run without bubblewrap: only for a trial on your own machine with submissions you trust",
    )
    p.set_defaults(func=_grade_autograde)

    p = grade_sub.add_parser("export", help="grades.csv with a status per row: graded, not graded (why), ...")
    p.add_argument("--course", default=".", help="the course folder (default: the current one)")
    p.add_argument("--to", default="grades.csv", help="the CSV file to write (default grades.csv)")
    p.set_defaults(func=_grade_export)

    p = grade_sub.add_parser("answers", help="print one student's right answers (their own values and cases)")
    p.add_argument("assignment", help="e.g. lesson07")
    p.add_argument("--student", required=True, help="the student id")
    p.add_argument("--course", default=".", help="the course folder (default: the current one)")
    p.set_defaults(func=_grade_answers)

    p = grade_sub.add_parser("report", help="what the class got wrong: the most common misconceptions first")
    p.add_argument("assignment", help="e.g. lesson07 (graded with `kvcourse grade autograde` first)")
    p.add_argument("--course", default=".", help="the course folder (default: the current one)")
    p.add_argument(
        "--html",
        default=None,
        help="where to write the HTML page (default: instructor/reports/ASSIGNMENT.html in the course)",
    )
    p.set_defaults(func=_grade_report)
