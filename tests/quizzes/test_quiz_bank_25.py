"""Bank 25's quick checks: a 2-bit cache's bytes are the engine's layout and a hand computation for every draw (its
recent tokens exactly the residual), no planted mistake lands on the key, the budget scenarios each have a format
that fits (and the answers differ between them), the simulator agrees, and the conceptual choices lead with the
lesson's reasons."""

from __future__ import annotations

import itertools

import pytest

from kvcourse.kernels.measure.low_bit import kivi_split
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.formulas import compute_answer, evaluate, facts, render
from kvcourse.quizzes.low_bit_checks import FORMAT_SCENARIOS, MIB, scenario_needs
from kvcourse.simulators.low_bit_model import LowBit, LowBitConfig

QUIZ = load_quiz("25")


def _draws(question_id: str) -> list[dict]:
    question = QUIZ.question(question_id)
    names = [name for name, _ in question.params]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in question.params))]


def test_kivi_bytes_by_hand_for_every_draw_and_no_mistake_lands_on_the_key():
    question = QUIZ.question("kivi_cache_at_context")
    answers = set()
    for values in _draws("kivi_cache_at_context"):
        layers, heads, dim, group = values["num_layers"], values["kv_heads"], values["head_dim"], values["group"]
        context, residual = values["context_tokens"], values["residual"]
        assert kivi_split(context, group, residual) == (context - residual, residual)  # the prompt's count holds
        answer = compute_answer(question, values)
        per_token = layers * heads * (dim // 2 + 8 * dim // group)  # codes, keys' and values' lows and steps
        assert answer == (context - residual) * per_token + residual * 2 * layers * heads * dim * 2
        names = {**facts(values), "answer": answer}
        for mistake, _ in question.mistakes:
            assert evaluate(str(mistake), names) != pytest.approx(answer, rel=question.rel_tol)
        assert "{" not in render(question.prompt, values)
        answers.add(answer)
    assert len(answers) >= 100


def test_a_smollm2_draw_is_the_simulators_cache():
    question = QUIZ.question("kivi_cache_at_context")
    values = {"num_layers": 30, "kv_heads": 3, "head_dim": 64, "group": 32, "residual": 64, "context_tokens": 8192}
    sim = LowBit(LowBitConfig(model="smollm2-135m", bits=2, residual=64, bytes_per_value=2))
    assert compute_answer(question, values) == sim.bytes_at(8192)


def test_every_budget_scenario_has_a_format_that_fits_and_the_answers_differ():
    question = QUIZ.question("format_that_fits")
    answers = []
    for scenario, (*_, budget) in FORMAT_SCENARIOS.items():
        needs = scenario_needs(scenario)
        assert needs[16] > needs[8] > needs[2]  # fewer bits, fewer bytes, scales and recent tokens counted
        answer = compute_answer(question, {"format_scenario": scenario})
        fits = [bits for bits, need in needs.items() if need <= budget * MIB]
        assert fits and answer == max(fits)
        assert "{" not in render(question.prompt, {"format_scenario": scenario})
        answers.append(answer)
    assert set(answers) == {16, 8, 2}


def test_the_choices_lead_with_the_lessons_reasons():
    keys = QUIZ.question("why_keys_by_channel")
    assert keys.kind.value == "choice" and keys.correct == "a" and "large for nearly every token" in keys.options[0]
    scale = QUIZ.question("uncalibrated_fp8")
    assert scale.correct == "a" and "448" in scale.options[0] and "calibrated" in scale.options[0]
