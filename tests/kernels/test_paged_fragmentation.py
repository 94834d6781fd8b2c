"""Reservation allocator and the reservation-versus-paging comparison (lessons 08, 09, 11)."""

from __future__ import annotations

import pytest
from factories import make_config

from kvcourse.kernels import (
    PagingReplay,
    ReservationAllocator,
    ReservationReplay,
    simulate_paging,
    simulate_reservation,
    workload,
)
from kvcourse.kernels.baselines.fragmentation import CATEGORIES, Segment
from kvcourse.kernels.engine.scheduler import Scheduler
from kvcourse.kernels.memory.budget import MemoryBudget, block_bytes, num_blocks_for_budget
from kvcourse.kernels.workload import TraceConfig, TraceRequest


def test_first_fit_and_external_fragmentation():
    alloc = ReservationAllocator(10)
    alloc.allocate(0, 3)
    alloc.allocate(1, 3)
    alloc.allocate(2, 3)
    alloc.free(0)
    alloc.free(2)
    assert alloc.num_free_slots == 7
    assert [(g.start, g.num_slots) for g in alloc.gaps()] == [(0, 3), (6, 4)]
    assert not alloc.can_allocate(5)  # 7 slots free, but no 5 of them in a row: external waste
    assert alloc.allocate(3, 2).start == 0  # first fit, not best fit
    with pytest.raises(MemoryError):
        alloc.allocate(4, 5)
    with pytest.raises(ValueError):
        alloc.allocate(3, 1)


def test_paging_beats_reservation_on_a_mixed_trace():
    trace = workload.request_trace(TraceConfig(num_requests=60, seed=1))
    reservation = simulate_reservation(trace, num_slots=8 * 1024)
    paging = simulate_paging(trace, num_blocks=8 * 1024 // 16, block_size=16)
    assert paging.utilisation > 0.9 > 0.5 > reservation.utilisation
    assert reservation.share("internal") > paging.share("internal")
    assert paging.mean_running > reservation.mean_running  # the saved memory buys batch size
    assert paging.num_steps < reservation.num_steps


def test_simulations_account_for_every_slot():
    trace = [TraceRequest(0, 5, 3, 16), TraceRequest(0, 10, 6, 16), TraceRequest(1, 2, 2, 16)]
    reservation, paging = simulate_reservation(trace, 32), simulate_paging(trace, 8, 4)
    for report in (reservation, paging):
        assert report.busy + report.total("idle") == report.num_slots * report.num_steps
        assert all(r.busy + r.idle == report.num_slots for r in report.history)
    # every request's tokens are counted once per step it runs: sum over steps of its length. A reservation
    # writes the prompt and the first answer token in the first step; the engine (and so the paging replay)
    # stores a sampled token's K/V one step later, and never stores the last one (it is never fed back)
    assert reservation.total("used") == sum(sum(range(r.num_prompt_tokens + 1, r.final_len + 1)) for r in trace)
    assert paging.num_preemptions == 0
    assert paging.total("used") == sum(sum(range(r.num_prompt_tokens, r.final_len)) for r in trace)


def test_paging_preempts_under_pressure_and_still_finishes_everything():
    trace = [TraceRequest(0, 6, 10, 16) for _ in range(4)]
    report = simulate_paging(trace, num_blocks=8, block_size=4)  # 4 x 16 tokens need 16 blocks
    assert report.num_preemptions > 0


def test_memory_budget_sizes_the_pool():
    config = make_config()
    budget = MemoryBudget(total_bytes=10_000_000, weight_bytes=4_000_000, reserve_bytes=1_000_000)
    assert budget.kv_bytes == 5_000_000
    per_block = block_bytes(config, 16, 2)
    assert per_block == 2 * config.num_layers * config.num_kv_heads * config.head_dim * 2 * 16
    assert num_blocks_for_budget(config, budget, 16, 2) == 5_000_000 // per_block
    with pytest.raises(ValueError, match="nothing is left"):
        MemoryBudget(total_bytes=10, weight_bytes=10)
    with pytest.raises(ValueError):
        MemoryBudget(total_bytes=-1, weight_bytes=0)


def test_the_80_gb_card_of_lesson_08():
    from kvcourse.kernels import EXAMPLE_13B

    budget = MemoryBudget.for_model(EXAMPLE_13B, total_bytes=80 * 10**9, bytes_per_value=2)
    assert budget.weight_bytes == 26_031_728_640  # 13B parameters in fp16
    blocks = num_blocks_for_budget(EXAMPLE_13B, budget, block_size=16, bytes_per_value=2)
    tokens = blocks * 16
    assert 65_000 < tokens <= budget.kv_bytes // 819_200  # about 66k tokens: 16 users of 4k context


def test_a_request_turned_away_with_enough_memory_free_in_total():
    # 12 slots: A takes 0-3, B 4-7, C 8-11; A and C finish first, leaving two holes of 4 (8 free)
    trace = [TraceRequest(0, 1, 1, 4), TraceRequest(0, 1, 3, 4), TraceRequest(0, 1, 1, 4), TraceRequest(1, 1, 5, 6)]
    replay = ReservationReplay(trace, 12)
    replay.step()
    assert replay.report.turned_away == []  # step 0: nothing free at all: D is not yet there
    replay.step()
    refusal = replay.report.turned_away[0]
    assert (refusal.request, refusal.needed, refusal.free, refusal.largest_gap) == (3, 6, 8, 4)
    record = replay.report.history[-1]
    assert record.external == 8 and record.stranded == 0 and record.waiting == 1
    report = replay.run()
    assert len(report.turned_away) == 1  # recorded once, at the first refusal
    paging = simulate_paging(trace, num_blocks=6, block_size=2)
    assert paging.total("external") == 0 and paging.turned_away == []


def test_replays_refuse_a_pool_that_can_never_hold_a_request():
    trace = [TraceRequest(0, 10, 6, 20)]
    with pytest.raises(ValueError, match="more than the pool"):
        ReservationReplay(trace, 16)
    with pytest.raises(ValueError, match="needs 4 blocks"):
        PagingReplay(trace, num_blocks=3, block_size=4)
    with pytest.raises(ValueError, match="empty"):
        ReservationReplay([], 16)


def test_the_lesson_trace_lands_where_the_literature_does():
    trace = workload.request_trace(workload.LESSON_TRACE)
    slots = workload.LESSON_POOL_SLOTS
    reservation = simulate_reservation(trace, slots)
    paging = simulate_paging(trace, slots // 16, 16)
    assert 0.20 <= reservation.utilisation <= 0.40  # vLLM paper: 20.4-38.2 % in reservation systems
    assert paging.utilisation >= 0.96
    assert reservation.turned_away and all(t.free >= t.needed > t.largest_gap for t in reservation.turned_away)
    # paging's only internal waste is each running sequence's partly filled last block
    assert all(r.internal < 16 * max(1, r.running) for r in paging.history)


def test_the_reservation_memory_map_tiles_the_pool_and_adds_up_to_each_record():
    trace = workload.request_trace(TraceConfig(num_requests=40, seed=3))
    replay = ReservationReplay(trace, 4096)
    assert replay.memory_map() == [Segment(0, 4096, "idle")]  # before the first step: one empty hole
    seen_blocked = 0
    while not replay.done:
        record = replay.step()
        segments = replay.memory_map()
        assert segments[0].start == 0 and segments[-1].end == 4096
        assert all(a.end == b.start for a, b in zip(segments, segments[1:], strict=False))  # no gap, no overlap
        for category in CATEGORIES:
            assert sum(s.num_slots for s in segments if s.category == category) == getattr(record, category)
        assert {s.request for s in segments if s.request is not None} <= set(range(len(trace)))
        assert (replay.blocked is not None) == (record.external > 0)
        if replay.blocked:
            seen_blocked += 1
            holes = [s.num_slots for s in segments if s.request is None]
            assert replay.blocked.free == sum(holes) >= replay.blocked.needed > max(holes) == replay.blocked.largest_gap
    assert seen_blocked >= len(replay.report.turned_away) > 0  # a request may be refused on several steps


def test_the_memory_map_shows_the_refusal_of_the_twelve_slot_example():
    trace = [TraceRequest(0, 1, 1, 4), TraceRequest(0, 1, 3, 4), TraceRequest(0, 1, 1, 4), TraceRequest(1, 1, 5, 6)]
    replay = ReservationReplay(trace, 12)
    replay.step()
    assert replay.blocked is None
    assert replay.memory_map()[:3] == [Segment(0, 2, "used", 0), Segment(2, 2, "internal", 0), Segment(4, 2, "used", 1)]
    replay.step()  # A and C have gone: B in the middle, two holes of 4, D needs 6
    assert replay.blocked == replay.report.turned_away[0]
    assert [(s.start, s.num_slots, s.category) for s in replay.memory_map()] == [
        (0, 4, "external"),
        (4, 3, "used"),
        (7, 1, "reserved_future"),
        (8, 4, "external"),
    ]


# -- PagingReplay: the engine's own scheduler, with dummy tokens (lesson 11) --------------------------
def test_the_paging_replay_of_the_lesson_trace():
    """Regression: the one paging replay is LLMEngine's schedule. Before, lessons 09, 14 and 16 replayed with
    hand-written rules (2,438 steps, 372 preemptions, 28.7 at once) while lesson 11 replayed the engine's."""
    trace = workload.request_trace(workload.LESSON_TRACE)
    replay = PagingReplay(trace, workload.LESSON_POOL_SLOTS // 16, 16)
    report = replay.run()
    assert (report.num_steps, report.num_preemptions, report.total("used")) == (2388, 220, 28_607_110)
    assert report.utilisation == pytest.approx(0.97857, abs=1e-5)
    assert f"{report.mean_running:.1f}" == "27.2"
    assert replay.manager.events.counts()["preempt"] == report.num_preemptions  # the scheduler's own preemptions


def test_the_paging_replay_drives_the_engine_s_scheduler():
    replay = PagingReplay([TraceRequest(0, 5, 3, 16)], num_blocks=4, block_size=4)
    assert isinstance(replay.scheduler, Scheduler) and replay.scheduler.kv_cache_manager is replay.manager
    replay.step()
    assert replay.running == replay.scheduler.running and [s.seq_id for s in replay.running] == [0]
    assert replay.scheduler.eos_token_ids == frozenset()  # the dummy token never ends an answer


def test_the_paging_replay_by_hand():
    # prompt 5, answer 3, blocks of 4: the prompt's 5 tokens take 2 blocks at admission; each sampled
    # token gets its slot one step later; the last answer token is never stored (it is never fed back)
    replay = PagingReplay([TraceRequest(0, 5, 3, 16)], num_blocks=4, block_size=4)
    report = replay.run()
    assert [(r.used, r.internal) for r in report.history] == [(5, 3), (6, 2), (7, 1)]
    assert replay.manager.num_free_blocks == 4


def test_a_preempted_request_keeps_its_tokens():
    # two requests of prompt 4 and answer 8 on 3 blocks of 4: the newer is preempted when the older grows
    trace = [TraceRequest(0, 4, 8, 12), TraceRequest(0, 4, 8, 12)]
    replay = PagingReplay(trace, num_blocks=3, block_size=4)
    lengths: dict[int, int] = {}
    while not replay.done:
        replay.step()
        for seq in replay.running + replay.waiting:
            assert seq.num_tokens >= lengths.get(seq.seq_id, 0)  # preempted, it keeps every token it had
            lengths[seq.seq_id] = seq.num_tokens
    assert replay.report.num_preemptions >= 1 and replay.num_recomputed_tokens > 0
    assert lengths == {0: 11, 1: 11}  # each wrote its whole answer once; the last token is never stored


def test_the_paging_memory_map_tiles_the_pool_and_adds_up_to_each_record():
    trace = workload.request_trace(TraceConfig(num_requests=20, seed=3))
    replay = PagingReplay(trace, 256, 16)
    while not replay.done:
        record = replay.step()
        segments = replay.memory_map()
        assert segments[0].start == 0 and segments[-1].end == 256 * 16
        assert all(a.end == b.start for a, b in zip(segments, segments[1:], strict=False))
        for category in CATEGORIES:
            assert sum(s.num_slots for s in segments if s.category == category) == getattr(record, category)
        tails = [s for s in segments if s.category == "internal"]
        assert all(s.num_slots < 16 for s in tails) and len(tails) <= record.running  # one partial block each
