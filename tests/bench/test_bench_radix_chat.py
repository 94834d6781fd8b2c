"""The radix chat benchmark's measuring code (benchmarks/bench_radix_chat.py) on the tiny model: figures come out,
every cache's tokens equal the uncached ones, and with room for everything the tree finds the most."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from factories import make_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ sits beside tests/, not in the package

from benchmarks.bench_radix_chat import measure  # noqa: E402
from kvcourse.kernels.memory.radix_chat import chat_trace  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread


def test_every_cache_serves_the_chat_alike_and_the_tree_finds_the_most_with_room():
    trace = chat_trace(3, turns=(3, 4), system_len=20, user_len=(3, 6), vocab=(3, 96), seed=2)
    results = measure(make_tiny_model("auto"), trace, {"ample": None, "pressed": 6}, max_new_tokens=4)
    for rows in results.values():
        assert all(row["tokens_equal_to_no_cache"] for row in rows.values())
        assert rows["none"]["found_later_turns"] == 0
    ample = {cache: row["found_later_turns"] for cache, row in results["ample"].items()}
    assert ample["hash_prompt_only"] <= ample["hash"] < ample["radix"]
