"""`kvcourse grade report`: what the class got wrong, the biggest problem first.

A class of ten lesson-07 submissions, graded by the real `kvcourse grade autograde` in the sandbox, with
a planted misconception: eight students leave out the K-and-V factor 2 on the parameterised cache size
(each on their own drawn values), four pick the same wrong option. The report names the slip first, the
HTML page lives under instructor/ and renders. Unit tests of the ranking and of what a wrong number means
run on hand-written status data, without a sandbox.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import shlex
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from guards import needs
from hostile_course import ASSIGNMENT, _submit, notebook, right_answers, shared_run
from nbgrader_cli import NBGRADER, nbgrader_env

from kvcourse.cli import main
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.formulas import draw_params, facts
from kvcourse.quizzes.grading.autograde import kept_answers, plain_details
from kvcourse.quizzes.grading.decide import Course, Decision, expected_answer
from kvcourse.quizzes.grading.gradebook import load_status, status_path
from kvcourse.quizzes.grading.nbgrader_export import init_course
from kvcourse.quizzes.grading.report import Answer, Report, _lab, analyse
from kvcourse.quizzes.grading.report_page import render_html, render_text
from kvcourse.quizzes.grading.sandbox import bwrap_path
from kvcourse.quizzes.grading.slips import How, explain_number

# Underscores never occur in base64, so a name found in the page is a name, not a piece of the figure.
STUDENTS = [f"kv_student_{i:02d}" for i in range(10)]
HALF_KV = STUDENTS[:8]  # cache_bytes_param: answer / 2 (keys or values, not both)
WRONG_OPTION = STUDENTS[2:6]  # main_cost: (a), the arithmetic, instead of (b), the memory
TWICE = STUDENTS[9:]  # per_token_gqa: answer * 2, no planted mistake: a factor of 2 too many
SANDBOX = needs("needs bubblewrap (apt-get install bubblewrap)" if bwrap_path() is None else None)


def _grade_the_class(tmp: Path) -> dict:
    """`kvcourse grade init`, nbgrader's generate_assignment, ten submissions, `kvcourse grade autograde`."""
    course_dir = tmp / "course"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["grade", "init", str(course_dir), "--lessons", "07", "--exchange", str(tmp / "exchange")]) == 0
    done = subprocess.run(
        [NBGRADER, "generate_assignment", ASSIGNMENT],
        cwd=course_dir,
        env=nbgrader_env(tmp),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    course = Course.load(course_dir)
    quiz = load_quiz("07")
    for student in STUDENTS:
        answers = right_answers(course, student)
        if student in HALF_KV:
            half = expected_answer(quiz.question("cache_bytes_param"), course, student) / 2
            answers["cache_bytes_param"] = f"answer_cache_bytes_param = {half!r}"
        if student in WRONG_OPTION:
            answers["main_cost"] = 'answer_main_cost = "a"'
        if student in TWICE:
            twice = expected_answer(quiz.question("per_token_gqa"), course, student) * 2
            answers["per_token_gqa"] = f'answer_per_token_gqa = "{twice:.0f} bytes"'
        _submit(course_dir, student, notebook(course_dir, answers))
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        code = main(["grade", "autograde", ASSIGNMENT, "--course", str(course_dir), "--jobs", "2"])
    assert code == 0, log.getvalue()
    return {"course": str(course_dir), "log": log.getvalue()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory, worker_id):
    """One graded class for the module, shared by both xdist workers."""
    return shared_run(tmp_path_factory, worker_id, "report-class", _grade_the_class)


@SANDBOX
def test_the_report_names_the_planted_misconception_first(graded, capsys):
    course_dir = graded["course"]
    assert main(["grade", "report", ASSIGNMENT, "--course", str(course_dir)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].startswith(
        "Most common misconception: cache_bytes_param x1/2, 80% of the class: "
        "You counted a key or a value per head, not both"
    ), out
    ranked = lines[lines.index("Misconceptions, most common first") + 2 :]
    assert ranked[0].split()[:4] == ["1", "80%", "cache_bytes_param", "x1/2"], out
    assert ranked[1].split()[:4] == ["2", "40%", "main_cost", "(a)"], out
    assert ranked[2].split()[:4] == ["3", "10%", "per_token_gqa", "x2"] and "2 (keys and values" in ranked[2], out
    assert "formula_code (code, 2 points): pass rate 10 of 10 (100%)" in out
    assert "outgrow_weights (free, 2 points): 10 of 10 answered" in out
    page = Course.load(course_dir).directory / "instructor" / "reports" / f"{ASSIGNMENT}.html"
    assert lines[-1].endswith(str(page)) and page.is_file()


@SANDBOX
def test_the_status_file_keeps_each_raw_answer(graded):
    status = load_status(Course.load(graded["course"]), ASSIGNMENT)
    assert sorted(status) == STUDENTS
    for student, entry in status.items():
        assert entry["answers"]["main_cost"] == ("a" if student in WRONG_OPTION else "b")
        assert isinstance(entry["answers"]["cache_bytes_param"], float)
        assert "formula_code" not in entry["answers"]  # a function's results are no plain answer
        assert entry["points"]["outgrow_weights"] is None and entry["points"]["formula_code"] == 2.0
        assert entry["details"] == {}  # no lab in lesson 07


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


@SANDBOX
def test_the_page_lives_under_instructor_renders_and_names_no_student(graded, tmp_path, capsys):
    course_dir = graded["course"]
    elsewhere = tmp_path / "reports" / "lesson07.html"
    assert main(["grade", "report", ASSIGNMENT, "--course", str(course_dir)]) == 0
    assert main(["grade", "report", ASSIGNMENT, "--course", str(course_dir), "--html", str(elsewhere)]) == 0
    for refused in (
        course_dir / "release" / "report.html",
        course_dir / "feedback" / "r.html",
        Path(Course.load(course_dir).exchange) / "r.html",
    ):
        assert main(["grade", "report", ASSIGNMENT, "--course", str(course_dir), "--html", str(refused)]) == 2
        assert "never where students may see it" in capsys.readouterr().err
        assert not refused.exists()
    page = course_dir / "instructor" / "reports" / f"{ASSIGNMENT}.html"
    assert page.stat().st_mode & 0o077 == 0  # the instructor's alone, as course.json
    text = page.read_text()
    assert text == elsewhere.read_text()
    parsed = _Page()
    parsed.feed(text)
    images = [attrs["src"] for tag, attrs in parsed.tags if tag == "img"]
    assert len(images) == 1 and images[0].startswith("data:image/png;base64,")
    assert base64.b64decode(images[0].split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    assert not [t for t, a in parsed.tags if t in ("script", "link", "iframe") or "href" in a]  # self-contained
    assert sum(tag == "table" for tag, _ in parsed.tags) == 1 + len(load_quiz("07").questions)
    words = " ".join(parsed.text)
    assert "Most common misconception: cache_bytes_param x1/2" in words
    for private in [*STUDENTS, str(course_dir), "release/", "feedback/", "submitted/"]:
        assert private not in text, private


# -- without a sandbox: hand-written status data ---------------------------------------------------------


@pytest.fixture
def course(tmp_path) -> Course:
    """A course with lessons 06 and 07 written, nothing generated or graded (no nbgrader run)."""
    init_course(tmp_path / "course", ["06", "07"], exchange=str(tmp_path / "exchange"))
    return Course.load(tmp_path / "course")


def _entry(answers: dict, verdicts: dict, points: dict | None = None) -> dict:
    entry = {"status": "graded", "verdicts": verdicts, "answers": answers}
    return entry if points is None else {**entry, "points": points}


def test_explain_number_names_planted_slips_then_simple_factors(course):
    quiz = load_quiz("06")
    per_layer = quiz.question("per_layer_token")  # 16,384 bytes; planted: 8,192, 524,288, 32,768
    assert explain_number(per_layer, 8192, 16384).how is How.PLANTED
    assert explain_number(per_layer, 8192, 16384).words[0].startswith("Half of it")
    quarter = explain_number(per_layer, 4096, 16384)
    assert (quarter.how, quarter.label) == (How.FACTOR, "x1/4")
    assert quarter.meaning == "a factor left out: 4 bytes per value (32-bit)"
    kilo = explain_number(per_layer, 16000, 16384)  # 16 KiB read as 16 kB
    assert kilo.how is How.FACTOR and "1024 vs 1000 (KiB vs kB)" in kilo.meaning
    assert explain_number(per_layer, 12345, 16384).how is How.UNEXPLAINED
    cache = load_quiz("07").question("cache_bytes_param")
    seed = course.seed("kv_student_00")
    right = expected_answer(cache, course, "kv_student_00")
    twice = explain_number(cache, right * 2, right, seed)
    assert twice.how is How.FACTOR and twice.meaning.startswith("a factor too many: 2 (keys and values")
    layers = facts(draw_params(cache, seed))["num_layers"]
    one_layer = explain_number(cache, right / layers, right, seed)
    assert one_layer.how is How.PLANTED and any("one layer's share" in w for w in one_layer.words)
    entries = load_quiz("10").question("table_entries")  # 22 blocks; 21 is planted
    assert explain_number(entries, 23, 22).meaning == "one too many"


def test_findings_are_ranked_by_share_of_the_class(course):
    quiz = load_quiz("07")
    cache = quiz.question("cache_bytes_param")
    graded = {}
    for i, student in enumerate(STUDENTS):
        right = expected_answer(cache, course, student)
        graded[student] = _entry(
            {
                "main_cost": "a" if i < 3 else "c" if i < 5 else "b",
                "users_to_outweigh_13b": 16 if i < 6 else 15 if i < 7 else 8,
                "cache_bytes_param": right / 2 if i < 4 else right,
            },
            {
                "main_cost": "Right: (b)." if i >= 5 else "Not.",
                "users_to_outweigh_13b": "x" if i < 7 else "Right",
                "cache_bytes_param": "x" if i < 4 else "Right",
                "per_token_gqa": "No answer: not defined.",
                "formula_code": "Right: all 8 test cases pass." if i % 2 else "3 of 8 test cases pass; ...",
                "outgrow_weights": "Written: graded by hand." if i < 9 else "No response.",
            },
            {
                "main_cost": float(i >= 5),
                "users_to_outweigh_13b": float(i >= 7),
                "cache_bytes_param": 2.0 * (i >= 4),
                "per_token_gqa": 0.0,
                "formula_code": 2.0 * (i % 2),
                "outgrow_weights": None if i < 9 else 0.0,
            },
        )
    report = analyse(quiz, "lesson07", graded, course)
    ranked = [(f.question, f.answer, f.count) for f in report.findings]
    assert ranked == [
        ("users_to_outweigh_13b", "16, 15 (x2, x1.88)", 7),
        ("cache_bytes_param", "x1/2", 4),
        ("main_cost", "(a)", 3),
        ("main_cost", "(c)", 2),
    ]
    assert report.findings[0].share == 0.7
    text = render_text(report)
    assert "per_token_gqa (param, 2 points): 0 of 10 right" in text and "no answer  100%" in text
    assert "pass rate 5 of 10 (50%)" in text and "9 of 10 answered" in text
    assert "(b) Memory" in text and "the right answer" in text
    html_text = render_html(report)
    assert "data:image/png;base64," in html_text and "<script" not in html_text


def test_a_status_file_written_before_the_report_still_loads(course, capsys):
    path = status_path(course, "lesson07")
    path.parent.mkdir(parents=True)
    old = {
        "status": "graded",
        "verdicts": {
            "main_cost": "Not (c).",
            "per_token_gqa": "Not within the tolerance",
            "users_to_outweigh_13b": "Right: 8.",
            "formula_code": "Right: all 8.",
            "cache_bytes_param": "Unreadable answer: 'abc'.",
            "outgrow_weights": "No response.",
        },
        "notes": [],
        "reason": "",
        "score": 3.0,
        "seconds": 1.0,
    }
    path.write_text(json.dumps({"kv_student_00": old, "kv_student_01": {"status": "not graded", "reason": "empty"}}))
    assert main(["grade", "report", "lesson07", "--course", str(course.directory)]) == 0
    out = capsys.readouterr().out
    assert "1 graded, 1 could not be graded" in out
    assert re.search(r"^  1 +100% +main_cost +\(c\) ", out, re.M), out  # the option, read back from the verdict
    assert "wrong (its answer was not kept: autograde again to see it)" in out


@pytest.mark.parametrize(
    "case, message",
    [
        ("lesson05", "no assignment lesson05 in"),
        ("lesson99x", "is not an assignment of this course"),
        ("lesson06", "nothing graded yet for lesson06: run `kvcourse grade autograde lesson06` first"),
        ("damaged", "the status file"),
        ("all_failed", "nothing graded yet for lesson07 (1 could not be graded"),
    ],
)
def test_one_clear_line_when_there_is_no_report(course, capsys, case, message):
    assignment = {"damaged": "lesson07", "all_failed": "lesson07"}.get(case, case)
    path = status_path(course, "lesson07")
    path.parent.mkdir(parents=True)
    if case == "damaged":
        path.write_text('{"kv_student_00": {"status": "graded", "verd')
    elif case == "all_failed":
        path.write_text(json.dumps({"kv_student_00": {"status": "not graded", "reason": "empty"}}))
    assert main(["grade", "report", assignment, "--course", str(course.directory)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    if case == "damaged":
        assert "is damaged" in err and "kvcourse grade autograde lesson07" in err


def test_lab_scores_and_the_rule_broken_most_often():
    lab = next(q for q in load_quiz("18").questions if q.kind.value == "lab")

    def traces(*failing: tuple[str, str]) -> dict:
        rows = [
            {"name": name, "public": name.startswith("public"), "score": 0.5, "kind": kind, "reason": "..."}
            for name, kind in failing
        ]
        return {"traces": rows + [{"name": "public-ok", "public": True, "score": 1.0, "kind": "", "reason": ""}]}

    answers = [
        Answer("a", None, False, 2.0, "Right", traces(), 2.0),
        Answer("b", None, False, 1.0, "x", traces(("hidden-3", "leak"), ("public-1", "leak")), 2.0),
        Answer("c", None, False, 1.5, "x", traces(("hidden-3", "leak")), 2.0),
        Answer("d", None, False, 0.0, "x", traces(("public-1", "over budget")), 2.0),
    ]
    report = _lab(lab, answers, 4)
    assert report.summary == "mean score 56%, 1 of 4 full marks; the rule broken most often: leak"
    rows = {r.answer: r.count for r in report.rows}
    assert rows["score full marks"] == 1 and rows["score 75-99%"] == 1 and rows["score 50-74%"] == 1
    assert rows["score 0"] == 1 and rows["rule: leak"] == 2 and rows["rule: over budget"] == 1
    assert rows["trace: a hidden trace (drawn per student)"] == 2 and rows["trace: public-1"] == 2


def test_what_the_status_file_keeps():
    records = {
        "c": {"q": "c", "value": "b"},
        "n": {"q": "n", "value": 8},
        "f": {"q": "f", "calls": [{"ok": 1}]},
        "m": {"q": "m", "missing": "answer_m"},
        "u": {"q": "u", "value": {"unreadable": "a set"}},
        "long": {"q": "long", "value": "9" * 5000},
        "forged": {"q": "forged", "value": "a"},
    }
    kept = kept_answers(records, ["c", "n", "f", "m", "u", "long", "absent"])
    assert kept == {"c": "b", "n": 8, "long": "9" * 200}
    assert plain_details(Decision(1.0, 1.0, "Right")) is None  # a Decision without details keeps none

    class WithDetails:
        details = {"traces": [{"name": "t1", "public": True, "score": 1.0, "kind": "", "reason": Path("/x")}]}

    assert plain_details(WithDetails())["traces"][0]["reason"] == "/x"


def test_the_guide_shows_the_report_command():
    from kvcourse.syllabus import REPO_ROOT

    guide = (REPO_ROOT / "quizzes" / "INSTRUCTORS.md").read_text()
    assert "## What the class got wrong" in guide
    shown = [
        shlex.split(line.split(" #")[0]) for line in guide.splitlines() if line.startswith("kvcourse grade report")
    ]
    assert shown and all(words[:3] == ["kvcourse", "grade", "report"] for words in shown)


def test_a_lab_graded_between_lines_shows_the_class_against_them_and_the_best_three_anonymised():
    """Lab B: the traces where most of the class fell below the baseline, the best three policies' figures (no
    names), and a figure of the class's mean hit rate against LRU's, the reference's and the oracle's."""
    from kvcourse.quizzes.grading.report_page import render_html

    lab = next(q for q in load_quiz("19").questions if q.kind.value == "lab")
    line = {"LRU": 0.40, "reference": 0.50, "oracle": 0.60}

    def run(name: str, mine: float, score: float) -> dict:
        return {
            "name": name,
            "public": name.startswith("public"),
            "score": score,
            "kind": "hit rate",
            "reason": "",
            "figures": {"yours": mine, **line},
        }

    answers = [
        Answer(
            student,
            None,
            False,
            10 * score,
            "x",
            {"traces": [run("public 1", mine, score), run("public 2", 0.45, 0.8), run("hidden 7", mine, score)]},
            10.0,
        )
        for student, mine, score in (
            ("s_ann", 0.30, 0.45),
            ("s_bob", 0.35, 0.52),
            ("s_cy", 0.48, 0.55),
            ("s_di", 0.52, 1.0),
        )
    ]
    report = _lab(lab, answers, 4)
    rows = {r.answer: (r.count, r.meaning) for r in report.rows}
    assert rows["below LRU: public 1"][0] == 3 and "below LRU: public 2" not in rows  # most of the class
    assert [name for name in rows if name.startswith("best policy")] == [
        "best policy 1",
        "best policy 2",
        "best policy 3",
    ]
    assert rows["best policy 1"][1].startswith("mean hit rate 0.485 on the public traces (LRU 0.4, reference 0.5")
    assert report.lab_figures is not None and sorted(report.lab_figures.students) == pytest.approx(
        [0.375, 0.4, 0.465, 0.485]
    )
    page = render_html(Report("lesson19", "Lab B", 4, 0, [report]))
    assert page.count("<img") == 2 and "against the lines they are graded between" in page
    assert not any(student in page for student in ("s_ann", "s_bob", "s_cy", "s_di"))
