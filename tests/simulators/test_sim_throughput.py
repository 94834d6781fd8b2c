"""Lesson 14's simulator: the roofline model against the cost model, the view headless, and the
memory cap and the trace helpers against the engine (tiny model)."""

from __future__ import annotations

import pytest
from factories import make_config, make_tiny_model
from sim_checks import assert_bad_input_is_shown, assert_each_control_redraws, shows_png

from kvcourse.kernels import (
    EXAMPLE_13B,
    MODEL_CONFIGS,
    EngineConfig,
    EventKind,
    LLMEngine,
    MemoryBudget,
    PagingReplay,
    ReservationReplay,
    SamplingParams,
    TraceServer,
    Transformer,
    costs,
    reservation_start_steps,
    serve_interleaved,
    serve_trace,
    trace_prompts,
    workload,
)
from kvcourse.simulators.base import InvalidInput
from kvcourse.simulators.controls import CUSTOM
from kvcourse.simulators.hardware import HARDWARE, kv_budget_on_card
from kvcourse.simulators.throughput import MAX_BATCH, Throughput, ThroughputConfig, ThroughputView, max_batch

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # tiny models: one thread

H100 = HARDWARE["H100 SXM"]


def _h100_13b(context_tokens=4096, batch_size=1, **kw) -> Throughput:
    return Throughput(
        ThroughputConfig(
            "llama-2-13b",
            2,
            H100.bandwidth_gbs,
            H100.tflops,
            kv_budget_on_card(H100, EXAMPLE_13B),
            context_tokens,
            batch_size,
            **kw,
        )
    )


# -- the model -------------------------------------------------------------------------------------
def test_a_step_is_the_longer_of_reading_and_computing_from_the_cost_model():
    sim = _h100_13b(batch_size=8)
    for b in (1, 8, 16, 1000):
        read = costs.decode_step_bytes(EXAMPLE_13B, b, 4096, 2) / 3.35e12
        compute = costs.decode_step_flops(EXAMPLE_13B, b, 4096) / 989e12
        assert sim.memory_seconds(b) == pytest.approx(read) and sim.compute_seconds(b) == pytest.approx(compute)
        assert sim.step_seconds(b) == pytest.approx(max(read, compute))
        assert sim.tokens_per_second(b) == pytest.approx(b / max(read, compute))
        assert sim.is_memory_bound(b)  # 3.4 GB of K/V per sequence: never compute-bound
    assert sim.weight_bytes_per_step == costs.weight_bytes_read_per_pass(EXAMPLE_13B, 2)
    assert sim.kv_bytes_per_sequence == 819_200 * 4096
    assert sim.ridge_batch is None


def test_the_h100_holds_17_conversations_of_4096_tokens_of_the_13b_model():
    sim = _h100_13b()
    kv_bytes = 80 * 2**30 - costs.weight_bytes(EXAMPLE_13B, 2)  # 59,867,617,280: 4,567 blocks, 256 each
    assert sim.config.kv_budget_bytes == kv_bytes
    assert sim.num_blocks == kv_bytes // (819_200 * 16) and sim.blocks_per_sequence == 256
    assert sim.max_batch == 4567 // 256 == 17 == costs.max_cached_tokens(EXAMPLE_13B, kv_bytes) // 4096
    assert sim.best_tokens_per_second == pytest.approx(sim.tokens_per_second(17))
    assert sim.fits and not _h100_13b(batch_size=18).fits


def test_overhead_adds_to_every_step_and_a_short_context_reaches_the_ridge():
    base, slow = _h100_13b(64), _h100_13b(64, overhead_ms=2.0)
    assert slow.step_seconds(4) == pytest.approx(base.step_seconds(4) + 0.002)
    ridge = base.ridge_batch
    assert ridge == costs.compute_bound_batch(EXAMPLE_13B, 64, 989e12, 3.35e12, 2)
    assert ridge is not None and base.is_memory_bound(ridge - 1) and not base.is_memory_bound(ridge)


def test_step_doubles_the_batch_and_reset_restores():
    sim = _h100_13b(batch_size=3)
    sim.step()
    sim.step()
    assert sim.batch_size == 12
    sim.reset()
    assert sim.batch_size == 3
    top = _h100_13b(batch_size=MAX_BATCH)
    with pytest.raises(InvalidInput, match="Reset"):
        top.step()


def test_a_budget_smaller_than_one_sequence_fits_none():
    sim = Throughput(ThroughputConfig("llama-2-13b", kv_budget_gb=1.0, context_tokens=4096))
    assert sim.max_batch == 0 and sim.best_tokens_per_second == 0.0 and not sim.fits
    assert Throughput(ThroughputConfig("llama-2-13b", kv_budget_gb=0.0)).num_blocks == 0


def test_kv_budget_on_card_is_the_memory_the_weights_leave():
    assert kv_budget_on_card(H100, EXAMPLE_13B) == pytest.approx(
        80 * 2**30 / 1e9 - costs.weight_bytes(EXAMPLE_13B, 2) / 1e9
    )
    assert kv_budget_on_card(HARDWARE["A100 80GB SXM"], MODEL_CONFIGS["llama-2-70b"]) == 0.0


@pytest.mark.parametrize(
    "field, bad, name",
    [
        ("model", "gpt-5", "Model"),
        ("bytes_per_value", 3, "Bytes per value"),
        ("bandwidth_gbs", 0.0, "Memory bandwidth"),
        ("bandwidth_gbs", float("nan"), "Memory bandwidth"),
        ("tflops", -1.0, "Compute"),
        ("kv_budget_gb", -1.0, "KV budget"),
        ("kv_budget_gb", float("inf"), "KV budget"),
        ("context_tokens", 0, "Context per sequence"),
        ("context_tokens", 2.5, "Context per sequence"),
        ("batch_size", 0, "Batch"),
        ("batch_size", MAX_BATCH + 1, "Batch"),
        ("overhead_ms", -0.5, "Overhead"),
        ("block_size", 0, "Block size"),
    ],
)
def test_invalid_inputs_name_the_control(field, bad, name):
    values = dict(
        model="smollm2-135m",
        bytes_per_value=2,
        bandwidth_gbs=3350.0,
        tflops=989.0,
        kv_budget_gb=50.0,
        context_tokens=4096,
        batch_size=1,
        overhead_ms=0.0,
        block_size=16,
    )
    values[field] = bad
    with pytest.raises(InvalidInput, match=name):
        ThroughputConfig(**values)


# -- the view --------------------------------------------------------------------------------------
def test_view_starts_on_a_card_and_reports_the_cap():
    view = ThroughputView("H100 SXM", model="llama-2-13b", context_tokens=4096, batch_size=8)
    assert view.error is None and shows_png(view)
    assert view.values["kv_budget_gb"] == pytest.approx(round(kv_budget_on_card(H100, EXAMPLE_13B), 2))
    assert "17 sequences of 4,096 tokens fit" in view.message.value and "memory-bound" in view.message.value
    rate_ax, time_ax = view.axes
    assert "caps the batch at 17" in rate_ax.get_title() and "batch 8" in time_ax.get_title()


def test_every_control_changes_the_status_and_the_figure_stays():
    view = ThroughputView("H100 SXM", model="llama-2-13b", context_tokens=4096, batch_size=4)
    figure, axes = view.figure, list(view.axes)
    changes = {
        "bandwidth_gbs": 2000.0,
        "tflops": 500.0,
        "model": "llama-3-8b",
        "bytes_per_value": 1,
        "kv_budget_gb": 30.0,
        "context_tokens": 1000,
        "batch_size": 64,
        "overhead_ms": 1.0,
        "hardware": "H200 SXM",
    }
    assert_each_control_redraws(view, changes)
    assert view.figure is figure and view.axes == axes and len(figure.axes) == 2


def test_a_card_fills_its_figures_and_typing_one_makes_it_custom():
    view = ThroughputView("H100 SXM", model="llama-2-13b")
    view.controls["hardware"].value = "H200 SXM"
    h200 = HARDWARE["H200 SXM"]
    assert (view.values["bandwidth_gbs"], view.values["tflops"]) == (h200.bandwidth_gbs, h200.tflops)
    assert view.values["kv_budget_gb"] == pytest.approx(round(kv_budget_on_card(h200, EXAMPLE_13B), 2))
    view.controls["model"].value = "smollm2-135m"  # lighter weights: more room for caches on the same card
    assert view.values["kv_budget_gb"] == pytest.approx(
        round(kv_budget_on_card(h200, MODEL_CONFIGS["smollm2-135m"]), 2)
    )
    view.controls["bandwidth_gbs"].value = 1000.0
    assert view.values["hardware"] == CUSTOM and view.model.config.bandwidth_gbs == 1000.0
    view.controls["kv_budget_gb"].value = 1.0  # a custom card keeps the typed budget when the model changes
    view.controls["model"].value = "llama-3-8b"
    assert view.values["kv_budget_gb"] == 1.0


def test_step_doubles_and_a_batch_past_the_cap_is_flagged():
    view = ThroughputView("H100 SXM", model="llama-2-13b", context_tokens=4096, batch_size=8)
    view.step_button.click()
    assert view.model.batch_size == 16 and "does not fit" not in view.message.value
    view.step_button.click()
    assert view.model.batch_size == 32 and "Batch 32 does not fit" in view.message.value
    view.reset_button.click()
    assert view.model.batch_size == 8 and view.values["batch_size"] == 8


def test_measured_points_are_drawn_beside_the_roofline():
    view = ThroughputView(
        model="smollm2-135m",
        bytes_per_value=4,
        bandwidth_gbs=8.0,
        tflops=0.04,
        kv_budget_gb=0.0236,
        context_tokens=16,
        measured={1: 15.0, 8: 60.0, 32: 150.0},
        measured_label="measured on this CPU",
    )
    assert view.values["hardware"] == CUSTOM and view.error is None
    squares = [line for line in view.axes[0].lines if line.get_label() == "measured on this CPU"]
    assert len(squares) == 1 and list(squares[0].get_xdata()) == [1, 8, 32]
    view.controls["context_tokens"].value = 64  # the same machine and model: still shown
    assert any(line.get_label() == "measured on this CPU" for line in view.axes[0].lines)
    view.controls["hardware"].value = "H100 SXM"  # another machine: the CPU's points do not belong there
    assert not any(line.get_label() == "measured on this CPU" for line in view.axes[0].lines)


def test_no_sequence_fits_is_a_status_not_an_error():
    view = ThroughputView("H100 SXM", model="llama-2-13b", kv_budget_gb=1.0, context_tokens=4096)
    assert view.error is None and "none fits" in view.message.value
    assert "not one sequence" in view.axes[0].get_title()


@pytest.mark.parametrize(
    "name, bad",
    [
        ("bandwidth_gbs", -5.0),
        ("tflops", 0.0),
        ("kv_budget_gb", -1.0),
        ("context_tokens", 0),
        ("batch_size", 0),
        ("overhead_ms", -1.0),
    ],
)
def test_bad_input_shows_a_message_not_a_traceback(name, bad):
    assert_bad_input_is_shown(ThroughputView("H100 SXM"), name, bad)


# -- the simulator against the engine ---------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny() -> Transformer:
    return make_tiny_model(max_position_embeddings=256)


@pytest.mark.parametrize("num_blocks, context, block_size", [(32, 64, 16), (32, 16, 16), (12, 13, 4), (30, 30, 8)])
def test_the_engine_admits_exactly_the_batch_the_simulator_says_fits(tiny, num_blocks, context, block_size):
    config = tiny.config
    fit = max_batch(num_blocks, context, block_size)
    block_bytes = costs.kv_bytes_per_token(config, 4) * block_size
    sim = Throughput(
        ThroughputConfig(
            "custom",
            4,
            kv_budget_gb=num_blocks * block_bytes / 1e9,
            context_tokens=context,
            block_size=block_size,
            model_config=config,
        )
    )
    assert sim.num_blocks == num_blocks and sim.max_batch == fit
    by_blocks = LLMEngine(tiny, EngineConfig(block_size=block_size, num_blocks=num_blocks, max_num_batched_tokens=4096))
    by_budget = LLMEngine(
        tiny,
        EngineConfig(
            block_size=block_size,
            max_num_batched_tokens=4096,
            memory_budget=MemoryBudget(sim.config.kv_budget_bytes, 0),
        ),
    )
    for engine in (by_blocks, by_budget):
        prompts = [[3 + (i + j) % 90 for j in range(context)] for i in range(fit + 3)]  # the context, at once
        outputs = engine.generate(prompts, SamplingParams(max_new_tokens=1))
        first = [e for e in engine.events.of_kind(EventKind.ADMIT) if e.step == 0]
        assert engine.num_blocks == num_blocks and len(first) == fit
        assert all(o.finished and not o.refusal for o in outputs)


def _lesson_trace(num_requests: int) -> list[workload.TraceRequest]:
    return workload.request_trace(workload.LESSON_TRACE.shrunk(1 / 32, num_requests))  # lesson 14's


def test_reservation_start_steps_replay_the_reservation_batches_on_the_engine(tiny):
    trace = _lesson_trace(24)
    starts = reservation_start_steps(trace, 512)
    assert len(starts) == len(trace) and all(s >= r.arrival_step for s, r in zip(starts, trace, strict=True))
    replay = ReservationReplay(trace, 512).run()
    roomy = sum(-(-r.final_len // 16) for r in trace)
    run = serve_trace(
        LLMEngine(tiny, EngineConfig(num_blocks=roomy)), trace, trace_prompts(trace, list(range(3, 90))), starts
    )
    assert run.batch_per_step == replay.running_per_step  # the engine ran exactly the reserving server's batches
    assert run.num_tokens == sum(r.num_output_tokens for r in trace)
    assert run.max_batch == max(replay.running_per_step) and run.mean_batch == pytest.approx(replay.mean_running)


@pytest.mark.parametrize("num_requests", [24, 40])
def test_the_paging_engine_serves_the_trace_as_the_paging_replay_does(tiny, num_requests):
    trace = _lesson_trace(num_requests)
    replay = PagingReplay(trace, 32, 16).run()
    run = serve_trace(LLMEngine(tiny, EngineConfig(num_blocks=32)), trace, trace_prompts(trace, list(range(3, 90))))
    assert run.num_steps == replay.num_steps and run.num_tokens == sum(r.num_output_tokens for r in trace)
    assert run.batch_per_step == replay.running_per_step  # the replay is the engine's scheduler: step for step
    assert run.seconds > 0 and run.tokens_per_second == pytest.approx(run.num_tokens / run.seconds)


def test_interleaved_servers_run_the_same_batches_as_one_at_a_time(tiny):
    trace = _lesson_trace(24)
    prompts = trace_prompts(trace, list(range(3, 90)))
    starts = reservation_start_steps(trace, 512)
    roomy = sum(-(-r.final_len // 16) for r in trace)
    alone = [
        serve_trace(LLMEngine(tiny, EngineConfig(num_blocks=32)), trace, prompts),
        serve_trace(LLMEngine(tiny, EngineConfig(num_blocks=roomy)), trace, prompts, starts),
    ]
    servers = [
        TraceServer(LLMEngine(tiny, EngineConfig(num_blocks=32)), trace, prompts),
        TraceServer(LLMEngine(tiny, EngineConfig(num_blocks=roomy)), trace, prompts, starts),
    ]
    together = serve_interleaved(servers)
    assert all(s.done for s in servers)
    for a, b in zip(alone, together, strict=True):
        assert a.batch_per_step == b.batch_per_step and a.num_tokens == b.num_tokens
    assert together[0].num_steps < together[1].num_steps  # the paging one finished first; the other went on alone


def test_serve_trace_checks_its_inputs_and_reports_refusals(tiny):
    trace = _lesson_trace(4)
    prompts = trace_prompts(trace, [5, 6, 7])
    assert [len(p) for p in prompts] == [r.num_prompt_tokens for r in trace] and prompts[1][0] == 6
    with pytest.raises(ValueError, match="one prompt"):
        serve_trace(LLMEngine(tiny, EngineConfig(num_blocks=32)), trace, prompts[:2])
    with pytest.raises(ValueError, match="refused"):
        serve_trace(LLMEngine(tiny, EngineConfig(num_blocks=1, block_size=4)), trace, prompts)
    with pytest.raises(ValueError, match="empty"):
        trace_prompts(trace, [])


def test_a_tiny_config_of_ones_own_in_the_model():
    config = make_config()
    sim = Throughput(ThroughputConfig("custom", 4, 10.0, 0.01, 0.001, 40, 2, model_config=config))
    assert sim.weight_bytes_per_step == costs.weight_bytes_read_per_pass(config, 4)
    assert sim.max_batch == max_batch(sim.num_blocks, 40, 16)
