"""Bank 28's quick checks: blocks freed is lesson 28's simulator (a hand count for every draw), with 0, 1 and 2
blocks among the answers and each planted slip off the key on some draws; tokens per pass is the geometric sum,
its slips never on the key; the conceptual choices lead with the lesson's reasons."""

from __future__ import annotations

import itertools
import math

import pytest

from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.formulas import compute_answer, evaluate, facts, render

QUIZ = load_quiz("28")


def _draws(question_id: str) -> list[dict]:
    question = QUIZ.question(question_id)
    names = [name for name, _ in question.params]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in question.params))]


def test_blocks_freed_by_hand_and_each_slip_is_a_different_number_somewhere():
    question = QUIZ.question("blocks_freed")
    answers, slips_off = [], dict.fromkeys((str(m) for m, _ in question.mistakes), 0)
    for v in _draws("blocks_freed"):
        b = v["block_size"]
        during = math.ceil((v["computed"] + v["k"] + 1) / b)
        answer = compute_answer(question, v)
        assert answer == during - math.ceil((v["computed"] + 1 + v["accepted"]) / b)
        names = {**facts(v), "answer": answer}
        for mistake in slips_off:
            slips_off[mistake] += evaluate(mistake, names) != answer
        assert "{" not in render(question.prompt, v)
        answers.append(answer)
    assert {0, 1, 2} <= set(answers)
    assert all(count >= 10 for count in slips_off.values()), slips_off


def test_tokens_per_pass_is_the_geometric_sum_and_no_slip_lands_on_it():
    question = QUIZ.question("tokens_per_pass")
    for v in _draws("tokens_per_pass"):
        r, k = v["rate_pct"] / 100, v["k"]
        answer = compute_answer(question, v)
        assert answer == pytest.approx(sum(r**i for i in range(k + 1)))
        names = {**facts(v), "answer": answer}
        for mistake, _ in question.mistakes:
            assert evaluate(str(mistake), names) != pytest.approx(answer, rel=question.rel_tol)
        assert "{" not in render(question.prompt, v)


def test_the_choices_lead_with_the_lessons_reasons():
    pays = QUIZ.question("why_it_pays")
    assert pays.correct == "a" and "memory" in pays.options[0] and "k + 1" in pays.options[0]
    free = QUIZ.question("why_free_chat_loses")
    assert free.correct == "a" and "few drafts match" in free.options[0]
