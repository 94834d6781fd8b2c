"""The radix chat benchmark's measuring code (benchmarks/bench_radix_chat.py): the model-free counts on a small
trace, and the timed serving on the tiny model, whose answers must equal the uncached ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from factories import make_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ sits beside tests/, not in the package

from benchmarks.bench_radix_chat import CACHES, count, measure_times  # noqa: E402
from kvcourse.kernels.memory.radix_chat import chat_trace  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread


def test_counts_without_a_model_rank_the_caches_with_room_for_everything():
    trace = chat_trace(4, turns=(3, 5), system_len=40, user_len=(5, 20), vocab=(3, 96), seed=3)
    found = {cache: count(trace, cache, 512, answer_len=10)["found_later_turns"] for cache in CACHES}
    assert found["none"] == 0
    assert found["hash_prompt_only"] <= found["hash"] < found["radix"] == found["radix_lpm"]
    pressed = count(trace, "radix", 16, answer_len=10)
    assert pressed["evictions"] > 0 and pressed["found_later_turns"] < found["radix"]


def test_timed_serving_gives_every_cache_the_uncached_answers():
    trace = chat_trace(2, turns=(2, 3), system_len=20, user_len=(3, 6), vocab=(3, 96), seed=2)
    rows = measure_times(make_tiny_model("auto"), trace, answer_len=4, caches=CACHES, rounds=2)
    assert all(row["tokens_equal_to_no_cache"] for row in rows.values())
    assert (
        rows["none"]["found_later_turns"] == 0 < rows["hash"]["found_later_turns"] < rows["radix"]["found_later_turns"]
    )
