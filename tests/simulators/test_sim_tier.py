"""Lesson 27's simulator: restore and recompute times by hand, the crossover where the two lines meet (and none
where the link is slower per token), the GPU case's figures, the fit to measured points, the measured points from
the engine's table, the doubling step, its refusals, and the view."""

from __future__ import annotations

import pandas as pd
import pytest
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels.measure.tier import DEVICE, PAGE_CACHE, RECOMPUTE
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.tier import MeasuredTier, Tier, TierConfig, TierView, fitted, measured_from_table
from kvcourse.simulators.tier_model import H100_TFLOPS, LLAMA_8B_BYTES_PER_TOKEN, PCIE5_X16_GBS, prefill_rate

MEASURED = MeasuredTier((16, 64, 256), (0.1, 0.4, 1.6), (0.0012, 0.0042, 0.0162), (0.0003, 0.001, 0.004))


def test_times_by_hand():
    sim = Tier(TierConfig(tokens=1000, bytes_per_token=100_000, bandwidth_gbs=50.0, prefill_tokens_per_s=10_000.0,
                          fixed_us=500.0))  # fmt: skip
    assert sim.restore_s() == pytest.approx(500e-6 + 1000 * 100_000 / 50e9)  # 2.5 ms
    assert sim.recompute_s() == pytest.approx(0.1)
    assert sim.per_token_ratio() == pytest.approx(1e-4 / 2e-6)
    assert sim.restore_wins()


def test_the_crossover_is_where_the_lines_meet():
    sim = Tier(TierConfig(bytes_per_token=100_000, bandwidth_gbs=50.0, prefill_tokens_per_s=10_000.0, fixed_us=980.0))
    cross = sim.crossover()
    assert cross == pytest.approx(10.0)  # 980 µs / (100 µs - 2 µs) a token
    assert sim.restore_s(10) == pytest.approx(sim.recompute_s(10))
    assert not sim.restore_wins(9) and sim.restore_wins(11)
    assert Tier(TierConfig(fixed_us=0.0)).crossover() == 0.0  # no fixed part: restoring wins at every n
    slow_link = Tier(TierConfig(bytes_per_token=100_000, bandwidth_gbs=0.5, prefill_tokens_per_s=10_000.0))
    assert slow_link.crossover() is None and not slow_link.restore_wins(10**6)


def test_the_gpu_case_from_its_sources():
    assert LLAMA_8B_BYTES_PER_TOKEN == 131_072 and PCIE5_X16_GBS == 64.0 and H100_TFLOPS == 989.0
    rate = prefill_rate(8.03e9, 989.0, 0.5)
    assert rate == pytest.approx(989e12 * 0.5 / 16.06e9)  # about 30,800 tokens a second
    sim = Tier(TierConfig())
    assert sim.config.prefill_tokens_per_s == round(rate)
    assert 10 < sim.per_token_ratio() < 20  # 32.5 µs to recompute a token, 2.05 µs over the link


def test_the_fit_recovers_a_straight_line():
    measured = MeasuredTier((16, 64, 256), (0.1, 0.4, 1.6), tuple(200e-6 + n * 46_080 / 0.5e9 for n in (16, 64, 256)),
                            (0.0003, 0.001, 0.004))  # fmt: skip
    fit = fitted(measured, 46_080)
    assert fit["bandwidth_gbs"] == pytest.approx(0.5) and fit["fixed_us"] == pytest.approx(200.0)
    assert fit["prefill_tokens_per_s"] == pytest.approx(256 / 1.6)
    sim = Tier(TierConfig(tokens=256, bytes_per_token=46_080, **fit))
    assert sim.restore_s() == pytest.approx(measured.device_s[-1])


def test_the_measured_points_from_the_engines_table():
    table = pd.DataFrame({RECOMPUTE: [0.1, 0.4], DEVICE: [0.001, 0.004], PAGE_CACHE: [0.0002, 0.001]},
                         index=pd.Index([16, 64], name="tokens"))  # fmt: skip
    assert measured_from_table(table) == MeasuredTier((16, 64), (0.1, 0.4), (0.001, 0.004), (0.0002, 0.001))
    with pytest.raises(ValueError):
        MeasuredTier((16, 64), (0.1,), (0.001, 0.004), (0.0002, 0.001))


def test_step_doubles_the_tokens_and_reset_goes_back():
    sim = Tier(TierConfig(tokens=16))
    assert [sim.step() for _ in range(3)] == [32, 64, 128]
    sim.reset()
    assert sim.tokens == 16
    with pytest.raises(InvalidInput, match="most"):
        Tier(TierConfig(tokens=1 << 24)).step()


@pytest.mark.parametrize(
    "changes",
    [
        {"tokens": 0},
        {"bytes_per_token": 0},
        {"bandwidth_gbs": 0.0},
        {"prefill_tokens_per_s": -1.0},
        {"fixed_us": -1.0},
        {"bandwidth_gbs": float("nan")},
    ],  # fmt: skip
)
def test_bad_input_is_refused(changes):
    with pytest.raises(InvalidInput):
        TierConfig(**changes)


def test_the_view_draws_redraws_and_names_the_winner():
    view = TierView(256, bytes_per_token=46_080, measured=MEASURED, **fitted(MEASURED, 46_080))
    assert view.error is None and shows_png(view) and "restoring" in view.message.value
    view.step_button.click()
    assert view.controls["tokens"].value == 512 and view.model.tokens == 512
    view.reset_button.click()
    assert_each_control_redraws(
        view,
        {
            "tokens": 4096,
            "bytes_per_token": 131_072,
            "bandwidth_gbs": 0.01,
            "prefill_tokens_per_s": 30_000.0,
            "fixed_us": 1000.0,
        },  # fmt: skip
    )
    assert "recomputing" in view.message.value  # 0.01 GB/s: the link is slower per token


@pytest.mark.parametrize(("name", "bad"), [("tokens", 0), ("bandwidth_gbs", -5.0), ("fixed_us", float("nan"))])
def test_the_view_shows_bad_input_instead_of_a_traceback(name, bad):
    assert_bad_input_is_shown(TierView(), name, bad)
