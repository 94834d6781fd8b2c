"""Lesson 21's simulator: a request stream under a token budget, TTFT and ITL against two targets, and goodput.

The model drives the engine's own scheduler with dummy tokens and stamps each request as LLMEngine does, so
its latencies must be LLMEngine's on the same stream (a tiny model, a clock that runs as the model's does);
its goodput must be the requests that meet both targets, counted by hand, over the time served.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from factories import make_tiny_model
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
from kvcourse.simulators import serving_budget_model
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.serving_budget import (
    ServingBudget,
    ServingBudgetConfig,
    ServingBudgetView,
    fit_step_cost,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

SMALL = dict(num_requests=16, long_prompt_tokens=300, short_prompt_tokens=20, answer_tokens=12)


def _sim(**changes) -> ServingBudget:
    return ServingBudget(ServingBudgetConfig(**{**SMALL, **changes}))


# -- the model -------------------------------------------------------------------------------------
def test_without_long_prompts_no_request_misses_a_loose_target():
    for budget in (16, 64, 4096):
        sim = _sim(long_percent=0, token_budget=budget, arrival_rate=0.5, ttft_target=1e4, itl_target=1e4)
        assert sim.config.num_long == 0 and not any(sim.is_long)
        assert sim.num_good == sim.config.num_requests and sim.goodput_share == 1.0
    # and the same stream against a target shorter than one step: every request misses it
    assert _sim(long_percent=0, itl_target=0.5).num_good == 0


def test_a_smaller_budget_shortens_the_worst_gap_of_short_requests():
    worst = {}
    for budget in (4096, 512, 128, 32):
        sim = _sim(long_percent=25, token_budget=budget, arrival_rate=0.3, tokens_per_step_time=8.0)
        assert sim.config.num_long == 4
        worst[budget] = max(sim.gaps(long=False))
    assert worst[4096] > worst[512] > worst[128] > worst[32], worst
    assert worst[4096] > 3 * worst[32]  # the stall of a whole long prefill against a chunk's
    # what it costs the long prompts: their first token comes later
    assert max(_sim(long_percent=25, token_budget=32, arrival_rate=0.3).ttfts(long=True)) > max(
        _sim(long_percent=25, token_budget=4096, arrival_rate=0.3).ttfts(long=True)
    )


def test_goodput_is_the_requests_meeting_both_targets_over_the_time_served():
    sim = _sim(long_percent=25, token_budget=64, arrival_rate=0.3, ttft_target=20.0, itl_target=2.5)
    by_hand = [lat.ttft_s <= 20.0 and max(lat.itl_s, default=0.0) <= 2.5 for lat in sim.latencies]
    assert 0 < sum(by_hand) < len(by_hand)  # the targets split the requests: the test can fail both ways
    assert list(sim.good) == by_hand and sim.num_good == sum(by_hand)
    start = min(lat.arrival_s for lat in sim.latencies)
    end = max(lat.arrival_s + lat.e2e_s for lat in sim.latencies)
    assert sim.goodput_per_step_time == pytest.approx(sum(by_hand) / (end - start))
    assert sim.goodput_share == pytest.approx(sum(by_hand) / len(by_hand))
    # the time served is the sum of the steps' durations, each 1 + tokens / T
    served = sim.served
    assert served.step_times == tuple(1 + n / sim.config.tokens_per_step_time for n in served.step_tokens)
    assert end <= sum(served.step_times) + max(sim.config.arrival_times) + 1e-9


def test_every_request_is_computed_in_full_whatever_the_budget():
    for budget in (16, 4096):
        sim = _sim(long_percent=25, token_budget=budget)
        assert max(sim.served.step_tokens) <= budget
        assert sum(sim.served.step_tokens) == sum(sim.config.prompt_lengths) + 16 * (12 - 1)
        assert all(lat.num_output_tokens == 12 for lat in sim.latencies)


def test_a_change_of_target_judges_the_same_replay_again():
    serving_budget_model._served.cache_clear()
    first = _sim(ttft_target=10.0).served
    again = _sim(ttft_target=500.0, itl_target=2.0).served
    assert again is first and serving_budget_model._served.cache_info().hits == 1


def test_halving_the_budget_and_reset():
    sim = _sim(token_budget=64)
    sim.step()
    assert sim.token_budget == 32 and sim.stream.token_budget == 32
    sim.step()
    sim.step()
    with pytest.raises(InvalidInput, match="smallest budget"):
        sim.step()
    sim.reset()
    assert sim.token_budget == 64


@pytest.mark.parametrize(
    "field, bad, name",
    [
        ("arrival_rate", 0.0, "Arrival rate"),
        ("long_percent", 101, "Long prompts"),
        ("long_prompt_tokens", 0, "Long prompt"),
        ("token_budget", 4, "Token budget"),
        ("ttft_target", -1.0, "TTFT target"),
        ("itl_target", float("nan"), "ITL target"),
        ("tokens_per_step_time", float("inf"), "Tokens per step-time"),
        ("long_percent", 2.5, "whole number"),
    ],
)
def test_invalid_inputs_name_their_control(field, bad, name):
    with pytest.raises(InvalidInput, match=name):
        ServingBudgetConfig(**{field: bad})


def test_a_stream_too_long_to_replay_says_what_to_change():
    with pytest.raises(InvalidInput, match="raise the token budget"):
        ServingBudgetConfig(num_requests=200, long_percent=100, long_prompt_tokens=8192, token_budget=8)


def test_the_step_cost_is_read_back_from_two_gaps():
    unit, tokens, decodes, prompt = 0.004, 40.0, 4, 2000
    plain, stall = unit * (1 + decodes / tokens), unit * (1 + (decodes + prompt) / tokens)
    cost = fit_step_cost(plain, stall, decodes, prompt)
    assert cost.tokens_per_step_time == pytest.approx(tokens) and cost.unit_s == pytest.approx(unit)
    assert fit_step_cost(plain, plain, decodes, prompt).tokens_per_step_time == 1e6  # no stall: tokens are free
    with pytest.raises(ValueError, match="positive"):
        fit_step_cost(0.0, stall, decodes, prompt)


# -- agreement with the engine ------------------------------------------------------------------------
def _served_on_the_engine(config: ServingBudgetConfig) -> list:
    """The stream on LLMEngine with a tiny model: each request added once the clock passes its arrival (stamped
    with it), the clock moved on by each step's duration as the model moves it."""
    longest = max(config.prompt_lengths) + config.answer_tokens
    engine = LLMEngine(
        make_tiny_model(max_position_embeddings=longest),
        EngineConfig(
            block_size=16,
            num_blocks=sum((p + config.answer_tokens) // 16 + 1 for p in config.prompt_lengths),
            max_num_seqs=config.num_requests,
            max_num_batched_tokens=config.token_budget,
            max_model_len=longest,
        ),
    )
    clock = {"now": 0.0}
    schedule = engine.scheduler.schedule

    def timed_schedule():
        batch = schedule()
        clock["now"] += config.step_time(batch.num_tokens)
        return batch

    engine.scheduler.schedule = timed_schedule
    generator = torch.Generator().manual_seed(0)
    arrivals, ids = config.arrival_times, []
    while len(ids) < config.num_requests or engine.has_unfinished_requests:
        if not engine.has_unfinished_requests:
            clock["now"] = max(clock["now"], arrivals[len(ids)])
        while len(ids) < config.num_requests and arrivals[len(ids)] <= clock["now"]:
            arrived = arrivals[len(ids)]
            engine.clock = lambda t=arrived: t  # the request arrived then
            prompt = torch.randint(3, 90, (config.prompt_lengths[len(ids)],), generator=generator).tolist()
            ids.append(
                engine.add_request(prompt, SamplingParams(max_new_tokens=config.answer_tokens, stop_on_eos=False))
            )
        engine.clock = lambda: clock["now"]
        engine.step()
    return [engine.requests[i].output().latency for i in ids]


@pytest.mark.parametrize("budget", [512, 48])  # the long prompt in one step, and in chunks
def test_the_simulator_s_latencies_are_the_engine_s(budget):
    sim = _sim(long_percent=25, token_budget=budget, arrival_rate=0.4, tokens_per_step_time=8.0)
    on_engine = _served_on_the_engine(sim.stream)
    assert [dataclasses.astuple(lat) for lat in on_engine] == [dataclasses.astuple(lat) for lat in sim.latencies]
    assert max(sim.served.step_tokens) == budget  # the budget bound at least one step


# -- the view --------------------------------------------------------------------------------------
def test_the_view_draws_halves_and_resets():
    view = ServingBudgetView(**SMALL, long_percent=25, token_budget=64)
    assert view.error is None and shows_png(view)
    assert "budget of 64 tokens per step" in view.message.value and "Goodput" in view.message.value
    view.step_button.click()
    assert view.controls["token_budget"].value == 32 and "budget of 32 tokens" in view.message.value
    view.step_button.click()
    view.step_button.click()  # 8: the smallest
    view.step_button.click()
    assert "press Reset" in view.message.value
    view.reset_button.click()
    assert view.controls["token_budget"].value == 64 and "budget of 64 tokens" in view.message.value


def test_every_control_redraws():
    view = ServingBudgetView(**SMALL)
    assert_each_control_redraws(
        view,
        {
            "arrival_rate": 0.5,
            "long_percent": 50,
            "long_prompt_tokens": 600,
            "token_budget": 32,
            "ttft_target": 20.0,
            "itl_target": 3.0,
            "tokens_per_step_time": 200.0,
        },
    )
    assert view.model.config.long_prompt_tokens == 600 and view.model.token_budget == 32


@pytest.mark.parametrize("name, bad", [("token_budget", 0), ("long_percent", 150), ("itl_target", 0.0)])
def test_bad_input_is_a_message(name, bad):
    assert_bad_input_is_shown(ServingBudgetView(**SMALL), name, bad)
