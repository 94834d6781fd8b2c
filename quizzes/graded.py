"""Helpers that generated nbgrader notebooks import: the student id and the graders (lesson 00).

Every grader raises AssertionError with a readable message on a wrong or malformed answer,
and never anything that could stop nbgrader: a failing test cell simply scores 0.

The student id: while nbgrader autogrades (NBGRADER_EXECUTION=autograde) the notebook runs in
autograded/<student_id>/<assignment>/, so the id is read from that path, whatever the student
wrote. Elsewhere it is $KVCOURSE_STUDENT_ID, else the login name, which is what
`nbgrader submit` uses unless given --student.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from typing import Any

from .bank import load_quiz
from .checking import expected_number, prompt_for, same_value, time_limit
from .units import AnswerFormatError, format_quantity, parse_quantity, shown, within_tolerance

# An endless loop in a student's function fails its test instead of using up nbgrader's cell timeout.
GRADE_TIME_LIMIT_S = 10.0


def student_id() -> str:
    """The id whose values parameterised questions use (see the module docstring)."""
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        here = Path.cwd()
        if here.parent.parent.name == "autograded":
            return here.parent.name
        raise AssertionError(f"cannot find the student id: autograding in {here}, "
                             "expected autograded/<student_id>/<assignment>/")
    return os.environ.get("KVCOURSE_STUDENT_ID") or getpass.getuser()


def show(lesson: str, question_id: str, student: str) -> None:
    """Print a parameterised question with this student's values."""
    print(prompt_for(load_quiz(lesson).question(question_id), student))


def solve(lesson: str, question_id: str, student: str) -> float:
    """The right answer for this student (used in the instructor's source notebook)."""
    return expected_number(load_quiz(lesson).question(question_id), student)


def check_format(value: Any, kind: str, unit: str = "") -> None:
    """The visible test: the answer is of a readable form (points come from the hidden tests)."""
    if kind == "choice":
        assert isinstance(value, str) and len(value.strip()) == 1, \
            f"answer with one letter as a string, e.g. \"b\"; got {shown(value)}"
    else:
        try:
            parse_quantity(value, unit)
        except AnswerFormatError as err:
            raise AssertionError(str(err)) from None


def check_runs(func: Any, args: tuple) -> None:
    """The visible test of a function: it can be called (points come from the hidden tests)."""
    assert callable(func), f"expected a function, got {shown(func)}"
    try:
        func(*args)
    except Exception as err:  # reported as a failed check, like any wrong answer
        raise AssertionError(f"calling it with {args!r} raised {type(err).__name__}: {shown(str(err), 200)}") from None


def grade_choice(value: Any, expected: str, keys: str) -> None:
    """Hidden test of a multiple-choice answer."""
    assert isinstance(value, str) and value.strip().lower() in keys, \
        f"answer with one letter among {list(keys)}; got {shown(value)}"
    assert value.strip().lower() == expected, f"({value.strip().lower()}) is not the right option"


def grade_numeric(value: Any, expected: float, unit: str, rel_tol: float, abs_tol: float) -> None:
    """Hidden test of a numeric answer."""
    try:
        number = parse_quantity(value, unit)
    except AnswerFormatError as err:
        raise AssertionError(str(err)) from None
    assert within_tolerance(number, expected, rel_tol, abs_tol), \
        f"{format_quantity(number, unit)} is not within the tolerance of the right answer"


def grade_parameterised(lesson: str, question_id: str, value: Any) -> None:
    """Hidden test of a parameterised answer: recomputed from the student id, never stored."""
    question = load_quiz(lesson).question(question_id)
    expected = expected_number(question, student_id())
    grade_numeric(value, expected, question.unit, question.rel_tol, question.abs_tol)


def grade_function(func: Any, cases: list[tuple[tuple, Any]]) -> None:
    """Hidden test of a short function: every (arguments, expected) case must match."""
    assert callable(func), f"expected a function, got {shown(func)}"
    for args, expected in cases:
        call = f"{getattr(func, '__name__', 'function')}({', '.join(map(repr, args))})"
        try:
            with time_limit(GRADE_TIME_LIMIT_S):
                got = func(*args)
        except Exception as err:  # the student's exception is a failed test, reported plainly
            raise AssertionError(f"{call} raised {type(err).__name__}: {shown(str(err), 200)}") from None
        assert same_value(got, expected), f"{call} returned {shown(got)}, expected {expected!r}"

