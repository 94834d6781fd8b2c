"""An instructor's first week (issue 33): nbgrader's own autograde refuses before it touches a folder,
the export leaves out lessons never released and says why for every row, feedback names a planted
mistake, marks a written answer as graded by hand and hides the set-up code, and a command run from
the wrong folder names the full path and the way out."""

from __future__ import annotations

import csv
import hashlib
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions
from nbgrader_cli import NBGRADER, nbgrader_env

from kvcourse.cli import main
from kvcourse.quizzes.bank import load_quiz, parse_quiz
from kvcourse.quizzes.checking import check, named_mistake
from kvcourse.quizzes.formulas import draw_params, evaluate, facts
from kvcourse.quizzes.grading.autograde import autograde
from kvcourse.quizzes.grading.decide import Course, decide, decide_free, expected_answer
from kvcourse.quizzes.grading.gradebook import export_grades
from kvcourse.quizzes.grading.nbgrader_export import build_notebook, init_course
from kvcourse.quizzes.grading.notebook import BY_HAND, graded_notebook, limit_notes
from kvcourse.quizzes.grading.recovery import match_cells, read_cells, template_cells
from kvcourse.quizzes.grading.sandbox import Limits, bwrap_path
from kvcourse.quizzes.units import format_quantity

SALT = "0123456789ab"
COURSE = Course(Path("/nonexistent"), "kvtest", SALT, "ab" * 32, "/nonexistent/exchange")
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
QUERY_HEADS = "only the key/value heads are cached"  # lesson 07 per_token_gqa's planted mistake, in part
TOO_FEW = "still weigh less than the weights"  # lesson 07 users_to_outweigh_13b's 7, in part


def _query_heads_mistake(student: str) -> float:
    """The number a student who counts every query head gets for lesson 07's per_token_gqa."""
    q = load_quiz("07").question("per_token_gqa")
    values = facts(draw_params(q, COURSE.seed(student)))
    return expected_answer(q, COURSE, student) * values["num_heads"] / values["num_kv_heads"]


# -- C3: a planted mistake is named, in the widget and in the grade, with one piece of code -----------------


def test_a_planted_mistake_is_named_by_the_widget_and_the_grader_without_the_right_answer():
    """Regression: a wrong number's feedback said only 'Not within the tolerance of the right answer: you
    gave 249'. A number the bank plants as a mistake is now named, the same words in both places."""
    q = load_quiz("01").question("num_passes")
    why = named_mistake(q, 249)
    assert why and "prompt" in why
    verdict = decide(q, {"q": q.id, "value": 249}, COURSE, "alice").verdict
    assert verdict.endswith(why) and why in check(q, 249).message
    assert "250" not in verdict
    plain = decide(q, {"q": q.id, "value": 100}, COURSE, "alice").verdict
    assert plain == "Not within the tolerance of the right answer: you gave 100."  # no mistake: nothing named


def test_a_parameterised_mistake_is_computed_from_that_students_values():
    q = load_quiz("07").question("per_token_gqa")
    for student in ("alice", "bob", "s-07"):  # every model this question draws shares its K/V heads
        wrong = _query_heads_mistake(student)
        verdict = decide(q, {"q": q.id, "value": wrong}, COURSE, student).verdict
        assert QUERY_HEADS in verdict and QUERY_HEADS in check(q, wrong, COURSE.seed(student)).message
        right = expected_answer(q, COURSE, student)
        assert format_quantity(right, q.unit).split(" (")[0] not in verdict and f"{right:.0f}" not in verdict
        other = decide(q, {"q": q.id, "value": wrong}, COURSE, student + "-neighbour").verdict
        if abs(_query_heads_mistake(student + "-neighbour") - wrong) > 0.02 * wrong:
            assert QUERY_HEADS not in other  # a neighbour's numbers are not this student's mistake


BANK = """lesson = "07"
[[question]]
id = "n"
kind = "numeric"
prompt = "How many?"
unit = "count"
rel_tol = 0.0
abs_tol = 0.5
[question.secret]
answer = 250
explanation = "e"
mistakes = [{ value = VALUE, why = "WHY" }]
"""


@pytest.mark.parametrize(
    "value, why, message",
    [
        ("250.2", "a slip", "within the tolerance of the right answer"),
        ("249", "you meant 250", "its words give the right answer"),
        ("249", "{answer} it is", "plain sentence"),
        ('"answer - 1"', "a slip", "a finite number"),
    ],
)
def test_the_bank_refuses_a_mistake_that_gives_the_answer_away(value, why, message):
    with pytest.raises(ValueError, match=message):
        parse_quiz(BANK.replace("VALUE", value).replace("WHY", why), "quizzes/bank/07.toml")


def test_a_mistakes_arithmetic_is_read_never_run():
    assert evaluate("answer * num_heads / num_kv_heads", {"answer": 10, "num_heads": 4, "num_kv_heads": 2}) == 20
    for bad in ("__import__('os').getcwd()", "answer.real", "[answer]", "dtype"):
        with pytest.raises(ValueError):
            evaluate(bad, {"answer": 1, "dtype": "16-bit"})


# -- C1, C2: the graded notebook (what feedback shows) ----------------------------------------------------


def _submission(tmp_path: Path, free_text: str):
    source = tmp_path / "lesson07.ipynb"
    nbformat.write(build_notebook(load_quiz("07"), SALT), source)
    released, _ = ClearSolutions().preprocess(nbformat.read(source, as_version=4), {})
    released, _ = ClearHiddenTests().preprocess(released, {})
    for cell in released.cells:
        if cell.metadata["kvcourse"]["role"] == "free":
            cell.source = free_text
    nbformat.write(released, tmp_path / "submitted.ipynb")
    template = template_cells(source)
    names = {q.id: q.function or f"answer_{q.id}" for q in load_quiz("07").questions if q.auto_graded}
    return source, match_cells(read_cells(tmp_path / "submitted.ipynb")[0], template, names), template


def test_feedback_says_a_written_answer_waits_for_a_human_and_hides_the_set_up_code(tmp_path):
    """Regression: feedback showed 'Written response (Score: 0.0 / 2.0)' without a word, and opened with
    the ~40 lines of the locked set-up cell."""
    quiz = load_quiz("07")
    q = quiz.question("outgrow_weights")
    source, sub, template = _submission(tmp_path, "The cache grows with tokens and users; the weights do not.")
    stub = next(c.source for c in template if c.role == "free")
    decisions = {q.id: decide_free(q, sub.free.get(q.id), stub)}
    nb = graded_notebook(source, sub, {}, decisions, quiz, COURSE, "alice")
    MetadataValidator().validate_nb(nb)  # nbgrader's generate_feedback reads it as before
    nbformat.validate(nb)
    roles = [c.metadata.get("kvcourse", {}).get("role") for c in nb.cells]
    setup = nb.cells[roles.index("setup")]
    assert setup.source.startswith("# Set-up (locked)") and "\n" not in setup.source
    assert setup.metadata["nbgrader"]["locked"] and setup.metadata["nbgrader"]["grade_id"] == "setup"
    text = nbformat.writes(nb)
    assert SALT not in text and "def check_form" not in text
    after = nb.cells[roles.index("free") + 1]
    assert after.cell_type == "markdown" and after.source == BY_HAND and "graded by hand" in BY_HAND.lower()

    _, empty, _ = _submission(tmp_path, stub)  # no response: 0 at once, nothing waits for a human
    decisions = {q.id: decide_free(q, empty.free.get(q.id), stub)}
    nb = graded_notebook(source, empty, {}, decisions, quiz, COURSE, "alice")
    assert BY_HAND not in nbformat.writes(nb)


def test_a_run_cut_by_the_limits_leaves_notes_for_the_export():
    timeout = nbformat.v4.new_output(
        "error",
        ename="TimeoutError",
        traceback=[],
        evalue="Stopped: this cell ran for more than 30 s (the grader's time limit).",
    )
    cut = nbformat.v4.new_output("stream", name="stdout", text="x\n[... output cut: this cell printed more ...]\n")
    own = nbformat.v4.new_output("error", ename="TimeoutError", evalue="my own", traceback=[])
    notes = limit_notes([[timeout], [cut], [own], []], 30, 1_000_000)
    assert notes == [
        "1 cell(s) stopped at the time limit of 30 s per cell",
        "output cut at 1,000,000 bytes in 1 cell(s)",
    ]
    assert limit_notes([[own], []], 30, 1_000_000) == []


# -- D: the wrong folder ----------------------------------------------------------------------------------


def test_a_command_run_outside_the_course_names_the_full_path_and_the_way_out(tmp_path, monkeypatch, capsys):
    """Regression: it printed '. has no readable instructor/course.json'."""
    monkeypatch.chdir(tmp_path)
    assert main(["grade", "export"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path.resolve() / "instructor" / "course.json") in err
    assert "cd into the course folder or pass --course DIR" in err and ". has no" not in err


# -- A and B, and C in nbgrader's own feedback: a course with real nbgrader commands ------------------------


def _nbgrader(env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([NBGRADER, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _answer(nb, grade_id: str, code: str) -> None:
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    cell.source = cell.source.replace(STUB, code) if STUB in cell.source else code


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """Lessons 05 and 07 generated; 07 released (in the exchange); carol collected and graded by
    `kvcourse grade autograde`, erin collected but not graded, dave waiting in the exchange."""
    tmp = tmp_path_factory.mktemp("first_week")
    env = nbgrader_env(tmp)
    course_dir, exchange = tmp / "course", tmp / "exchange"
    init_course(course_dir, ["05", "07"], course_id="kvtest", exchange=str(exchange))
    for name in ("lesson05", "lesson07"):
        done = _nbgrader(env, course_dir, "generate_assignment", name)
        assert done.returncode == 0, done.stdout + done.stderr
    (exchange / "kvtest" / "outbound" / "lesson07").mkdir(parents=True)  # what release_assignment leaves
    (exchange / "kvtest" / "inbound").mkdir()
    (exchange / "kvtest" / "inbound" / "dave+lesson07+2026-01-05 10:00:00.000000 UTC+abc").mkdir()
    released = nbformat.read(course_dir / "release" / "lesson07" / "lesson07.ipynb", as_version=4)
    for student in ("carol", "erin"):
        nb = nbformat.from_dict(released)
        if student == "carol":
            _answer(nb, "answer_users_to_outweigh_13b", "answer_users_to_outweigh_13b = 7")
            _answer(nb, "answer_per_token_gqa", f"answer_per_token_gqa = {_query_heads_mistake_in(course_dir):.0f}")
            _answer(nb, "free_outgrow_weights", "The cache grows with every token and user; the weights do not.")
        folder = course_dir / "submitted" / student / "lesson07"
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / "lesson07.ipynb")
        (folder / "timestamp.txt").write_text("2026-01-05 09:00:00.000000 UTC")
    log: list[str] = []
    results = autograde(
        course_dir, "lesson07", ["carol"], Limits(30, 1_000_000, 120), sandbox=bwrap_path() is not None, log=log.append
    )
    assert [r.status for r in results] == ["graded"], log
    return {"dir": course_dir, "env": env, "tmp": tmp, "log": log}


def _query_heads_mistake_in(course_dir: Path) -> float:
    real = Course.load(course_dir)
    q = load_quiz("07").question("per_token_gqa")
    values = facts(draw_params(q, real.seed("carol")))
    return expected_answer(q, real, "carol") * values["num_heads"] / values["num_kv_heads"]


def _snapshot(course_dir: Path) -> dict[str, str]:
    files = [p for p in sorted((course_dir / "autograded").rglob("*")) if p.is_file()] + [course_dir / "gradebook.db"]
    return {str(p.relative_to(course_dir)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.mark.slow
@pytest.mark.parametrize("force", [[], ["--force"]])
def test_nbgrader_autograde_refuses_at_once_and_changes_nothing(course, force):
    """Regression: after `kvcourse grade autograde`, `nbgrader autograde` said 'Skipping existing
    assignment' and exited 0, and with --force it deleted every autograded/<student>/<assignment> first;
    before that, the refusal came as a 35-line traceback per student."""
    before = _snapshot(course["dir"])
    assert "autograded/carol/lesson07/lesson07.ipynb" in before
    done = _nbgrader(course["env"], course["dir"], "autograde", "lesson07", *force)
    out = (done.stdout + done.stderr).strip()
    assert done.returncode != 0, out
    assert "kvcourse grade autograde lesson07" in out and "Traceback" not in out
    assert len(out.splitlines()) <= 2, out
    assert _snapshot(course["dir"]) == before  # not a file of autograded/ nor the gradebook touched


@pytest.mark.slow
def test_nbgrader_feedback_names_the_mistake_waits_for_a_human_and_hides_the_set_up(course):
    real = Course.load(course["dir"])
    done = _nbgrader(course["env"], course["dir"], "generate_feedback", "lesson07", "--student=carol")
    assert done.returncode == 0, done.stdout + done.stderr
    page = (course["dir"] / "feedback" / "carol" / "lesson07" / "lesson07.html").read_text()
    assert TOO_FEW in page and QUERY_HEADS in page
    assert "Graded by hand" in page
    assert "Set-up (locked)" in page and "def check_form" not in page and real.salt not in page
    right = expected_answer(load_quiz("07").question("per_token_gqa"), real, "carol")
    assert f"{right:,.0f}" not in page and f"{right:.0f}" not in page


@pytest.mark.slow
def test_the_export_leaves_out_lessons_never_released_and_gives_every_row_a_reason(course):
    """Regression: lesson05, generated but never released, was 'not submitted' for everyone, and the
    reason column was empty on every row."""
    log: list[str] = []
    rows = export_grades(course["dir"], course["tmp"] / "grades.csv", log=log.append)
    assert {r["assignment"] for r in rows} == {"lesson07"}
    assert any("lesson05" in line and "never released" in line for line in log)
    by = {r["student_id"]: r for r in rows}
    assert set(by) == {"carol", "dave", "erin"}
    assert by["carol"]["status"] == "to grade by hand"
    assert "to grade by hand: outgrow_weights (2 points)" in by["carol"]["reason"]
    assert by["erin"]["status"] == "not graded" and "kvcourse grade autograde lesson07" in by["erin"]["reason"]
    assert by["dave"]["status"] == "not graded" and "nbgrader collect lesson07" in by["dave"]["reason"]
    with open(course["tmp"] / "grades.csv", newline="") as f:
        assert all(r["reason"] for r in csv.DictReader(f))
