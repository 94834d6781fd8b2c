"""Bank 22's quick checks with per-student values: each key is what the published configs give by hand, every card
scenario has exactly one model that fits, and lesson 22's simulator agrees with the bank on both."""

from __future__ import annotations

import itertools

import pytest

from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.cache_2026 import CONFIGS_2026, FIT_SCENARIOS, scenario_needs
from kvcourse.quizzes.checking import named_mistake
from kvcourse.quizzes.formulas import compute_answer, draw_params, facts, render
from kvcourse.simulators.hybrid_memory_model import fit_table, per_gpu_bytes

QUIZ = load_quiz("22")
GIB = 2**30

# By hand from each config.json: values per token in the layers that keep every token, and the windows' part.
BY_HAND = {
    1: (61 * (512 + 64), 0),  # DeepSeek-V3: a latent of 512 and a RoPE key of 64, 61 layers
    2: (27 * (512 + 64), 0),  # DeepSeek-V2-Lite
    3: (10 * 2 * 16 * 128, 52 * 2 * 16 * 128 * 1024),  # Gemma-3-27B: 10 global layers; 52 local of 1,024 tokens
    4: (8 * 2 * 8 * 256, 40 * 2 * 8 * 256 * 1024),  # Gemma-3-12B: 8 global; 40 local of 1,024 tokens
    5: (12 * 2 * 8 * 128, 36 * 2 * 8 * 128 * 8192),  # Llama-4-Scout: 12 global layers; 36 chunked, 8,192 tokens
}


def _draws(question_id: str) -> list[dict]:
    question = QUIZ.question(question_id)
    names = [name for name, _ in question.params]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in question.params))]


def test_the_bank_has_the_three_kinds_the_lesson_needs():
    assert [q.id for q in QUIZ.questions] == ["cache_at_context", "which_model_fits", "latent_under_tp"]
    assert QUIZ.question("latent_under_tp").correct == "a"


def test_cache_at_a_context_by_hand():
    question = QUIZ.question("cache_at_context")
    answers = set()
    for values in _draws("cache_at_context"):
        per_token, windows = BY_HAND[values["config_2026"]]
        context = values["context_tokens"]
        assert context >= 8192  # every window and chunk is full at the drawn lengths
        expected = (per_token * context + windows) * 2
        assert compute_answer(question, values) == expected
        names = facts(values)
        assert names["token_bytes"] == per_token * 2 and names["bounded_bytes"] == windows * 2
        assert "{" not in render(question.prompt, values)
        answers.add(expected)
    assert len(answers) == len(_draws("cache_at_context"))  # every student's draw has its own answer


@pytest.mark.parametrize("name", ["deepseek-v3", "gemma-3-27b", "llama-4-scout"])
def test_the_simulator_agrees_with_the_bank_on_the_published_layouts(name):
    (number,) = [n for n, (_, layout) in CONFIGS_2026.items() if layout == LAYOUTS_2026[name]]
    question = QUIZ.question("cache_at_context")
    values = {"config_2026": number, "context_tokens": 32_768}
    assert per_gpu_bytes(name, 32_768, 1, 1).cache == compute_answer(question, values)


def test_each_slip_is_named_for_the_student_who_made_it():
    question = QUIZ.question("cache_at_context")
    slips = {"all_growing_bytes": "every layer", "growing_bytes": "leaves out the local", "no_rope_bytes": "RoPE key"}
    for seed in (str(i) for i in range(40)):
        values = draw_params(question, seed)
        names = facts(values)
        for fact, words in slips.items():
            if names[fact] > 0 and abs(names[fact] - compute_answer(question, values)) > 0.02 * names[fact]:
                assert words in (named_mistake(question, names[fact], seed) or ""), (seed, fact)


@pytest.mark.parametrize("scenario", sorted(FIT_SCENARIOS))
def test_exactly_one_model_fits_each_card_and_the_simulator_agrees(scenario):
    card_gb, users, context, names = FIT_SCENARIOS[scenario]
    fits = [need <= card_gb * GIB for need in scenario_needs(scenario)]
    assert fits.count(True) == 1
    answer = compute_answer(QUIZ.question("which_model_fits"), {"fit_scenario": scenario})
    assert fits.index(True) + 1 == answer
    card = {24: "L4", 80: "H100 80GB", 141: "H200"}[card_gb]
    assert fit_table(list(names), card, context, users)["fits"].tolist() == fits
    text = render(QUIZ.question("which_model_fits").prompt, {"fit_scenario": scenario})
    assert all(f"({i}) {name}," in text for i, name in enumerate(names, start=1)) and "{" not in text


def test_the_scenarios_give_different_answers():
    question = QUIZ.question("which_model_fits")
    assert len({compute_answer(question, values) for values in _draws("which_model_fits")}) >= 3
