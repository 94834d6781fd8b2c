"""A class on one machine: per-student memory while running a lesson, and how many students run lessons at once.

Each student is the student's lab (`kvcourse lab`, a Jupyter server with JupyterLab) plus one kernel,
single-threaded as the course's kernels are, running every cell of a real lesson (class_student.py).
1. The survey: one student at a time runs each of a few lessons; the peak PSS and RSS of server +
   kernel, sampled every 0.2 s. The lesson with the highest peak is the one the class is sized on.
2. The sweep: N = 1, 2, 4, 8, ... students run that lesson at the same moment; the peak of their
   total PSS, the machine's lowest MemAvailable, the 1-minute load average, and each lesson's wall
   time against N = 1. It stops before a level whose memory would not fit with headroom, or once a
   level has run past its time budget.
3. The figures: students per machine by memory (peak PSS each, headroom kept) and by CPU (how much
   slower a lesson runs), and the Zero to JupyterHub resources they suggest.
The machine the course is developed on is shared: CPU timings are inflated by other work (the
load average is recorded beside them); memory figures are what they are.
Run: python -m benchmarks.bench_class   (quick check of the machinery: --quick, writes nothing)
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from benchmarks.class_student import Memory, Student, mem_available
from benchmarks.common import write_result
from kvcourse.syllabus import get_lesson

GIB = 1024**3
SURVEY_LESSONS = ("05", "11", "13", "14", "16")
MACHINE_GIB = 24  # the machine the figure is for: 2 cores, 24 GiB
HEADROOM_GIB = 3  # the OS, the hub and proxy, the page cache the image needs
SAMPLE_S = 0.2


@dataclass
class Peaks:
    """What a sampler saw: the peak of the total, per-role peaks, the lowest MemAvailable, the load averages."""

    total: Memory = field(default_factory=Memory)
    server: Memory = field(default_factory=Memory)
    kernel: Memory = field(default_factory=Memory)
    min_available: int = 0
    loads: list[float] = field(default_factory=list)


class Sampler:
    """Samples the students' memory every SAMPLE_S seconds in a thread, keeping the peaks."""

    def __init__(self, students: list[Student]) -> None:
        self.students = students
        self.peaks = Peaks(min_available=mem_available())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        p = self.peaks
        total = Memory()
        for student in self.students:
            server, kernel = student.memory()
            total += server + kernel
            p.server = Memory(max(p.server.pss, server.pss), max(p.server.rss, server.rss))
            p.kernel = Memory(max(p.kernel.pss, kernel.pss), max(p.kernel.rss, kernel.rss))
        p.total = Memory(max(p.total.pss, total.pss), max(p.total.rss, total.rss))
        p.min_available = min(p.min_available, mem_available())
        p.loads.append(os.getloadavg()[0])


def _gib(n: int) -> float:
    return round(n / GIB, 3)


def run_class(notebook: Path, num_students: int) -> dict:
    """``num_students`` students run ``notebook`` at the same moment; their memory peaks and wall times."""
    available_before = mem_available()
    students = [Student(notebook) for _ in range(num_students)]
    try:
        for student in students:
            student.start()
        with Sampler(students) as sampler:
            idle = sum((s + k for s, k in (st.memory() for st in students)), Memory())
            with ThreadPoolExecutor(num_students) as pool:
                seconds = list(pool.map(lambda st: st.run(), students))
    finally:
        for student in students:
            student.stop()
    p = sampler.peaks
    return {
        "lesson": notebook.name,
        "students": num_students,
        "seconds": [round(s, 1) for s in seconds],
        "median_seconds": round(statistics.median(seconds), 1),
        "idle_pss_gib": _gib(idle.pss),
        "idle_rss_gib": _gib(idle.rss),
        "peak_pss_gib": _gib(p.total.pss),
        "peak_rss_gib": _gib(p.total.rss),
        "peak_server_pss_gib": _gib(p.server.pss),
        "peak_kernel_pss_gib": _gib(p.kernel.pss),
        "peak_server_rss_gib": _gib(p.server.rss),
        "peak_kernel_rss_gib": _gib(p.kernel.rss),
        "mem_available_before_gib": _gib(available_before),
        "mem_available_min_gib": _gib(p.min_available),
        "load_avg_1min": {"mean": round(statistics.mean(p.loads), 2), "max": round(max(p.loads), 2)},
    }


def survey(lessons: tuple[str, ...]) -> list[dict]:
    """One student at a time runs each lesson; the peak memory of server + kernel."""
    rows = []
    for number in lessons:
        row = run_class(get_lesson(number).notebook_path, 1)
        rows.append(row)
        print(
            f"lesson {number}: peak PSS {row['peak_pss_gib']:.2f} GiB (server {row['peak_server_pss_gib']:.2f}, "
            f"kernel {row['peak_kernel_pss_gib']:.2f}), RSS {row['peak_rss_gib']:.2f} GiB, "
            f"{row['median_seconds']:.0f} s, load {row['load_avg_1min']['mean']}",
            flush=True,
        )
    return rows


def sweep(notebook: Path, max_students: int, per_student_gib: float, level_budget_s: float) -> dict:
    """N = 1, 2, 4, ... students at once, until memory (with headroom) or the time budget says stop."""
    rows, stopped = [], f"reached --max-students {max_students}"
    n = 1
    while n <= max_students:
        needed = n * per_student_gib + HEADROOM_GIB
        if mem_available() / GIB < needed:
            stopped = (
                f"memory: {n} students need about {needed:.1f} GiB with headroom, "
                f"{mem_available() / GIB:.1f} GiB available"
            )
            break
        start = time.perf_counter()
        row = run_class(notebook, n)
        row["slowdown_vs_1"] = round(row["median_seconds"] / rows[0]["median_seconds"], 2) if rows else 1.0
        rows.append(row)
        print(
            f"{n} students: total peak PSS {row['peak_pss_gib']:.2f} GiB, MemAvailable min "
            f"{row['mem_available_min_gib']:.1f} GiB, lesson {row['median_seconds']:.0f} s "
            f"(x{row['slowdown_vs_1']}), load {row['load_avg_1min']['mean']}",
            flush=True,
        )
        if time.perf_counter() - start > level_budget_s:
            stopped = (
                f"time: {n} students took {time.perf_counter() - start:.0f} s, over the {level_budget_s:.0f} s budget"
            )
            break
        n *= 2
    return {"lesson": notebook.name, "rows": rows, "stopped_by": stopped}


def figures(survey_rows: list[dict], sweep_result: dict, cpus: int, machine_gib: float = MACHINE_GIB) -> dict:
    """Students per machine by memory and by CPU, and Z2JH resources, from the measurements."""
    peak = max(survey_rows, key=lambda r: r["peak_pss_gib"])
    rows = sweep_result["rows"]
    largest = rows[-1]
    # What one more student adds, at the largest N measured (libraries shared between students count once).
    marginal = (
        (largest["peak_pss_gib"] - rows[0]["peak_pss_gib"]) / (largest["students"] - 1)
        if largest["students"] > 1
        else peak["peak_pss_gib"]
    )
    by_memory = math.floor((machine_gib - HEADROOM_GIB - rows[0]["peak_pss_gib"]) / max(marginal, 1e-9)) + 1
    by_memory_alone = math.floor((machine_gib - HEADROOM_GIB) / peak["peak_pss_gib"])
    slowdowns = {r["students"]: r["slowdown_vs_1"] for r in rows}
    within_2x = max((n for n, slowdown in slowdowns.items() if slowdown <= 2.0), default=1)
    # The model for an idle machine: each kernel is single-threaded, so up to `cpus` students at once run at
    # full speed and 2 x cpus at half speed. The measured slowdowns sit above it on a shared machine.
    by_cpu_2x = 2 * cpus
    return {
        "peak_lesson": peak["lesson"],
        "per_student_peak_pss_gib": peak["peak_pss_gib"],
        "per_student_peak_rss_gib": peak["peak_rss_gib"],
        "per_student_idle_pss_gib": peak["idle_pss_gib"],
        "marginal_pss_per_student_gib": round(marginal, 3),
        "students_by_memory": by_memory,
        "students_by_memory_without_sharing": by_memory_alone,
        "slowdown_by_students": slowdowns,
        "students_at_once_within_2x_measured": within_2x,
        "students_at_once_within_2x_idle_machine_model": by_cpu_2x,
        "headroom_gib": HEADROOM_GIB,
        "machine_gib": machine_gib,
        "cpus": cpus,
        "z2jh": {
            "mem_guarantee": f"{math.ceil(peak['peak_pss_gib'] * 4) / 4:g}G",
            "mem_limit": f"{math.ceil(peak['peak_rss_gib'] * 1.25 * 4) / 4:g}G",
            "cpu_guarantee": round(cpus / max(by_memory, 1), 2),
            "cpu_limit": 1,
        },
    }


def quick_notebook(folder: Path) -> Path:
    """A two-cell notebook that imports the course: the machinery's check, in seconds."""
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("import kvcourse\nx = list(range(10**5))"),
            nbformat.v4.new_code_cell("print(sum(x))"),
        ]
    )
    path = folder / "class_quick.ipynb"
    nbformat.write(nb, path)
    return path


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", default=",".join(SURVEY_LESSONS), help="lessons to survey, e.g. 05,11,16")
    parser.add_argument("--sweep-lesson", default=None, help="lesson for the sweep (default: the survey's peak)")
    parser.add_argument("--max-students", type=int, default=16)
    parser.add_argument("--level-budget-s", type=float, default=1200, help="stop the sweep after a level this long")
    parser.add_argument("--quick", action="store_true", help="one student, a two-cell notebook; writes nothing")
    args = parser.parse_args(argv)
    if args.quick:
        with tempfile.TemporaryDirectory() as folder:
            row = run_class(quick_notebook(Path(folder)), 1)
        print(
            f"one student, idle: PSS {row['idle_pss_gib']:.3f} GiB; peak PSS {row['peak_pss_gib']:.3f} GiB "
            f"(server {row['peak_server_pss_gib']:.3f}, kernel {row['peak_kernel_pss_gib']:.3f})"
        )
        return row
    lessons = tuple(n.strip() for n in args.lessons.split(",") if n.strip())
    survey_rows = survey(lessons)
    peak = max(survey_rows, key=lambda r: r["peak_pss_gib"])
    notebook = (
        get_lesson(args.sweep_lesson).notebook_path
        if args.sweep_lesson
        else get_lesson(peak["lesson"][:2]).notebook_path
    )
    sweep_result = sweep(notebook, args.max_students, peak["peak_pss_gib"], args.level_budget_s)
    result = {
        "how": " ".join(["python -m benchmarks.bench_class", *argv]),
        "server": "kvcourse lab (jupyter lab, the student's lab) per student; kernel sessions made "
        "through its REST API, cells sent over the kernel's connection file",
        "threads_per_kernel": 1,
        "survey": survey_rows,
        "sweep": sweep_result,
        "figures": figures(survey_rows, sweep_result, os.cpu_count() or 1),
        "note": "machine shared with other work while measured: timings inflated (see load_avg_1min); "
        "memory figures unaffected",
    }
    path = write_result("class", result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
