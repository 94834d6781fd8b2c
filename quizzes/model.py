"""The questions of a quick check, as frozen validated dataclasses (lesson 00: how checks work).

A question has a public part (prompt, options, unit, tolerance, points) and a secret part
(the right option, the explanations, the numeric answer, the model solution, and the planted
mistakes: wrong numbers a common slip gives, with what each means). In the shipped
bank the secret part is sealed (see sealing.py); here it is already opened.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import Enum

from kvcourse.labs.spec import LABS

from .units import DIMENSIONS, format_quantity, within_tolerance


class Kind(Enum):
    """The six kinds of question."""

    CHOICE = "choice"  # multiple choice, one right option, an explanation for every option
    NUMERIC = "numeric"  # a number (optionally with a unit), within a tolerance
    PARAMETERISED = "param"  # numeric, values drawn from a seed, answer computed by kvcourse.kernels.costs
    CODE = "code"  # a small function, checked against a reference on test cases
    FREE = "free"  # free text: graded by hand in nbgrader; self-learners compare with a model answer
    LAB = "lab"  # a build-it lab (lessons 18-20): the learner's class, judged on traces (kvcourse.labs)


DEFAULT_POINTS = {Kind.CHOICE: 1, Kind.NUMERIC: 1, Kind.PARAMETERISED: 2, Kind.CODE: 2, Kind.FREE: 2, Kind.LAB: 10}
OPTION_KEYS = "abcdefgh"
_ID = re.compile(r"[a-z][a-z0-9_]{0,30}")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _numbers(text: str) -> set[str]:
    """The numbers a text names, without thousands separators."""
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def _fail(where: str, message: str) -> None:
    raise ValueError(f"{where}: {message}")


@dataclass(frozen=True)
class Question:
    """One question of a lesson's quick check; ``where`` names its file and id in error messages."""

    lesson: str
    id: str
    kind: Kind
    prompt: str
    points: int
    explanation: str = ""
    # choice
    options: tuple[str, ...] = ()
    correct: str | None = None  # key of the right option: "a", "b", ...
    why: tuple[tuple[str, str], ...] = ()  # (key, why it is right or wrong) for every option
    # numeric and parameterised
    answer: float | None = None  # numeric only; parameterised answers are computed
    unit: str = ""  # a dimension of units.DIMENSIONS ("" = a plain number)
    rel_tol: float = 0.01  # both 0: the exact value (counts of whole things)
    abs_tol: float = 0.0
    formula: str | None = None  # parameterised: a name in formulas.FORMULAS
    params: tuple[tuple[str, tuple], ...] = ()  # parameterised: (name, the values to draw from)
    # (the wrong number, what it means) per planted mistake: a number for a numeric question, an
    # expression of the drawn values and `answer` for a parameterised one ("answer / 2")
    mistakes: tuple[tuple[float | str, str], ...] = ()
    # code
    function: str | None = None  # the name the learner's code must define
    starter: str = ""
    solution: str = ""
    cases: tuple[tuple, ...] = ()  # argument tuples; expected values come from the solution
    # free response
    model_answer: str = ""
    min_chars: int = 40
    # lab: the key of its LabSpec in kvcourse.labs.LABS, which names its lesson, its class and its reference
    lab: str | None = None
    where: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        where = self.where or f"lesson {self.lesson}, question {self.id!r}"
        if not _ID.fullmatch(self.id):
            _fail(where, "id must be lower-case letters, digits and '_', starting with a letter")
        if not self.prompt.strip():
            _fail(where, "prompt is empty")
        if isinstance(self.points, bool) or not isinstance(self.points, int) or self.points <= 0:
            _fail(where, f"points must be a positive whole number, got {self.points!r}")
        {
            Kind.CHOICE: self._check_choice,
            Kind.NUMERIC: self._check_numeric,
            Kind.PARAMETERISED: self._check_parameterised,
            Kind.CODE: self._check_code,
            Kind.FREE: self._check_free,
            Kind.LAB: self._check_lab,
        }[self.kind](where)

    def _check_choice(self, where: str) -> None:
        if not 2 <= len(self.options) <= len(OPTION_KEYS):
            _fail(where, f"a choice question needs 2 to {len(OPTION_KEYS)} options, got {len(self.options)}")
        if self.correct not in self.option_keys:
            _fail(where, f"correct must be one of {list(self.option_keys)}, got {self.correct!r}")
        explained = [key for key, text in self.why if text.strip()]
        if sorted(explained) != sorted(self.option_keys):
            _fail(where, f"every option needs an explanation in 'why': have {explained}, need {list(self.option_keys)}")

    def _check_tolerance(self, where: str) -> None:
        if self.unit not in DIMENSIONS:
            _fail(where, f"unit must be one of {sorted(DIMENSIONS)}, got {self.unit!r}")
        for name in ("rel_tol", "abs_tol"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                _fail(where, f"{name} must be a finite number >= 0, got {value!r}")
        if self.rel_tol == 0 and self.abs_tol == 0:
            whole = self.kind is Kind.PARAMETERISED or (
                isinstance(self.answer, (int, float)) and float(self.answer).is_integer()
            )
            if self.unit != "count" or not whole:
                _fail(
                    where,
                    "rel_tol and abs_tol are both 0 (the exact value): only a count of whole "
                    "things may ask for that; give a tolerance",
                )
        if not self.explanation.strip():
            _fail(where, "a numeric question needs an explanation (the worked answer)")

    def _check_numeric(self, where: str) -> None:
        self._check_tolerance(where)
        if isinstance(self.answer, bool) or not isinstance(self.answer, (int, float)) or not math.isfinite(self.answer):
            _fail(where, f"answer must be a finite number, got {self.answer!r}")
        right = _numbers(format_quantity(self.answer, self.unit).split(" (")[0]) | {f"{self.answer:g}"}
        for value, why in self._check_mistakes(where):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                _fail(where, f"a numeric question's mistake is a finite number, got {value!r}")
            if within_tolerance(value, self.answer, self.rel_tol, self.abs_tol):
                _fail(where, f"mistake {value!r} is within the tolerance of the right answer")
            if right & _numbers(why) - _numbers(self.prompt):
                _fail(where, f"mistake {value!r}: its words give the right answer")

    def _check_mistakes(self, where: str) -> tuple[tuple[float | str, str], ...]:
        for value, why in self.mistakes:
            if not isinstance(why, str) or not why.strip() or "{" in why:
                _fail(
                    where,
                    f"mistake {value!r} needs a plain sentence saying what it means (no {{names}}: "
                    "it is shown as written, never with a right value)",
                )
        return self.mistakes

    def _check_parameterised(self, where: str) -> None:
        # formulas.py imports the engine, and PyTorch with it: loaded only where a parameterised question is made
        from .formulas import FORMULAS, compute_answer, evaluate, facts

        self._check_tolerance(where)
        if self.answer is not None:
            _fail(where, "a parameterised question must not store an answer: it is computed")
        if self.formula not in FORMULAS:
            _fail(where, f"formula must be one of {sorted(FORMULAS)}, got {self.formula!r}")
        needed = FORMULAS[self.formula].params
        given = [name for name, _ in self.params]
        if sorted(given) != sorted(needed):
            _fail(where, f"formula {self.formula!r} takes params {sorted(needed)}, got {sorted(given)}")
        for name, values in self.params:
            if not values:
                _fail(where, f"param {name!r} has no values to draw from")
        if self.mistakes:
            first = {name: values[0] for name, values in self.params}  # one draw shows the names are right
            names = {**facts(first), "answer": compute_answer(self, first)}
            for value, _ in self._check_mistakes(where):
                if not isinstance(value, str):
                    _fail(
                        where, f"a parameterised question's mistake is an expression of the drawn values, got {value!r}"
                    )
                try:
                    evaluate(value, names)
                except (ValueError, ArithmeticError) as err:
                    _fail(where, f"mistake {value!r}: {err}")

    def _check_code(self, where: str) -> None:
        if not self.function or not self.function.isidentifier():
            _fail(where, f"function must be a Python name, got {self.function!r}")
        if f"def {self.function}(" not in self.solution:
            _fail(where, f"solution must define {self.function}()")
        if not self.cases:
            _fail(where, "a code question needs at least one test case")

    def _check_free(self, where: str) -> None:
        if not self.model_answer.strip():
            _fail(where, "a free-response question needs a model answer")

    def _check_lab(self, where: str) -> None:
        if self.lab not in LABS:
            _fail(where, f"lab must be one of {sorted(LABS)}, got {self.lab!r}")
        if LABS[self.lab].lesson != self.lesson:
            _fail(where, f"lab {self.lab!r} is the lab of lesson {LABS[self.lab].lesson}, not of lesson {self.lesson}")

    @property
    def class_name(self) -> str:
        """The class a lab question's answer defines (MyBlockManager, ...)."""
        return LABS[self.lab].class_name if self.lab in LABS else ""

    @property
    def option_keys(self) -> tuple[str, ...]:
        return tuple(OPTION_KEYS[: len(self.options)])

    @property
    def explanations(self) -> dict[str, str]:
        """Why each option is right or wrong, by option key (choice questions)."""
        return dict(self.why)

    @property
    def param_values(self) -> dict[str, tuple]:
        return dict(self.params)

    @property
    def auto_graded(self) -> bool:
        return self.kind is not Kind.FREE


@dataclass(frozen=True)
class Quiz:
    """The quick check of one lesson: its questions in order."""

    lesson: str
    title: str
    questions: tuple[Question, ...]

    def __post_init__(self) -> None:
        if len(self.questions) < 1:
            raise ValueError(f"lesson {self.lesson}: a quiz needs at least one question")
        ids = [q.id for q in self.questions]
        if len(set(ids)) != len(ids):
            raise ValueError(f"lesson {self.lesson}: question ids repeat: {ids}")

    def question(self, question_id: str) -> Question:
        """The question with this id."""
        for q in self.questions:
            if q.id == question_id:
                return q
        raise KeyError(f"lesson {self.lesson} has no question {question_id!r}; it has {[q.id for q in self.questions]}")

    @property
    def total_points(self) -> int:
        return sum(q.points for q in self.questions)
