"""Loading and validating the question bank: one TOML file per lesson, quizzes/bank/NN.toml (lesson 00).

A file holds ``lesson = "NN"`` and a list of ``[[question]]`` tables. Each question's public
fields sit in the open; its secret fields (answer, right option, explanations, solution,
model answer, planted mistakes) sit in one ``sealed`` string (see sealing.py). Authors may write them as a plain
``[question.secret]`` table instead and seal the file with ``python -m kvcourse.quizzes.authoring
seal``; the shipped bank holds only sealed questions (a test checks this). A lab question (lessons
18-20) only names its lab (``lab = "block_manager"``): it has no secret, its reference solution being
kvcourse.quizzes.labs'. Every error names the file and the question.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

from .model import DEFAULT_POINTS, Kind, Question, Quiz
from .sealing import unseal

_COMMON = {"id", "kind", "prompt", "points", "sealed", "secret"}
_PUBLIC = {
    Kind.CHOICE: {"options"},
    Kind.NUMERIC: {"unit", "rel_tol", "abs_tol"},
    Kind.PARAMETERISED: {"unit", "rel_tol", "abs_tol", "formula", "params"},
    Kind.CODE: {"function", "starter", "cases"},
    Kind.FREE: {"min_chars"},
    Kind.LAB: {"lab"},
}
_SECRET = {
    Kind.CHOICE: {"correct", "why"},
    Kind.NUMERIC: {"answer", "explanation", "mistakes"},
    Kind.PARAMETERISED: {"explanation", "mistakes"},
    Kind.CODE: {"solution", "explanation"},
    Kind.FREE: {"model_answer"},
    Kind.LAB: set(),  # nothing to seal: the reference solution lives in kvcourse.quizzes.labs
}


def bank_text(lesson: str) -> tuple[str, str]:
    """(file name, text) of a lesson's bank file as shipped in the package."""
    name = f"bank/{lesson}.toml"
    path = resources.files("kvcourse.quizzes").joinpath(name)
    if not path.is_file():
        raise KeyError(f"there is no quick check for lesson {lesson!r} (no quizzes/{name})")
    return f"quizzes/{name}", path.read_text(encoding="utf-8")


def _question(entry: dict, lesson: str, index: int, source: str) -> Question:
    qid = entry.get("id", f"#{index + 1}")
    where = f"{source}, question {qid!r}"
    try:
        kind = Kind(entry.get("kind"))
    except ValueError:
        raise ValueError(f"{where}: kind must be one of {[k.value for k in Kind]}, got {entry.get('kind')!r}") from None
    unknown = set(entry) - _COMMON - _PUBLIC[kind]
    if unknown:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)} for a {kind.value} question")
    if kind is Kind.LAB:
        if "sealed" in entry or "secret" in entry:
            raise ValueError(
                f"{where}: a lab question has no secret to seal (its reference solution is "
                "kvcourse.quizzes.labs'): drop 'sealed' or [secret]"
            )
        secret = {}
    elif ("sealed" in entry) == ("secret" in entry):
        raise ValueError(f"{where}: give exactly one of 'sealed' or a [secret] table")
    else:
        try:
            secret = entry["secret"] if "secret" in entry else unseal(entry["sealed"], lesson, str(qid))
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    unknown = set(secret) - _SECRET[kind]
    if unknown:
        raise ValueError(f"{where}: unknown secret fields {sorted(unknown)} for a {kind.value} question")
    fields = {k: v for k, v in entry.items() if k not in ("sealed", "secret", "kind")}
    fields.update(secret)
    fields.setdefault("points", DEFAULT_POINTS[kind])
    for name in ("options", "cases"):
        if name in fields:
            fields[name] = tuple(tuple(c) if isinstance(c, list) else c for c in fields[name])
    if "why" in fields:
        fields["why"] = tuple(sorted(fields["why"].items()))
    if "params" in fields:
        fields["params"] = tuple(sorted((k, tuple(v)) for k, v in fields["params"].items()))
    if "mistakes" in fields:
        fields["mistakes"] = _mistakes(fields["mistakes"], where)
    try:
        return Question(lesson=lesson, kind=kind, where=where, **fields)
    except TypeError as err:
        raise ValueError(f"{where}: {err}") from None


def _mistakes(entries: object, where: str) -> tuple[tuple[float | str, str], ...]:
    """mistakes = [{ value = 249, why = "..." }, ...] as (value, why) pairs."""
    if not isinstance(entries, list) or not all(isinstance(m, dict) and set(m) == {"value", "why"} for m in entries):
        raise ValueError(f'{where}: mistakes must be a list of {{ value = ..., why = "..." }} tables')
    return tuple((m["value"], m["why"]) for m in entries)


def parse_quiz(text: str, source: str, title: str = "") -> Quiz:
    """A quiz from the text of a bank file; ValueError names the file and question at fault."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{source}: not valid TOML: {err}") from None
    lesson = data.get("lesson")
    if not isinstance(lesson, str) or len(lesson) != 2 or not lesson.isdigit():
        raise ValueError(f'{source}: needs lesson = "NN" (two digits), got {lesson!r}')
    unknown = set(data) - {"lesson", "question"}
    if unknown:
        raise ValueError(f"{source}: unknown top-level keys {sorted(unknown)}")
    entries = data.get("question", [])
    questions = tuple(_question(entry, lesson, i, source) for i, entry in enumerate(entries))
    if not questions:
        raise ValueError(f"{source}: no [[question]] tables")
    return Quiz(lesson=lesson, title=title, questions=questions)


@cache
def load_quiz(lesson: str | int) -> Quiz:
    """The quick check of a lesson ("07" or 7), loaded and validated."""
    from kvcourse.syllabus import get_lesson

    entry = get_lesson(lesson)
    source, text = bank_text(entry.number)
    quiz = parse_quiz(text, source, entry.title)
    if quiz.lesson != entry.number:
        raise ValueError(f"{source}: says lesson = {quiz.lesson!r}, expected {entry.number!r}")
    return quiz


def load_all() -> tuple[Quiz, ...]:
    """Every lesson's quick check, in course order."""
    from kvcourse.syllabus import load_syllabus

    return tuple(load_quiz(lesson.number) for lesson in load_syllabus())
