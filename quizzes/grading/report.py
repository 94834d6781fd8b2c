"""`kvcourse grade report ASSIGNMENT`: what the class got wrong, the biggest problem first (quizzes/INSTRUCTORS.md).

From instructor/status/<assignment>.json (autograde's outcome per student, each raw answer with it) and the
lesson's bank:
- a choice question: the share of the class on each option, the right one marked, and for each wrong
  option the misconception the bank's explanation of it names;
- a numeric or parameterised question: the wrong answers grouped by what they mean: one of the bank's
  planted mistakes (checking.named_mistake, on each student's drawn values), else a simple factor off the
  right answer (2 for keys and values, the layers, the bytes per value, 1024 vs 1000...), else unexplained
  (slips.py says what a wrong number means);
- a lab: the score distribution and the rule and the trace that cost points most often;
- a code question: the pass rate; a free response: how many answered.
The findings (one named wrong option, or one named numeric slip, and the share of the class making it) are
ranked, the largest first. The report names no student; report_page.py prints it as plain text and writes it
as one self-contained HTML page under instructor/reports/.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kvcourse.labs.common import BASELINE_SCORE
from kvcourse.labs.spec import LABS

from ..bank import load_quiz
from ..checking import choice_key
from ..model import Kind, Question, Quiz
from ..units import AnswerFormatError, format_quantity, parse_quantity
from .decide import Course, expected_answer
from .gradebook import status_path
from .nbgrader_export import lesson_of
from .slips import How, Slip, explain_number

_VERDICT_KEY = re.compile(r"(?:Right: |Not )\(([a-h])\)\.")  # a choice verdict: "Right: (b)." or "Not (a)."


class ReportError(ValueError):
    """Why there is no report: no such assignment, nothing graded yet, a damaged status file."""


def short(text: str, limit: int = 100, *, sentence: bool = True) -> str:
    """The first sentence of a text (or the text, with sentence=False), cut at `limit` characters."""
    text = " ".join(text.split())
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0] if sentence else text
    return first if len(first) <= limit else first[: limit - 3].rstrip() + "..."


# -- the report ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of a question's table: an answer (or a group of answers), how many gave it, what it means."""

    answer: str
    count: int
    meaning: str = ""
    right: bool = False
    group: str = ""  # the figure's colour: a finding's key, "unexplained", "no answer" or "failed"


@dataclass(frozen=True)
class Finding:
    """One named wrong option or numeric slip, and the share of the class making it."""

    question: str
    answer: str
    meaning: str
    count: int
    share: float

    @property
    def key(self) -> str:
        return f"{self.question} {self.answer}"


@dataclass(frozen=True)
class LabFigures:
    """A lab graded between lines: each student's mean figure on the public traces (the same for everyone), and
    the mean of each line there: {"LRU": 0.41, "reference": 0.52, "oracle": 0.58}."""

    figure: str  # "hit rate", "goodput"
    students: list[float]
    lines: dict[str, float]


@dataclass
class QuestionReport:
    """One question's table, and the one-line summary above it."""

    question: Question
    summary: str
    rows: list[Row] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    lab_figures: LabFigures | None = None  # a lab graded between lines (B, C): the class against them


@dataclass
class Report:
    """What the class got wrong on one assignment: the ranked findings, then question by question."""

    assignment: str
    title: str
    num_graded: int
    num_not_graded: int
    questions: list[QuestionReport]

    @property
    def findings(self) -> list[Finding]:
        order = {q.question.id: i for i, q in enumerate(self.questions)}
        found = [f for q in self.questions for f in q.findings]
        return sorted(found, key=lambda f: (-f.count, order[f.question], f.answer))


@dataclass(frozen=True)
class Answer:
    """One graded student's answer to one question, as the status file keeps it."""

    student: str
    value: Any
    kept: bool  # False: no raw answer kept (not handed over, or graded before reports existed)
    points: float | None
    verdict: str
    details: dict | None
    max_points: float

    @property
    def right(self) -> bool:
        if self.points is not None:
            return self.points >= self.max_points
        return self.verdict.startswith("Right")

    @property
    def absent(self) -> str:
        """ "no answer" or "unreadable" where the verdict says so, else ""."""
        return (
            "no answer"
            if self.verdict.startswith("No answer")
            else "unreadable"
            if self.verdict.startswith("Unreadable")
            else ""
        )


def _part(entry: dict, name: str) -> dict:
    value = entry.get(name)
    return value if isinstance(value, dict) else {}


def answers_to(question: Question, graded: dict[str, dict]) -> list[Answer]:
    """Every graded student's answer to this question (a student graded without it is left out)."""
    found = []
    for student, entry in sorted(graded.items()):
        verdicts, answers, points = _part(entry, "verdicts"), _part(entry, "answers"), _part(entry, "points")
        if question.id not in verdicts:
            continue
        got, details = points.get(question.id), _part(entry, "details").get(question.id)
        found.append(
            Answer(
                student,
                answers.get(question.id),
                question.id in answers,
                float(got) if isinstance(got, (int, float)) else None,
                str(verdicts[question.id]),
                details if isinstance(details, dict) else None,
                float(question.points),
            )
        )
    return found


def _choice(q: Question, answers: list[Answer], n: int) -> QuestionReport:
    counts: Counter[str] = Counter()
    for a in answers:
        key = choice_key(q, a.value) if a.kept else None
        match = _VERDICT_KEY.fullmatch(a.verdict)
        counts[key or (match.group(1) if match else a.absent or "unreadable")] += 1
    report = QuestionReport(q, f"{counts[q.correct]} of {n} right ({q.correct})")
    for key, option in zip(q.option_keys, q.options, strict=True):
        right = key == q.correct
        meaning = "the right answer" if right else short(q.explanations[key])
        report.rows.append(Row(f"({key}) {short(option, 40)}", counts[key], meaning, right, f"{q.id} ({key})"))
        if not right and counts[key]:
            report.findings.append(Finding(q.id, f"({key})", meaning, counts[key], counts[key] / n))
    report.rows += [
        Row(other, counts[other], group="no answer") for other in ("unreadable", "no answer") if counts[other]
    ]
    return report


def _numeric(q: Question, answers: list[Answer], n: int, course: Course) -> QuestionReport:
    right, absent = 0, Counter()
    slips: list[tuple[Slip, float]] = []
    for a in answers:
        if a.right:
            right += 1
        elif a.absent or not a.kept:
            absent[a.absent or "wrong (its answer was not kept: autograde again to see it)"] += 1
        else:
            try:
                number = parse_quantity(a.value, q.unit)
            except AnswerFormatError:
                absent["unreadable"] += 1
                continue
            slips.append(
                (explain_number(q, number, expected_answer(q, course, a.student), course.seed(a.student)), number)
            )
    report = QuestionReport(q, f"{right} of {n} right")
    report.rows.append(Row("right", right, "the right answer", True))
    for slip, members, ambiguous in _groups(slips):
        if q.kind is Kind.NUMERIC:
            shown = [format_quantity(v, q.unit).split(" (")[0] for v in dict.fromkeys(members)]
        else:  # each student's values differ: how far off, not the numbers
            shown = list(dict.fromkeys(label or "?" for label in slip.label.split(", ")))
        answer = ", ".join(shown[:3]) + (", ..." if len(shown) > 3 else "")
        if q.kind is Kind.NUMERIC and slip.label and slip.named:
            answer += f" ({slip.label})"
        meaning = short(slip.meaning, 140) if slip.named else "unexplained"
        if ambiguous:
            meaning += f" ({ambiguous} of these also fit another slip on their drawn values)"
        report.rows.append(
            Row(answer, len(members), meaning, group=f"{q.id} {answer}" if slip.named else "unexplained")
        )
        if slip.named:
            report.findings.append(Finding(q.id, answer, meaning, len(members), len(members) / n))
    report.rows += [Row(what, count, group="no answer") for what, count in absent.items()]
    return report


def _groups(slips: list[tuple[Slip, float]]) -> list[tuple[Slip, list[float], int]]:
    """Wrong numbers grouped by what they mean, the largest group first: (the slip, the numbers, how many
    of them fit another planted slip too). A number that fits several planted slips joins the one most
    students' numbers fit; the same ratio off makes one group of a factor, whatever the drawn values."""
    fits = Counter(w for slip, _ in slips if slip.how is How.PLANTED for w in slip.words)
    groups: dict[tuple, tuple[Slip, list[float], list[int]]] = {}
    for slip, number in slips:
        if slip.how is How.PLANTED:
            word = max(slip.words, key=fits.__getitem__)  # the first of the most common, in the bank's order
            key, one = (How.PLANTED, word), Slip(How.PLANTED, slip.label, (word,))
        else:
            key, one = (slip.how, slip.label if slip.named else ""), slip
        old, numbers, ambiguous = groups.get(key, (one, [], []))
        labels = ", ".join(dict.fromkeys([*old.label.split(", "), slip.label]))
        words = old.words if slip.how is How.PLANTED else tuple(dict.fromkeys([*old.words, *slip.words]))
        groups[key] = (Slip(old.how, labels, words), numbers + [number], ambiguous + [len(slip.words) > 1])
    ranked = sorted(groups.values(), key=lambda g: (-len(g[1]), not g[0].named))
    return [(slip, numbers, sum(ambiguous) if slip.how is How.PLANTED else 0) for slip, numbers, ambiguous in ranked]


def _code(q: Question, answers: list[Answer], n: int) -> QuestionReport:
    passed = sum(a.right for a in answers)
    absent = Counter(a.absent for a in answers if not a.right and a.absent)
    failed = len(answers) - passed - sum(absent.values())
    report = QuestionReport(q, f"pass rate {passed} of {n} ({passed / n:.0%})")
    report.rows = [Row("all test cases pass", passed, "", True), Row("some test cases fail", failed, group="failed")]
    report.rows += [Row(what, count, group="no answer") for what, count in absent.items()]
    return report


_BINS = ((1.0, "full marks"), (0.75, "75-99%"), (0.5, "50-74%"), (0.25, "25-49%"), (1e-9, "1-24%"), (-1.0, "0"))


def _judged_traces(answer: Answer) -> list[dict]:
    judged = (answer.details or {}).get("traces")
    if not isinstance(judged, list):
        return []
    return [t for t in judged if isinstance(t, dict) and isinstance(t.get("score"), (int, float))]


def _lab(q: Question, answers: list[Answer], n: int) -> QuestionReport:
    scores = [a.points / a.max_points if a.points is not None and a.max_points else 0.0 for a in answers]
    bins = Counter(next(name for low, name in _BINS if s >= low) for s in scores)
    rules, traces = Counter(), Counter()
    for a in answers:
        failing = [t for t in _judged_traces(a) if t["score"] < 1]
        rules.update({str(t.get("kind") or "unnamed") for t in failing})
        traces.update(
            {str(t.get("name", "?")) if t.get("public") else "a hidden trace (drawn per student)" for t in failing}
        )
    mean = sum(scores) / len(scores) if scores else 0.0
    worst = f"; the rule broken most often: {rules.most_common(1)[0][0]}" if rules else ""
    report = QuestionReport(q, f"mean score {mean:.0%}, {bins['full marks']} of {n} full marks{worst}")
    report.rows = [Row(f"score {name}", bins[name], "", name == "full marks", "failed") for _, name in _BINS]
    report.rows += [Row(f"rule: {kind}", count, "students losing points on it") for kind, count in rules.most_common(5)]
    report.rows += [Row(f"trace: {name}", count, "students failing it") for name, count in traces.most_common(3)]
    spec = LABS.get(q.lab or "")
    if spec is not None and spec.figure:
        report.lab_figures = _between_lines(report, answers, spec.figure, spec.lines)
    return report


def _between_lines(report: QuestionReport, answers: list[Answer], figure: str, names: tuple[str, ...]) -> LabFigures:
    """Rows for a lab graded between lines: the traces where most of the class fell below the baseline, and the
    best three policies' figures (anonymised); and the class's figures against the lines, for the page's figure."""
    baseline = names[0]
    below, runs = Counter(), Counter()
    for a in answers:
        for t in _judged_traces(a):
            name = str(t.get("name", "?")) if t.get("public") else "hidden traces (drawn per student)"
            runs[name] += 1
            below[name] += t["score"] < BASELINE_SCORE
    for name in sorted(runs, key=lambda k: (-below[k] / runs[k], k)):
        if 2 * below[name] > runs[name]:
            report.rows.append(Row(f"below {baseline}: {name}", below[name], f"of {runs[name]} runs scored under 60 %"))
    public: list[tuple[float, dict[str, float]]] = []
    for a in answers:
        shown = [t["figures"] for t in _judged_traces(a) if t.get("public") and isinstance(t.get("figures"), dict)]
        if shown and all(isinstance(f.get("yours"), (int, float)) for f in shown):
            lines = {k: sum(f.get(k, 0.0) for f in shown) / len(shown) for k in names}
            public.append((sum(f["yours"] for f in shown) / len(shown), lines))
    lines = public[0][1] if public else {}
    for rank, (mine, _) in enumerate(sorted(public, key=lambda p: -p[0])[:3], 1):
        against = ", ".join(f"{k} {v:.3g}" for k, v in lines.items())
        report.rows.append(Row(f"best policy {rank}", 1, f"mean {figure} {mine:.3g} on the public traces ({against})"))
    return LabFigures(figure, [mine for mine, _ in public], lines)


def _free(q: Question, answers: list[Answer], n: int) -> QuestionReport:
    written = sum(a.points is None and not a.verdict.startswith("No response") for a in answers)
    report = QuestionReport(q, f"{written} of {n} answered (graded by hand)")
    report.rows = [Row("answered", written, "to grade by hand", True), Row("no response", len(answers) - written)]
    return report


def analyse(quiz: Quiz, assignment: str, graded: dict[str, dict], course: Course, num_not_graded: int = 0) -> Report:
    """The report from the status entries of the graded students (autograde's Result, as JSON)."""
    n = len(graded)
    if not n:
        raise ReportError(f"nothing graded yet for {assignment}: run `kvcourse grade autograde {assignment}` first")
    questions = []
    for q in quiz.questions:
        answers = answers_to(q, graded)
        if q.kind is Kind.CHOICE:
            questions.append(_choice(q, answers, n))
        elif q.kind in (Kind.NUMERIC, Kind.PARAMETERISED):
            questions.append(_numeric(q, answers, n, course))
        elif q.kind is Kind.CODE:
            questions.append(_code(q, answers, n))
        elif q.kind is Kind.FREE:
            questions.append(_free(q, answers, n))
        else:  # a lab (kind "lab"): scored on traces
            questions.append(_lab(q, answers, n))
    return Report(assignment, quiz.title, n, num_not_graded, questions)


def read_status(course: Course, assignment: str) -> dict[str, dict]:
    """The status file, or ReportError: nothing graded yet, or a damaged file."""
    path = status_path(course, assignment)
    again = f"kvcourse grade autograde {assignment}"
    if not path.is_file():
        raise ReportError(f"nothing graded yet for {assignment}: run `{again}` first")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ReportError(
            f"the status file {path} is damaged ({short(why, 80)}): run `{again}` to grade "
            "everyone again, which rewrites it"
        ) from None
    if not isinstance(data, dict) or not all(isinstance(e, dict) for e in data.values()):
        raise ReportError(
            f"the status file {path} is damaged (not one entry per student): run `{again}` to "
            "grade everyone again, which rewrites it"
        )
    return data


def build_report(course: Course, assignment: str) -> Report:
    """The report of one assignment of a course, or ReportError saying why there is none."""
    lesson = lesson_of(assignment)
    source = course.directory / "source"
    if not (source / assignment).is_dir():
        have = sorted(p.name for p in source.iterdir() if p.is_dir()) if source.is_dir() else []
        raise ReportError(f"no assignment {assignment} in {course.directory} (it has: {', '.join(have) or 'none'})")
    status = read_status(course, assignment)
    graded = {s: e for s, e in status.items() if e.get("status") == "graded"}
    if not graded:
        raise ReportError(
            f"nothing graded yet for {assignment} ({len(status)} could not be graded: see "
            f"`kvcourse grade export`): run `kvcourse grade autograde {assignment}` first"
        )
    return analyse(load_quiz(lesson), assignment, graded, course, len(status) - len(graded))
