"""The disk-tier benchmark's measuring code (benchmarks/bench_tier.py) on the tiny model: every n restored whole,
its first token equal to the recomputed one, the files gone after, and the crossover read from the rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from factories import make_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/ sits beside tests/, not in the package

from benchmarks.bench_tier import crossover, measure  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread


def test_restores_every_full_block_and_gives_the_recomputed_token(tmp_path):
    model = make_tiny_model("auto")
    for n in (16, 48):
        row = measure(model, n, tmp_path, repeats=2, vocab=(3, 90))
        assert row["restored_tokens"] == n and row["first_token_equal"]
        assert min(row["recompute_s"], row["restore_disk_s"], row["restore_page_cache_s"]) > 0
    assert not [p for p in tmp_path.iterdir() if any(p.iterdir())]  # each engine's tier closed its files


def test_the_crossover_is_where_restoring_stays_faster():
    rows = [{"n": n, "recompute_s": r, "restore_s": 2.0} for n, r in ((16, 1.0), (32, 3.0), (64, 1.5), (128, 4.0))]
    assert crossover(rows, "restore_s") == 128
    assert crossover(rows[:3], "restore_s") is None
