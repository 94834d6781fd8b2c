"""The `kvcourse progress` and `kvcourse grade init` subcommands (lesson 00)."""

from __future__ import annotations

import argparse
from pathlib import Path


def _progress(args: argparse.Namespace) -> int:
    from .progress import format_progress

    print(format_progress())
    return 0


def _grade_init(args: argparse.Namespace) -> int:
    from .nbgrader_export import init_course, parse_lessons

    lessons = parse_lessons(args.lessons)
    written = init_course(Path(args.directory), lessons, course_id=args.course_id, exchange=args.exchange)
    print(f"nbgrader course written to {args.directory}: {len(written)} assignments "
          f"({', '.join(written)}). Next: cd {args.directory} && nbgrader generate_assignment --all")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `progress` and `grade init` to the kvcourse command line."""
    p = sub.add_parser("progress", help="print your quick-check progress, per lesson")
    p.set_defaults(func=_progress)
    grade = sub.add_parser("grade", help="instructors: build an nbgrader course from the question bank")
    grade_sub = grade.add_subparsers(dest="grade_command", metavar="ACTION", required=True)
    p = grade_sub.add_parser("init", help="write nbgrader_config.py and one source assignment per lesson")
    p.add_argument("directory", help="the course folder to create (must be empty or absent)")
    p.add_argument("--lessons", default="00-17", help='which lessons, e.g. "01-05" or "03,07,16" (default: all, 00-17)')
    p.add_argument("--course-id", default="kvcourse", help="nbgrader course id (default kvcourse)")
    p.add_argument("--exchange", default=None,
                   help="exchange folder for release/fetch/submit (default: nbgrader's own, /srv/nbgrader/exchange)")
    p.set_defaults(func=_grade_init)
