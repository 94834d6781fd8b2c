"""Each lab is one LabSpec (course/labs/spec.py), and everything about a lab reads it (issue 41, item 5).

A spec is whole: its base class declares the methods it names, and those are exactly the stubs a learner
writes; its family draws traces of its own lab. Its lesson's notebook starts from it and defines the class
it names on the base it names; the notebook and the grader draw the same public traces, and the grader
draws as many hidden ones as the spec says (changing the spec changes what the grader draws). Its reference
solution lives on the instructor's side: nothing imports the module, and the learner's side works, and
cannot reach it, when the quizzes package is hidden, as in the grading sandbox. The simulator's twin and
the lab guard read the same spec.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import io
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
from import_graph import module_files, notebook_code, notebook_imports, package_dirs, reachable, repo_imports

from kvcourse.labs import LABS, LabSpec, public_traces
from kvcourse.labs.notebook import implemented
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.grading.decide import Course, expected_answer, lab_traces
from kvcourse.quizzes.grading.lab_guard import lab_shortcut
from kvcourse.quizzes.grading.nbgrader_export import build_notebook
from kvcourse.quizzes.grading.sandbox import quizzes_dir
from kvcourse.quizzes.labs import reference
from kvcourse.quizzes.model import Kind
from kvcourse.simulators import learner_policy
from kvcourse.syllabus import get_lesson

ROOT = Path(__file__).resolve().parents[2]
COURSE = Course(Path("/nonexistent"), "kvtest", "0123456789ab", "cd" * 32, "/srv/nbgrader/exchange")
LAB_KEYS = list(LABS)


def _question(spec: LabSpec):
    return next(q for q in load_quiz(spec.lesson).questions if q.kind is Kind.LAB)


def _notebook_cells(spec: LabSpec) -> list[tuple[int, str]]:
    return list(notebook_code(get_lesson(spec.lesson).notebook_path))


def _written(base: type, methods: tuple[str, ...]) -> type:
    """A subclass of ``base`` that writes exactly ``methods`` (a property stays a property)."""
    body = {
        name: property(lambda self: 0) if isinstance(getattr(base, name), property) else (lambda self, *a: None)
        for name in methods
    }
    return type("Written", (base,), body)


# -- the spec is whole ---------------------------------------------------------------------------------


def test_the_registry_holds_the_three_labs_by_key():
    assert LAB_KEYS == ["block_manager", "eviction", "scheduler"]
    assert all(spec.key == key for key, spec in LABS.items())
    with pytest.raises(dataclasses.FrozenInstanceError):
        LABS["eviction"].num_hidden_traces = 0  # type: ignore[misc]


@pytest.mark.parametrize("key", LAB_KEYS)
def test_each_spec_is_complete_and_consistent(key):
    spec = LABS[key]
    assert spec.title == get_lesson(spec.lesson).title and spec.title.startswith("Lab ")
    # the methods it names are exactly the base's stubs: all written is a finished answer, one left out is not
    assert implemented(_written(spec.base, spec.methods))
    for name in spec.methods:
        assert not implemented(_written(spec.base, tuple(m for m in spec.methods if m != name))), name
    # its traces are its own lab's, public ones named and marked so, drawn the same every time
    traces = spec.public_traces()
    assert [t.name for t in traces] == [f"public {i + 1}" for i in range(spec.num_public_traces)]
    assert all(t.public and t.lab == key for t in traces) and traces == public_traces(key)
    assert spec.draw(7) == spec.draw(7) and not spec.draw(7).public and spec.num_hidden_traces >= 1
    # the lab's module holds its interface, its run and its judge
    assert spec.record.__module__ == spec.judge.__module__ == spec.base.__module__


def test_a_spec_that_is_not_whole_is_refused():
    spec = LABS["scheduler"]
    for change, message in [
        ({"methods": ("choose_admission", "choose")}, r"missing \['choose'\]"),
        ({"public_seeds": (1, 1)}, "distinct"),
        ({"num_hidden_traces": 0}, "hidden trace"),
        ({"reference": "kvcourse.labs.solution_scheduler"}, "instructor's side"),
        ({"class_name": "SchedulerBase"}, "a name of its own"),
    ]:
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(spec, **change)


# -- the notebook ------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", LAB_KEYS)
def test_the_notebook_of_its_lesson_names_its_base_and_reads_the_spec(key):
    spec = LABS[key]
    assert get_lesson(spec.lesson).notebook_path.is_file()
    trees = [ast.parse(code) for _, code in _notebook_cells(spec)]
    classes = [
        node
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == spec.class_name
    ]
    assert len(classes) == 1, f"lesson {spec.lesson} must define class {spec.class_name} once"
    [skeleton] = classes
    assert [ast.unparse(base) for base in skeleton.bases] == [spec.base.__name__]
    assert {node.name for node in skeleton.body if isinstance(node, ast.FunctionDef)} >= set(spec.methods)
    # the lab is named once, where the notebook takes its spec; everything else reads lab.<field>
    keys = [node for tree in trees for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value == key]
    lookups = [
        node
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and ast.unparse(node) == f"LABS[{key!r}]"
    ]
    assert len(keys) == len(lookups) == 1, f"lesson {spec.lesson} names its lab {len(keys)} times"


@pytest.mark.parametrize("key", LAB_KEYS)
def test_the_notebook_and_the_grader_draw_the_same_public_traces(key):
    spec = LABS[key]
    _, setup = _notebook_cells(spec)[0]
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        exec(compile(setup, f"<lesson {spec.lesson}, first code cell>", "exec"), namespace)
    assert namespace["lab"] is spec
    assert f"{spec.num_hidden_traces} hidden ones" in printed.getvalue()
    graded = lab_traces(_question(spec), COURSE, "alice")
    assert namespace["traces"] == graded[: spec.num_public_traces] == public_traces(key)


# -- the grader --------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", LAB_KEYS)
def test_the_grader_draws_the_hidden_count_of_the_spec(key, monkeypatch):
    spec, question = LABS[key], _question(LABS[key])
    alice, bob = (lab_traces(question, COURSE, student) for student in ("alice", "bob"))
    hidden = alice[spec.num_public_traces :]
    assert len(hidden) == spec.num_hidden_traces and not any(t.public for t in hidden)
    assert [t.name for t in hidden] == [f"hidden {i + 1}" for i in range(spec.num_hidden_traces)]
    assert hidden != bob[spec.num_public_traces :]
    prompt = build_notebook(load_quiz(spec.lesson), "salt").cells
    assert any(
        f"those {spec.num_public_traces} traces and on {spec.num_hidden_traces} hidden ones" in cell.source
        for cell in prompt
    )
    # the grader keeps no count of its own: a spec asking for more hidden traces gets them
    monkeypatch.setitem(LABS, key, dataclasses.replace(spec, num_hidden_traces=spec.num_hidden_traces + 2))
    assert len(lab_traces(question, COURSE, "alice")) == spec.num_public_traces + spec.num_hidden_traces + 2
    assert f"{spec.num_hidden_traces + 2} hidden ones" in expected_answer(question, COURSE, "alice")


@pytest.mark.parametrize("key", LAB_KEYS)
def test_the_lab_guard_reads_the_spec(key):
    spec = LABS[key]
    for name in spec.engine_own:
        assert name in (lab_shortcut(f"x = {name}") or ""), name
    assert "the grader's own code" in (lab_shortcut(f"from {spec.judge.__module__} import judge") or "")
    assert lab_shortcut(f"from {spec.reference} import {spec.class_name}")
    assert lab_shortcut(f"lab = LABS[{key!r}]\nclass {spec.class_name}({spec.base.__name__}):\n    pass") is None


# -- the simulator -----------------------------------------------------------------------------------


# Each lab's twin in the simulators (config, model and view over the engine: they never import the course, so
# the spec is not theirs to read; the lab's lesson builds its twin, which is what this checks).
TWINS = {
    "block_manager": learner_policy.LearnerSharing,
    "eviction": learner_policy.LearnerPrefixCache,
    "scheduler": learner_policy.LearnerPagingSim,
}


def test_each_lab_has_one_simulator_twin_and_its_lesson_shows_it():
    assert set(TWINS) == set(LABS)
    for key, cls in TWINS.items():
        view = importlib.import_module(get_lesson(LABS[key].lesson).simulator)
        assert getattr(view, cls.__name__) is cls, f"lesson {LABS[key].lesson}'s simulator does not build {cls}"


# -- the reference: the instructor's side only -------------------------------------------------------


@pytest.mark.parametrize("key", LAB_KEYS)
def test_the_reference_is_on_the_instructor_side_and_defines_the_spec_class(key):
    spec = LABS[key]
    found = find_spec(spec.reference)
    assert found is not None and found.origin is not None
    assert Path(found.origin).resolve().is_relative_to(quizzes_dir())  # the folder the grading sandbox hides
    solution = reference(key)
    assert solution.__name__ == spec.class_name and issubclass(solution, spec.base) and implemented(solution)


def test_nothing_imports_a_reference_and_the_learner_side_cannot_reach_one():
    files = module_files(ROOT, package_dirs(ROOT))
    edges = repo_imports(ROOT, files)
    notebooks = [
        edge for path in sorted((ROOT / "lessons").glob("*.ipynb")) for edge in notebook_imports(ROOT, path, files)
    ]
    references = {spec.reference for spec in LABS.values()}
    assert references <= set(files)
    assert not [str(e) for e in edges + notebooks if e.target in references], "a reference is read as text only"
    learner = {edge.source for edge in notebooks} | {"kvcourse.labs", "kvcourse.simulators.learner_policy"}
    assert not references & set(reachable(learner, edges + notebooks))


def test_the_learner_side_works_without_the_instructor_side_and_cannot_reach_a_reference():
    """As in the grading sandbox, where the quizzes package is hidden."""
    script = (
        "import sys\n"
        "sys.modules['kvcourse.quizzes'] = None  # hidden, as the sandbox hides quizzes/\n"
        "from kvcourse.labs import LABS, check, public_traces, record_runs\n"
        "import kvcourse.simulators.learner_policy  # the twins work without the instructor's side too\n"
        "assert all(public_traces(key) == spec.public_traces() for key, spec in LABS.items())\n"
        "import importlib\n"
        "for spec in LABS.values():\n"
        "    try:\n"
        "        importlib.import_module(spec.reference)\n"
        "    except ImportError:\n"
        "        continue\n"
        "    raise SystemExit(f'{spec.reference} was imported')\n"
        "print('ok')\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
