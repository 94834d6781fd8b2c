"""The class benchmark's machinery (benchmarks/bench_class.py): a real student's lab and kernel, measured.

One student runs a two-cell notebook (seconds, not a lesson); the figures are not checked, only
that they come out and hang together. `python -m benchmarks.bench_class` measures the real lessons.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ sits beside tests/, not in the package

from benchmarks.bench_class import figures, quick_notebook, run_class  # noqa: E402
from benchmarks.class_student import LessonError, Memory, descendants, process_memory  # noqa: E402


def test_process_memory_reads_pss_and_rss_of_this_process():
    here = process_memory(os.getpid())
    assert 0 < here.pss <= here.rss
    assert process_memory(2**22 + 7) == Memory()  # a process that is not there: nothing, not an error


@pytest.mark.slow
def test_one_student_runs_a_notebook_in_the_lab_and_is_measured(tmp_path: Path):
    row = run_class(quick_notebook(tmp_path), 1)
    assert row["students"] == 1 and len(row["seconds"]) == 1
    assert row["peak_server_pss_gib"] > 0 and row["peak_kernel_pss_gib"] > 0
    assert row["peak_pss_gib"] <= row["peak_rss_gib"] and row["idle_pss_gib"] <= row["peak_pss_gib"]
    assert row["mem_available_min_gib"] <= row["mem_available_before_gib"] + 1


@pytest.mark.slow
def test_a_failing_cell_names_itself_and_stops_the_student(tmp_path: Path):
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("raise ValueError('not this lesson')")]
    )
    path = tmp_path / "broken.ipynb"
    nbformat.write(nb, path)
    before = set(descendants(os.getpid()))
    with pytest.raises(LessonError, match=r"broken.ipynb cell 1 failed .*ValueError: not this lesson"):
        run_class(path, 1)
    assert set(descendants(os.getpid())) <= before  # the lab and its kernel are gone


def test_figures_follow_from_the_rows():
    def row(n, pss, seconds):
        return {
            "lesson": "16_x.ipynb",
            "students": n,
            "peak_pss_gib": pss,
            "peak_rss_gib": pss * 1.1,
            "idle_pss_gib": 0.3,
            "median_seconds": seconds,
            "slowdown_vs_1": seconds / 20,
        }

    survey = [row(1, 2.0, 20), row(1, 3.0, 20)]
    sweep = {"rows": [row(1, 3.0, 20), row(2, 5.5, 22), row(4, 10.5, 40)]}
    out = figures(survey, sweep, cpus=2, machine_gib=24)
    assert out["per_student_peak_pss_gib"] == 3.0 and out["marginal_pss_per_student_gib"] == 2.5
    assert out["students_by_memory"] == 1 + int((24 - 3 - 3.0) / 2.5)
    assert out["students_by_memory_without_sharing"] == 7
    assert out["slowdown_by_students"] == {1: 1.0, 2: 1.1, 4: 2.0} and out["students_at_once_within_2x_measured"] == 4
    assert out["z2jh"]["mem_guarantee"] == "3G" and out["z2jh"]["cpu_limit"] == 1
