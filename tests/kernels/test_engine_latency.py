"""Latency per request in the engine (issue 44 item 1): TTFT, TPOT, ITL and goodput with vLLM's definitions.

The engine's clock is set to its own step count, so every time is a number of steps a test can count by hand.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from kvcourse.kernels import EngineConfig, LLMEngine, SamplingParams
from kvcourse.kernels.engine.latency import LatencyTargets, RequestTimes, latency_summary, percentile
from kvcourse.kernels.memory.events import EventKind


def _prompt(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 90) for _ in range(n)]  # the tiny model has 96 token ids


def _engine(model, **config) -> LLMEngine:
    engine = LLMEngine(model, EngineConfig(**{"block_size": 4, "num_blocks": 64, **config}))
    engine.clock = lambda: float(engine.num_steps)  # seconds == steps: each time below counts steps
    return engine


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, stop_on_eos=False)


def test_a_lone_request_waits_one_step_per_prompt_chunk_then_one_per_token(tiny_model):
    engine = _engine(tiny_model, max_num_batched_tokens=8)
    (out,) = engine.generate([_prompt(20)], _greedy(5))  # 20 prompt tokens in chunks of 8: 3 steps
    lat = out.latency
    assert lat is not None and lat.num_output_tokens == 5 == len(out.tokens)
    assert (lat.arrival_step, lat.first_token_step, lat.finish_step) == (0, 3, 7)
    assert lat.ttft_s == lat.ttft_steps == 3
    assert lat.itl_s == (1.0,) * 4 and lat.itl_steps == (1,) * 4
    assert lat.tpot_s == 1.0 and lat.e2e_s == 7.0


def test_a_queued_request_counts_its_wait_in_ttft_and_a_long_prompt_stalls_the_others(tiny_model):
    engine = _engine(tiny_model, max_num_seqs=1)
    first, second = engine.generate([_prompt(6, 1), _prompt(6, 2)], _greedy(4))
    assert first.latency.ttft_s == 1 and first.latency.e2e_s == 4
    assert second.latency.arrival_step == 0 and second.latency.ttft_s == 5  # it started when the first finished
    assert second.latency.tpot_s == 1.0

    engine = _engine(tiny_model, max_num_batched_tokens=8)
    chat = engine.add_request(_prompt(4, 3), _greedy(8))
    engine.step()
    engine.step()  # the chat decodes, then a 24-token document arrives and shares each step's 8 tokens
    doc = engine.add_request(_prompt(24, 4), _greedy(2))
    while engine.has_unfinished_requests:
        engine.step()
    chat_lat, doc_lat = (engine.requests[i].output().latency for i in (chat, doc))
    assert chat_lat.itl_steps == (1,) * 7  # decodes go first: the document is chunked into what is left
    assert doc_lat.ttft_steps == 4  # 24 prompt tokens at 7 per step beside the chat's one


def test_tpot_is_the_mean_gap_and_the_times_are_the_clocks(tiny_model):
    engine = LLMEngine(tiny_model, EngineConfig(block_size=4, num_blocks=64))  # the real clock: perf_counter
    outs = engine.generate([_prompt(9, s) for s in range(3)], _greedy(6))
    for out in outs:
        lat = out.latency
        assert lat.ttft_s > 0 and len(lat.itl_s) == 5 and all(gap >= 0 for gap in lat.itl_s)
        assert lat.tpot_s == pytest.approx(sum(lat.itl_s) / 5) and lat.e2e_s == pytest.approx(
            lat.ttft_s + sum(lat.itl_s)
        )


def test_a_preempted_request_shows_its_stall_as_one_long_gap(tiny_model):
    engine = _engine(tiny_model, num_blocks=16)
    outs = engine.generate([_prompt(n, n) for n in (20, 18, 22, 15, 19)], _greedy(12))
    assert engine.events.of_kind(EventKind.PREEMPT)
    gaps = [gap for out in outs for gap in out.latency.itl_steps]
    assert max(gaps) > 1 and all(out.latency.num_output_tokens == 12 for out in outs)


def test_no_latency_without_a_token_and_an_aborted_request_keeps_what_it_got(tiny_model):
    engine = _engine(tiny_model)
    refused, empty = engine.generate([[], _prompt(5)], [_greedy(3), _greedy(0)])
    assert refused.refusal and refused.latency is None and empty.latency is None
    rid = engine.add_request(_prompt(5, 9), _greedy(20))
    for _ in range(4):
        engine.step()
    assert engine.requests[rid].output().latency is None  # still running
    engine.abort_request(rid)
    lat = engine.requests[rid].output().latency
    assert lat is not None and lat.num_output_tokens == 4 and lat.finish_step == engine.num_steps == 4


def test_percentiles_are_numpys_and_goodput_counts_requests_meeting_every_target():
    values = [random.Random(1).random() for _ in range(37)]
    for q in (0, 50, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match="percentile"):
        percentile(values, 101)
    lats = []
    for i, gaps in enumerate(([0.1, 0.1], [0.1, 0.5], [0.3, 0.3], [])):
        times = RequestTimes(arrival_step=0, arrival_s=float(i))
        clock = float(i) + 0.2 * (i + 1)
        times.add_tokens(1, 1, clock)
        for gap in gaps:
            clock += gap
            times.add_tokens(1, 2, clock)
        times.finish(3, clock)
        lats.append(times.latency())
    summary = latency_summary(lats, LatencyTargets(ttft_s=0.65, itl_s=0.4))
    assert summary.num_requests == 4 and summary.ttft_s[50] == pytest.approx(0.5)
    assert summary.itl_s[50] == pytest.approx(float(np.percentile([0.1, 0.1, 0.1, 0.5, 0.3, 0.3], 50)))
    assert summary.tpot_s[99] == pytest.approx(float(np.percentile([0.1, 0.3, 0.3], 99)))  # one token: no TPOT
    assert summary.num_good == 2 and summary.goodput_share == 0.5  # the second's gap, the last two's TTFT
    assert summary.duration_s == pytest.approx(3.8) and summary.goodput_per_s == pytest.approx(2 / 3.8)
    assert latency_summary(lats).num_good is None and latency_summary(lats).goodput_per_s is None


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True])
def test_targets_must_be_positive_seconds(bad):
    with pytest.raises(ValueError, match="positive number of seconds"):
        LatencyTargets(ttft_s=bad)


def test_a_summary_needs_finished_requests():
    with pytest.raises(ValueError, match="no finished requests"):
        latency_summary([])
