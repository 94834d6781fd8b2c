"""Lesson 01's floors and the course's one token count (lessons 01 and 02), checked here, not in front of the learner.

That no cell above lesson 01's prediction ``01.binds`` states which floor binds is checked, with every
other prediction, in tests/lessons/test_predictions_not_given_away.py. Lessons 01 and 02 both turn English
words into tokens with ``kvcourse.tokens.tokens_per_word`` on the same paragraph, so they print the same
number (issue 42 found 226 in one and 232 in the other, when lesson 01 also counted the model's answer).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcourse.tokens import ENGLISH_SAMPLE, count_tokens, count_words, tokens_per_word

LESSONS = Path(__file__).resolve().parents[2] / "lessons"
LESSON_01 = LESSONS / "01_one_word_cost.ipynb"
LESSON_02 = LESSONS / "02_rereading_the_prompt.ipynb"


def _sources(path: Path) -> list[str]:
    return ["".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]]


def test_01_and_02_count_tokens_per_word_with_the_one_function():
    """01-13 and 02-15: both lessons take tokens per word from kvcourse.tokens, never from tokenizer.encode."""
    for path in (LESSON_01, LESSON_02):
        code = "\n".join(_sources(path))
        assert "tokens_per_word(tokenizer)" in code, path.name
        assert "tokenizer.encode(" not in code, path.name


class _Tokenizer:
    """Splits on spaces and adds a start token unless told not to, as many real tokenizers do."""

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return [0] * add_special_tokens + [1] * len(text.split())


def test_the_count_is_the_texts_own_tokens_over_its_words():
    assert count_tokens(_Tokenizer(), "one two three") == 3  # no special token counted
    assert count_words("one, two  three.") == 3
    assert tokens_per_word(_Tokenizer(), "one two") == 1.0
    assert tokens_per_word(_Tokenizer()) == 1.0  # ENGLISH_SAMPLE unless told
    with pytest.raises(ValueError, match="no words"):
        tokens_per_word(_Tokenizer(), "   ")


@pytest.mark.slow
def test_the_paragraph_gives_the_same_count_in_both_lessons(real_model):
    """The real tokenizer: a 200-word answer is round(200 x 104 / 92) = 226 tokens in lessons 01 and 02."""
    tokenizer = real_model[1]
    assert count_words(ENGLISH_SAMPLE) == 92
    assert count_tokens(tokenizer, ENGLISH_SAMPLE) == len(tokenizer.encode(ENGLISH_SAMPLE)) == 104
    assert round(200 * tokens_per_word(tokenizer)) == 226
