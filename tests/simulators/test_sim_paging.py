"""Lesson 11's simulator: reservation against paging on one trace, as a model, as a view, and against the engine.

The model drives the engine's own allocators (ReservationReplay, and PagingReplay, which runs
LLMEngine's scheduler with dummy tokens), so its numbers must be exactly theirs; and PagingReplay
must hold, step by step and sequence by sequence, the blocks LLMEngine holds on the same trace.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from factories import serve_beside_replay
from sim_checks import assert_bad_input_is_shown, shows_png

from kvcourse.kernels import (
    paged_attention_reference,
    paged_decode_attention,
    simulate_paging,
    simulate_reservation,
    workload,
)
from kvcourse.kernels.baselines.fragmentation import CATEGORIES
from kvcourse.kernels.workload import TraceConfig
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.paging import (
    PagingConfig,
    PagingSim,
    PagingView,
    block_size_sweep,
    decode_attention_inputs,
    utilisation_curve,
)

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

SMALL = dict(num_requests=30, pool_slots=4096, answer_limit=256, answer_mean=80.0, arrivals_per_step=0.5)


def _astuples(report):
    return [dataclasses.astuple(r) for r in report.history]


# -- the model -----------------------------------------------------------------------------------
def test_the_defaults_are_the_shared_trace_and_pool():
    config = PagingConfig()
    assert config.trace_config == workload.LESSON_TRACE  # lessons 09, 11 and 16 replay the same requests
    assert config.pool_slots == workload.LESSON_POOL_SLOTS and config.num_blocks == 1024
    assert PagingSim(config).trace == workload.request_trace(workload.LESSON_TRACE)


def test_the_simulator_is_the_engine_s_allocators():
    sim = PagingSim(PagingConfig(block_size=8, **SMALL))
    reservation, paging = sim.run()
    trace = workload.request_trace(sim.config.trace_config)
    assert _astuples(reservation) == _astuples(simulate_reservation(trace, 4096))
    assert _astuples(paging) == _astuples(simulate_paging(trace, 4096 // 8, 8))
    assert paging.num_preemptions == simulate_paging(trace, 512, 8).num_preemptions


def test_steps_go_together_until_done_and_reset_starts_again():
    sim = PagingSim(PagingConfig(steps_per_click=25, **SMALL))
    sim.step()
    assert sim.reservation.step_index == sim.paging.step_index == sim.step_index == 25
    sim.step(10)
    assert sim.step_index == 35
    sim.run()
    assert sim.done and sim.step_index == max(sim.reservation.report.num_steps, sim.paging.report.num_steps)
    with pytest.raises(InvalidInput, match="press Reset"):
        sim.step()
    sim.reset()
    assert sim.step_index == 0 and not sim.done


def test_the_pool_map_adds_up_to_each_step_s_record():
    sim = PagingSim(PagingConfig(block_size=16, steps_per_click=40, **SMALL))
    for replay in sim.replays:
        assert (sim.pool_map(replay) == CATEGORIES.index("idle")).all()  # before the first step
    while not sim.done:
        sim.step()
        for replay in sim.replays:
            if replay.done:
                continue
            slots, record = sim.pool_map(replay), replay.report.history[-1]
            for i, category in enumerate(CATEGORIES):
                assert (slots == i).sum() == getattr(record, category), (replay.name, category)


def test_paging_wins_on_the_lesson_trace():
    sim = PagingSim()
    reservation, paging = sim.run()
    assert 0.204 <= reservation.utilisation <= 0.382 < 0.96 <= paging.utilisation  # the vLLM paper's ranges
    assert paging.total("external") == 0 and not paging.turned_away and len(reservation.turned_away) > 100
    assert sim.more_running > 2 and paging.num_steps < reservation.num_steps / 2
    assert all(r.internal <= 15 * r.running for r in paging.history)  # at most one partial block each


def test_utilisation_curve():
    report = PagingSim(PagingConfig(**SMALL)).run()[0]
    steps, share = utilisation_curve(report, window=1)
    assert list(steps) == list(range(report.num_steps))
    assert share == pytest.approx([r.utilisation for r in report.history])
    _, whole = utilisation_curve(report, window=report.num_steps)
    assert whole[-1] == pytest.approx(report.utilisation)
    with pytest.raises(InvalidInput):
        utilisation_curve(report, window=0)


def test_block_size_sweep_trades_waste_for_table_length():
    trace = workload.request_trace(TraceConfig(num_requests=40, seed=2))
    points = block_size_sweep(trace, 8192, [1, 4, 16, 64])
    assert points[0].tail_waste == 0  # blocks of one token have no tails
    wastes = [p.waste for p in points]
    assert wastes == sorted(wastes) and points[-1].tail_waste > 3 * points[2].tail_waste
    tables = [p.mean_table_len for p in points]
    assert tables == sorted(tables, reverse=True)
    assert tables[0] == pytest.approx(4 * tables[1], rel=0.05)  # one entry per block: a quarter with 4x blocks
    allocations = [p.num_allocations for p in points]
    assert allocations == sorted(allocations, reverse=True)
    for p in points:
        assert p.report.utilisation == simulate_paging(trace, 8192 // p.block_size, p.block_size).utilisation


@pytest.mark.parametrize("block_size", [1, 4, 16, 64])
def test_decode_attention_inputs_are_a_valid_scattered_pool(block_size):
    contexts = [37, 100, 5, 64]
    q, k, v, tables, lens, scale = decode_attention_inputs(contexts, block_size, 6, 2, 8, seed=1)
    used = [int(tables[i, j]) for i, n in enumerate(contexts) for j in range(math.ceil(n / block_size))]
    assert sorted(used) == list(range(k.shape[0]))  # every block belongs to exactly one sequence
    out = paged_decode_attention(q, k, v, tables, lens, scale)
    reference = paged_attention_reference(q, k, v, tables, contexts, [1] * len(contexts), scale)
    torch.testing.assert_close(out, reference)


@pytest.mark.parametrize(
    "field, bad, name",
    [
        ("block_size", 0, "Block size"),
        ("block_size", 2.5, "Block size"),
        ("pool_slots", 0, "Pool"),
        ("pool_slots", 10**9, "Pool"),
        ("num_requests", 0, "Requests"),
        ("arrivals_per_step", 0.0, "Arrivals"),
        ("arrivals_per_step", float("nan"), "Arrivals"),
        ("answer_mean", -3.0, "Mean answer"),
        ("answer_limit", 0, "Answer limit"),
        ("seed", -1, "Seed"),
        ("steps_per_click", 0, "Steps per click"),
    ],
)
def test_invalid_inputs_name_their_control(field, bad, name):
    with pytest.raises(InvalidInput, match=name):
        PagingConfig(**{field: bad})


def test_a_pool_smaller_than_one_reservation_or_one_block_says_what_to_change():
    with pytest.raises(InvalidInput, match="raise Pool .* or lower Answer limit"):
        PagingSim(PagingConfig(pool_slots=2000))
    with pytest.raises(InvalidInput, match="at least one block"):
        PagingConfig(block_size=64, pool_slots=32)


# -- agreement with the engine ----------------------------------------------------------------------
@pytest.mark.parametrize("num_blocks", [200, 40])  # plenty, and tight enough to preempt
def test_the_paging_replay_holds_the_engine_s_blocks_step_by_step(num_blocks):
    trace = workload.request_trace(TraceConfig(num_requests=40, arrivals_per_step=0.5, seed=3).scaled(1 / 16))
    for engine, replay, request_of in serve_beside_replay(trace, num_blocks, 4):
        on_engine = {
            request_of[s.request_id]: (s.num_tokens, len(s.block_table))
            for r in engine.requests.values()
            for s in r.seqs
            if s.block_table
        }
        in_replay = {s.seq_id: (s.num_tokens, len(s.block_table)) for s in replay.running}
        assert on_engine == in_replay, f"step {replay.step_index - 1}"
        assert engine.kv_cache_manager.num_used_blocks == replay.manager.num_used_blocks
    assert engine.num_steps == replay.report.num_steps and not engine.has_unfinished_requests
    assert engine.events.counts().get("preempt", 0) == replay.report.num_preemptions
    assert (replay.report.num_preemptions > 0) == (num_blocks == 40)


# -- the view --------------------------------------------------------------------------------------
def test_the_view_steps_runs_and_resets():
    view = PagingView(steps_per_click=50, **SMALL)
    assert view.error is None and shows_png(view)
    assert "After engine step 49" in view.message.value and "reservation" in view.message.value
    view.step_button.click()
    assert "After engine step 99" in view.message.value
    view.run_button.click()
    assert view.model.done and "finished every request" in view.message.value
    view.step_button.click()  # past the end: a message, not a traceback
    assert "press Reset" in view.message.value
    view.reset_button.click()
    assert view.error is None and "After engine step 49" in view.message.value


def test_every_control_rebuilds_the_model():
    view = PagingView(steps_per_click=50, **SMALL)
    for name, value in [
        ("block_size", 32),
        ("pool_slots", 8192),
        ("num_requests", 20),
        ("arrivals_per_step", 1.0),
        ("answer_mean", 40.0),
        ("answer_limit", 128),
        ("seed", 7),
        ("steps_per_click", 10),
    ]:
        before, renders = view.model, view.num_renders
        view.controls[name].value = value
        assert view.error is None, (name, view.message.value)
        assert view.model is not before and view.num_renders == renders + 1
        assert getattr(view.model.config, name) == value
    assert "blocks of 32 tokens" in view.message.value and "After engine step 9 " in view.message.value


@pytest.mark.parametrize(
    "name, bad", [("block_size", 0), ("pool_slots", 100), ("answer_limit", 10**6), ("arrivals_per_step", float("inf"))]
)
def test_bad_input_is_a_message(name, bad):
    assert_bad_input_is_shown(PagingView(steps_per_click=50, **SMALL), name, bad)
