"""The course's two public-domain texts: one to evaluate on, one to fit on (lessons 23-25, issue 45).

``held_out_text`` is the evaluation text: chapter I of Lewis Carroll's *Alice's Adventures in Wonderland*
(1865; Project Gutenberg eBook #11, its header and licence cut), about 3,000 of SmolLM2's tokens of narrative
prose and dialogue. ``calibration_text`` is the text a conversion may fit on (lesson 23's activation-aware
factorisation reads the model's activations on it): the Constitution of the United States (1787), the preamble
and Articles I to VII, about 5,800 tokens of legal prose. Both are public domain, and both come from the
``examples/`` folder of the sdist of the PyPI package wordcloud 1.9.6 (``texts_data/SOURCES.md`` names the cuts).

Why this way round: the two texts differ in kind (a story told with dialogue; clauses of law), so nothing
fitted on the calibration text can flatter the evaluation by sharing its vocabulary or its style, and the
evaluation text is the more ordinary English, closer to what a learner's prompts look like.

"Held out" means that nothing in the course prompts the model with the text or fits anything on it; it does NOT
mean that the model never saw it. Both texts are famous and almost surely in SmolLM2's pre-training data (largely
a web crawl), which is one reason its perplexity on Alice is as low as it is (18.0 over the chapter in
float32). Every comparison the course draws is between caches or conversions of one model on the same text, so
what the model remembers of the text helps each side alike and those comparisons stay fair; an absolute perplexity
here is not what SmolLM2 would score on text it has never read.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

HELD_OUT_SOURCE = 'Lewis Carroll, "Alice\'s Adventures in Wonderland" (1865), chapter I (Project Gutenberg #11)'
CALIBRATION_SOURCE = "the Constitution of the United States (1787), preamble and Articles I-VII"


@cache
def _read(name: str) -> str:
    return files("kvcourse.kernels.measure").joinpath("texts_data", name).read_text(encoding="utf-8")


def held_out_text() -> str:
    """The evaluation text: chapter I of "Alice's Adventures in Wonderland", public domain."""
    return _read("alice_chapter_1.txt")


def calibration_text() -> str:
    """The calibration text, kept apart from the evaluation: the US Constitution's articles, public domain."""
    return _read("constitution.txt")
