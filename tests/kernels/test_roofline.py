"""kernels/measure/roofline.py: the floors' arithmetic and the refusals, not the timings (lesson 01)."""

from __future__ import annotations

import math

import pytest
import torch

from kvcourse.kernels import MODEL_CONFIGS, costs
from kvcourse.kernels.measure.roofline import Roofline, best_seconds, copy_bandwidth, peak_flops

MACHINE = Roofline(flops_per_second=100e9, bytes_per_second=20e9)  # ridge at 5 FLOP per byte


def test_the_ridge_is_peak_flops_over_bandwidth():
    assert MACHINE.ridge_flops_per_byte == 5.0
    assert Roofline(989e12, 3.35e12).ridge_flops_per_byte == pytest.approx(295.2, abs=0.1)


def test_the_floor_is_the_longer_of_the_two():
    assert MACHINE.compute_seconds(1e9) == 0.01 and MACHINE.memory_seconds(1e9) == 0.05
    assert MACHINE.floor_seconds(1e9, 1e9) == 0.05  # 1 FLOP per byte, below the ridge: memory binds
    assert MACHINE.binding(1e9, 1e9) == "memory"
    assert MACHINE.floor_seconds(10e9, 1e9) == 0.1  # 10 FLOP per byte, above the ridge: compute binds
    assert MACHINE.binding(10e9, 1e9) == "compute"
    assert MACHINE.binding(5e9, 1e9) == "compute"  # at the ridge the two are equal; a tie counts as compute


def test_the_ridge_batch_is_the_first_batch_whose_arithmetic_reaches_the_shared_read():
    flops, shared = 2e9, 4e9  # 2 FLOPs for every 4-byte weight: 0.5 FLOP per byte at batch 1
    batch = MACHINE.ridge_batch(flops, shared)
    assert batch == 10  # 10 x 0.5 = 5 FLOP per byte, the ridge
    assert MACHINE.binding(batch * flops, shared) == "compute"
    assert MACHINE.binding((batch - 1) * flops, shared) == "memory"
    assert MACHINE.ridge_batch(1e12, shared) == 1  # compute already binds alone


def test_a_model_at_batch_b_does_about_two_b_flops_per_weight_byte():
    config = MODEL_CONFIGS["smollm2-135m"]
    per_byte = costs.forward_flops(config, 1, 1) / costs.weight_bytes_read_per_pass(config, 4)
    assert per_byte == pytest.approx(2 * costs.num_parameters(config) / costs.weight_bytes(config, 4), rel=0.01)
    batch = MACHINE.ridge_batch(costs.forward_flops(config, 1, 1), costs.weight_bytes_read_per_pass(config, 4))
    assert batch == 11  # a hair under 0.5 FLOP per byte: 10 sequences fall just short of the ridge at 5


@pytest.mark.parametrize("rates", [(0.0, 1e9), (1e9, -1.0), (math.inf, 1e9), (1e9, math.nan)])
def test_a_rate_that_is_not_positive_and_finite_is_refused(rates):
    with pytest.raises(ValueError, match="positive, finite rate"):
        Roofline(*rates)


def test_negative_work_and_a_batch_without_arithmetic_are_refused():
    with pytest.raises(ValueError, match="flops must be a non-negative"):
        MACHINE.floor_seconds(-1.0, 1e9)
    with pytest.raises(ValueError, match="bytes must be a non-negative"):
        MACHINE.binding(1e9, math.nan)
    with pytest.raises(ValueError, match="flops_per_sequence must be positive"):
        MACHINE.ridge_batch(0.0, 1e9)


def test_the_measurements_refuse_bad_sizes_and_return_positive_rates():
    with pytest.raises(ValueError, match="size"):
        peak_flops(size=0)
    with pytest.raises(ValueError, match="floating-point"):
        peak_flops(torch.int32)
    with pytest.raises(ValueError, match="nbytes"):
        copy_bandwidth(nbytes=0)
    with pytest.raises(ValueError, match="repeats"):
        best_seconds(lambda: None, repeats=0)
    assert peak_flops(size=64, repeats=1) > 0 and copy_bandwidth(nbytes=2**20, repeats=1) > 0


def test_a_16_bit_roofline_takes_float32s_rate_where_that_is_faster(monkeypatch):
    """On a CPU without 16-bit arithmetic a bfloat16 product runs far below float32's rate, and the model's own
    products take the faster way: the floor must too, or the measured pass beats it (lesson 01 on AVX2)."""
    from kvcourse.kernels.measure import roofline

    rates = {torch.bfloat16: 1e9, torch.float32: 5e10}  # FLOP/s, as an AVX2-only CPU measures them (the unit alone)
    monkeypatch.setattr(roofline, "peak_flops", lambda dtype, device="cpu": rates[dtype])
    monkeypatch.setattr(roofline, "copy_bandwidth", lambda device="cpu": 1e10)
    assert roofline.measure(torch.bfloat16).flops_per_second == 5e10
    rates[torch.bfloat16] = 1e11  # a CPU (or GPU) with fast 16-bit products keeps its own rate
    assert roofline.measure(torch.bfloat16).flops_per_second == 1e11
    assert roofline.measure(torch.float32).flops_per_second == 5e10


def test_a_pass_lies_nearer_the_floor_that_binds_even_when_it_beats_it():
    machine = Roofline(flops_per_second=1e11, bytes_per_second=1e10)  # 1 ms of arithmetic, 50 ms of reading
    flops, nbytes = 1e8, 5e8
    for seconds in (0.035, 0.05, 0.5):  # beaten by 30 %, met, ten times over
        assert machine.nearer(seconds, flops, nbytes) == machine.binding(flops, nbytes) == "memory"
    assert machine.nearer(0.002, flops, nbytes) == "compute"
    assert machine.pass_note(0.1, flops, nbytes).startswith("the pass took 2.0x the memory floor")
    assert machine.pass_note(0.04, flops, nbytes).startswith("the pass beat the memory floor by 20%")


def test_the_last_level_cache_is_read_from_linux_and_absent_elsewhere(tmp_path, monkeypatch):
    from kvcourse.kernels.measure import roofline

    for index, size in enumerate(["48K", "2048K", "480M"]):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(f"{size}\n")
    assert roofline.last_level_cache_bytes(tmp_path) == 480 * 2**20
    assert roofline.last_level_cache_bytes(tmp_path / "missing") is None
    monkeypatch.setattr(roofline, "last_level_cache_bytes", lambda: 480 * 2**20)
    note = Roofline(1e11, 1e10).pass_note(0.04, 1e8, 5e8)
    assert "last-level cache (480 MiB) can hold 100% of the 500 MB" in note
