"""The question bank: every lesson has one, it validates, and it does not show answers in plain text."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from kvcourse.quizzes.authoring import seal_text, unseal_text
from kvcourse.quizzes.bank import bank_text, load_all, load_quiz, parse_quiz
from kvcourse.quizzes.checking import check, expected_number, expected_results, prompt_for
from kvcourse.quizzes.formulas import draw_params
from kvcourse.quizzes.model import Kind
from kvcourse.quizzes.sealing import seal, unseal
from kvcourse.syllabus import load_syllabus


def test_every_lesson_has_at_least_three_questions():
    quizzes = load_all()
    assert [q.lesson for q in quizzes] == [lesson.number for lesson in load_syllabus()]
    assert len(quizzes) == 29
    for quiz in quizzes:
        assert len(quiz.questions) >= 3, quiz.lesson


def test_every_kind_is_used_and_choice_questions_explain_every_option():
    kinds = {q.kind for quiz in load_all() for q in quiz.questions}
    assert kinds == set(Kind)
    for quiz in load_all():
        for q in quiz.questions:
            if q.kind is Kind.CHOICE:
                assert set(q.explanations) == set(q.option_keys)
                assert all(len(text) > 20 for text in q.explanations.values())


def test_check_yourself_questions_of_chapter_003_sit_in_their_lessons():
    prompts = {quiz.lesson: " ".join(q.prompt.lower() for q in quiz.questions) for quiz in load_all()}
    assert "why can a token's key and value be cached" in prompts["05"]
    assert "main cost of the kv cache" in prompts["07"]
    assert "why does grouped-query attention" in prompts["16"]
    assert "long conversation get slower" in prompts["06"]


def test_the_bank_is_correct_where_seed_000_simplifies():
    question = next(q for quiz in load_all() for q in quiz.questions if q.id == "key_depends_on")
    assert question.correct == "b"
    assert "earlier" in question.explanations["b"] or "before" in question.options[1]
    assert check(question, "a", "").passed is False  # "only on token 7 itself" is wrong above layer 1


def test_reference_answers_pass_their_own_checks():
    for quiz in load_all():
        for q in quiz.questions:
            if q.kind is Kind.CHOICE:
                assert check(q, q.correct).passed
            elif q.kind in (Kind.NUMERIC, Kind.PARAMETERISED):
                for seed in ("alice", "bob", "s3"):
                    assert check(q, expected_number(q, seed), seed).passed, q.id
            elif q.kind is Kind.CODE:
                assert check(q, q.solution).passed
                assert expected_results(q)


def test_shipped_bank_is_sealed_and_shows_no_answer():
    folder = resources.files("kvcourse.quizzes").joinpath("bank")
    for quiz in load_all():
        text = folder.joinpath(f"{quiz.lesson}.toml").read_text(encoding="utf-8")
        assert "[question.secret]" not in text and "secret =" not in text
        for q in quiz.questions:
            if q.kind is Kind.NUMERIC:
                assert not re.search(rf"\b{int(q.answer)}\b", text.replace(",", "")) or str(
                    int(q.answer)
                ) in q.prompt.replace(",", ""), q.id
            for secret in [*q.explanations.values(), q.model_answer, q.solution, q.explanation]:
                if secret.strip():
                    assert secret.strip() not in text, q.id


def test_seal_round_trip_and_wrong_key():
    secret = {"answer": 819200, "explanation": "2 x 40 x 40 x 128 x 2"}
    sealed = seal(secret, "07", "per_token")
    assert "819200" not in sealed
    assert unseal(sealed, "07", "per_token") == secret
    with pytest.raises(ValueError, match="per_token"):
        unseal(sealed[:-4] + "AAAA", "07", "per_token")


def test_authoring_round_trip_keeps_questions():
    source, text = bank_text("07")
    plain = unseal_text(text)
    assert "[question.secret]" in plain
    again = seal_text(plain)
    assert parse_quiz(again, "again") == parse_quiz(text, source)


BAD = """
lesson = "07"
[[question]]
id = "q1"
kind = "choice"
prompt = "Pick one"
options = ["x", "y"]
[question.secret]
correct = "b"
why = { a = "because a is wrong here" }
"""


@pytest.mark.parametrize(
    "text, message",
    [
        (BAD, r"bank/07.toml, question 'q1': every option needs an explanation"),
        (BAD.replace('correct = "b"', 'correct = "c"'), r"question 'q1': correct must be one of"),
        (BAD.replace('kind = "choice"', 'kind = "essay"'), r"question 'q1': kind must be one of"),
        (
            BAD.replace('prompt = "Pick one"', 'prompt = "Pick"\ncolour = "red"'),
            r"question 'q1': unknown fields \['colour'\]",
        ),
        (BAD.replace('lesson = "07"', "lesson = 7"), r"bank/07.toml: needs lesson"),
        (BAD.replace('id = "q1"', 'id = "Q 1"'), r"question 'Q 1': id must be"),
        (
            'lesson = "07"\n[[question]]\nid = "n"\nkind = "numeric"\nprompt = "p"\n[question.secret]\n'
            'answer = "lots"\nexplanation = "e"',
            r"question 'n': answer must be a finite number",
        ),
        (
            'lesson = "07"\n[[question]]\nid = "p"\nkind = "param"\nprompt = "p"\nformula = "kv_cache_bytes"\n'
            'params = { model = ["llama-2-7b"] }\n[question.secret]\nexplanation = "e"',
            r"question 'p': formula 'kv_cache_bytes' takes params",
        ),
        (
            'lesson = "07"\n[[question]]\nid = "s"\nkind = "free"\nprompt = "p"\nsealed = "bm9wZQ=="',
            r"question 's': the sealed answer",
        ),
        ("lesson = [", r"bank/07.toml: not valid TOML"),
    ],
)
def test_malformed_bank_errors_name_file_and_question(text, message):
    with pytest.raises(ValueError, match=message):
        parse_quiz(text, "quizzes/bank/07.toml")


def test_lesson_00_and_09_apply_ideas_with_numbers_the_engine_agrees_with():
    from kvcourse.kernels import MODEL_CONFIGS, costs

    smol = MODEL_CONFIGS["smollm2-135m"]
    quiz00, quiz09 = load_quiz("00"), load_quiz("09")
    assert [q.id for q in quiz00.questions] == ["num_layers", "token_kv_bytes", "embedding_bytes"]
    assert quiz00.question("token_kv_bytes").answer == costs.kv_bytes_per_token(smol, 4)
    assert quiz00.question("embedding_bytes").answer == smol.vocab_size * smol.hidden_size * 4
    for q, answers in [
        (quiz00.question("token_kv_bytes"), ["45 KiB", "46 kB", "46080"]),
        (quiz00.question("embedding_bytes"), ["113 MB", "108 MiB"]),
    ]:
        assert q.unit == "bytes" and all(check(q, a).passed for a in answers), q.id
    pool = quiz09.question("pool_utilisation")
    assert pool.unit == "percent" and pool.answer == pytest.approx(100 * (300 + 700 + 500 + 1200) / 10240)
    assert 20 <= pool.answer <= 40  # the seed's 20-40 % before paging, reproduced by computation
    assert not {"kib", "what_is_graded", "old_utilisation"} & {q.id for quiz in load_all() for q in quiz.questions}


def test_weight_bytes_makes_the_learner_count_the_parameters():
    from kvcourse.kernels import MODEL_CONFIGS, costs

    q = load_quiz("01").question("weight_bytes")
    n = costs.num_parameters(MODEL_CONFIGS["smollm2-135m"])
    for seed in ("alice", "bob", "s3"):
        prompt = prompt_for(q, seed)
        assert "numel()" in prompt and f"{n:,}" not in prompt and str(n) not in prompt
        values = draw_params(q, seed)
        assert expected_number(q, seed) == n * values["bytes_per_value"]
        assert f"{n:,}" in check(q, expected_number(q, seed), seed).explanation  # shown after the attempt
