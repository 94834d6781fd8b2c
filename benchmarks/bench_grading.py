"""A class of submissions through `kvcourse grade autograde`: serial against --jobs 2, in one run.

One course (`kvcourse grade init`, `nbgrader generate_assignment lessonNN`, lesson 07 by default),
N submissions filed as `nbgrader collect` files them (default 100: each student's own right answers,
every tenth with two wrong ones; in a lab, lessons 18-20, every tenth hands in the skeleton), then
the whole class graded in the sandbox under the default caps, first one at a time, then two at a
time, then (with --rounds 2) both again. The figure is the wall time of each, and serial / jobs-2
per round; the scores of every pass must be identical.
Run: .venv/bin/python -m benchmarks.bench_grading [--lesson 07] [--students 100] [--jobs 2] [--rounds 1]
     (--quick: 6 students, writes nothing). Writes benchmarks/results/grading.json (grading_lessonNN.json
     for another lesson).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import nbformat

from benchmarks.common import machine_header, write_result
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.grading.autograde import autograde
from kvcourse.quizzes.grading.confine import enforcement
from kvcourse.quizzes.grading.decide import Course, expected_answer
from kvcourse.quizzes.grading.nbgrader_export import init_course
from kvcourse.quizzes.grading.sandbox import Limits, preflight

WRONG = ("per_token_gqa", "main_cost")  # lesson 07's questions every tenth student gets wrong


def _solution(cell_source: str) -> str:
    """The source notebook's answer with nbgrader's solution markers taken out."""
    return re.sub(r"^\s*### (BEGIN|END) SOLUTION\n?", "", cell_source, flags=re.M)


def build_class(folder: Path, students: int, lesson: str = "07") -> Path:
    course_dir, assignment = folder / "course", f"lesson{lesson}"
    init_course(course_dir, [lesson], course_id="kvbench", exchange=str(folder / "exchange"))
    (folder / "exchange").mkdir()
    bin_dir = str(Path(sys.executable).parent)  # nbgrader calls its `alembic` helper from PATH
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [f"{bin_dir}/nbgrader", "generate_assignment", assignment],
        cwd=course_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)
    course, quiz = Course.load(course_dir), load_quiz(lesson)
    source = nbformat.read(course_dir / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    code = {
        c.metadata["kvcourse"]["question"]: _solution(c.source)
        for c in source.cells
        if c.metadata.get("kvcourse", {}).get("role") == "answer"
    }
    release = course_dir / "release" / assignment / f"{assignment}.ipynb"
    for i in range(students):
        student = f"s{i:03d}"
        nb = nbformat.read(release, as_version=4)
        for cell in nb.cells:
            meta = cell.metadata.get("kvcourse", {})
            if meta.get("role") != "answer":
                continue
            q = quiz.question(meta["question"])
            if q.kind.value == "lab":
                cell.source = cell.source if i % 10 == 9 else code[q.id]  # the skeleton, or the reference
                continue
            right = code[q.id] if q.kind.value == "code" else f"answer_{q.id} = {expected_answer(q, course, student)!r}"
            cell.source = f"answer_{q.id} = 3" if i % 10 == 9 and q.id in WRONG else right
        target = course_dir / "submitted" / student / assignment
        target.mkdir(parents=True)
        (target / "timestamp.txt").write_text("2026-05-04 09:00:00.000000 UTC")
        nbformat.write(nb, target / f"{assignment}.ipynb")
    return course_dir


def grade_class(course_dir: Path, jobs: int, lesson: str = "07") -> tuple[float, dict[str, float]]:
    start = time.monotonic()
    results = autograde(course_dir, f"lesson{lesson}", None, Limits(), jobs=jobs, log=lambda line: None)
    return time.monotonic() - start, {r.student: r.score for r in results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lesson", default="07", help="the lesson whose assignment is graded (default 07)")
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="6 students, one round, nothing written")
    args = parser.parse_args(argv)
    students = 6 if args.quick else args.students
    how = enforcement(Limits().caps)
    print("\n".join(how.lines()))
    preflight(Limits())  # once, before any timing (autograde runs it once per process)
    with tempfile.TemporaryDirectory(prefix="kvbench-grading-") as folder:
        course_dir = build_class(Path(folder), students, args.lesson)
        rounds, scores = [], None
        for r in range(1 if args.quick else args.rounds):
            serial, got = grade_class(course_dir, 1, args.lesson)
            parallel, again = grade_class(course_dir, args.jobs, args.lesson)
            if got != again or (scores is not None and got != scores):
                raise SystemExit("the scores differ between passes: grading is not deterministic")
            scores = got
            rounds.append(
                {
                    "serial_s": round(serial, 1),
                    f"jobs{args.jobs}_s": round(parallel, 1),
                    "speedup": round(serial / parallel, 2),
                }
            )
            print(
                f"round {r + 1}: {students} submissions serial {serial:.0f} s ({serial / students:.2f} s each), "
                f"--jobs {args.jobs} {parallel:.0f} s: {serial / parallel:.2f}x"
            )
    payload = {
        **machine_header(),
        "lesson": args.lesson,
        "students": students,
        "jobs": args.jobs,
        "caps_via": how.via,
        "caps": how.lines()[1:],
        "rounds": rounds,
        "score_counts": {f"{k:g}": v for k, v in sorted(Counter(scores.values()).items())},
    }
    if not args.quick:
        name = "grading" if args.lesson == "07" else f"grading_lesson{args.lesson}"
        print(f"wrote {write_result(name, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
