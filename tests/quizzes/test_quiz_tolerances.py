"""Every numeric question refuses its planted wrong answers and the classic slips, in the widget and in
grading alike, for every value a parameterised question can draw (issue 32: bank 13 took 62.5 for 62)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from kvcourse.quizzes import checking
from kvcourse.quizzes.bank import load_all
from kvcourse.quizzes.formulas import compute_answer, evaluate, facts
from kvcourse.quizzes.grading import decide as grading
from kvcourse.quizzes.model import Kind, Question
from kvcourse.quizzes.units import is_exact, within_tolerance

COURSE = grading.Course(Path("/nonexistent"), "kvtest", "salt", "ab" * 32, "/nonexistent/exchange")
NUMERIC = [q for quiz in load_all() for q in quiz.questions if q.kind in (Kind.NUMERIC, Kind.PARAMETERISED)]

# Slips a learner makes that the bank does not plant as named mistakes, per question: each must be refused.
SLIPS: dict[tuple[str, str], tuple[float, ...]] = {
    ("03", "grid_cells"): (10_000 * 9_999,),  # every query but its own key
    ("08", "users_fit"): (15.5, 15.3, 13.69),  # not rounded down; the card read as 80 GB, not 80 GiB
    ("09", "used_share"): (97.5 / 10.72, 98 / 10.72),  # one token short per step; first and last only
    ("12", "shared_blocks"): (186.5, 3 * 62.5),  # the part-full block counted as a fraction
    ("13", "full_blocks"): (62.5, 63),  # 1000 / 16 not rounded down, or rounded up
    ("15", "shared_prompt_window"): (3_500, 3_489),  # not a whole number of blocks
}


def _draws(question: Question) -> list[dict]:
    """Every combination of values a parameterised question can draw ({} for a plain numeric one)."""
    if question.kind is Kind.NUMERIC:
        return [{}]
    names = [name for name, _ in question.params]
    return [
        dict(zip(names, combo, strict=True)) for combo in itertools.product(*(values for _, values in question.params))
    ]


def _cases() -> list[tuple[Question, dict]]:
    return [(q, values) for q in NUMERIC for values in _draws(q)]


def _ids(case: tuple[Question, dict]) -> str:
    question, values = case
    return f"{question.lesson}-{question.id}" + "".join(f"-{v}" for v in values.values())


def _wrong_values(question: Question, values: dict, answer: float) -> list[float]:
    names = {**facts(values), "answer": answer}
    wrong = [evaluate(v, names) if isinstance(v, str) else float(v) for v, _ in question.mistakes]
    wrong += [answer * 2, answer / 2]  # K and V counted once or twice too often; bytes per value 1 vs 2 vs 4
    wrong += [answer * n for n in (names.get("num_layers"),) if n]  # one layer counted as all, or all as one
    wrong += [answer / n for n in (names.get("num_layers"),) if n]
    if is_exact(question.rel_tol, question.abs_tol):
        wrong += [answer - 1, answer + 1, answer - 0.5, answer + 0.5]  # block or whole-thing rounding
    wrong += SLIPS.get((question.lesson, question.id), ())
    return [w for w in wrong if w != answer]


@pytest.fixture
def drawn(monkeypatch):
    """Make both the widget and grading draw the given values, whatever the seed."""

    def use(values: dict) -> None:
        for module in (checking, grading):
            monkeypatch.setattr(module, "draw_params", lambda question, seed: dict(values))

    return use


@pytest.mark.parametrize("case", _cases(), ids=_ids)
def test_right_answer_passes_and_every_wrong_one_is_refused(case, drawn):
    question, values = case
    drawn(values)
    answer = float(question.answer) if question.kind is Kind.NUMERIC else compute_answer(question, values)
    assert checking.check(question, answer).passed
    assert checking.check(question, f"{answer:,.10g}").passed
    assert grading.decide(question, {"value": answer}, COURSE, "ann").right
    for wrong in _wrong_values(question, values, answer):
        verdict = checking.check(question, wrong)
        assert not verdict.passed, f"{question.lesson}/{question.id} {values}: {wrong} accepted ({verdict.message})"
        assert not grading.decide(question, {"value": wrong}, COURSE, "ann").right, (question.id, wrong)


@pytest.mark.parametrize("case", _cases(), ids=_ids)
def test_planted_mistakes_are_named(case, drawn):
    question, values = case
    drawn(values)
    answer = float(question.answer) if question.kind is Kind.NUMERIC else compute_answer(question, values)
    names = {**facts(values), "answer": answer}
    for planted, why in question.mistakes:
        wrong = evaluate(planted, names) if isinstance(planted, str) else float(planted)
        if wrong == answer:
            continue
        assert why in checking.check(question, wrong).message
        assert why in grading.decide(question, {"value": wrong}, COURSE, "ann").verdict


def test_the_boundary_of_a_tolerance_is_outside():
    assert not within_tolerance(62.5, 62, 0.0, 0.5)
    assert within_tolerance(62.4, 62, 0.0, 0.5)
    assert not within_tolerance(101, 100, 0.01, 0.0) and within_tolerance(100.9, 100, 0.01, 0.0)
    assert within_tolerance(62.0, 62, 0.0, 0.0) and not within_tolerance(62.000001, 62, 0.0, 0.0)


def test_full_blocks_refuses_the_unrounded_quotient():
    question = next(q for q in NUMERIC if (q.lesson, q.id) == ("13", "full_blocks"))
    verdict = checking.check(question, "62.5")
    assert not verdict.passed and "rounding down" in verdict.message
    assert grading.decide(question, {"value": "62.5"}, COURSE, "ann").points == 0
    assert checking.check(question, "62").passed


def test_whole_number_counts_say_so():
    question = next(q for q in NUMERIC if (q.lesson, q.id) == ("10", "table_entries"))
    assert "whole number" in checking.check(question, "22.3").message


def test_exact_tolerance_only_for_whole_counts():
    with pytest.raises(ValueError, match="only a count of whole things"):
        Question(
            lesson="99",
            id="share",
            kind=Kind.NUMERIC,
            prompt="What share?",
            points=1,
            answer=9.2,
            unit="percent",
            rel_tol=0.0,
            abs_tol=0.0,
            explanation="Worked.",
        )
