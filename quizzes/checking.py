"""Checking one answer to one question, for any kind, without ever raising (lesson 00).

Malformed answers ("abc" for a number, None, a list, code that does not run) get a verdict
that says what was wrong, never a traceback.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvcourse.time_limit import time_limit

from .formulas import compute_answer, draw_params, evaluate, facts, render
from .model import Kind, Question
from .units import AnswerFormatError, format_quantity, is_exact, parse_quantity, shown, within_tolerance

# A learner's loop that never ends must not freeze the lesson: calls are cut off after this long.
CODE_TIME_LIMIT_S = 2.0


@dataclass(frozen=True)
class Verdict:
    """The outcome of one attempt: whether it passed, what to tell the learner, and why.

    A free response is never checked by the course: a written answer gives ``passed=False``,
    ``self_assessed=True``, and the model answer as the explanation, for the learner to compare.
    """

    passed: bool
    message: str
    explanation: str = ""
    malformed: bool = False
    self_assessed: bool = False


def check(question: Question, answer: Any, seed: str = "") -> Verdict:
    """Check an answer; ``seed`` draws the values of a parameterised question."""
    checker = {
        Kind.CHOICE: _check_choice,
        Kind.NUMERIC: lambda q, a, s: _check_number(q, a, q.answer, q.explanation, s),
        Kind.PARAMETERISED: _check_parameterised,
        Kind.CODE: _check_code,
        Kind.FREE: _check_free,
        Kind.LAB: _check_lab,
    }[question.kind]
    return checker(question, answer, seed)


def choice_key(question: Question, answer: Any) -> str | None:
    """The option key an answer names ("b", "B", or the option's full text); None if it names none."""
    if not isinstance(answer, str):
        return None
    text = answer.strip()
    if text.lower() in question.option_keys:
        return text.lower()
    for key, option in zip(question.option_keys, question.options, strict=True):
        if text == option.strip():
            return key
    return None


def _check_choice(question: Question, answer: Any, seed: str) -> Verdict:
    key = choice_key(question, answer)
    if answer is None:
        return Verdict(False, "Choose an option first.", malformed=True)
    if key is None:
        keys = ", ".join(f'"{k}"' for k in question.option_keys)
        return Verdict(False, f"Answer with one option's letter: {keys} (got {shown(answer)}).", malformed=True)
    why = question.explanations[key]
    if key == question.correct:
        return Verdict(True, f"Right: ({key}).", why)
    return Verdict(False, f"Not ({key}).", why)


def named_mistake(question: Question, value: float, seed: str = "") -> str | None:
    """What a wrong number means when it is one of the question's planted mistakes (the bank's words).

    The widget and the graded feedback both call this. A parameterised question's mistakes are
    computed on the values ``seed`` draws (two slips may then give the same number: both are named).
    None when the number matches no planted mistake.
    """
    if not question.mistakes:
        return None
    names: dict[str, Any] = {}
    if question.kind is Kind.PARAMETERISED:
        values = draw_params(question, seed)
        names = {**facts(values), "answer": compute_answer(question, values)}
    meant: list[str] = []
    for planted, why in question.mistakes:
        try:
            target = evaluate(planted, names) if isinstance(planted, str) else float(planted)
        except (ValueError, ArithmeticError):
            continue
        if within_tolerance(value, target, question.rel_tol, question.abs_tol) and why not in meant:
            meant.append(why)
    if len(meant) > 1:
        return "That number fits more than one slip. " + " Or: ".join(meant)
    return meant[0] if meant else None


def _check_number(question: Question, answer: Any, expected: float, explanation: str, seed: str) -> Verdict:
    try:
        value = parse_quantity(answer, question.unit)
    except AnswerFormatError as err:
        return Verdict(False, f"Could not read that answer: {err}.", malformed=True)
    if within_tolerance(value, expected, question.rel_tol, question.abs_tol):
        return Verdict(True, f"Right: {format_quantity(expected, question.unit)}.", explanation)
    mistake = named_mistake(question, value, seed)
    if mistake:
        return Verdict(False, f"Not quite: you gave {format_quantity(value, question.unit)}. {mistake}")
    hint = ""
    if is_exact(question.rel_tol, question.abs_tol) and not float(value).is_integer():
        hint = " This question counts whole things: the answer is a whole number."
    elif expected and value and math.isfinite(value / expected):
        ratio = value / expected
        if ratio > 1.5 or ratio < 1 / 1.5:
            hint = f" Your answer is about {ratio:.3g} times the right one."
        else:
            hint = " Close, but outside the tolerance."
    return Verdict(False, f"Not quite: you gave {format_quantity(value, question.unit)}.{hint}")


def _check_parameterised(question: Question, answer: Any, seed: str) -> Verdict:
    values = draw_params(question, seed)
    expected = compute_answer(question, values)
    return _check_number(question, answer, expected, render(question.explanation, {**values, "answer": expected}), seed)


def compile_function(source: str, name: str) -> Callable:
    """The function ``name`` defined by ``source``; ValueError says why there is none."""
    namespace: dict[str, Any] = {}
    try:
        with time_limit(CODE_TIME_LIMIT_S):
            exec(compile(source, "<your code>", "exec"), namespace)  # noqa: S102 - the learner's own code
    except SyntaxError as err:
        raise ValueError(f"your code does not parse: {err.msg} (line {err.lineno})") from None
    except Exception as err:  # any error while defining it is the learner's to fix
        raise ValueError(f"your code raised {type(err).__name__}: {shown(str(err), 200)}") from None
    func = namespace.get(name)
    if not callable(func):
        raise ValueError(f"your code must define a function named {name}()")
    return func


def same_value(got: Any, expected: Any) -> bool:
    """Equal, with a relative tolerance of 1e-9 for numbers (floats add up in different orders)."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return got is expected
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        try:
            return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)
        except OverflowError:  # an integer too large for a float is not the answer
            return False
    try:
        return bool(got == expected)
    except Exception:  # a returned object whose comparison fails is simply not the answer
        return False


def expected_results(question: Question) -> list[tuple[tuple, Any]]:
    """(arguments, what the reference solution returns) for every test case."""
    reference = compile_function(question.solution, question.function)
    return [(tuple(args), reference(*args)) for args in question.cases]


def _check_code(question: Question, answer: Any, seed: str) -> Verdict:
    try:
        func = answer if callable(answer) else compile_function(_source(answer), question.function)
    except ValueError as err:
        return Verdict(False, str(err)[0].upper() + str(err)[1:] + ".", malformed=True)
    for args, expected in expected_results(question):
        call = f"{question.function}({', '.join(map(repr, args))})"
        try:
            with time_limit(CODE_TIME_LIMIT_S):
                got = func(*args)
        except Exception as err:  # the learner's function failing is feedback, not a crash
            return Verdict(False, f"{call} raised {type(err).__name__}: {shown(str(err), 200)}", malformed=True)
        if not same_value(got, expected):
            return Verdict(False, f"{call} returned {shown(got)}; that is not right.")
    return Verdict(True, f"All {len(question.cases)} test cases pass.", question.explanation)


def _source(answer: Any) -> str:
    if not isinstance(answer, str) or not answer.strip():
        raise ValueError("write your function first")
    return answer


def _check_free(question: Question, answer: Any, seed: str) -> Verdict:
    if not isinstance(answer, str) or len(answer.strip()) < question.min_chars:
        return Verdict(
            False,
            f"Write your own answer first (at least {question.min_chars} characters); "
            "then compare it with the model answer.",
            malformed=True,
        )
    return Verdict(
        False,
        "Answer saved. Nothing checks free text here: compare yours with this model answer "
        "and judge for yourself whether it makes the same points.",
        question.model_answer,
        self_assessed=True,
    )


def _check_lab(question: Question, answer: Any, seed: str) -> Verdict:
    """A lab's class on its public traces (kvcourse.labs); a graded course adds hidden traces."""
    if answer is None or isinstance(answer, (str, int, float, list, dict)):
        call = f"check_answer({question.lesson!r}, {question.id!r}, {question.class_name})"
        return Verdict(False, f"Pass your class itself, as in {call}.", malformed=True)
    from kvcourse.labs import judge_runs, public_traces, record_runs

    traces = public_traces(question.lab)
    results = judge_runs(question.lab, traces, record_runs(question.lab, answer, [t.to_plain() for t in traces]))
    passed = sum(r.passed for r in results)
    if passed == len(results):
        return Verdict(True, f"All {len(results)} public traces pass.")
    first = next(r for r in results if not r.passed)
    return Verdict(False, f"{passed} of {len(results)} public traces pass. {first.name}: {first.reason}")


def expected_number(question: Question, seed: str = "") -> float:
    """The right number of a numeric or parameterised question (for the seed's drawn values)."""
    if question.kind is Kind.NUMERIC:
        return float(question.answer)
    if question.kind is Kind.PARAMETERISED:
        return compute_answer(question, draw_params(question, seed))
    raise ValueError(f"question {question.id!r} is a {question.kind.value} question, not numeric")


def prompt_for(question: Question, seed: str = "") -> str:
    """The prompt as the learner sees it, with drawn values filled in."""
    if question.kind is Kind.PARAMETERISED:
        return render(question.prompt, draw_params(question, seed))
    return question.prompt
