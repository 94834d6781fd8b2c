"""Bank 26's quick checks: the tokens a chat turn finds are the engine's (its scheduler and KV-cache manager
serving such a turn, radix tree and hash chain) and a hand count for every draw, no named slip lands on the key,
and the conceptual choices lead with the lesson's reasons."""

from __future__ import annotations

import itertools

import pytest

from kvcourse.kernels.measure.chat_prefix import count_chat, seeded_answers
from kvcourse.kernels.memory.radix_chat import ChatTrace
from kvcourse.quizzes.bank import load_quiz
from kvcourse.quizzes.formulas import compute_answer, evaluate, facts, render

QUIZ = load_quiz("26")


def _draws(question_id: str) -> list[dict]:
    question = QUIZ.question(question_id)
    names = [name for name, _ in question.params]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(v for _, v in question.params))]


@pytest.mark.parametrize("question_id", ["radix_tokens_found", "hash_tokens_found"])
def test_every_draw_by_hand_and_no_slip_lands_on_the_key(question_id):
    question = QUIZ.question(question_id)
    for values in _draws(question_id):
        computed = values["prev_prompt"] + values["answer_tokens"] - 1
        block = values["block_size"]
        expected = computed if question_id == "radix_tokens_found" else computed // block * block
        answer = compute_answer(question, values)
        assert answer == expected
        names = {**facts(values), "answer": answer}
        for mistake, _ in question.mistakes:
            assert evaluate(str(mistake), names) != pytest.approx(answer, abs=0.5)
        assert "{" not in render(question.prompt, values)


@pytest.mark.parametrize(
    "values",
    [
        {"prev_prompt": 182, "answer_tokens": 50, "message_tokens": 12, "block_size": 16},
        {"prev_prompt": 410, "answer_tokens": 36, "message_tokens": 31, "block_size": 32},
    ],
)
def test_the_engine_finds_what_the_answers_say(values):
    first, message = values["prev_prompt"] - 10, values["message_tokens"]
    trace = ChatTrace(list(range(100, 100 + first)), [[list(range(3, 13)), list(range(20, 20 + message))]])
    answer = seeded_answers(values["answer_tokens"], (5000, 6000))
    for cache, question_id in (("radix", "radix_tokens_found"), ("hash", "hash_tokens_found")):
        later = count_chat(trace, cache, 512, values["block_size"], answer).turns[1]
        assert later.found == compute_answer(QUIZ.question(question_id), values)


def test_the_choices_lead_with_the_lessons_reasons():
    evict = QUIZ.question("eviction_candidates")
    assert evict.kind.value == "choice" and evict.correct == "a" and "leaf" in evict.options[0]
    lpm = QUIZ.question("longest_prefix_first")
    assert lpm.correct == "a" and "tight" in lpm.options[0] and "passed over" in lpm.options[0]
