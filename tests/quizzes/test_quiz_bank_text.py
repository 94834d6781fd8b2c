"""Bank texts that must agree with the lessons and the engine (issues 31 and 32)."""

from __future__ import annotations

import re

from kvcourse.quizzes.bank import load_all, load_quiz


def test_layers_are_counted_from_zero():
    why = load_quiz("04").question("key_depends_on").explanations["a"]
    assert "layer 0" in why and "From layer 1 on" in why and "layer 2" not in why


def test_hit_the_wall_states_what_the_key_assumes():
    prompt = load_quiz("08").question("hit_the_wall").prompt
    assert "enough for the other four" in prompt


def test_copy_on_write_option_agrees_with_the_engine():
    quiz = load_quiz("12")
    copies = quiz.question("copies")
    option = copies.options[ord(copies.correct) - ord("a")]
    assert "four copies" not in option and "three" in option and "original" in option
    assert "copying nothing" in copies.explanations[copies.correct]
    assert "each sample copied it" not in " ".join(why for _, why in quiz.question("shared_blocks").mistakes)


def test_why_gqa_names_decode_bandwidth():
    answer = load_quiz("16").question("why_gqa").model_answer
    assert "every decode step reads every cached key and value" in answer and "bytes read" in answer


def test_mistakes_do_not_shout():
    units = {"KV", "GB", "GiB", "MB", "TB", "FLOP", "TFLOP", "GPU", "CPU", "GQA", "MLP", "LRU"}  # LRU: a policy's name
    for quiz in load_all():
        for question in quiz.questions:
            for text in [question.prompt, *(why for _, why in question.mistakes)]:
                loud = [w for w in re.findall(r"\b[A-Z]{3,}\b", text) if w not in units]
                assert not loud, f"{quiz.lesson}/{question.id}: {loud} in {text!r}"
