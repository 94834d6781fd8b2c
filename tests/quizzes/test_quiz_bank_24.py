"""Bank 24's quick checks: a hybrid config's cache is the engine's layout and a hand computation for every draw, no
planted mistake lands on the key, the budget scenarios each have a window that fits (and the largest one differs
between them), the simulator agrees, and the conceptual choice leads with the lesson's reason."""

from __future__ import annotations

import itertools

import pytest

from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.formulas import compute_answer, evaluate, facts, render
from kvcourse.quizzes.local_global_checks import MIB, WINDOW_SCENARIOS, scenario_needs
from kvcourse.simulators.local_global_model import LocalGlobal, LocalGlobalConfig

QUIZ = load_quiz("24")


def _draws(question_id: str) -> list[dict]:
    question = QUIZ.question(question_id)
    names = [name for name, _ in question.params]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in question.params))]


def test_hybrid_bytes_by_hand_for_every_draw_and_no_mistake_lands_on_the_key():
    question = QUIZ.question("hybrid_cache_at_context")
    answers = set()
    for values in _draws("hybrid_cache_at_context"):
        answer = compute_answer(question, values)
        global_layers = values["num_layers"] // (values["local_per_global"] + 1)
        local_layers = values["num_layers"] - global_layers
        per_token_layer = 2 * values["kv_heads"] * values["head_dim"] * 2
        kept = global_layers * values["context_tokens"] + local_layers * min(values["window"], values["context_tokens"])
        assert answer == kept * per_token_layer
        names = {**facts(values), "answer": answer}
        for mistake, _ in question.mistakes:
            assert evaluate(str(mistake), names) != pytest.approx(answer, rel=question.rel_tol)
        assert "{" not in render(question.prompt, values)
        answers.add(answer)
    assert len(answers) >= 100


def test_a_smollm2_like_draw_is_the_simulators_cache():
    sim = LocalGlobal(LocalGlobalConfig(model="llama-3-8b", window=1024, local_per_global=3, bytes_per_value=2))
    question = QUIZ.question("hybrid_cache_at_context")
    values = {"num_layers": 32, "kv_heads": 8, "head_dim": 128, "local_per_global": 3, "window": 1024,
              "context_tokens": 32768}  # fmt: skip
    assert compute_answer(question, values) == sim.bytes_at(32768)


def test_every_budget_scenario_has_a_window_that_fits_and_the_answers_differ():
    question = QUIZ.question("largest_window_that_fits")
    answers = []
    for scenario, (*_, budget, windows) in WINDOW_SCENARIOS.items():
        needs = scenario_needs(scenario)
        assert needs == sorted(needs) and windows == tuple(sorted(windows))  # a longer window holds more
        answer = compute_answer(question, {"window_scenario": scenario})
        fits = [w for w, need in zip(windows, needs, strict=True) if need <= budget * MIB]
        assert fits and answer == max(fits)
        assert "{" not in render(question.prompt, {"window_scenario": scenario})
        answers.append(answer)
    assert len(set(answers)) >= 3


def test_the_choice_leads_with_the_lessons_reason():
    question = QUIZ.question("untrained_windows")
    assert question.kind.value == "choice" and question.correct == "a" and "never learnt" in question.options[0]
