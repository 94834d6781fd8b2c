"""The instructor's side of grading: right answers and points, decided outside the student's kernel.

A graded notebook only hands over plain values (collector.py); here they are compared with the
right answers, which are computed in the instructor's process from the bank and the course's
instructor/course.json, and never sent into a student's sandbox:
- choice and numeric questions: the bank's answer (sealed in the public bank: see INSTRUCTORS.md,
  "What stays secret");
- parameterised questions: the formula on the values drawn for this student from the course salt;
- code questions: the reference solution on the bank's public cases and on three hidden cases
  drawn for this student from the course secret (HMAC), so a function that only knows the public
  examples fails;
- labs (lessons 18-20): the runs the sandbox recorded on the lab's public traces and on the hidden
  traces its spec asks for (``LabSpec.num_hidden_traces``), drawn for this student from the course
  secret, replayed here on the engine and scored by the lab's judge (kvcourse.labs.judge_runs); the
  points are the question's times the mean trace score (labs B and C: over the hidden traces,
  ``scored_traces``). A lab whose code uses the engine's own implementation, or the grader's own code,
  scores 0 (lab_guard.py).
Feedback says right or wrong and why (a planted mistake of the bank by name, as the quick check does),
never a hidden case, a hidden trace or a right value the student got wrong.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

from kvcourse.labs import LabTrace, TraceResult, judge_runs
from kvcourse.labs.spec import LABS

from ..checking import choice_key, compile_function, named_mistake, same_value, time_limit
from ..formulas import compute_answer, draw_params, render
from ..model import Kind, Question
from ..units import AnswerFormatError, format_quantity, parse_quantity, shown, within_tolerance
from .course import NUM_HIDDEN_CASES, Course
from .lab_guard import lab_shortcut


def _plain(value: Any) -> Any:
    """A reference result as the collector hands values over (tuples become lists)."""
    return json.loads(json.dumps(value))


def reference_calls(question: Question, cases: list[tuple]) -> list[Any]:
    """What the bank's reference solution returns for each case, as plain values."""
    reference = compile_function(question.solution, question.function)
    results = []
    for args in cases:
        with time_limit(5.0):
            results.append(_plain(reference(*args)))
    return results


def code_cases(question: Question, course: Course, student: str) -> list[tuple]:
    """The bank's public cases, then NUM_HIDDEN_CASES more drawn for this student from the course secret.

    A hidden case mixes, position by position, argument values seen in the public cases, and is
    kept only if the reference solution accepts it and it is not a public case already.
    """
    public = [tuple(case) for case in question.cases]
    columns = []
    for i in range(len(public[0])):
        seen = {repr(case[i]): case[i] for case in public}
        columns.append([seen[key] for key in sorted(seen)])
    hidden: list[tuple] = []
    reference = compile_function(question.solution, question.function)
    for attempt in itertools.count():
        if len(hidden) == NUM_HIDDEN_CASES or attempt > 200:
            break
        pick = course.draw(question.lesson, question.id, student, str(attempt))
        case = []
        for column in columns:
            case.append(copy.deepcopy(column[pick % len(column)]))
            pick //= len(column)
        case = tuple(case)
        if case in public or case in hidden:
            continue
        try:
            with time_limit(1.0):
                reference(*case)
        except Exception:  # noqa: BLE001 - a mix the reference refuses (an index out of range) is no case
            continue
        hidden.append(case)
    return public + hidden


def expected_answer(question: Question, course: Course, student: str) -> Any:
    """The right answer for this student: an option key, a number, the reference results, or the model answer."""
    if question.kind is Kind.CHOICE:
        return question.correct
    if question.kind is Kind.NUMERIC:
        return float(question.answer)
    if question.kind is Kind.PARAMETERISED:
        return compute_answer(question, draw_params(question, course.seed(student)))
    if question.kind is Kind.CODE:
        cases = code_cases(question, course, student)
        return list(zip(cases, reference_calls(question, cases), strict=True))
    if question.kind is Kind.LAB:
        lab = LABS[question.lab]
        return (
            f"every trace passing: the lab's {lab.num_public_traces} public traces and {lab.num_hidden_traces} "
            f"hidden ones (the reference: {lab.reference})"
        )
    return question.model_answer


@dataclass(frozen=True)
class Decision:
    """The points one question earns, and what the student is told (no right value, no hidden case)."""

    points: float | None  # None: to be graded by hand
    max_points: float
    verdict: str  # one line: right, wrong, unreadable, no answer
    feedback: str = ""  # the bank's explanation, where it gives nothing away
    details: dict | None = None  # plain data for the instructor's report: a lab's {"traces": [...]}

    @property
    def right(self) -> bool:
        return self.points is not None and self.points == self.max_points


def decide(question: Question, record: dict | None, course: Course, student: str, source: str = "") -> Decision:
    """Points for one auto-graded question from the collector's record (plain JSON values, or None);
    ``source`` is the student's code, which a lab's answer is read for (``lab_shortcut``)."""
    points = float(question.points)
    if question.kind is Kind.LAB and (shortcut := lab_shortcut(source)):
        what = LABS[question.lab].work
        return Decision(
            0.0,
            points,
            f"Not graded on its runs: your code uses {shortcut}: write your own {what} (0 of {points:g} points).",
        )
    if record is None or "missing" in record:
        name = {Kind.CODE: question.function, Kind.LAB: question.class_name}.get(question.kind, f"answer_{question.id}")
        return Decision(0.0, points, f"No answer: {name} was not defined when the notebook ran.")
    if question.kind is Kind.CODE:
        return _decide_code(question, record.get("calls"), course, student)
    if question.kind is Kind.LAB:
        return _decide_lab(question, record, course, student)
    value = record.get("value")
    if isinstance(value, dict) or "value" not in record:
        why = value.get("unreadable", "not a plain value") if isinstance(value, dict) else "nothing"
        return Decision(0.0, points, f"Unreadable answer: {shown(str(why), 80)}.")
    if question.kind is Kind.CHOICE:
        key = choice_key(question, value)
        if key is None:
            return Decision(
                0.0,
                points,
                f"Unreadable answer: {shown(value)} names none of the options {list(question.option_keys)}.",
            )
        if key == question.correct:
            return Decision(points, points, f"Right: ({key}).", question.explanations[key])
        return Decision(0.0, points, f"Not ({key}).", question.explanations[key])
    try:
        number = parse_quantity(value, question.unit)
    except AnswerFormatError as err:
        return Decision(0.0, points, f"Unreadable answer: {err}.")
    expected = expected_answer(question, course, student)
    if within_tolerance(number, expected, question.rel_tol, question.abs_tol):
        explanation = question.explanation
        if question.kind is Kind.PARAMETERISED:
            values = draw_params(question, course.seed(student))
            explanation = render(question.explanation, {**values, "answer": expected})
        return Decision(points, points, f"Right: {format_quantity(number, question.unit)}.", explanation)
    mistake = named_mistake(question, number, course.seed(student))  # the widget's words for a planted slip
    return Decision(
        0.0,
        points,
        f"Not within the tolerance of the right answer: you gave "
        f"{format_quantity(number, question.unit)}." + (f" {mistake}" if mistake else ""),
    )


def _decide_code(question: Question, calls: Any, course: Course, student: str) -> Decision:
    points = float(question.points)
    expected = expected_answer(question, course, student)
    if not isinstance(calls, list) or len(calls) != len(expected):
        return Decision(0.0, points, "Unreadable answer: the function's results could not be collected.")
    public = len(question.cases)
    passed = 0
    first_failure = ""
    for index, ((args, want), got) in enumerate(zip(expected, calls, strict=True)):
        ok = isinstance(got, dict) and "ok" in got and not isinstance(got["ok"], dict) and same_value(got["ok"], want)
        passed += ok
        if not ok and not first_failure:
            call = f"{question.function}({', '.join(map(repr, args))})" if index < public else "a hidden test case"
            if isinstance(got, dict) and "error" in got:
                first_failure = f"{call} raised {shown(str(got['error']), 120)}"
            elif isinstance(got, dict) and "ok" in got:
                first_failure = f"{call} returned {shown(got['ok'])}, which is not right"
            else:
                first_failure = f"{call}: no result"
    if passed == len(expected):
        return Decision(points, points, f"Right: all {len(expected)} test cases pass.", question.explanation)
    return Decision(0.0, points, f"{passed} of {len(expected)} test cases pass; {first_failure}.")


# -- labs ------------------------------------------------------------------------------------------


def lab_traces(question: Question, course: Course, student: str) -> list[LabTrace]:
    """The traces a lab is graded on: its spec's public traces, then its hidden ones, drawn for this student
    from the course secret (nobody without the secret can predict them)."""
    return LABS[question.lab].graded_traces(
        lambda i: course.draw(question.lesson, question.id, student, "trace", str(i))
    )


def _cut(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _judged(lab: str, trace: LabTrace, log: Any) -> TraceResult:
    """One trace replayed and scored; a log the replay cannot even read scores 0, never a crash."""
    try:
        return judge_runs(lab, [trace], [log])[0]
    except Exception as err:  # noqa: BLE001 - a forged log: whatever it makes the replay raise
        return TraceResult(
            trace.name, trace.public, 0.0, f"the recorded run cannot be replayed ({type(err).__name__})", kind="replay"
        )


def _trace_details(lab: str, result: TraceResult) -> dict:
    """What the report keeps of one judged trace: its score and why, and where the lab sets a figure between
    lines (labs B and C), the figure beside the lines: {"yours": 0.47, "LRU": 0.41, "reference": 0.52, ...}."""
    kept: dict = {
        "name": result.name,
        "public": result.public,
        "score": result.score,
        "kind": result.kind,
        "reason": _cut(result.reason),
    }
    spec = LABS[lab]
    if spec.figure:
        figures = {"yours": result.metrics.get(spec.figure), **{k: result.reference.get(k) for k in spec.lines}}
        kept["figures"] = {k: float(v) for k, v in figures.items() if isinstance(v, (int, float))}
    return kept


def scored_traces(lab: str, results: list[TraceResult]) -> list[TraceResult]:
    """The traces a lab's points come from. Lab A's are all of them: it is pass or fail, and knowing a trace buys
    nothing a correct class does not earn. Labs graded between lines (B, C: ``LabSpec.lines``) count the hidden
    traces only: a learner holds the public ones and could replay choices computed offline from their future
    (the oracle's), which no feeder can stop; their scores are still shown."""
    if not LABS[lab].lines:
        return results
    return [r for r in results if not r.public]


def _decide_lab(question: Question, record: dict, course: Course, student: str) -> Decision:
    points = float(question.points)
    logs = record.get("lab")
    if not isinstance(logs, list):
        why = record.get("error") if isinstance(record.get("error"), str) else "no runs were handed over"
        return Decision(0.0, points, f"Unreadable answer: {_cut(why, 200)}.")
    traces = lab_traces(question, course, student)
    if len(logs) != len(traces):
        return Decision(0.0, points, f"Unreadable answer: {len(logs)} runs handed over for {len(traces)} traces.")
    results = [_judged(question.lab, trace, log) for trace, log in zip(traces, logs, strict=True)]
    scored = scored_traces(question.lab, results)
    mean = sum(r.score for r in scored) / len(scored)
    got = points if all(r.passed for r in results) else math.floor(points * mean * 10 + 1e-9) / 10
    details = {"traces": [_trace_details(question.lab, r) for r in results]}
    passed = sum(r.passed for r in results)
    public = sum(t.public for t in traces)
    counts = f"{public} public, {len(traces) - public} hidden"
    if passed == len(results):
        return Decision(points, points, f"Right: all {len(results)} traces pass ({counts}).", details=details)
    first = next(r for r in results if not r.passed)
    label = first.name if first.public else "a hidden trace"
    why = _cut(first.reason).rstrip(".")
    over = " on the hidden ones" if len(scored) < len(results) else ""
    return Decision(
        got,
        points,
        f"{passed} of {len(results)} traces pass ({counts}), mean score{over} {mean:.0%}: "
        f"{got:g} of {points:g} points. First failure, {label}: {why}.",
        details=details,
    )


def decide_free(question: Question, text: str | None, stub: str) -> Decision:
    """A free response is graded by hand; an empty or untouched one scores 0 at once."""
    if text is None or not text.strip() or text.strip() == stub.strip():
        return Decision(0.0, float(question.points), "No response.")
    return Decision(None, float(question.points), "Written: graded by hand.")
