"""The English paragraph lessons 01 and 02 measure tokens per word on, and the one count both use.

Lesson 01 measures how many tokens an English word takes for SmolLM2's tokenizer on this paragraph
(and on an answer the model writes); lesson 02 turns words into tokens with the same measurement,
never with a rule of thumb (lesson 00's glossary). Both take it from ``tokens_per_word``, so the same
paragraph gives the same number in every lesson.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["ENGLISH_SAMPLE", "count_tokens", "count_words", "tokens_per_word"]

ENGLISH_SAMPLE = (
    "Most people picture a chatbot looking its answer up, the way a search engine finds a page. "
    "A language model does nothing of the kind. It builds the reply one small piece at a time, and "
    "every piece is the result of a long calculation involving all of its learned numbers. "
    "Nothing is retrieved; everything is computed, and the bill arrives piece by piece. "
    "That is why the length of an answer, rather than the difficulty of the question, decides how "
    "long you wait and how much the reply costs to produce."
)


class Tokenizer(Protocol):
    """Anything with a Hugging Face tokenizer's ``encode``."""

    def encode(self, text: str, *, add_special_tokens: bool = ...) -> list[int]: ...


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    """The tokens of ``text`` itself (lesson 01): no special tokens added, no chat template around it."""
    return len(tokenizer.encode(text, add_special_tokens=False))


def count_words(text: str) -> int:
    """The words of ``text`` as a reader counts them: the pieces between spaces, punctuation included."""
    return len(text.split())


def tokens_per_word(tokenizer: Tokenizer, text: str = ENGLISH_SAMPLE) -> float:
    """Tokens per word of ``text`` (lessons 01 and 02): ``count_tokens`` over ``count_words``.

    Unless told otherwise it measures ``ENGLISH_SAMPLE``, the course's convention for English prose.
    """
    num_words = count_words(text)
    if num_words == 0:
        raise ValueError("the text has no words to count tokens per word on")
    return count_tokens(tokenizer, text) / num_words
