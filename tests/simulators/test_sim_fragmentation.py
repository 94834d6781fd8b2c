"""Lesson 09's simulator: the reservation replay stepped a few steps per click, and its view.

The model drives the engine's own ReservationReplay, so the checks here are that it adds up to
what the engine records (every step, slot by slot) and to simulate_reservation on the same trace,
and that the lesson's helpers (the map over time, the sweep, the share inside the regions) agree
with hand computations.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import ReservationReplay, simulate_reservation, workload
from kvcourse.kernels.baselines.fragmentation import CATEGORIES
from kvcourse.kernels.workload import (
    LESSON_POOL_SLOTS,
    LESSON_TRACE,
    TraceConfig,
    TraceRequest,
    request_trace,
)
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.fragmentation import (
    CODES,
    Fragmentation,
    FragmentationConfig,
    FragmentationView,
    memory_map_over_time,
    oracle_trace,
    share_inside_regions,
    strip_codes,
    sweep,
)

SMALL = dict(pool_slots=4096, num_requests=40, seed=3)  # a short replay (a few thousand steps)


# -- the model -----------------------------------------------------------------------------------
def test_the_defaults_are_the_lesson_trace_and_pool():
    config = FragmentationConfig()
    assert config.trace_config == LESSON_TRACE and config.pool_slots == LESSON_POOL_SLOTS
    sim = Fragmentation(config)
    assert sim.trace == request_trace(LESSON_TRACE) and sim.num_steps == 1  # the strip shows step 0


def test_stepped_to_the_end_it_is_the_engines_replay_slot_by_slot():
    sim = Fragmentation(FragmentationConfig(steps_per_click=7, **SMALL))
    engine = simulate_reservation(request_trace(sim.config.trace_config), 4096)
    while not sim.done:
        record = sim.record
        counts = np.bincount(sim.strip(), minlength=len(CATEGORIES))
        assert {c: int(counts[CODES[c]]) for c in CATEGORIES} == {c: getattr(record, c) for c in CATEGORIES}
        assert record == engine.history[record.step]  # the same numbers, step for step
        sim.step()
    assert sim.report.as_dict() == engine.as_dict() and sim.report.history == engine.history
    assert sim.num_served == 40
    with pytest.raises(InvalidInput, match="press Reset"):
        sim.step()


def test_regions_in_the_strip_are_the_allocators_regions():
    sim = Fragmentation(FragmentationConfig(start_step=300, **SMALL))
    regions = {s.request: s for s in sim.segments if s.request is not None and s.category == "used"}
    assert regions and all(
        sim.replay.trace[r].max_len == sum(s.num_slots for s in sim.segments if s.request == r) for r in regions
    )
    # every region still running after the step sits where the engine's allocator put it
    for rid, region in sim.replay.allocator.regions.items():
        assert regions[rid].start == region.start


def test_steps_per_click_start_step_and_reset():
    sim = Fragmentation(FragmentationConfig(steps_per_click=25, start_step=100, **SMALL))
    assert sim.record.step == 100
    sim.step()
    assert sim.record.step == 125
    sim.reset()
    assert sim.record.step == 100 and sim.num_steps == 101


def test_the_lessons_first_refusal_shows_in_the_strip():
    engine = simulate_reservation(request_trace(LESSON_TRACE), LESSON_POOL_SLOTS)
    first = engine.turned_away[0]
    sim = Fragmentation(FragmentationConfig(start_step=first.step))
    assert sim.blocked == first
    holes = [h.num_slots for h in sim.holes]
    assert sum(holes) == first.free >= first.needed > max(holes) == first.largest_gap
    assert all(h.category == "external" for h in sim.holes)
    assert Fragmentation(FragmentationConfig(start_step=first.step - 1)).blocked is None


@pytest.mark.parametrize(
    "field, bad, name",
    [
        ("pool_slots", 0, "Pool"),
        ("pool_slots", 2.5, "Pool"),
        ("pool_slots", 1500, "could never be admitted"),
        ("answer_limit", 0, "Answer limit"),
        ("arrivals_per_step", 0.0, "Arrivals"),
        ("arrivals_per_step", float("nan"), "Arrivals"),
        ("sigma", 0.0, "spread"),
        ("sigma", 9.0, "spread"),
        ("seed", -1, "Seed"),
        ("steps_per_click", 0, "Steps per click"),
        ("start_step", -1, "Start at step"),
        ("num_requests", 0, "Requests"),
    ],
)
def test_invalid_inputs_name_the_control(field, bad, name):
    with pytest.raises(InvalidInput, match=name):
        FragmentationConfig(**{field: bad})


def test_a_pool_just_large_enough_for_the_longest_reservation_is_accepted():
    longest = max(r.max_len for r in request_trace(LESSON_TRACE))
    assert Fragmentation(FragmentationConfig(pool_slots=longest)).record.running <= 1
    with pytest.raises(InvalidInput, match=f"{longest:,} slots"):
        FragmentationConfig(pool_slots=longest - 1)


# -- the lesson's helpers ------------------------------------------------------------------------
def test_the_map_over_time_is_the_strip_of_every_sampled_step():
    config = FragmentationConfig(**SMALL)
    trace = request_trace(config.trace_config)
    image = memory_map_over_time(trace, 4096, every=50, slot_bin=1)
    replay = ReservationReplay(trace, 4096)
    for column, step in enumerate(image.steps):
        while replay.step_index <= step:
            replay.step()
        np.testing.assert_array_equal(image.codes[:, column], strip_codes(replay.memory_map(), 4096))
    assert image.steps == list(range(0, image.report.num_steps, 50))
    assert image.report.as_dict() == simulate_reservation(trace, 4096).as_dict()
    binned = memory_map_over_time(trace, 4096, every=50, slot_bin=16)
    assert binned.codes.shape == (256, len(image.steps))
    with pytest.raises(ValueError, match="divide"):
        memory_map_over_time(trace, 4096, slot_bin=3000)


def test_sweep_is_one_replay_per_value():
    base = TraceConfig(num_requests=30, seed=2)
    reports = sweep("answer_limit", [256, 512], trace_config=base, pool_slots=8192)
    for limit, report in zip([256, 512], reports, strict=True):
        trace = request_trace(dataclasses.replace(base, answer_limit=limit))
        assert report.as_dict() == simulate_reservation(trace, 8192).as_dict()
    pools = sweep("pool_slots", [4096, 8192], trace_config=base)
    assert pools[1].as_dict() == simulate_reservation(request_trace(base), 8192).as_dict()
    with pytest.raises(ValueError, match="unknown setting"):
        sweep("colour", [1])


def test_the_share_inside_the_regions_depends_on_the_trace_alone():
    trace = request_trace(TraceConfig(num_requests=50, seed=4))
    # a request runs one step per answer token; at its j-th step it holds prompt + j tokens of max_len slots
    used = sum(
        r.num_prompt_tokens * r.num_output_tokens + r.num_output_tokens * (r.num_output_tokens + 1) // 2 for r in trace
    )
    held = sum(r.max_len * r.num_output_tokens for r in trace)
    shares = [share_inside_regions(simulate_reservation(trace, slots)) for slots in (4096, 8192, 65536)]
    shifted = [dataclasses.replace(r, arrival_step=3 * r.arrival_step) for r in trace]  # slower arrivals
    shares.append(share_inside_regions(simulate_reservation(shifted, 8192)))
    assert all(math.isclose(s, used / held, rel_tol=1e-12) for s in shares)


def test_oracle_reservations_have_no_internal_waste():
    trace = [TraceRequest(0, 5, 3, 20), TraceRequest(2, 4, 9, 20)]
    oracle = oracle_trace(trace)
    assert [r.max_len for r in oracle] == [8, 13] and [r.final_len for r in oracle] == [8, 13]
    report = simulate_reservation(oracle, 32)
    assert report.total("internal") == 0 and report.total("reserved_future") > 0


# -- the view ------------------------------------------------------------------------------------
def test_view_starts_at_the_refusal_and_draws_it():
    first = simulate_reservation(request_trace(LESSON_TRACE), LESSON_POOL_SLOTS).turned_away[0]
    view = FragmentationView(start_step=first.step)
    assert view.error is None and shows_png(view)
    assert f"Request {first.request} turned away" in view.message.value
    assert f"largest hole is {first.largest_gap:,}" in view.message.value
    strip_ax, history_ax = view.axes
    assert f"no {first.needed:,} in a row" in strip_ax.get_title()
    assert "real tokens" in history_ax.get_title() and len(view.figure.axes) == 2


def test_every_control_changes_the_status_and_the_figure_stays():
    view = FragmentationView(start_step=50)
    figure, axes = view.figure, list(view.axes)
    changes = {
        "pool_slots": 32768,
        "answer_limit": 512,
        "arrivals_per_step": 0.1,
        "sigma": 0.5,
        "seed": 7,
        "start_step": 80,
        "steps_per_click": 10,
    }
    assert_each_control_redraws(view, changes)
    assert view.figure is figure and view.axes == axes and len(figure.axes) == 2
    assert view.model.config == FragmentationConfig(32768, 512, 0.1, 0.5, 7, 10, 80)


def test_step_advances_and_reset_restores():
    view = FragmentationView(steps_per_click=40, start_step=10)
    assert "Step 10:" in view.message.value
    view.step_button.click()
    assert view.model.record.step == 50 and "Step 50:" in view.message.value
    view.controls["pool_slots"].value = 8192
    view.reset_button.click()
    assert view.values["pool_slots"] == LESSON_POOL_SLOTS and view.model.record.step == 10


def test_stepping_past_the_end_says_so():
    view = FragmentationView(**{k: v for k, v in SMALL.items() if k != "num_requests"}, steps_per_click=100_000)
    view.step_button.click()
    assert view.model.done and "Every request served" in view.message.value
    view.step_button.click()
    assert view.error is None and "press Reset" in view.message.value  # information, not an input error


@pytest.mark.parametrize(
    "name, bad",
    [
        ("pool_slots", 0),
        ("pool_slots", 1000),
        ("answer_limit", -4),
        ("arrivals_per_step", 0.0),
        ("sigma", 100.0),
        ("seed", -2),
        ("steps_per_click", 0),
        ("start_step", -1),
    ],
)
def test_bad_input_shows_a_message_not_a_traceback(name, bad):
    assert_bad_input_is_shown(FragmentationView(start_step=5), name, bad)


def test_the_trace_module_and_the_simulator_share_the_lesson_settings():
    assert FragmentationConfig().answer_limit == workload.LESSON_TRACE.answer_limit
    assert FragmentationView().model.config.pool_slots == workload.LESSON_POOL_SLOTS
