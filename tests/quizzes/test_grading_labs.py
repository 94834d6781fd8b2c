"""The three labs as graded assignments (lessons 18-20): the bank's lab questions, the notebooks
`kvcourse grade init` writes for them, the static guard, and the real `kvcourse grade autograde`
in the bubblewrap sandbox, where each lab runs on the public traces and on hidden ones drawn per
student. The reference solutions score full marks; every hostile student scores what its honest
work earns, with the reason in the verdict; none gains a point by patching the grader or the engine.

One course (the three lessons), one `nbgrader generate_assignment` each, and one autograde run per
assignment, shared by both xdist workers. `pytest tests/quizzes/test_grading_labs.py -s` prints the table.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import nbformat
import pytest
from guards import needs
from hostile_course import _env, shared_run
from lab_course import (
    ENGINE_PATCHER,
    FUTURE_IN_REACH,
    IN_PLACE,
    IN_USE,
    LEAKER,
    NEWEST_FIRST,
    REFUSER,
    with_imports,
)
from nbgrader.preprocessors import ClearSolutions

from kvcourse.labs import LABS, record_runs
from kvcourse.quizzes.bank import load_quiz, parse_quiz
from kvcourse.quizzes.grading.autograde import autograde
from kvcourse.quizzes.grading.decide import Course, decide, lab_traces
from kvcourse.quizzes.grading.lab_guard import lab_shortcut
from kvcourse.quizzes.grading.nbgrader_export import build_notebook, init_course
from kvcourse.quizzes.grading.sandbox import bwrap_path, quizzes_dir
from kvcourse.quizzes.labs import solution_source
from kvcourse.quizzes.model import Kind

COURSE = Course(Path("/nonexistent"), "kvtest", "0123456789ab", "cd" * 32, "/srv/nbgrader/exchange")
SANDBOX = needs("needs bubblewrap (apt-get install bubblewrap)" if bwrap_path() is None else None)


def _lab(lesson: str):
    return next(q for q in load_quiz(lesson).questions if q.kind is Kind.LAB)


def _class(source: str, name: str):
    namespace: dict = {}
    exec(compile(source, "<answer>", "exec"), namespace)
    return namespace[name]


# -- the bank and the notebooks ---------------------------------------------------------------------


def test_each_lab_lesson_holds_its_lab_and_choice_questions_that_explain_every_option():
    for lab, spec in LABS.items():
        quiz = load_quiz(spec.lesson)
        labs = [q for q in quiz.questions if q.kind is Kind.LAB]
        assert [(q.lab, q.id, q.points, q.class_name) for q in labs] == [(lab, lab, 10, spec.class_name)]
        choices = [q for q in quiz.questions if q.kind is Kind.CHOICE]
        assert 2 <= len(choices) <= 3 and quiz.title.startswith("Lab ")
        for q in choices:
            assert set(q.explanations) == set(q.option_keys) and all(len(w) > 40 for w in q.explanations.values())


@pytest.mark.parametrize(
    "change, message",
    [
        ('lab = "block_manager"', r"question 'x': lab must be one of"),
        ('lab = "scheduler"', r"lab 'scheduler' is the lab of lesson 20, not of lesson 18"),
        ('lab = "block_manager"\nsealed = "e30="', r"a lab question has no secret"),
        ('lab = "block_manager"\noptions = ["a", "b"]', r"unknown fields \['options'\]"),
    ],
)
def test_a_malformed_lab_question_is_named(change, message):
    text = f'lesson = "18"\n[[question]]\nid = "x"\nkind = "lab"\nprompt = "Write it."\n{change}\n'
    if "must be one of" in message:
        text = text.replace('"block_manager"', '"allocator"')
    with pytest.raises(ValueError, match=message):
        parse_quiz(text, "quizzes/bank/18.toml")


def _run(source: str, namespace: dict) -> bool:
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, "<cell>", "exec"), namespace)
        return True
    except Exception:
        return False


@pytest.mark.parametrize("lab", list(LABS))
def test_the_release_leaves_a_class_to_complete_and_its_check_runs_the_public_traces(lab):
    question = _lab(LABS[lab].lesson)
    nb = build_notebook(load_quiz(LABS[lab].lesson), "salt")
    cell = {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells}
    answer, test = cell[f"answer_{lab}"], cell[f"test_{lab}"]
    assert answer.metadata["nbgrader"]["solution"] and test.metadata["nbgrader"]["points"] == 10
    assert test.metadata["nbgrader"]["locked"] and f"check({lab!r}, {question.class_name})" in test.source
    source_ns: dict = {}
    assert _run(answer.source, source_ns) and _run(test.source, source_ns)  # the reference passes the check

    released, _ = ClearSolutions().preprocess(nb, {})
    text = "\n".join(c.source for c in released.cells)
    assert "BEGIN SOLUTION" not in text and "kvcourse.quizzes" not in text
    for line in solution_source(lab).splitlines():  # every statement of a method's body
        if line.startswith(" " * 8) and len(line.strip()) > 12:
            assert line not in text, line
    stub = next(c.source for c in released.cells if c.metadata["nbgrader"]["grade_id"] == f"answer_{lab}")
    namespace: dict = {}
    assert _run(stub, namespace), stub  # the released cell runs: a class, not a raise
    cls = namespace[question.class_name]
    assert cls.__mro__[1].__name__ == solution_source(lab).split("(", 1)[1].split(")", 1)[0]  # the lab's base
    assert not _run(test.source, namespace)  # nothing written yet: the check says so, with an error


def test_lab_notebooks_have_valid_nbgrader_metadata_and_points():
    from nbgrader.nbgraderformat import MetadataValidator

    for lesson in (spec.lesson for spec in LABS.values()):
        quiz = load_quiz(lesson)
        nb = build_notebook(quiz, "salt")
        MetadataValidator().validate_nb(nb)
        graded = {
            c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
            for c in nb.cells
            if c.metadata["nbgrader"]["grade"]
        }
        assert sum(graded.values()) == quiz.total_points == 13, lesson
        assert "completing a function or a class" in nb.cells[0].source


def test_every_method_of_a_released_skeleton_raises_until_written():
    nb = build_notebook(load_quiz("18"), "salt")
    released, _ = ClearSolutions().preprocess(nb, {})
    stub = next(c.source for c in released.cells if c.metadata["nbgrader"]["grade_id"] == "answer_block_manager")
    manager = _class(stub, "MyBlockManager")(8, 4)  # the base's __init__: constructing works
    assert manager.num_blocks == 8
    for name in ("can_allocate", "allocate", "can_append", "append_slots", "free"):
        with pytest.raises(NotImplementedError):
            getattr(manager, name)(None)
    with pytest.raises(NotImplementedError):
        manager.fork(None, None)
    with pytest.raises(NotImplementedError):
        manager.num_free_blocks  # noqa: B018 - a property


def test_hidden_traces_are_drawn_per_student_and_course_and_never_public():
    q = _lab("20")
    alice, again, bob = (lab_traces(q, COURSE, s) for s in ("alice", "alice", "bob"))
    other = lab_traces(q, Course(Path("/x"), "kvtest", "0123456789ab", "ef" * 32, "/x"), "alice")
    assert len(alice) == 3 + LABS["scheduler"].num_hidden_traces and [t.name for t in alice[3:]] == [
        "hidden 1",
        "hidden 2",
        "hidden 3",
    ]
    assert [t.to_plain() for t in alice] == [t.to_plain() for t in again]
    assert alice[:3] == bob[:3] and all(t.public for t in alice[:3]) and not any(t.public for t in alice[3:])
    assert alice[3:] != bob[3:] and alice[3:] != other[3:]


# -- the static guard -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, found",
    [
        ("from kvcourse.kernels import KVCacheManager\nclass MyBlockManager(KVCacheManager): pass", "KVCacheManager"),
        ("import kvcourse.kernels.memory.block_pool as bp", "kvcourse.kernels.memory"),
        ("from kvcourse.kernels.engine import policy", "kvcourse.kernels.engine"),
        ("from kvcourse.kernels import engine", "kvcourse.kernels.engine"),
        ("x = FCFSPolicy()", "FCFSPolicy"),
        ("s = Scheduler(config, manager)", "the engine's own Scheduler"),
        ("from kvcourse.labs import record_runs", "record_runs"),
        ("import kvcourse.labs.run as run\nrun.record_runs = print", "kvcourse.labs.run"),
        ("from kvcourse import labs\nlabs.judge_runs = print", "judge_runs"),
        ("from kvcourse.labs.block_manager import ReplayManager", "kvcourse.labs.block_manager"),
        ("m = __import__('kvcourse')", "__import__"),
        ("import importlib", "importlib"),
        ("import sys\nsys.modules['kvcourse.labs'].check = print", "sys.modules"),
        ("getattr(engine_module, 'LRUEviction')", "LRUEviction"),
        ("%time x = 1\nfrom kvcourse.kernels import BlockPool", "BlockPool"),
        ("this is not python {\nBlockPool", "BlockPool"),
        ("from kvcourse.quizzes.labs import reference", "kvcourse.quizzes"),
    ],
)
def test_the_guard_names_what_a_lab_answer_borrows(code, found):
    assert found in (lab_shortcut(code) or "")


@pytest.mark.parametrize(
    "code",
    [
        solution_source("block_manager"),
        solution_source("eviction"),
        solution_source("scheduler"),
        "from kvcourse.labs import check, Refuse, SchedulerBase, SeqView, EvictionCandidate, BlockCopy\n"
        "check('scheduler', MyScheduler)",
        "class MyScheduler(SchedulerBase):\n    # better than FCFSPolicy, and than the Scheduler's default\n    pass",
        "import kvcourse.labs\nkvcourse.labs.check('eviction', MyEviction)",
        "%time check('eviction', MyEviction)",
        "class MyEviction(EvictionBase):\n    def judge(self, c):\n        return c.num_hits\n"
        "    def choose(self, candidates):\n        return max(candidates, key=self.judge).block_id",
        "from kvcourse.kernels import LLMEngine  # trying the engine by hand is allowed",
    ],
)
def test_the_guard_lets_honest_code_through(code):
    assert lab_shortcut(code) is None


def test_a_shortcut_scores_0_with_the_reason_even_when_its_runs_look_perfect():
    q = _lab("20")
    logs = record_runs(
        "scheduler",
        _class(solution_source("scheduler"), "MyScheduler"),
        [t.to_plain() for t in lab_traces(q, COURSE, "eve")],
    )
    assert decide(q, {"q": q.id, "lab": logs}, COURSE, "eve").right
    source = "from kvcourse.kernels import FCFSPolicy\n\n\nclass MyScheduler(FCFSPolicy, SchedulerBase):\n    pass"
    decision = decide(q, {"q": q.id, "lab": logs}, COURSE, "eve", source)
    assert decision.points == 0
    assert decision.verdict.startswith(
        "Not graded on its runs: your code uses the engine's own FCFSPolicy: write your own scheduler"
    )


def test_lab_points_verdict_and_details_from_a_record():
    q = _lab("20")
    traces = lab_traces(q, COURSE, "ann")
    plain = [t.to_plain() for t in traces]
    right_runs = record_runs("scheduler", _class(solution_source("scheduler"), "MyScheduler"), plain)
    right = decide(q, {"q": q.id, "lab": right_runs}, COURSE, "ann")
    assert right.right and right.verdict == "Right: all 6 traces pass (3 public, 3 hidden)."
    assert [(t["name"], t["public"], t["score"]) for t in right.details["traces"]] == [
        (t.name, t.public, 1.0) for t in traces
    ]
    assert all(set(t["figures"]) == {"yours", "FCFS", "reference"} for t in right.details["traces"])  # the report's

    partial_runs = record_runs("scheduler", _class(NEWEST_FIRST, "MyScheduler"), plain)
    partial = decide(q, {"q": q.id, "lab": partial_runs}, COURSE, "ann")
    scores = [t["score"] for t in partial.details["traces"]]
    hidden = [t["score"] for t in partial.details["traces"] if not t["public"]]  # a learner holds the public ones
    assert 0 < partial.points < 10 and partial.points == int(100 * sum(hidden) / len(hidden)) / 10
    assert f"{sum(s >= 1 for s in scores)} of 6 traces pass" in partial.verdict
    assert "on the hidden ones" in partial.verdict
    perfect_public = right_runs[:3] + partial_runs[3:]  # the public traces answered from their future, offline
    memorised = decide(q, {"q": q.id, "lab": perfect_public}, COURSE, "ann")
    assert memorised.points == partial.points  # knowing the public traces buys nothing
    failing = next(t for t in partial.details["traces"] if t["score"] < 1)
    assert (failing["name"] in partial.verdict) == failing["public"] and failing["kind"] == "goodput"
    if not failing["public"]:
        assert "a hidden trace" in partial.verdict

    forged = [{"entries": [], "error": None}] * 6
    for record, why in [
        ({"q": q.id, "lab": forged}, "cannot be replayed"),
        ({"q": q.id, "lab": forged[:2]}, "2 runs handed over for 6 traces"),
        ({"q": q.id, "lab": None, "error": "the runs' logs are not plain JSON"}, "not plain JSON"),
        ({"q": q.id, "lab": [["admit"] * 5, 7, None, "x", {"entries": "no"}, {}]}, "cannot be replayed"),
        ({"q": q.id, "missing": "MyScheduler"}, "No answer: MyScheduler was not defined"),
        (None, "No answer: MyScheduler was not defined"),
    ]:
        decision = decide(q, record, COURSE, "ann")
        assert decision.points == 0 and why in decision.verdict, (why, decision.verdict)


def _collector(tmp_path: Path) -> dict:
    code = (quizzes_dir() / "grading" / "collector.py").read_text().split('"""', 2)[2]
    namespace: dict = {}
    exec(code.replace('RESULTS = "results.jsonl"', f"RESULTS = {str(tmp_path / 'r.jsonl')!r}"), namespace)
    return namespace


def test_the_collector_hands_over_a_labs_runs_and_survives_what_the_class_does(tmp_path):
    ns = _collector(tmp_path)
    traces = [t.to_plain() for t in lab_traces(_lab("20"), COURSE, "ann")]
    ns["MyScheduler"] = _class(solution_source("scheduler"), "MyScheduler")
    ns["record_lab"]("scheduler", "MyScheduler", "scheduler", traces)
    ns["Quitter"] = _class(
        with_imports(
            "scheduler",
            "class Quitter(SchedulerBase):\n"
            "    def choose_admission(self, waiting, free_blocks):\n"
            "        raise SystemExit(0)\n",
        ),
        "Quitter",
    )
    ns["record_lab"]("quitter", "Quitter", "scheduler", traces)
    ns["record_lab"]("absent", "Nobody", "scheduler", traces)
    ns["LAB_LOG_LIMIT"] = 1000
    ns["record_lab"]("huge", "MyScheduler", "scheduler", traces[:1])
    ns["LAB_LOG_LIMIT"] = 1_500_000
    ns["record_missing"](
        [
            ("scheduler", "MyScheduler", {"lab": "scheduler", "traces": traces}),
            ("late", "MyScheduler", {"lab": "scheduler", "traces": traces[:1]}),
        ]
    )
    written = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [line["q"] for line in written] == ["scheduler", "quitter", "absent", "huge", "late"]
    lines = {line["q"]: line for line in written}
    assert len(lines["scheduler"]["lab"]) == 6 and all(not log["error"] for log in lines["scheduler"]["lab"])
    assert [log["error"] for log in lines["quitter"]["lab"]] == ["the run stopped: SystemExit: 0"] * 6
    assert lines["absent"] == {"q": "absent", "missing": "Nobody"}
    assert lines["huge"]["lab"] is None and "more than 1,000" in lines["huge"]["error"]
    assert len(lines["late"]["lab"]) == 1  # record_missing: only what was not handed over yet


# -- self-learners -----------------------------------------------------------------------------------


def test_the_quick_check_points_at_the_labs_check_and_check_answer_records_it(tmp_path, monkeypatch):
    from kvcourse.quizzes import check_answer, quick_check
    from kvcourse.quizzes.progress import Progress, format_progress

    monkeypatch.setenv("KVCOURSE_PROGRESS", str(tmp_path / "progress"))
    view = quick_check("20")
    item = next(i for i in view.items if i.question.kind is Kind.LAB)
    assert item.check_button.layout.display == "none"
    assert 'check("scheduler", MyScheduler)' in item.input.value
    assert 'check_answer("20", "scheduler", MyScheduler)' in item.input.value
    assert check_answer("20", "scheduler", "MyScheduler").malformed  # a name, not the class
    verdict = check_answer("20", "scheduler", _class(NEWEST_FIRST, "MyScheduler"))
    assert not verdict.passed and "0 of 3 public traces pass" in verdict.message
    assert check_answer("20", "scheduler", _class(solution_source("scheduler"), "MyScheduler")).passed
    assert "scheduler" in Progress().passed("20")
    assert "Passed before" in next(i for i in quick_check("20").items if i.question.kind is Kind.LAB).feedback.value
    line = next(row for row in format_progress().splitlines() if row.startswith("20 "))
    assert "1/4" in line


# -- the real autograde, in the sandbox ------------------------------------------------------------

COURSE_PATHS = "COURSE = {course!r}\nQUIZZES = {quizzes!r}\nEXCHANGE = {exchange!r}\n"
READER = """import os
found = []
for path in [COURSE + "/instructor/course.json", COURSE + "/source/lesson20/lesson20.ipynb", COURSE + "/gradebook.db",
             COURSE + "/submitted/ref_c/lesson20/lesson20.ipynb", COURSE, QUIZZES + "/labs/solution_scheduler.py",
             QUIZZES + "/bank/20.toml", QUIZZES + "/labs", EXCHANGE]:
    try:
        data = open(path, "rb").read() if os.path.isfile(path) else str(os.listdir(path)).encode()
        if data == b"[]":
            raise FileNotFoundError("an empty folder")
        found.append(path)
        print("LEAKED", path)
    except Exception as err:
        print("BLOCKED", path, type(err).__name__)
"""
PATCHER = '''import json


class MyScheduler(SchedulerBase):
    """Admits nobody: every request is lost."""

    def choose_admission(self, waiting, free_blocks):
        return None

    def choose_victim(self, running, needy):
        return needy.seq_id


def record_lab(question, name, lab, traces):  # the collector's, replaced: runs that never happened
    with open(RESULTS, "a") as f:
        runs = [{"entries": [], "beams": [], "error": None}] * 6  # traces: for lab C, only how many there are
        f.write(json.dumps({"q": question, "lab": runs}) + "\\n")
'''
FAKER = """import kvcourse.labs as labs

labs.record_runs = lambda lab, answer, traces: [{"entries": [], "error": None} for _ in traces]
"""
# Lab B: looks for the future at every route issue 43 (item 5) names, then evicts the least recently used block.
PEEKER = (
    """import gc
import json
import os
import sys


"""
    + FUTURE_IN_REACH
    + '''

def notebook_holds_traces():
    try:
        with open("/grading/grading.ipynb") as f:
            text = f.read()
    except OSError as err:
        return type(err).__name__
    return "'hidden" + " 1'" in text or "'num_" + "blocks'" in text  # a trace's repr, as the collector's call held it


def feeder_files():
    """What it can read of every other process that serves the lab: its memory, environment and open files."""
    read = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b".feeder\\x00" not in f.read():  # python -m ...labs.feeder, not the runner that started it
                    continue
        except OSError:
            continue
        for what in ("mem", "environ", "fd"):
            try:
                if what == "fd":
                    [os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")]
                else:
                    open(f"/proc/{pid}/{what}", "rb").close()
                read[what] = "read"
            except OSError as err:
                read[what] = type(err).__name__
    return read


class MyEviction(EvictionBase):
    """Least recently used; on each trace it first looks for what is coming."""

    seen = {"gc": 0, "notebook": None, "feeder": None}

    def __init__(self):
        self.calls = 0
        MyEviction.seen["notebook"] = notebook_holds_traces()
        MyEviction.seen["feeder"] = feeder_files()

    def choose(self, candidates):
        self.calls += 1
        if self.calls <= 3:
            MyEviction.seen["gc"] = max(MyEviction.seen["gc"], len(future_in_reach()))
        return min(candidates, key=lambda c: (c.has_cached_children, c.last_used, -c.depth)).block_id
'''
)
PEEKED = """print("PEEKED", json.dumps(MyEviction.seen, sort_keys=True))
with open(RESULTS, "a") as f:  # perfect-looking runs of its own, after the collector's line
    f.write(json.dumps({"q": "{question}", "lab": [{"entries": [], "error": None}] * 6}) + "\\n")
"""
ENGINE_USER = '''from kvcourse.kernels import FCFSPolicy


class MyScheduler(FCFSPolicy, SchedulerBase):
    """The engine's own first come, first served."""
'''

# student -> (lesson, the lab's answer cell, the lab points due or None to compute them outside the sandbox, why)
STUDENTS = {
    "ref_a": ("18", solution_source("block_manager"), 10, "the reference block manager"),
    "leaker": ("18", LEAKER, 0, "free never gives a block back: leak"),
    "in_place": ("18", IN_PLACE, 0, "writes into a shared block: copy on write missed"),
    "ref_b": ("19", solution_source("eviction"), 10, "the reference eviction policy"),
    "in_use": ("19", IN_USE, 0, "evicts a block a running sequence holds"),
    "engine_patcher": ("19", ENGINE_PATCHER, 0, "switches the pool's check off in the sandbox, then evicts in use"),
    "peeker": (
        "19",
        with_imports("eviction", PEEKER),
        None,
        "looks for the future (gc, frames, the notebook, /proc/<feeder>), forges its runs; evicts LRU",
    ),
    "ref_c": ("20", solution_source("scheduler"), 10, "the reference scheduler"),
    "newest_first": ("20", NEWEST_FIRST, None, "last come, first served: a partial score"),
    "refuser": ("20", REFUSER, 0, "refuses every request without a reason"),
    "reader": (
        "20",
        "{paths}" + READER + "\n\n" + solution_source("scheduler"),
        10,
        "reads the secret, the source, the reference solutions from disk; FCFS otherwise",
    ),
    "patcher": (
        "20",
        with_imports("scheduler", PATCHER),
        0,
        "replaces the collector's record_lab by perfect-looking runs",
    ),
    "faker": ("20", solution_source("scheduler") + "\n\n" + FAKER, 0, "replaces kvcourse.labs.record_runs (the guard)"),
    "engine_user": (
        "20",
        with_imports("scheduler", ENGINE_USER),
        0,
        "subclasses the engine's own FCFSPolicy (the guard)",
    ),
}
VERDICTS = {
    "leaker": "leaks",
    "in_place": "copy on write missed",
    "in_use": "is in use",
    "engine_patcher": "is in use",
    "refuser": "a refusal needs a reason",
    "patcher": "cannot be replayed",
    "faker": "your code uses the grader's own record_runs: write your own scheduler",
    "engine_user": "your code uses the engine's own FCFSPolicy: write your own scheduler",
}


def _answers(lesson: str, lab_cell: str) -> dict[str, str]:
    """Right choices, and the lab's cell as given."""
    answers = {}
    for q in load_quiz(lesson).questions:
        answers[q.id] = lab_cell if q.kind is Kind.LAB else f"answer_{q.id} = {q.correct!r}"
    return answers


def _submission(course_dir: Path, lesson: str, answers: dict[str, str], last: str = "") -> nbformat.NotebookNode:
    nb = nbformat.read(course_dir / "release" / f"lesson{lesson}" / f"lesson{lesson}.ipynb", as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("kvcourse", {})
        if meta.get("role") == "answer" and meta.get("question") in answers:
            cell.source = answers[meta["question"]]
    if last:  # a cell of the student's own at the end
        nb.cells.append(nbformat.v4.new_code_cell(last))
    return nb


def _grade_labs(tmp: Path) -> dict:
    course_dir = tmp / "course"
    init_course(course_dir, ["18", "19", "20"], course_id="kvlabs", exchange=str(tmp / "exchange"))
    secret = course_dir / "instructor" / "course.json"  # fixed: every run grades the same hidden traces
    secret.write_text(json.dumps({**json.loads(secret.read_text()), "secret": "ab" * 32}))
    for lesson in ("18", "19", "20"):
        done = subprocess.run(
            [str(Path(sys.executable).parent / "nbgrader"), "generate_assignment", f"lesson{lesson}"],
            cwd=course_dir,
            env=_env(tmp),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    course = Course.load(course_dir)
    paths = COURSE_PATHS.format(course=str(course_dir), quizzes=str(quizzes_dir()), exchange=course.exchange)
    for student, (lesson, cell, _, _) in STUDENTS.items():
        folder = course_dir / "submitted" / student / f"lesson{lesson}"  # where `nbgrader collect` files it
        folder.mkdir(parents=True)
        (folder / "timestamp.txt").write_text("2026-05-04 09:00:00.000000 UTC")
        last = PEEKED.replace("{question}", _lab(lesson).id) if student == "peeker" else ""
        nbformat.write(
            _submission(course_dir, lesson, _answers(lesson, cell.replace("{paths}", paths)), last),
            folder / f"lesson{lesson}.ipynb",
        )
    log: list[str] = []
    results = {}
    for lesson in ("18", "19", "20"):
        names = [s for s, (lsn, *_) in STUDENTS.items() if lsn == lesson]
        for result in autograde(course_dir, f"lesson{lesson}", names, jobs=2, log=log.append):
            results[result.student] = asdict(result)
    due = {}
    for student, (lesson, cell, points, _) in STUDENTS.items():
        if points is None:  # the same class outside the sandbox, on the same traces
            q = _lab(lesson)
            logs = record_runs(
                q.lab, _class(cell, q.class_name), [t.to_plain() for t in lab_traces(q, course, student)]
            )
            points = decide(q, {"q": q.id, "lab": logs}, course, student).points
        due[student] = 3 + points  # the three choice questions, answered right
    released = {
        lesson: (course_dir / "release" / f"lesson{lesson}" / f"lesson{lesson}.ipynb").read_text()
        for lesson in ("18", "19", "20")
    }
    hidden = {
        student: [t.to_plain() for t in lab_traces(_lab(lesson), course, student)[3:]]
        for student, (lesson, *_) in STUDENTS.items()
    }
    return {
        "course": str(course_dir),
        "results": results,
        "due": due,
        "log": log,
        "released": released,
        "hidden": hidden,
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory, worker_id):
    return shared_run(tmp_path_factory, worker_id, "lab-grading", _grade_labs)


def _graded_text(graded: dict, student: str) -> str:
    lesson = STUDENTS[student][0]
    return (graded["course"] / "autograded" / student / f"lesson{lesson}" / f"lesson{lesson}.ipynb").read_text()


@SANDBOX
def test_every_lab_student_scores_what_its_honest_work_earns(graded, capsys):
    rows = []
    for student, (lesson, _, _, what) in STUDENTS.items():
        result = graded["results"][student]
        rows.append((student, lesson, result["score"], graded["due"][student], result["seconds"], what))
    with capsys.disabled():
        print("\n\nstudent         lesson  got    due    seconds  what it did")
        for row in rows:
            print(f"{row[0]:<15} {row[1]:<7} {row[2]:<6g} {row[3]:<6g} {row[4]:>7.1f}  {row[5]}")
    assert [row for row in rows if row[2] != row[3]] == []
    for student in ("ref_a", "ref_b", "ref_c", "reader", "peeker"):
        assert graded["results"][student]["notes"] == [], student  # labs B and C: the feeder was there, protected


@SANDBOX
def test_a_policy_looking_for_the_future_finds_none_and_is_graded_on_the_feeders_log(graded):
    # Issue 43, item 5. The feeder serves labs B and C's traces: nothing of them in the policy's process (gc, its
    # callers' frames), nor in the notebook it can read, nor readable of the feeder (memory, environment, files).
    outputs = [
        o.get("text", "") for c in nbformat.reads(_graded_text(graded, "peeker"), 4).cells for o in c.get("outputs", [])
    ]
    line = next(text for text in outputs if text.startswith("PEEKED"))
    assert json.loads(line.removeprefix("PEEKED")) == {
        "feeder": {"environ": "PermissionError", "fd": "PermissionError", "mem": "PermissionError"},
        "gc": 0,
        "notebook": False,
    }
    # Its forged runs came last in results.jsonl; the grade is the feeder's log: its least recently used, scored.
    details = graded["results"]["peeker"]["details"][_lab("19").id]["traces"]
    assert len(details) == 6 and all(t["kind"] != "replay" and "figures" in t for t in details), details
    assert graded["results"]["peeker"]["score"] == graded["due"]["peeker"] > 3


@SANDBOX
def test_each_verdict_says_which_rule_cost_the_points(graded):
    for student, why in VERDICTS.items():
        lab = _lab(STUDENTS[student][0]).id
        verdict = graded["results"][student]["verdicts"][lab]
        assert why in verdict, (student, verdict)
        assert "0 of 6 traces pass" in verdict or verdict.startswith("Not graded on its runs"), (student, verdict)
    for student in ("ref_a", "ref_b", "ref_c"):
        lab = _lab(STUDENTS[student][0]).id
        assert graded["results"][student]["verdicts"][lab] == "Right: all 6 traces pass (3 public, 3 hidden)."
        details = graded["results"][student]["details"][lab]["traces"]
        assert [(t["name"], t["score"]) for t in details][3:] == [(f"hidden {i}", 1.0) for i in (1, 2, 3)]


@SANDBOX
def test_the_sandbox_hides_the_course_and_the_reference_solutions(graded):
    text = _graded_text(graded, "reader")
    outputs = "".join(o.get("text", "") for c in nbformat.reads(text, 4).cells for o in c.get("outputs", []))
    assert outputs.count("BLOCKED") == 9 and "LEAKED" not in outputs, outputs


@SANDBOX
def test_released_and_graded_notebooks_hold_no_solution_and_no_hidden_trace(graded):
    for lesson, text in graded["released"].items():
        lab = next(key for key, spec in LABS.items() if spec.lesson == lesson)
        assert "BEGIN SOLUTION" not in text and "course.json" not in text, lesson
        for line in (
            "self.free_list = list(range(num_blocks))",
            "leaves = [c for c in candidates",
            "return running[-1].seq_id",
        ):
            assert json.dumps(line)[1:-1] not in text, (lesson, line)
        assert "from kvcourse.labs import check" in text and lab in text
    for student in STUDENTS:
        text = _graded_text(graded, student)
        assert ("record_lab" not in text or student == "patcher") and "hidden 1" not in text, student
        for trace in graded["hidden"][student]:
            for prompt, *_ in trace["requests"]:
                if len(prompt) >= 6:  # long enough not to turn up by chance
                    assert str(prompt)[1:-1] not in text, student
