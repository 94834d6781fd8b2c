"""Bank 21's quick checks with per-student values: each key is what the engine's definitions and the 2026 table
give, every draw has one right answer, and the disaggregation simulator moves the bytes the bank expects."""

from __future__ import annotations

import itertools

import pytest

from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.formulas import BUDGET_TABLES, BUDGET_TARGETS, REQUEST_LOGS, compute_answer, facts, render
from kvcourse.simulators.disaggregation_model import Disaggregation, DisaggregationConfig

QUIZ = load_quiz("21")


def _draws(question_id: str) -> list[dict]:
    question = QUIZ.question(question_id)
    names = [name for name, _ in question.params]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in question.params))]


def test_goodput_from_a_log_by_hand():
    question = QUIZ.question("goodput_from_log")
    answers = set()
    for values in _draws("goodput_from_log"):
        log = REQUEST_LOGS[values["request_log"]]
        good = sum(
            first - arrival <= values["ttft_target_s"] and (last - first) / (n - 1) <= values["tpot_target_ms"] / 1e3
            for arrival, first, last, n in log
        )
        seconds = max(last for *_, last, _ in log) - min(arrival for arrival, *_ in log)
        assert good >= 1 and compute_answer(question, values) == pytest.approx(good / seconds)
        answers.add(round(good / seconds, 6))
        assert "{" not in render(question.prompt, values)
    assert len(answers) >= 6  # the draws give students different answers


def test_each_budget_table_has_one_budget_meeting_both_targets():
    question = QUIZ.question("budget_for_targets")
    gap_ms, ttft_s = BUDGET_TARGETS
    assert f"{gap_ms} ms" in question.prompt and f"{ttft_s:g} s" in question.prompt
    answers = set()
    for values in _draws("budget_for_targets"):
        table = BUDGET_TABLES[values["budget_table"]]
        gaps, ttfts = [gap for gap, _ in table.values()], [ttft for _, ttft in table.values()]
        assert gaps == sorted(gaps, reverse=True) and ttfts == sorted(ttfts)  # smaller budgets: shorter, later
        answers.add(compute_answer(question, values))
        assert f"{int(compute_answer(question, values)):,} tokens" in facts(values)["budget_text"]
    assert len(answers) == len(BUDGET_TABLES)


def test_disaggregated_bytes_are_the_table_and_the_simulator_agrees():
    question = QUIZ.question("disaggregated_bytes")
    for values in _draws("disaggregated_bytes"):
        layout = LAYOUTS_2026[values["model_2026"]]
        names = facts(values)
        expected = layout.per_token_bytes * values["prompt_tokens"]
        assert compute_answer(question, values) == expected
        assert names["token_bytes"] == layout.per_token_bytes == names["num_layers"] * names["layer_values"] * 2
    sim = Disaggregation(DisaggregationConfig(model="llama-3.1-8b", prompt_tokens=8192))
    assert sim.transfer_bytes == compute_answer(question, {"model_2026": "llama-3.1-8b", "prompt_tokens": 8192})
