"""Lesson 28's claims that do not need the real model, checked on a tiny model.

The lesson serves SmolLM2 with and without n-gram drafts (kernels/measure/speculative.py); its expects on the real
model run with the notebook (tests/lessons/test_notebooks.py). Here: the run's sizes; on a tiny model, a prompt
that repeats itself is drafted and accepted more than one that does not, takes fewer passes, and both answers equal
plain greedy decoding; a longer shortest n-gram proposes no more drafts; the agreement count.
"""

from __future__ import annotations

import pytest
from factories import make_tiny_model

from kvcourse.kernel_env import HEADLESS_ENV
from kvcourse.kernels.measure import speculative
from kvcourse.speculation_run import speculation_run_size

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
REPEATING = [5, 6, 7, 8, 9, 10, 11, 12] * 4
NEW = 24


@pytest.fixture(scope="module")
def model():
    return make_tiny_model(max_position_embeddings=256)


@pytest.mark.parametrize("headless", [True, False])
def test_the_run_is_short_headless_and_longer_for_people(headless, monkeypatch):
    if headless:
        monkeypatch.setenv(HEADLESS_ENV, "1")
    else:
        monkeypatch.delenv(HEADLESS_ENV, raising=False)
        monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    run = speculation_run_size()
    assert (run.new_tokens, run.rounds) == ((32, 1) if headless else (64, 3))


def test_the_table_counts_passes_and_acceptance_and_the_answers_equal_plain(model):
    free = [(37 * i) % 59 + 3 for i in range(16)]  # the tiny model has 64 tokens
    table = speculative.with_and_without(model, {"grounded": REPEATING, "free": free}, NEW, 4, 1)
    assert table["same tokens"].all() and (table["agree for"] == NEW).all()
    assert (table["plain passes"] == NEW - 1).all()
    assert (table["speculative passes"] <= table["plain passes"]).all()
    assert (table["tokens per pass"] == (NEW - 1) / table["speculative passes"]).all()
    assert table.loc["grounded", "acceptance"] >= table.loc["free", "acceptance"]
    assert ((table["acceptance"] >= 0) & (table["acceptance"] <= 1)).all()


def test_a_longer_shortest_ngram_proposes_no_more_drafts(model):
    knob = speculative.min_ngram_counts(model, REPEATING[:12] + [40, 41, 5, 42], NEW, 4, (1, 2, 3))
    drafted = list(knob["drafted"])
    assert drafted == sorted(drafted, reverse=True)
    assert (knob["accepted"] <= knob["drafted"]).all()


def test_agree_for_counts_the_common_start():
    assert speculative.agree_for([1, 2, 3], [1, 2, 4]) == 2
    assert speculative.agree_for([1, 2], [1, 2, 3]) == 2
    assert speculative.agree_for([], [1]) == 0
