"""Labs B and C graded without the future (issue 43, item 5): the feeder serves each trace from a process the
learner's policy cannot read, asks the policy only what an online policy may see, and keeps the log itself.

The feeder is started here as the sandbox runner starts it (sandbox_runner.start_feeder, with the traces and the
log as open files); the sandbox itself is tests/quizzes/test_grading_labs.py's (the student "peeker").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from lab_course import FUTURE_IN_REACH

from kvcourse.labs import public_traces, record_runs
from kvcourse.labs.feeder import feed_all
from kvcourse.quizzes.grading.notebook import fed_records
from kvcourse.quizzes.grading.sandbox_runner import start_feeder
from kvcourse.quizzes.labs import solution_source

PEEKER = (
    """import gc
import sys


"""
    + FUTURE_IN_REACH
    + '''

class MyEviction(EvictionBase):
    """Least recently used (the engine's rule), after looking for the future at every choice."""

    seen = []

    def choose(self, candidates):
        MyEviction.seen.append(len(future_in_reach()))
        return min(candidates, key=lambda c: (c.has_cached_children, c.last_used, -c.depth)).block_id
'''
)
RAISER = '''class MyScheduler(SchedulerBase):
    """First come, first served until the {n}th admission, then {what}."""

    calls = 0

    def choose_admission(self, waiting, free_blocks):
        MyScheduler.calls += 1
        if MyScheduler.calls == {n}:
            {what}
        return 0 if waiting and waiting[0].num_blocks_needed <= free_blocks else None

    def choose_victim(self, running, needy):
        return running[-1].seq_id
'''


def _class(lab: str, source: str, name: str):
    namespace: dict = {}
    header = {"eviction": "from kvcourse.labs import EvictionBase\n", "scheduler": "from kvcourse.labs import *\n"}
    exec(compile(header[lab] + source, "<answer>", "exec"), namespace)
    return namespace[name]


class Feeder:
    """A feeder serving ``plan``, as the runner starts it; ``lines()`` reads its log back."""

    def __init__(self, folder: Path, plan: dict) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - read back by lines(), closed by close()
        with tempfile.TemporaryFile() as traces:
            traces.write(json.dumps(plan).encode())
            traces.seek(0)
            self.address = str(folder / "feeder.sock")
            self.process = start_feeder(f"{self.address},{os.dup(traces.fileno())},{os.dup(self.log.fileno())}")

    def lines(self) -> list[dict]:
        self.log.seek(0)
        return [json.loads(line) for line in self.log.read().decode().splitlines()]

    def runs(self) -> dict[tuple, dict]:
        return {(line["q"], line["trace"]): line["log"] for line in self.lines() if "log" in line}

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        self.log.close()


@pytest.fixture
def feeder_for(tmp_path):
    made = []

    def start(plan: dict) -> Feeder:
        made.append(Feeder(tmp_path, plan))
        return made[-1]

    yield start
    for feeder in made:
        feeder.close()


def _plan(lab: str, count: int = 1) -> tuple[dict, list]:
    traces = public_traces(lab)[:count]
    return {lab: {"lab": lab, "traces": [t.to_plain() for t in traces]}}, traces


@pytest.mark.parametrize("lab", ["eviction", "scheduler"])
def test_the_feeder_writes_the_choices_record_runs_writes_and_serves_each_trace_once(lab, feeder_for):
    name = {"eviction": "MyEviction", "scheduler": "MyScheduler"}[lab]
    answer = _class(lab, solution_source(lab), name)
    plan, traces = _plan(lab)
    feeder = feeder_for(plan)
    feed_all(feeder.address, lab, lab, answer, 1)
    feed_all(feeder.address, lab, lab, _class(lab, "class " + name + ":\n    pass\n", name), 1)  # served already
    header, *runs = feeder.lines()
    assert header["feeder"]["protected"] and len(runs) == 1  # the second asking is refused: nothing written
    mine = record_runs(lab, answer, [t.to_plain() for t in traces])[0]
    assert runs[0]["log"]["entries"] == mine["entries"] and len(mine["entries"]) > 20
    assert runs[0]["log"]["error"] is None is mine["error"]


@pytest.mark.parametrize("what", ['raise ValueError("no")', 'return "first"', "raise SystemExit(0)"])
def test_a_class_that_raises_exits_or_answers_nonsense_reads_as_it_does_in_its_own_process(what, feeder_for):
    answer = _class("scheduler", RAISER.replace("{n}", "3").replace("{what}", what), "MyScheduler")
    plan, traces = _plan("scheduler", 2)
    feeder = feeder_for(plan)
    feed_all(feeder.address, "scheduler", "scheduler", answer, 2)
    fed = [feeder.runs()[("scheduler", i)] for i in range(2)]
    if "SystemExit" in what:  # the collector's words for a run its class ended (record_lab), on every trace left
        assert [(log["entries"], log["error"]) for log in fed] == [([], "the run stopped: SystemExit: 0")] * 2
        return
    answer.calls = 0
    mine = record_runs("scheduler", answer, [t.to_plain() for t in traces])
    assert [log["error"] for log in fed] == [log["error"] for log in mine] and fed[0]["error"], what
    assert fed[0]["entries"] == mine[0]["entries"]


LEARNER = """import sys
from kvcourse.labs import EvictionBase
from kvcourse.labs.feeder import feed_all
exec(sys.argv[2])
feed_all(sys.argv[1], "eviction", "eviction", MyEviction, 1)
print(MyEviction.seen)
"""


def test_the_policy_finds_no_trace_in_its_own_process(feeder_for):
    answer = _class("eviction", PEEKER, "MyEviction")
    plan, traces = _plan("eviction")
    record_runs("eviction", answer, [t.to_plain() for t in traces])  # served in its own process: the future is there
    assert answer.seen and min(answer.seen) > 0
    feeder = feeder_for(plan)
    learner = subprocess.run(  # a process that never drew a trace, as the sandboxed kernel
        [sys.executable, "-c", LEARNER, feeder.address, PEEKER], capture_output=True, text=True, timeout=300
    )
    seen = json.loads(learner.stdout.strip().splitlines()[-1]) if learner.returncode == 0 else learner.stderr
    assert seen and max(seen) == 0, str(seen)[-500:]  # served by the feeder: nothing of the trace in reach
    assert feeder.runs()[("eviction", 0)]["error"] is None


READER = """import json, os, subprocess, sys, tempfile
from kvcourse.quizzes.grading.sandbox_runner import start_feeder

with tempfile.TemporaryFile() as plan, tempfile.TemporaryFile() as log:
    plan.write(b"{}")
    plan.seek(0)
    feeder = start_feeder(f"{sys.argv[1]},{os.dup(plan.fileno())},{os.dup(log.fileno())}")
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # an ordinary process
    read = {}
    for name, pid in (("feeder", feeder.pid), ("plain", plain.pid)):
        for what in ("mem", "environ", "fd"):
            try:
                path = f"/proc/{pid}/{what}"
                open(path, "rb").close() if what != "fd" else [os.readlink(f"{path}/{n}") for n in os.listdir(path)]
                read[f"{name} {what}"] = "read"
            except OSError as err:
                read[f"{name} {what}"] = type(err).__name__
    feeder.kill()
    plain.kill()
print(json.dumps(read))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not shutil.which("setpriv"), reason="Linux, setpriv")
def test_a_process_of_the_same_user_cannot_read_the_feeders_memory_or_files(tmp_path):
    # Without capabilities, as in the sandbox (bwrap --cap-drop ALL): even root's processes are then only a user's.
    done = subprocess.run(
        ["setpriv", "--inh-caps=-all", "--bounding-set=-all", sys.executable, "-c", READER, str(tmp_path / "f.sock")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    read = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else done.stderr[-800:]
    assert read == {
        "feeder mem": "PermissionError",
        "feeder environ": "PermissionError",
        "feeder fd": "PermissionError",
        "plain mem": "read",
        "plain environ": "read",
        "plain fd": "read",
    }


def test_the_grade_reads_the_feeders_log_not_what_the_learners_process_wrote():
    plan = {"19.lab": {"lab": "eviction", "traces": [{}, {}]}, "20.lab": {"lab": "scheduler", "traces": [{}]}}
    header = {"feeder": {"protected": True, "why": "", "pid": 7}}
    served = {"entries": [["choose", [1, 2], 1]], "error": None}
    forged = {"q": "19.lab", "lab": [{"entries": [], "error": None}] * 2}
    records = {"19.lab": forged, "20.lab": {"q": "20.lab", "missing": "MyScheduler"}, "19.a": {"q": "19.a"}}
    merged, notes = fed_records(records, plan, [header, {"q": "19.lab", "trace": 1, "log": served}])
    assert merged["19.lab"] == {"q": "19.lab", "lab": [None, served]} and notes == []
    assert merged["20.lab"] == records["20.lab"] and merged["19.a"] == records["19.a"]  # as the learner's said
    _, notes = fed_records(records, plan, [])
    assert notes == [
        "no feeder served eviction and scheduler's traces: its runs were not graded (the sandbox's log says why)"
    ]
    _, notes = fed_records(records, plan, [{"feeder": {"protected": False, "why": "no PR_SET_DUMPABLE on darwin"}}])
    assert notes and "could not hide its memory (no PR_SET_DUMPABLE on darwin)" in notes[0]
    assert fed_records(records, {}, []) == (records, [])
