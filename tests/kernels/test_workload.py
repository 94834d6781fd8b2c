"""The request trace lessons 09, 11 and 16 replay, and lesson 14 scales (kvcourse.kernels.workload)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from kvcourse.kernels import workload
from kvcourse.kernels.workload import LESSON_TRACE, TraceConfig, TraceRequest, request_trace, trace_summary


def test_the_trace_is_deterministic_and_seeded():
    assert request_trace(LESSON_TRACE) == request_trace(TraceConfig())
    assert request_trace(TraceConfig(seed=1)) != request_trace(TraceConfig(seed=0))


def test_the_trace_has_the_stated_shape():
    trace = request_trace(TraceConfig(num_requests=4000))
    summary = trace_summary(trace)
    assert [r.arrival_step for r in trace] == sorted(r.arrival_step for r in trace)
    # Poisson arrivals at 0.25 per step: the last of 4000 arrives near step 16000
    assert 15_000 < summary["last_arrival_step"] < 17_000
    # log-normal means near ShareGPT's (161 / 338) before truncation cuts the long tail
    assert 130 < summary["mean_prompt"] < 175
    assert 290 < summary["mean_answer"] < 345
    assert all(r.max_len == r.num_prompt_tokens + LESSON_TRACE.answer_limit for r in trace)
    assert all(r.num_output_tokens <= LESSON_TRACE.answer_limit for r in trace)
    assert 0.9 < summary["share_ending_early"] < 1.0  # most answers stop well before the limit
    median = sorted(r.num_prompt_tokens for r in trace)[len(trace) // 2]
    assert median == pytest.approx(161 / math.exp(0.5), rel=0.1)  # a log-normal's mean is e^(sigma^2/2) x median


def test_scaling_keeps_the_shape_and_shortens_the_lengths():
    small = LESSON_TRACE.scaled(0.125)
    assert small.answer_limit == 128 and small.prompt_mean == pytest.approx(161 / 8)
    trace = request_trace(small)
    assert all(r.max_len == r.num_prompt_tokens + 128 for r in trace)
    assert [r.arrival_step for r in trace] == [r.arrival_step for r in request_trace(LESSON_TRACE)]


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_requests", 0),
        ("num_requests", 2.5),
        ("arrivals_per_step", 0),
        ("sigma", float("nan")),
        ("answer_limit", True),
        ("seed", "x"),
        ("prompt_mean", -1.0),
    ],
)
def test_bad_settings_name_the_setting(field, value):
    with pytest.raises(ValueError, match=field):
        TraceConfig(**{field: value})
    with pytest.raises(ValueError, match="factor"):
        LESSON_TRACE.scaled(0)


def test_requests_are_validated():
    with pytest.raises(ValueError):
        TraceRequest(0, 10, 10, 15)
    with pytest.raises(ValueError):
        trace_summary([])
    assert TraceRequest(0, 1, 2, 4).ends_early and not TraceRequest(0, 1, 3, 4).ends_early
    assert workload.LESSON_POOL_SLOTS % 16 == 0


def test_shrunk_scales_lengths_down_and_arrivals_up_together():
    """Lesson 14's trace: lesson 09's, 32 times shorter and 32 times as frequent, as many at once."""
    small = LESSON_TRACE.shrunk(1 / 32, 24)
    assert small == replace(
        LESSON_TRACE.scaled(1 / 32), arrivals_per_step=LESSON_TRACE.arrivals_per_step * 32, num_requests=24
    )
    assert LESSON_TRACE.shrunk(0.5).num_requests == LESSON_TRACE.num_requests


def test_lesson_stream_is_a_stream_between_the_two_policies_capacities():
    # lesson 14: lengths 32 times down, two arrivals per step, for dozens of steps
    config = workload.lesson_stream(64)
    assert config.arrivals_per_step == 2.0 and config.answer_limit == 32 and config.num_requests == 64
    trace = workload.request_trace(config)
    summary = workload.trace_summary(trace)
    assert summary["last_arrival_step"] >= 30  # a stream, not a burst of two steps
    # Little's law: arrivals per step x steps each answer takes = conversations wanting to run at once,
    # more than the 13 reservations of about 38 slots that 512 slots hold
    assert 512 // round(summary["mean_reserved"]) == 13 < config.arrivals_per_step * summary["mean_answer"] < 24
