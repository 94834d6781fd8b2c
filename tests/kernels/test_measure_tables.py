"""The tidy tables lessons 14 and 15 print from their measurements (kvcourse.kernels.measure)."""

from __future__ import annotations

import pytest
from factories import make_tiny_model

from kvcourse.kernels import MODEL_CONFIGS, costs, trace_prompts, workload
from kvcourse.kernels.measure import batch_sweep, stream
from kvcourse.kernels.measure.roofline import Roofline
from kvcourse.kernels.measure.spread import Spread, percentile

SMOL = MODEL_CONFIGS["smollm2-135m"]


def test_spread_says_only_what_every_round_agrees_on():
    assert str(Spread.of([1.2, 1.1, 1.3])) == "min 1.10x, median 1.20x, max 1.30x"
    assert Spread.of([1.2, 1.1]).verdict("faster") == "faster in every round"
    assert Spread.of([0.9, 1.1, 1.2]).verdict("faster").startswith("faster in some rounds, not in others")
    assert Spread.of([0.9, 0.8]).verdict("faster") == "not faster in any round"
    assert Spread.of([4.3, 4.4]).above(4.24) is True and Spread.of([4.2, 4.3]).above(4.24) is None
    with pytest.raises(ValueError):
        Spread.of([])


def test_the_nearest_rank_percentile_is_a_value_that_occurred():
    values = [float(v) for v in range(20, 0, -1)]  # 20 down to 1: the order does not matter
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 100)) == (10.0, 19.0, 20.0)
    assert percentile([7.0], 95) == 7.0 and percentile(values, 0) == 1.0
    assert percentile([], 95) == 0.0 and percentile([], 95, empty=-1.0) == -1.0


def test_the_sweep_keeps_the_fastest_round_and_the_rates_each_step_reached():
    rounds = [{1: 0.070, 8: 0.150, 32: 0.300}, {1: 0.060, 8: 0.400, 32: 0.310}, {1: 0.065, 8: 0.160, 32: 0.320}]
    table = batch_sweep.step_table(rounds, SMOL, 20, 4)
    assert list(table["fastest ms"]) == [60.0, 150.0, 300.0] and list(table["median ms"]) == [65.0, 160.0, 310.0]
    assert table.loc[32, "tokens/s"] == pytest.approx(32 / 0.3, abs=0.01)
    machine = Roofline(flops_per_second=100e9, bytes_per_second=20e9)
    roof = batch_sweep.beside_roofline(table, machine, SMOL, 20, 4)
    assert roof.loc[1, "GB/s achieved"] == pytest.approx(
        costs.decode_step_bytes(SMOL, 1, 20, 4) / 0.060 / 1e9, rel=1e-3
    )
    assert roof.loc[32, "GFLOP/s achieved"] == pytest.approx(
        costs.decode_step_flops(SMOL, 32, 20) / 0.3 / 1e9, rel=1e-3
    )
    caps = batch_sweep.cap_table({16: 32, 32: 16}, {32: 106.7})
    assert list(caps.iloc[:, 1]) == ["106.7", "not timed"]


def test_the_stream_rounds_count_the_same_batches_and_tokens_every_time():
    model = make_tiny_model(max_position_embeddings=256)
    trace = workload.request_trace(workload.lesson_stream(24))
    prompts = trace_prompts(trace, list(range(3, 90)))
    first, second = (stream.serve_both(model, trace, prompts, 32, 16) for _ in range(2))
    assert first.paged.batch_per_step == second.paged.batch_per_step
    assert first.reserved.batch_per_step == second.reserved.batch_per_step
    counts = stream.counts_table(first, trace, 32, 16)
    assert counts.loc["paging", "tokens"] == counts.loc["reservation", "tokens"] == first.paged.num_tokens
    assert counts.loc["paging", "steps"] < counts.loc["reservation", "steps"]
    times = stream.rounds_table([first, second])
    assert list(times.index) == [1, 2] and times.loc[1, "ratio"] == round(first.ratio, 2)
