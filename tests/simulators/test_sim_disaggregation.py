"""Lesson 21's disaggregation simulator: its numbers against the formulas it states, its refusals, and the view."""

from __future__ import annotations

import math

import pytest
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png, text_outside_figure

from kvcourse.kernels.model.cache_layouts import LAYOUTS_2026
from kvcourse.kernels.model.context_windows import PUBLISHED_2026
from kvcourse.simulators.base import InvalidInput, SimulatorView
from kvcourse.simulators.disaggregation import DisaggregationView, transfer_table
from kvcourse.simulators.disaggregation_model import (
    LINKS,
    MODELS,
    PREFILL_UTILISATION,
    Disaggregation,
    DisaggregationConfig,
    md1_wait,
)
from kvcourse.simulators.hardware import HARDWARE

H100 = HARDWARE["H100 SXM"]


@pytest.fixture(autouse=True)
def _fast_png(monkeypatch):
    monkeypatch.setattr(SimulatorView, "render_dpi", 30)


def _sim(**kw) -> Disaggregation:
    return Disaggregation(DisaggregationConfig(**kw))


# -- what a request moves and costs -------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("prompt", [1, 2048, 10_000])
def test_transfer_bytes_are_bytes_per_token_times_the_prompt(model, prompt):
    sim = _sim(model=model, prompt_tokens=prompt, link_gbs=12.5)
    layout = LAYOUTS_2026[model]
    windowed = [g for g in layout.groups if g.window is not None]
    kept = sum(g.num_layers * g.values_per_token * min(prompt, g.window) for g in windowed) * 2
    assert sim.transfer_bytes == layout.per_token_bytes * prompt + kept
    if not windowed:  # every layer full attention: bytes per token x prompt length, lesson 07's rule
        full = next(iter(layout.groups))
        assert sim.transfer_bytes == full.num_layers * full.values_per_token * 2 * prompt
    assert sim.transfer_seconds == pytest.approx(sim.transfer_bytes / 12.5e9)


def test_llama_31_8b_moves_128_kib_per_prompt_token():
    # meta-llama/Llama-3.1-8B: 32 layers x 8 KV heads x 128 x K and V x 2 bytes = 131,072 bytes per token
    sim = _sim(model="llama-3.1-8b", prompt_tokens=4096, link_gbs=50.0)
    assert sim.bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert sim.transfer_bytes == 131_072 * 4096
    assert sim.transfer_seconds == pytest.approx(131_072 * 4096 / 50e9)


def test_prefill_and_decode_costs_are_the_stated_formulas():
    sim = _sim(model="qwen3-8b", prompt_tokens=1000, answer_tokens=101)
    weights = PUBLISHED_2026["qwen3-8b"].weight_bytes
    flops = 2 * (weights / 2) * 1000
    assert sim.prefill_seconds == pytest.approx(flops / (H100.tflops * 1e12 * PREFILL_UTILISATION))
    # decode at a rate r with no stall: TPOT = W / B / (1 - r (n - 1) K / B)
    rate, bandwidth = 2.0, H100.bandwidth_gbs * 1e9
    kv = LAYOUTS_2026["qwen3-8b"].bytes_at(1000 + 50).total
    expected = weights / bandwidth / (1 - rate * 100 * kv / bandwidth)
    assert sim.decode_tpot(rate, 0.0) == pytest.approx(expected)
    # Little's law holds at the answer: the batch decoding is rate x gaps x TPOT, and a step takes TPOT
    batch = rate * 100 * expected
    assert (weights + batch * kv) / bandwidth == pytest.approx(expected)


def test_latencies_at_a_low_rate_are_the_bare_costs():
    sim = _sim(arrival_rate=1.0)
    tiny = 1e-9
    apart = sim.split(tiny)
    assert apart.ttft_s == pytest.approx(sim.prefill_seconds)
    step = sim.weight_bytes / (H100.bandwidth_gbs * 1e9)
    assert apart.tpot_s == pytest.approx(step + sim.transfer_seconds / (sim.config.answer_tokens - 1))
    colocated = sim.colocated(tiny)
    assert colocated.ttft_s == pytest.approx(sim.prefill_seconds + step / 2) and colocated.tpot_s == pytest.approx(step)


def test_md1_wait_and_its_limit():
    assert md1_wait(0.5, 0.1) == pytest.approx(0.05) and md1_wait(0.0, 1.0) == 0.0
    assert math.isinf(md1_wait(1.0, 0.1))


def test_prefill_stalls_decode_when_colocated():
    sim = _sim()
    rate = 30.0
    stall = rate / sim.config.num_gpus * sim.prefill_seconds
    assert sim.colocated(rate).tpot_s == pytest.approx(sim.decode_tpot(rate / 8, stall))
    assert sim.colocated(rate).tpot_s > sim.decode_tpot(rate / 8, 0.0)


# -- goodput ------------------------------------------------------------------------------------------
def test_goodput_peaks_at_an_interior_split():
    # Llama-3.1-8B on 8 H100s, 2,048-token prompts, 256-token answers, targets 0.5 s and 15 ms: too few
    # prefill GPUs miss the TTFT target early, too few decode GPUs the TPOT target.
    sim = _sim(model="llama-3.1-8b", num_gpus=8, prompt_tokens=2048, answer_tokens=256, tpot_target_ms=15.0)
    goodput = [sim.split_goodput(p) for p in range(1, 8)]
    best = goodput.index(max(goodput)) + 1
    assert 1 < best < 7, goodput
    assert goodput[0] < max(goodput) and goodput[-1] < max(goodput)
    assert sim.best_split == (best, pytest.approx(max(goodput)))
    assert max(goodput) > sim.colocated_goodput  # for this mix, apart serves more within both targets


def test_goodput_is_the_rate_where_a_target_is_just_met():
    sim = _sim(tpot_target_ms=15.0)
    for latency_at, goodput in (
        (lambda rate: sim.split(rate, 5), sim.split_goodput(5)),
        (sim.colocated, sim.colocated_goodput),
    ):
        assert latency_at(goodput).meets(0.5, 0.015) and not latency_at(goodput * 1.001).meets(0.5, 0.015)


def test_a_slow_link_costs_goodput_and_a_loose_tpot_favours_colocation():
    fast, slow = (_sim(prompt_tokens=8192, link_gbs=gbs, tpot_target_ms=15.0) for gbs in (LINKS["NVLink 4"], 1.0))
    assert slow.best_split[1] < fast.best_split[1]
    loose = _sim(tpot_target_ms=40.0)
    assert loose.colocated_goodput > loose.best_split[1]


def test_unreachable_targets_give_zero_goodput():
    sim = _sim(ttft_target_s=0.01)  # a prefill alone takes longer
    assert sim.split_goodput() == 0.0 and sim.colocated_goodput == 0.0


# -- refusals -----------------------------------------------------------------------------------------
def test_zero_link_bandwidth_is_refused_with_a_reason():
    with pytest.raises(InvalidInput, match="must be more than 0.*crosses the link"):
        DisaggregationConfig(link_gbs=0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_gpus", 1, "GPUs must be between 2"),
        ("prefill_gpus", 8, "Prefill GPUs must be between 1 and 7"),
        ("prefill_gpus", 2.5, "whole number"),
        ("arrival_rate", -1.0, "Arrival rate"),
        ("arrival_rate", math.nan, "finite"),
        ("answer_tokens", 1, "Answer"),
        ("prompt_tokens", 0, "Prompt"),
        ("link_gbs", -5.0, "Link bandwidth"),
        ("ttft_target_s", 0.0, "TTFT target"),
        ("tpot_target_ms", math.inf, "TPOT target"),
        ("model", "deepseek-v3", "Model must be"),
        ("card", "T4", "GPU must be"),
    ],
)
def test_bad_controls_say_which_and_why(field, value, message):
    with pytest.raises(InvalidInput, match=message):
        DisaggregationConfig(**{field: value})


def test_step_moves_a_gpu_to_prefill_until_one_decodes():
    sim = _sim(num_gpus=3, prefill_gpus=1)
    sim.step()
    assert sim.prefill_gpus == 2
    with pytest.raises(InvalidInput, match="press Reset"):
        sim.step()
    sim.reset()
    assert sim.prefill_gpus == 1


# -- the view -----------------------------------------------------------------------------------------
def test_view_draws_says_the_bytes_and_reacts_to_every_control():
    view = DisaggregationView()
    assert shows_png(view) and view.error is None and not text_outside_figure(view)
    sim = view.model
    assert f"{sim.bytes_per_token:,} bytes" in view.message.value and "268.44 MB" in view.message.value
    assert_each_control_redraws(
        view,
        {
            "model": "qwen3-32b",
            "card": "H200 SXM",
            "num_gpus": 16,
            "prefill_gpus": 9,
            "arrival_rate": 70.0,
            "prompt_tokens": 8192,
            "answer_tokens": 512,
            "link": "100 GbE",
            "link_gbs": 25.0,
            "ttft_target_s": 1.0,
            "tpot_target_ms": 30.0,
        },
    )
    assert view.controls["link"].value == "custom"  # a typed bandwidth is no longer the preset's
    assert not text_outside_figure(view)


def test_view_shows_bad_input_and_zero_bandwidth_as_messages():
    view = DisaggregationView()
    assert_bad_input_is_shown(view, "link_gbs", 0.0)
    assert_bad_input_is_shown(view, "prefill_gpus", 8)
    view.controls["link_gbs"].value = 0.0
    assert "crosses the link" in view.message.value


def test_fewer_gpus_keep_a_valid_split_and_step_writes_back():
    view = DisaggregationView(num_gpus=8, prefill_gpus=6)
    view.controls["num_gpus"].value = 4
    assert view.error is None and view.controls["prefill_gpus"].value == 2
    view.step_button.click()
    assert view.controls["prefill_gpus"].value == 3 and view.model.prefill_gpus == 3


def test_a_cache_larger_than_the_spare_memory_decodes_nothing():
    sim = _sim(model="qwen3-32b", card="A100 80GB SXM", prompt_tokens=131_072, ttft_target_s=1e4, tpot_target_ms=1e6)
    assert sim.max_batch < 1 and math.isinf(sim.decode_tpot(1e-6, 0.0))
    assert sim.best_split[1] == 0.0 and sim.colocated_goodput == 0.0


def test_transfer_table_is_the_layouts_bytes_over_each_link():
    table = transfer_table(["llama-3.1-70b", "deepseek-v3", "gpt-oss-120b"], 8192)
    for name, row in table.iterrows():
        sent = LAYOUTS_2026[name].bytes_at(8192).total
        assert row["bytes per token"] == LAYOUTS_2026[name].per_token_bytes
        assert row["MB per request"] == pytest.approx(sent / 1e6, abs=0.05)
        for link, gbs in LINKS.items():
            assert row[f"ms over {link} ({gbs:g} GB/s)"] == pytest.approx(sent / (gbs * 1e9) * 1e3, abs=0.005)
    assert table.loc["llama-3.1-70b", "MB per request"] == pytest.approx(327_680 * 8192 / 1e6, abs=0.05)
