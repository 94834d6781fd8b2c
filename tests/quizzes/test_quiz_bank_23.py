"""Bank 23's quick checks: the latent's bytes per token are the engine's layout and a hand computation for every
draw, the draws give students different answers, no planted mistake lands on the key, and the two choices hold
the lesson's reasons (absorption saves the rebuild, a position-dependent rotation blocks it) as their key."""

from __future__ import annotations

import itertools

import pytest

from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.kernels.model.latent import latent_bytes_per_token
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.formulas import compute_answer, evaluate, facts, render
from kvcourse.simulators.latent_rank_model import LatentRank, LatentRankConfig

QUIZ = load_quiz("23")


def _draws(question_id: str) -> list[dict]:
    question = QUIZ.question(question_id)
    names = [name for name, _ in question.params]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in question.params))]


def test_latent_bytes_by_hand_for_every_draw_and_no_mistake_lands_on_the_key():
    question = QUIZ.question("latent_bytes")
    answers = set()
    for values in _draws("latent_bytes"):
        answer = compute_answer(question, values)
        by_hand = values["num_layers"] * (values["latent_rank"] + values["rope_dims"]) * values["bytes_per_value"]
        assert answer == by_hand
        names = {**facts(values), "answer": answer}
        for mistake, _ in question.mistakes:
            assert evaluate(str(mistake), names) != pytest.approx(answer, rel=question.rel_tol)
        assert "{" not in render(question.prompt, values)
        answers.add(answer)
    assert len(answers) >= 20


def test_deepseek_v3s_draw_is_the_2026_tables_and_no_rope_is_the_simulators_latent():
    question = QUIZ.question("latent_bytes")
    values = {"num_layers": 61, "latent_rank": 512, "rope_dims": 64, "bytes_per_value": 2}
    assert compute_answer(question, values) == LAYOUTS_2026["deepseek-v3"].per_token_bytes == 70_272
    sim = LatentRank(LatentRankConfig(rank=192, bytes_per_value=2))  # SmolLM2's latent carries no RoPE key
    assert sim.bytes_per_token == latent_bytes_per_token(sim.config.shape, 192, 2) == 30 * 192 * 2


@pytest.mark.parametrize(
    ("question_id", "words"), [("what_absorption_saves", "Rebuilding"), ("why_decoupled_rope", "rotation")]
)
def test_the_choices_lead_with_the_lessons_reason(question_id, words):
    question = QUIZ.question(question_id)
    assert question.kind.value == "choice" and question.correct == "a" and words in question.options[0]
