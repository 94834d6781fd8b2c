"""The English paragraph lessons 01 and 02 measure tokens per word on (the course's convention).

Lesson 01 measures how many tokens an English word takes for SmolLM2's tokenizer on this paragraph
(and on an answer the model writes); lesson 02 turns words into tokens with the same measurement,
never with a rule of thumb (lesson 00's glossary).
"""

__all__ = ["ENGLISH_SAMPLE"]

ENGLISH_SAMPLE = (
    "Most people picture a chatbot looking its answer up, the way a search engine finds a page. "
    "A language model does nothing of the kind. It builds the reply one small piece at a time, and "
    "every piece is the result of a long calculation involving all of its learned numbers. "
    "Nothing is retrieved; everything is computed, and the bill arrives piece by piece. "
    "That is why the length of an answer, rather than the difficulty of the question, decides how "
    "long you wait and how much the reply costs to produce."
)
