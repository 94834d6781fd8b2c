"""Caps per submission through the real autograde (issue 27): a memory hog, a /tmp filler, a fork storm
and a CPU spinner, each with every answer right, graded two at a time beside innocent students.

Each scores exactly what its honest work earns (all 8 automatic points: the attack sits in a cell of
its own), each cap it broke is named in its notes and so in the export, the innocent students'
files and grades do not change by a byte, and the machine's available memory stays above a safe
margin throughout. The same memory hog graded with the caps forced onto plain resource limits
shows the fallback holds too. `pytest tests/quizzes/test_grading_caps.py -s` prints the table.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, replace
from pathlib import Path

import hostile_course as hc
import nbformat
import pytest
from guards import needs

from kvcourse.quizzes.grading import confine, sandbox
from kvcourse.quizzes.grading.autograde import autograde, jobs_that_fit
from kvcourse.quizzes.grading.caps import Caps, GiB, MiB
from kvcourse.quizzes.grading.gradebook import export_grades
from kvcourse.quizzes.grading.sandbox import Limits, bwrap_path

CAPS = Caps(memory_bytes=1 * GiB, processes=64, cpus=1.0, disk_bytes=192 * MiB)
LIMITS = Limits(cell_timeout_s=20.0, output_cap_bytes=1_000_000, submission_timeout_s=150.0, caps=CAPS)
SAFE_MARGIN = 2 * GiB  # the machine's available memory never falls below this while it grades
INNOCENTS = ["alice", "carol"]
ATTACKS = {
    "hog": "import numpy as np\nhog = np.ones(2**29)  # 4 GiB in one array",
    "hog_procs": (
        "import os, time\nkids = []\nfor _ in range(3):  # 3 x 600 MiB: each below the cap, together above\n"
        "    pid = os.fork()\n    if pid == 0:\n        block = bytearray(600 * 2**20)\n        time.sleep(3)\n"
        "        os._exit(0)\n    kids.append(pid)\nfor pid in kids:\n    os.waitpid(pid, 0)"
    ),
    "filler": (
        "n = 0\ntry:\n    while True:\n        open(f'/tmp/fill{n}', 'wb').write(b'x' * 16 * 2**20)\n        n += 1\n"
        "finally:\n    print(n, 'files in /tmp')\nwhile True:\n    open(f'fill{n}', 'wb').write(b'x' * 16 * 2**20)\n"
        "    n += 1"
    ),
    "storm": ("import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(60)\n        os._exit(0)"),
    "spinner": (
        "import os, resource, time\nstart = time.time()\nkids = []\nfor _ in range(4):\n    pid = os.fork()\n"
        "    if pid == 0:\n        end = time.time() + 3\n        while time.time() < end:\n            pass\n"
        "        os._exit(0)\n    kids.append(pid)\nfor pid in kids:\n    os.waitpid(pid, 0)\n"
        "used = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(f'SPIN {(used.ru_utime + used.ru_stime) / (time.time() - start):.2f}')"
    ),
}
FORCED = "hog_rlimits"  # the memory hog again, with the caps forced onto resource limits

pytestmark = needs("needs bubblewrap (apt-get install bubblewrap)" if bwrap_path() is None else None)


def _watch_memory(stop: threading.Event, lowest: list[int]) -> None:
    while not stop.wait(0.05):
        available = confine.memory_available()
        if available is not None:
            lowest[0] = min(lowest[0], available)


def _grade(tmp: Path) -> dict:
    course_dir, course = hc.make_course(tmp, "kvcaps")
    for name in [*INNOCENTS, *ATTACKS, FORCED]:
        attack = ATTACKS.get(name, ATTACKS["hog"]) if name not in INNOCENTS else None
        nb = hc.notebook(
            course_dir, hc.right_answers(course, name), extra={"test_main_cost": attack} if attack else None
        )
        hc._submit(course_dir, name, nb)
    log: list[str] = []
    results = autograde(course_dir, hc.ASSIGNMENT, INNOCENTS, LIMITS, log=log.append)
    before = hc._snapshot(course_dir, INNOCENTS, course.course_id)
    lowest, stop = [confine.memory_available() or 0], threading.Event()
    start_available = lowest[0]
    watcher = threading.Thread(target=_watch_memory, args=(stop, lowest), daemon=True)
    watcher.start()
    try:
        results += autograde(course_dir, hc.ASSIGNMENT, list(ATTACKS), LIMITS, jobs=2, log=log.append)
        forced = Limits(20.0, 1_000_000, 150.0, replace(CAPS, via="rlimits"))
        results += autograde(course_dir, hc.ASSIGNMENT, [FORCED], forced, log=log.append)
    finally:
        stop.set()
        watcher.join()
    after = hc._snapshot(course_dir, INNOCENTS, course.course_id)
    spins = {}
    for name in ("spinner",):
        nb = nbformat.read(course_dir / "autograded" / name / hc.ASSIGNMENT / f"{hc.ASSIGNMENT}.ipynb", as_version=4)
        text = "".join(o.get("text", "") for cell in nb.cells for o in cell.get("outputs", []))
        spins[name] = float(text.split("SPIN ")[1].split()[0])
    how = confine.enforcement(CAPS)
    return {
        "course": str(course_dir),
        "results": {r.student: asdict(r) for r in results},
        "log": log,
        "before": before,
        "after": after,
        "lowest": lowest[0],
        "start": start_available,
        "spins": spins,
        "via": how.via,
        "processes_capped": bool(how.processes),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory, worker_id):
    return hc.shared_run(tmp_path_factory, worker_id, "caps-grading", _grade)


def test_every_capped_student_scores_what_its_honest_work_earns(graded, capsys):
    results = graded["results"]
    with capsys.disabled():
        print(
            f"\n\ncaps enforced by {graded['via']}; available memory {graded['start'] / GiB:.1f} GiB at the "
            f"start, {graded['lowest'] / GiB:.1f} GiB at the lowest"
        )
        for name, result in results.items():
            print(f"{name:<12} {result['score']:g} of 8  {result['seconds']:5.1f} s  {'; '.join(result['notes'])}")
    assert {name: r["score"] for name, r in results.items()} == dict.fromkeys(results, 8.0)


def test_each_cap_a_submission_reaches_is_named_in_its_notes_and_the_export(graded, tmp_path):
    notes = {name: " ".join(r["notes"]) for name, r in graded["results"].items()}
    assert "memory limit of 1 GiB reached in 1 cell(s)" in notes["hog"]
    assert "memory limit of 1 GiB reached in 1 cell(s)" in notes[FORCED]
    assert "disk cap of 192 MiB reached in 1 cell(s)" in notes["filler"]
    assert "process limit of 64 tasks reached in 1 cell(s)" in notes["storm"]
    if graded["via"].startswith("cgroup"):  # only a cgroup sees processes that are each below the cap
        assert "memory limit of 1 GiB reached" in notes["hog_procs"]
    assert notes["alice"] == "" and notes["carol"] == ""
    rows = {r["student_id"]: r for r in export_grades(graded["course"], tmp_path / "grades.csv")}
    assert "disk cap of 192 MiB reached" in rows["filler"]["reason"] and rows["filler"]["score"] == 8.0


def test_innocent_students_files_and_grades_are_byte_identical_under_the_caps(graded):
    before, after = graded["before"], graded["after"]
    assert before["files"] == after["files"]
    for key in ("grades", "stamps", "sources", "status"):
        assert before[key] == after[key], key


def test_the_machine_keeps_a_safe_margin_of_memory_while_it_grades(graded):
    assert graded["lowest"] >= SAFE_MARGIN, (graded["start"], graded["lowest"])
    assert graded["start"] - graded["lowest"] < 4 * GiB  # the 4 GiB hog alone would take more, uncapped


def test_a_cpu_spinner_gets_one_cores_worth(graded):
    if len(confine.available_cores()) < 2:
        pytest.skip("one core: every submission gets at most one core's worth anyway")
    assert graded["spins"]["spinner"] < 1.6  # 4 busy processes: about 2.0 on two free cores


def test_the_preflight_says_how_each_cap_is_enforced_before_anyone_is_graded(graded):
    log = graded["log"]
    first = next(i for i, line in enumerate(log) if line.startswith("graded "))
    assert log[0].startswith("caps per submission, enforced by ") and first > 4
    assert any(line.startswith("  memory:    1 GiB") for line in log[:first])
    assert any(line.startswith("caps per submission, enforced by rlimits") for line in log)
    assert any(f"{len(ATTACKS)} submissions graded in" in line and "2 at a time" in line for line in log)


def test_no_cgroup_outlives_its_submission(graded):
    how = confine.enforcement(CAPS)
    if how.backend is None:
        pytest.skip(f"no cgroups here ({how.why})")
    folders = [how.backend.parent] if hasattr(how.backend, "parent") else [how.backend.memory]
    left = [
        p.name
        for folder in folders
        for p in folder.iterdir()
        if p.name.startswith("kvgrade-") and not p.name.startswith("kvgrade-grader-")
    ]
    assert not [name for name in left if name.split("-")[1] == str(os.getpid())]


# -- the caps themselves, without a run ------------------------------------------------------------


def test_caps_are_validated_with_a_clear_message():
    with pytest.raises(ValueError, match="at least|between 256 MiB"):
        Caps(memory_bytes=100 * MiB)
    with pytest.raises(ValueError, match="below the memory cap"):
        Caps(memory_bytes=512 * MiB, disk_bytes=512 * MiB)
    with pytest.raises(ValueError, match="process cap"):
        Caps(processes=4)
    with pytest.raises(ValueError, match="enforced via"):
        Caps(via="docker")
    assert Caps(memory_bytes=None).memory_text() == "no memory cap"


def test_a_machine_that_cannot_cap_memory_grades_nobody_unless_told(monkeypatch):
    cannot = confine.Enforcement("rlimits", "", "", "pinned to 1 core", "512 MiB", "no cgroups on darwin")
    monkeypatch.setattr(sandbox, "enforcement", lambda caps, sandbox=True: cannot)
    with pytest.raises(RuntimeError, match="cannot cap a submission's memory.*--no-memory-cap"):
        sandbox.preflight(Limits())
    monkeypatch.setattr(sandbox, "_PREFLIGHT_PASSED", {(True, Caps(memory_bytes=None))})
    assert sandbox.preflight(Limits(caps=Caps(memory_bytes=None))) is cannot  # the trial's way through


def test_jobs_are_fewer_where_their_memory_caps_would_not_fit(monkeypatch):
    monkeypatch.setattr("kvcourse.quizzes.grading.autograde.memory_available", lambda: 9 * GiB)
    said: list[str] = []
    assert jobs_that_fit(8, Limits(caps=Caps(memory_bytes=2 * GiB)), said.append) == 3
    assert "grading 3 at a time, not 8" in said[0]
    assert jobs_that_fit(2, Limits(), said.append) == 2
    with pytest.raises(ValueError, match="at least 1"):
        jobs_that_fit(0, Limits())


def test_a_cgroup_v2_group_writes_the_caps_in_its_files(tmp_path):
    """cgroup v2 cannot be made where the course is developed (v1 there): its files, on a plain folder."""
    from kvcourse.quizzes.grading import cgroups

    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    backend, why = cgroups._v2(tmp_path, "/", "/")
    assert backend == cgroups.CgroupV2(tmp_path, delegated=False) and why == ""
    (tmp_path / "cgroup.subtree_control").write_text("cpu\n")
    assert cgroups._v2(tmp_path, "/", "/")[0] is None  # memory and pids not available there
    group = cgroups.CgroupV2(tmp_path, delegated=False).group(2 * GiB, 128, 1.5)
    folder = group.folders[0]
    assert (folder / "memory.max").read_text() == str(2 * GiB) and (folder / "pids.max").read_text() == "128"
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.count("memory") == 1 and group.count("processes") == 0
    assert group.procs_files == [str(folder / "cgroup.procs")]
