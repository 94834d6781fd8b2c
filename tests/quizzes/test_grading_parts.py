"""The parts of the trusted autograde, one by one (issue 15): what the notebook draws, what the kernel may
hand over, how a damaged notebook is read, how points are decided, what the sandbox hides."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from guards import needs
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

from kvcourse.quizzes.bank import load_all, load_quiz
from kvcourse.quizzes.checking import prompt_for
from kvcourse.quizzes.grading.autograde import copy_companions
from kvcourse.quizzes.grading.decide import Course, code_cases, decide, decide_free, expected_answer
from kvcourse.quizzes.grading.nbgrader_export import (
    NBGRADER_EXCHANGE,
    STUDENTS_DIR,
    build_notebook,
    ensure_exchange,
    init_course,
    next_steps,
    parse_lessons,
)
from kvcourse.quizzes.grading.notebook import _clean_outputs, read_records
from kvcourse.quizzes.grading.recovery import (
    NotGradable,
    match_cells,
    read_cells,
    shown_student_id,
    template_cells,
)
from kvcourse.quizzes.grading.sandbox import Limits, bwrap_command, bwrap_path, environment, quizzes_dir
from kvcourse.quizzes.model import Kind

SALT = "0123456789ab"
COURSE = Course(Path("/nonexistent"), "kvtest", SALT, "ab" * 32, "/srv/nbgrader/exchange")


def _run_cells(nb, student: str = "someone") -> dict[str, bool]:
    """Run a notebook's code cells in one namespace, in process; test cell grade_id -> passed."""
    namespace: dict = {}
    results = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(cell.source, grade_id or "<cell>", "exec"), namespace)
            ok = True
        except Exception:
            ok = False
        if grade_id == "setup":
            namespace["STUDENT_ID"] = student
        if grade_id.startswith("test_"):
            results[grade_id] = ok
        elif not ok and not grade_id.startswith("answer_"):
            raise AssertionError(f"cell {grade_id or cell.source[:40]!r} failed")
    return results


def _release(nb):
    released, _ = ClearSolutions().preprocess(nb, {})
    return ClearHiddenTests().preprocess(released, {})[0]


def test_every_source_notebook_reads_and_its_release_does_not():
    """What `nbgrader validate` checks, for every lesson, in process."""
    for lesson in parse_lessons("00-20"):
        nb = build_notebook(load_quiz(lesson), SALT)
        source_results = _run_cells(nb)
        assert source_results and all(source_results.values()), (lesson, source_results)
        assert not any(_run_cells(_release(nb)).values()), lesson


def test_released_notebooks_import_nothing_from_the_course_and_hold_no_answer():
    for quiz in load_all():
        released = _release(build_notebook(quiz, SALT))
        text = "\n".join(cell.source for cell in released.cells)
        imports = [line for line in text.splitlines() if "import kvcourse" in line or "from kvcourse" in line]
        labs = any(q.kind is Kind.LAB for q in quiz.questions)  # a lab's cells import its base class and check
        assert all(labs and line.startswith("from kvcourse.labs import ") for line in imports), (quiz.lesson, imports)
        assert "BEGIN SOLUTION" not in text and "expected_number" not in text, quiz.lesson
        for q in quiz.questions:
            if q.kind is Kind.CHOICE:
                assert f"answer_{q.id} = {q.correct!r}" not in text
            if q.kind is Kind.FREE:
                assert q.model_answer[:60] not in text


def test_the_notebook_draws_the_values_the_instructor_grades():
    for quiz in load_all():
        nb = build_notebook(quiz, SALT)
        setup = next(c.source for c in nb.cells if c.metadata["nbgrader"]["grade_id"] == "setup")
        for q in (q for q in quiz.questions if q.kind is Kind.PARAMETERISED):
            show = next(c.source for c in nb.cells if c.metadata["nbgrader"]["grade_id"] == f"show_{q.id}")
            for student in ("alice", "bob", "s-07", "Zoë"):
                namespace: dict = {}
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(setup, namespace)
                    namespace["STUDENT_ID"] = student
                    out.truncate(0)
                    out.seek(0)
                    exec(show, namespace)
                assert out.getvalue().strip() == prompt_for(q, COURSE.seed(student)), (q.id, student)


def test_init_keeps_the_secret_out_of_the_release_and_prints_commands_that_run(tmp_path):
    names = init_course(tmp_path / "c", ["05", "07"], course_id="kvtest")
    secret = tmp_path / "c" / "instructor" / "course.json"
    assert oct(secret.stat().st_mode & 0o777) == "0o600" and oct(secret.parent.stat().st_mode & 0o777) == "0o700"
    course = Course.load(tmp_path / "c")
    assert course.secret not in (tmp_path / "c" / "source" / "lesson07" / "lesson07.ipynb").read_text()
    command = next_steps(tmp_path / "c", names)
    assert command.startswith(f"cd {tmp_path / 'c'} && ") and command.count("nbgrader generate_assignment") == 2
    with pytest.raises(ValueError, match="not empty"):
        init_course(tmp_path / "c", ["01"])


def test_init_states_the_exchange_writes_the_students_config_and_keeps_the_course_private(tmp_path):
    """Regression: the exchange was left to a default the docs misnamed (/srv/... where nbgrader 0.9 uses
    /usr/local/share/...), the students' config was described but never given, and the folder was 755."""
    from nbgrader.exchange.default.exchange import Exchange
    from traitlets.config import PyFileConfigLoader

    assert Exchange.root.default_value == NBGRADER_EXCHANGE  # the default grade init names is nbgrader's own
    init_course(tmp_path / "c", ["07"], course_id="kvtest")
    for name in ("nbgrader_config.py", f"{STUDENTS_DIR}/nbgrader_config.py"):
        config = PyFileConfigLoader(name, path=str(tmp_path / "c")).load_config()
        assert config.CourseDirectory.course_id == "kvtest" and config.Exchange.root == NBGRADER_EXCHANGE, name
    assert oct((tmp_path / "c").stat().st_mode & 0o777) == "0o700"
    assert oct((tmp_path / "c" / "source" / "lesson07" / "lesson07.ipynb").stat().st_mode & 0o777) == "0o600"
    init_course(tmp_path / "d", ["07"], exchange=str(tmp_path / "ex"))
    assert PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path / "d")).load_config().Exchange.root == str(
        tmp_path / "ex"
    )


def test_the_exchange_is_made_writable_for_every_student_or_the_command_is_given(tmp_path):
    assert ensure_exchange(str(tmp_path / "ex")) is None
    assert oct((tmp_path / "ex").stat().st_mode & 0o7777) == "0o1777"
    assert ensure_exchange(str(tmp_path / "ex")) is None  # there already: left as it is
    (tmp_path / "file").write_text("")
    command = ensure_exchange(str(tmp_path / "file" / "ex"))  # cannot be made here
    assert command == f"sudo mkdir -p {tmp_path / 'file' / 'ex'} && sudo chmod 1777 {tmp_path / 'file' / 'ex'}"


def test_the_id_a_notebook_drew_its_values_for_is_read_from_its_set_up_output():
    def cells(printed: str, grade_id: str = "setup") -> list[dict]:
        return [
            {"cell_type": "markdown", "grade_id": "intro", "printed": ""},
            {"cell_type": "code", "grade_id": grade_id, "printed": printed},
        ]

    assert shown_student_id(cells("Your student id: root\n  This looks like a shared account.\n")) == "root"
    assert shown_student_id(cells("")) is None  # never run, or outputs cleared
    assert shown_student_id(cells("Your student id: bob\n", grade_id="other")) is None


# -- what the kernel hands over ------------------------------------------------------------------------


def _collector(tmp_path: Path) -> dict:
    code = (quizzes_dir() / "grading" / "collector.py").read_text().split('"""', 2)[2]
    namespace: dict = {}
    exec(code.replace('RESULTS = "results.jsonl"', f"RESULTS = {str(tmp_path / 'r.jsonl')!r}"), namespace)
    return namespace


def test_the_collector_hands_over_plain_values_only(tmp_path):
    ns = _collector(tmp_path)

    class Always:
        def __eq__(self, other):
            return True

    class Sneaky(str):
        def __eq__(self, other):
            return True

    ns.update(a=Always(), b=Sneaky("b"), c=10**400, d=float("nan"), e=[1, "2", (3.5, None)], f="x" * 3000, g=True)
    for name in "abcdefgh":
        ns["record"](name, name)
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    values = {line["q"]: line.get("value", line.get("missing")) for line in lines}
    assert values["a"] == {"unreadable": "a Always, not a plain value"}
    assert "unreadable" in values["b"] and "unreadable" in values["c"] and "unreadable" in values["d"]
    assert values["e"] == [1, "2", [3.5, None]] and "unreadable" in values["f"] and values["g"] is True
    assert values["h"] == "h"  # never defined: reported missing, by name


def test_the_collector_calls_functions_with_a_time_limit(tmp_path):
    ns = _collector(tmp_path)
    ns["CALL_LIMIT_S"] = 0.2
    ns["f"] = lambda x: 1 / x if x else (_ for _ in ()).throw(SystemExit)
    ns["slow"] = lambda x: [None for _ in iter(int, 1)]
    ns["record_calls"]("q1", "f", [(2,), (0,)])
    ns["record_calls"]("q2", "slow", [(1,)])
    ns["record_calls"]("q3", "nothing", [(1,)])
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert lines[0]["calls"] == [{"ok": 0.5}, {"error": "SystemExit: "}]
    assert lines[1]["calls"] == [{"error": "ran for more than 0.2 s"}]
    assert lines[2] == {"q": "q3", "missing": "nothing"}


def test_forged_and_broken_result_lines_are_read_defensively(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"q": "a", "value": "b"}),
                json.dumps({"q": "a", "missing": "answer_a"}),
                "[" * 50_000,
                "not json",
                json.dumps(["q", "a"]),
                "x" * 300_000,
                json.dumps({"q": "c", "value": 1}),
                json.dumps({"q": "c", "value": 2}),
            ]
        )
    )
    records = read_records(path)
    assert records["a"]["value"] == "b"  # a later "missing" (a restarted kernel) does not undo an answer
    assert records["c"]["value"] == 2 and set(records) == {"a", "c"}
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    assert read_records(link) == {}  # a link planted by the student is not followed


def test_outputs_keep_text_and_images_never_html_or_javascript():
    outputs = [
        {
            "output_type": "display_data",
            "data": {"text/html": "<script>steal()</script>", "application/javascript": "steal()"},
        },
        {"output_type": "execute_result", "data": {"text/plain": "42", "text/html": "<b>42</b>"}},
        {"output_type": "stream", "name": "stdout", "text": "y" * 5000},
        "junk",
        {"output_type": "bogus"},
    ]
    cleaned = _clean_outputs(outputs, cap=3000)
    text = json.dumps(cleaned)
    assert "steal" not in text and "<b>" not in text and '"42"' in text and "output cut" in text


# -- a damaged notebook ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lesson07(tmp_path_factory):
    path = tmp_path_factory.mktemp("source") / "lesson07.ipynb"
    nbformat.write(build_notebook(load_quiz("07"), SALT), path)
    template = template_cells(path)
    names = {
        q.id: (q.function if q.kind is Kind.CODE else f"answer_{q.id}")
        for q in load_quiz("07").questions
        if q.auto_graded
    }
    released = _release(nbformat.read(path, as_version=4))
    for cell in released.cells:
        meta = cell.metadata["kvcourse"]
        if meta["role"] == "answer":
            cell.source = (
                f"answer_{meta['question']} = 1"
                if meta["question"] != "formula_code"
                else "def kv_cache_bytes(*a):\n    return 0"
            )
        if meta["role"] == "free":
            cell.source = "My own words about the cache."
    return template, names, released


def _read(tmp_path: Path, content: bytes | str, template, names):
    path = tmp_path / "nb.ipynb"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    cells, notes = read_cells(path)
    sub = match_cells(cells, template, names)
    return sub, notes + sub.notes


def test_an_intact_notebook_is_read_without_notes(tmp_path, lesson07):
    template, names, released = lesson07
    sub, notes = _read(tmp_path, nbformat.writes(released), template, names)
    assert (
        notes == []
        and set(sub.answers) == set(names)
        and sub.free == {"outgrow_weights": "My own words about the cache."}
    )


@pytest.mark.parametrize("damage", ["metadata", "ids", "both", "order", "deleted", "comma", "truncated", "v3"])
def test_answers_are_recovered_from_a_damaged_notebook(tmp_path, lesson07, damage):
    template, names, released = lesson07
    nb = nbformat.from_dict(json.loads(nbformat.writes(released)))
    if damage in ("metadata", "both"):
        for cell in nb.cells:
            cell.metadata = {}
    if damage in ("ids", "both"):
        nb.nbformat_minor = 4
        for cell in nb.cells:
            cell.pop("id", None)
    if damage == "order":
        nb.cells = nb.cells[:2] + nb.cells[2:][::-1]
    if damage == "deleted":
        nb.cells = [c for c in nb.cells if c.metadata["kvcourse"]["role"] in ("answer", "free")]
    text = json.dumps(nb)
    if damage == "comma":
        comma = text.index("}, {", len(text) // 2)
        text = text[: comma + 1] + text[comma + 2 :]
    if damage == "truncated":
        text = text[: int(len(text) * 0.9)]
    if damage == "v3":
        text = json.dumps(
            {
                "nbformat": 3,
                "worksheets": [
                    {
                        "cells": [
                            {"cell_type": c.cell_type, "input" if c.cell_type == "code" else "source": c.source}
                            for c in nb.cells
                        ]
                    }
                ],
            }
        )
    sub, notes = _read(tmp_path, text, template, names)
    if damage == "truncated":  # the cells before the cut
        assert len(sub.answers) >= 3 and set(sub.answers) <= set(names) and "not valid JSON" in notes[0]
        return
    assert set(sub.answers) == set(names), (damage, notes)
    assert sub.free == {"outgrow_weights": "My own words about the cache."}, (damage, notes)


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "invalid JSON"),
        (b"{not json", "invalid JSON"),
        (b"\xff\xfe\x00", "not UTF-8"),
        (b"[1, 2]", "no list of cells"),
        (b'{"cells": 3}', "no list of cells"),
        (b"[" * 100_000, "invalid JSON"),
    ],
)
def test_an_unreadable_notebook_gets_a_one_line_reason(tmp_path, lesson07, content, reason):
    template, names, _ = lesson07
    with pytest.raises(NotGradable, match=reason):
        _read(tmp_path, content, template, names)


def test_links_and_huge_files_are_refused(tmp_path):
    target = tmp_path / "secret.ipynb"
    target.write_text("{}")
    (tmp_path / "link.ipynb").symlink_to(target)
    with pytest.raises(NotGradable, match="link"):
        read_cells(tmp_path / "link.ipynb")
    with open(tmp_path / "huge.ipynb", "wb") as f:
        f.truncate(21_000_000)
    with pytest.raises(NotGradable, match="larger than 20 MB"):
        read_cells(tmp_path / "huge.ipynb")


# -- deciding the points --------------------------------------------------------------------------------


def test_points_are_decided_from_plain_values():
    quiz = load_quiz("07")
    choice, param, code = quiz.question("main_cost"), quiz.question("cache_bytes_param"), quiz.question("formula_code")
    assert decide(choice, {"q": "main_cost", "value": "B"}, COURSE, "al").right
    assert not decide(choice, {"q": "main_cost", "value": {"unreadable": "x"}}, COURSE, "al").right
    assert decide(choice, {"q": "main_cost", "missing": "answer_main_cost"}, COURSE, "al").points == 0
    assert decide(choice, None, COURSE, "al").points == 0
    value = expected_answer(param, COURSE, "al")
    assert decide(param, {"q": "x", "value": value}, COURSE, "al").right
    assert decide(param, {"q": "x", "value": f"{value / 1e9} GB"}, COURSE, "al").right
    wrong = decide(param, {"q": "x", "value": value * 3}, COURSE, "al")
    assert not wrong.right and f"{value:,.0f}" not in wrong.verdict + wrong.feedback
    results = [{"ok": got} for _, got in expected_answer(code, COURSE, "al")]
    assert decide(code, {"q": "x", "calls": results}, COURSE, "al").right
    assert not decide(code, {"q": "x", "calls": results[:-1]}, COURSE, "al").right
    assert not decide(code, {"q": "x", "calls": results[:-1] + [{"ok": {"unreadable": "x"}}]}, COURSE, "al").right
    hidden = decide(code, {"q": "x", "calls": results[:-1] + [{"ok": -1}]}, COURSE, "al")
    assert "a hidden test case" in hidden.verdict and "-1" in hidden.verdict
    free = load_quiz("07").question("outgrow_weights")
    assert decide_free(free, "YOUR ANSWER HERE", "YOUR ANSWER HERE").points == 0
    assert decide_free(free, "An answer.", "YOUR ANSWER HERE").points is None


def test_hidden_cases_are_drawn_per_student_from_the_secret():
    q = load_quiz("10").question("physical_slot")  # mixed cases the reference refuses are left out
    public = [tuple(case) for case in q.cases]
    alice, bob = code_cases(q, COURSE, "alice"), code_cases(q, COURSE, "bob")
    assert alice[: len(public)] == public and len(alice) == len(public) + 3
    assert alice != bob and not set(map(repr, alice[len(public) :])) & set(map(repr, public))
    other = Course(COURSE.directory, "kvtest", SALT, "cd" * 32, COURSE.exchange)
    assert code_cases(q, other, "alice") != alice  # another course's secret, other cases


# -- the sandbox -------------------------------------------------------------------------------------------


def test_limits_are_checked():
    assert Limits().cell_timeout_s == 30 and Limits().output_cap_bytes == 1_000_000
    with pytest.raises(ValueError):
        Limits(cell_timeout_s=0)
    with pytest.raises(ValueError):
        Limits(output_cap_bytes=10)


@needs("needs bubblewrap (apt-get install bubblewrap)" if bwrap_path() is None else None)
def test_the_sandbox_hides_a_course_even_inside_the_repository(tmp_path):
    repo = quizzes_dir().parent
    with tempfile.TemporaryDirectory(dir=repo, prefix=".kvgrade-test-") as course:
        (Path(course) / "gradebook.db").write_text("secret")
        copy = tmp_path / "copy"
        copy.mkdir()
        probe = (
            "import os, socket, sys\n"
            "def tries(f):\n    try:\n        f(); return 'open'\n    except Exception as e:\n"
            "        return type(e).__name__\n"
            f"print(tries(lambda: open({course + '/gradebook.db'!r}).read()))\n"
            f"print(sorted(os.listdir({str(quizzes_dir())!r})))\n"
            f"print(tries(lambda: open({str(repo / 'README.md')!r}, 'a')))\n"
            "print(tries(lambda: socket.create_connection(('1.1.1.1', 53), timeout=2)))\n"
            "open('/grading/written', 'w').write('ok')\nopen('/grading/out.ipynb', 'w').write('ok')\n"
            "import kvcourse.kernels.costs\nprint(tries(lambda: __import__('kvcourse.quizzes.sealing')))\n"
        )
        cmd = bwrap_command(copy, [Path(course)], [sys.executable, "-c", probe], environment("s1", "/tmp", "/tmp"))
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        lines = done.stdout.split("\n")
        assert done.returncode == 0, done.stderr
        assert lines[0] == "FileNotFoundError" and lines[1] == "[]" and lines[2] == "OSError"
        assert lines[3] == "OSError" and lines[4] == "ModuleNotFoundError"
        assert (copy / "out.ipynb").read_text() == "ok"  # a returned file reaches the copy; nothing else does
        assert not (copy / "written").exists()


def test_without_bwrap_autograde_refuses_and_names_the_package(monkeypatch, tmp_path):
    from kvcourse.quizzes.grading import autograde, sandbox

    init_course(tmp_path / "c", ["07"])
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        autograde.autograde(tmp_path / "c", "lesson07")
    assert os.environ.get("NBGRADER_EXECUTION") is None


def test_the_runner_cuts_output_and_stops_loops_even_without_the_sandbox(tmp_path):
    from kvcourse.quizzes.grading.notebook import read_outputs
    from kvcourse.quizzes.grading.sandbox import run_submission

    copy = tmp_path / "copy"
    copy.mkdir()
    collector = (quizzes_dir() / "grading" / "collector.py").read_text().split('"""', 2)[2]
    collector = collector.replace('RESULTS = "results.jsonl"', f"RESULTS = {str(copy / 'results.jsonl')!r}")
    cells = ["x = 1", collector, "print('y' * 3_000_000)", "while True:\n    pass", "record('x', 'x')"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, copy / "grading.ipynb")
    run = run_submission(copy, "s1", Limits(cell_timeout_s=2, output_cap_bytes=100_000), [], sandbox=False)
    outputs = read_outputs(copy / "out.ipynb", len(cells), 200_000)
    assert run.returncode == 0, run.log
    assert "output cut" in json.dumps(outputs[2]) and len(json.dumps(outputs[2])) < 110_000
    assert outputs[3][0]["ename"] == "TimeoutError"
    assert read_records(copy / "results.jsonl") == {"x": {"q": "x", "value": 1}}


def test_a_machine_that_cannot_run_a_notebook_grades_nobody(monkeypatch):
    from kvcourse.quizzes.grading import sandbox

    monkeypatch.setattr(sandbox, "_PREFLIGHT_PASSED", set())
    monkeypatch.setattr(
        sandbox, "run_submission", lambda *a, **k: sandbox.Run(0.1, 1, "bwrap: setting up uid map: boom")
    )
    with pytest.raises(RuntimeError, match="boom.*nothing was graded"):
        sandbox.preflight(Limits())


def test_a_students_markdown_cannot_run_script_in_the_graders_browser():
    from kvcourse.quizzes.grading.notebook import _escape_markdown

    shown = _escape_markdown("<img src=x onerror=steal()> [click](javascript:steal()) [ok](https://example.org)")
    assert "<img" not in shown and "](javascript:" not in shown and "[ok](https://example.org)" in shown


def test_the_graded_folder_keeps_what_release_feedback_needs(tmp_path: Path):
    """Regression: only the notebook and timestamp.txt were copied, so `nbgrader release_feedback` found no
    submission_secret.txt and feedback never reached the students. Plain files travel; links and notebooks do not."""
    submitted, graded = tmp_path / "submitted", tmp_path / "graded"
    (submitted / "data").mkdir(parents=True)
    (submitted / ".ipynb_checkpoints").mkdir()
    for name, text in {
        "timestamp.txt": "2026-12-01 10:00:00",
        "submission_secret.txt": "s3cret",
        "data/table.csv": "a,b",
        "lesson07.ipynb": "{}",
        ".ipynb_checkpoints/x.txt": "old",
    }.items():
        (submitted / name).write_text(text)
    outside = tmp_path / "instructor_secret.txt"
    outside.write_text("never copy me")
    (submitted / "link.txt").symlink_to(outside)
    (submitted / "linked_dir").symlink_to(tmp_path, target_is_directory=True)
    graded.mkdir()
    copy_companions(submitted, graded)
    copied = sorted(str(p.relative_to(graded)) for p in graded.rglob("*") if p.is_file())
    assert copied == ["data/table.csv", "submission_secret.txt", "timestamp.txt"]
    assert (graded / "submission_secret.txt").read_text() == "s3cret"
