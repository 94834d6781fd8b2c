"""Bank 27's quick checks: the restore time is a hand computation for every draw and no planted mistake lands on the
key; which-wins agrees with lesson 27's simulator, never comes within 10 % of a tie, and both answers occur; the
conceptual choices lead with the lesson's reasons."""

from __future__ import annotations

import itertools

import pytest

from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.formulas import compute_answer, evaluate, facts, render
from kvcourse.quizzes.tier_checks import tier_case

QUIZ = load_quiz("27")


def _draws(question_id: str) -> list[dict]:
    question = QUIZ.question(question_id)
    names = [name for name, _ in question.params]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in question.params))]


def test_restore_seconds_by_hand_for_every_draw_and_no_mistake_lands_on_the_key():
    question = QUIZ.question("restore_seconds")
    answers = set()
    for v in _draws("restore_seconds"):
        answer = compute_answer(question, v)
        per_token = 2 * v["num_layers"] * v["kv_heads"] * v["head_dim"] * v["bytes_per_value"]
        assert answer == pytest.approx(v["tokens"] * per_token / (v["bandwidth_gbs"] * 1e9))
        names = {**facts(v), "answer": answer}
        for mistake, _ in question.mistakes:
            assert evaluate(str(mistake), names) != pytest.approx(answer, rel=question.rel_tol)
        assert "{" not in render(question.prompt, v)
        answers.add(answer)
    assert len(answers) >= 100  # of 960 draws: many products coincide


def test_which_wins_is_the_simulators_verdict_far_from_a_tie_and_both_occur():
    question = QUIZ.question("which_wins")
    answers = []
    for v in _draws("which_wins"):
        case = tier_case(v)
        answer = compute_answer(question, v)
        assert answer == (1 if case.restore_s() < case.recompute_s() else 2)
        assert not 0.9 < case.restore_s() / case.recompute_s() < 1.1
        text = render(question.prompt, v)
        assert "{" not in text and "H100" in text
        answers.append(answer)
    assert answers.count(1) >= len(answers) // 4 and answers.count(2) >= len(answers) // 4


def test_the_choices_lead_with_the_lessons_reasons():
    drop = QUIZ.question("why_drop_page_cache")
    assert drop.correct == "a" and "page cache" in drop.options[0] and "memory copy" in drop.options[0]
    preempt = QUIZ.question("why_recompute_preemption")
    assert preempt.correct == "a" and "prefix cache" in preempt.options[0]
