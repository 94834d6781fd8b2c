"""Lesson 26's claims that do not need the real model, checked on a tiny model and on the pool sweep's counts.

The lesson serves a chat on SmolLM2 with no cache, the hash chain (prompt blocks only, and with answers' blocks) and
the radix tree (kernels/measure/chat_prefix.py), then sweeps pools on the engine's scheduler and KV-cache manager
alone. Its expects on the real model run with the notebook (tests/lessons/test_notebooks.py); here: the run's
sizes, the tables on a tiny model (answers equal to no cache, found tokens ordered, the turn table's hand counts),
the sweep's findings exactly (its counts need no model, so they are the lesson's), and the admission order that
shows starvation.
"""

from __future__ import annotations

import pytest
from factories import make_tiny_model

from kvcourse.kernel_env import HEADLESS_ENV
from kvcourse.kernels.measure import chat_prefix
from kvcourse.kernels.measure.chat_prefix import count_chat, seeded_answers
from kvcourse.kernels.memory.radix_chat import chat_trace
from kvcourse.radix_chat_sweep import chat_run_size

pytestmark = pytest.mark.usefixtures("one_cpu_thread")
BLOCK = 16


@pytest.mark.parametrize("headless", [True, False])
def test_the_chat_is_shorter_headless_and_fits_the_lessons_conversations(headless, monkeypatch):
    if headless:
        monkeypatch.setenv(HEADLESS_ENV, "1")
    else:
        monkeypatch.delenv(HEADLESS_ENV, raising=False)
        monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    size = chat_run_size()
    assert size.conversations <= len(chat_prefix.CONVERSATIONS)
    assert all(size.turns <= len(c) for c in chat_prefix.CONVERSATIONS)
    assert (size.conversations * size.turns < 12) == headless


def test_the_tables_on_a_tiny_model():
    trace = chat_trace(3, turns=(3, 3), system_len=20, user_len=(4, 9), vocab=(3, 96), seed=5)
    table, runs = chat_prefix.serve_indexes(make_tiny_model("auto"), trace, 256, BLOCK, 6)
    assert table["answers equal to no cache"].all()
    found = table["prompt tokens found (later turns)"]
    assert found["none"] == 0 < found["hash_prompt_only"] <= found["hash"] < found["radix"]
    turns = chat_prefix.turn_table(runs, 0).iloc[1:]
    computed = turns["computed by the previous turn"]
    assert (turns["found: radix"] == computed).all() and (turns["found: hash"] == computed // BLOCK * BLOCK).all()
    replay = count_chat(trace, "radix", 256, BLOCK, chat_prefix.replayed(runs["radix"]))
    assert replay.found_later_turns() == found["radix"]


def test_the_sweeps_findings():
    trace = chat_trace(**chat_prefix.SWEEP_TRACE, seed=0)
    answers = seeded_answers(chat_prefix.SWEEP_ANSWER, chat_prefix.SWEEP_TRACE["vocab"])
    sweep = chat_prefix.pool_sweep(trace, chat_prefix.SWEEP_POOLS, BLOCK, answers)
    fcfs, lpm = sweep["found: radix"], sweep["found: radix_lpm"]
    ample = max(chat_prefix.SWEEP_POOLS)
    assert lpm[ample] == fcfs[ample] and sweep.loc[ample, "evictions: radix"] == 0
    assert all(lpm[p] > fcfs[p] for p in sorted(chat_prefix.SWEEP_POOLS)[:2])
    hurt = [p for p in sweep.index if lpm[p] < fcfs[p]]
    assert hurt and all(sweep.loc[p, "evictions: radix_lpm"] > sweep.loc[p, "evictions: radix"] for p in hurt)
    cached_blocks = len(count_chat(trace, "radix", ample, BLOCK, answers).trees[-1])
    roomy = min(sweep.index, key=lambda pool: abs(pool - 0.75 * cached_blocks))
    assert roomy in hurt  # the prediction's pool: fewer


def test_longest_prefix_first_admits_the_request_that_shares_nothing_last():
    cached = list(range(100, 140))
    waiting = [list(range(500, 530)), cached[:6] + list(range(600, 624)), cached[:20] + list(range(700, 710))]
    assert chat_prefix.admission_order("radix", cached, waiting, 4) == [0, 1, 2]
    assert chat_prefix.admission_order("radix_lpm", cached, waiting, 4) == [2, 1, 0]
