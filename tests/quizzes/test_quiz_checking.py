"""Checking answers of every kind: units, tolerances, computed answers, malformed input."""

from __future__ import annotations

import math

import pytest

from kvcourse.kernels import costs
from kvcourse.kernels.model.config_table import EXAMPLE_13B, MODEL_CONFIGS
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.checking import check, prompt_for
from kvcourse.quizzes.formulas import draw_params
from kvcourse.quizzes.units import AnswerFormatError, parse_quantity


@pytest.mark.parametrize(
    "text, unit, value",
    [
        ("819200", "bytes", 819200),
        ("819,200", "bytes", 819200),
        ("819_200", "bytes", 819200),
        ("8.192e5", "bytes", 819200),
        ("819200 bytes", "bytes", 819200),
        ("0.8 MB", "bytes", 800000),
        ("0.8 mb", "bytes", 800000),
        ("800 KiB", "bytes", 819200),
        ("3.2 GB", "bytes", 3.2e9),
        ("1 TiB", "bytes", 2**40),
        ("100 million", "count", 1e8),
        ("4k", "count", 4000),
        ("512 tokens", "count", 512),
        ("2 billion parameters", "count", 2e9),
        ("25%", "percent", 25),
        ("4x", "ratio", 4),
        ("500 ms", "seconds", 0.5),
        (819200, "bytes", 819200),
        (2.5, "ratio", 2.5),
    ],
)
def test_units_rule(text, unit, value):
    assert math.isclose(parse_quantity(text, unit), value)


@pytest.mark.parametrize(
    "text, unit, message",
    [
        ("abc", "bytes", "could not read a number"),
        ("3 GB", "count", "in bytes, but this question wants"),
        ("1,5", "bytes", "commas may only separate thousands"),
        ("5 furlongs", "bytes", "unknown unit"),
        (None, "bytes", "expected"),
        (True, "count", "expected"),
        ([1, 2], "bytes", "got a list"),
        (float("nan"), "bytes", "finite"),
        ("inf", "bytes", "could not read"),
        ("2 Mb s", "bytes", "unknown unit"),
    ],
)
def test_malformed_numbers_raise_a_format_error(text, unit, message):
    with pytest.raises(AnswerFormatError, match=message):
        parse_quantity(text, unit)


def test_a_byte_answer_accepts_every_spelling_and_rejects_wrong_ones():
    q = load_quiz("06").question("per_layer_token")  # one token, one layer of Llama-2-7B at 16 bits
    for answer in (16384, "16384 bytes", "16,384", "16 KiB", "16.384 kB", "0.016384 MB"):
        assert check(q, answer).passed, answer
    for answer in (8192, "16 MB", "16 GB", "16 kB"):
        assert not check(q, answer).passed, answer
    assert costs.kv_bytes_per_token(EXAMPLE_13B, 2) == 819200


@pytest.mark.parametrize("answer", ["abc", None, [819200], {"a": 1}, "", "12 furlongs"])
def test_malformed_numeric_answers_get_feedback_not_a_crash(answer):
    verdict = check(load_quiz("06").question("per_layer_token"), answer)
    assert not verdict.passed and verdict.malformed and verdict.message


def test_choice_answers():
    q = load_quiz("07").question("main_cost")
    right = check(q, "b")
    assert right.passed and right.explanation == q.explanations["b"]
    assert check(q, " B ").passed
    assert check(q, q.options[1]).passed  # the option's full text works too
    wrong = check(q, "a")
    assert not wrong.passed and not wrong.malformed and wrong.explanation == q.explanations["a"]
    for bad in ("z", None, 2, ["b"]):
        verdict = check(q, bad)
        assert verdict.malformed and not verdict.passed


def test_parameterised_answers_are_computed_by_costs_from_the_seed():
    q = load_quiz("07").question("cache_bytes_param")
    values = draw_params(q, "alice")
    assert values == draw_params(q, "alice")  # stable per seed
    config = MODEL_CONFIGS[values["model"]]
    expected = costs.kv_cache_bytes(config, values["num_tokens"], values["num_users"], values["bytes_per_value"])
    assert check(q, expected, "alice").passed
    assert check(q, f"{expected / 1e9} GB", "alice").passed
    assert not check(q, expected * 2, "alice").passed
    assert f"{values['num_tokens']:,}" in prompt_for(q, "alice")
    drawn = {tuple(sorted(draw_params(q, f"s{i}").items())) for i in range(30)}
    assert len(drawn) > 5  # different students see different values


def test_code_answers_right_wrong_and_broken():
    q = load_quiz("07").question("formula_code")
    assert check(q, q.solution).passed
    assert check(q, lambda *a: 2 * math.prod(a)).passed  # a callable works too
    wrong = check(q, "def kv_cache_bytes(*a):\n    return 1\n")
    assert not wrong.passed and "returned 1" in wrong.message
    for broken, message in [
        ("def kv_cache_bytes(:\n", "does not parse"),
        ("def something_else():\n    return 0\n", "must define a function named kv_cache_bytes"),
        ("def kv_cache_bytes(*a):\n    return 1 / 0\n", "ZeroDivisionError"),
        ("raise RuntimeError('boom')", "RuntimeError"),
        (None, "write your function first"),
        ("", "write your function first"),
    ]:
        verdict = check(q, broken)
        assert not verdict.passed and verdict.malformed and message.lower() in verdict.message.lower()


def test_free_response_needs_an_attempt_before_the_model_answer():
    q = load_quiz("05").question("why_cacheable")
    short = check(q, "because")
    assert not short.passed and short.malformed and not short.self_assessed and short.explanation == ""
    full = check(q, "Keys and values of earlier tokens never change, because the causal mask hides later tokens.")
    # Answered, not passed: nothing checks free text, the learner compares it with the model answer.
    assert not full.passed and not full.malformed and full.self_assessed and full.explanation == q.model_answer
    assert "judge for yourself" in full.message


def test_an_endless_loop_is_cut_off(monkeypatch):
    from kvcourse.quizzes import checking

    monkeypatch.setattr(checking, "CODE_TIME_LIMIT_S", 0.2)
    q = load_quiz("07").question("formula_code")
    verdict = check(q, "def kv_cache_bytes(*a):\n    while True:\n        pass\n")
    assert verdict.malformed and "TimeoutError" in verdict.message
    verdict = check(q, "while True:\n    pass\n")
    assert verdict.malformed and "TimeoutError" in verdict.message
    assert check(q, q.solution).passed  # the alarm is gone afterwards
