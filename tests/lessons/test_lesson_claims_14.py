"""Lesson 14's printed numbers that are not timings, recomputed independently.

The lesson runs SmolLM2; who runs in which step of a trace does not depend on the model when every
answer has a fixed length (the stop token is ignored), so the schedules (the counts the lesson leads
with: steps, sequences and tokens per step) are checked on the tiny model, and once on SmolLM2 to
show they match. The figures on paper are recomputed here from the
cost model's formulas and the spec-sheet numbers, without the simulator.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from factories import make_tiny_model

from kvcourse.kernels import (
    EXAMPLE_13B,
    MODEL_CONFIGS,
    PagingReplay,
    ReservationReplay,
    Transformer,
    costs,
    trace_prompts,
    workload,
)
from kvcourse.kernels.measure import batch_sweep, batching, stream
from kvcourse.kernels.measure.block_sizes import closest_option
from kvcourse.kernels.measure.roofline import Roofline
from kvcourse.simulators.hardware import HARDWARE, kv_budget_on_card
from kvcourse.simulators.throughput import Throughput, ThroughputConfig, max_batch

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # one thread: the lessons' setting, fastest for tiny models

SMOL = MODEL_CONFIGS["smollm2-135m"]
SCALE, BLOCK_SIZE = 1 / 32, 16


def lesson_trace(num_requests: int) -> list[workload.TraceRequest]:
    """The lesson's stream: lesson 09's trace, lengths scaled down 32 times, two arrivals per step."""
    return workload.request_trace(workload.lesson_stream(num_requests))


def test_smollm2_reads_its_weights_once_per_step():
    # 134,515,008 parameters, the output layer tied to the embedding table: all read once per step
    assert costs.num_parameters(SMOL) == 134_515_008
    assert costs.weight_bytes_read_per_pass(SMOL, 4) == 538_060_032
    assert costs.weight_bytes_read_per_pass(SMOL, 2) == 269_030_016
    for batch in (1, 32):
        assert costs.decode_step_bytes(SMOL, batch, 16, 4) == 538_060_032 + batch * 16 * 46_080
    assert costs.decode_step_flops(SMOL, 32, 16) == 32 * costs.decode_step_flops(SMOL, 1, 16)


def test_the_lessons_pool_and_its_caps():
    pool_blocks = round(workload.LESSON_POOL_SLOTS * SCALE) // BLOCK_SIZE
    assert pool_blocks == 32
    caps = {ctx: max_batch(pool_blocks, ctx, BLOCK_SIZE) for ctx in (16, 32, 64, 128, 256, 512)}
    assert caps == {16: 32, 32: 16, 64: 8, 128: 4, 256: 2, 512: 1}
    for bpv in (4, 2):  # the simulator, given the pool in bytes, caps the batch the same way
        pool_gb = pool_blocks * BLOCK_SIZE * costs.kv_bytes_per_token(SMOL, bpv) / 1e9
        for ctx, cap in caps.items():
            assert Throughput(ThroughputConfig("smollm2-135m", bpv, 8.0, 0.04, pool_gb, ctx)).max_batch == cap


@pytest.fixture(scope="module")
def tiny() -> Transformer:
    return make_tiny_model(max_position_embeddings=256)


def _serve_both(model, trace, prompts):
    """The lesson's two servers, stepped in turn as the lesson steps them (one round)."""
    served = stream.serve_both(
        model, trace, prompts, round(workload.LESSON_POOL_SLOTS * SCALE) // BLOCK_SIZE, BLOCK_SIZE
    )
    return served.paged, served.reserved


@pytest.mark.parametrize("num_requests", [40, 64])  # the quick path and the full one
def test_the_trace_on_the_engine_paging_against_reservation(tiny, num_requests):
    trace = lesson_trace(num_requests)
    summary = workload.trace_summary(trace)
    assert summary["num_requests"] == num_requests and summary["share_ending_early"] > 0.9
    assert summary["last_arrival_step"] >= 15  # a stream over many steps, not a burst
    assert 13 < 2.0 * summary["mean_answer"] < 24  # Little's law: more than reservation holds, less than paging
    assert max(r.max_len for r in trace) <= 512  # every reservation fits the 32-block pool
    paged, reserved = _serve_both(tiny, trace, trace_prompts(trace, list(range(3, 90))))
    by_reservation = ReservationReplay(trace, 512).run()
    by_paging = PagingReplay(trace, 32, BLOCK_SIZE).run()
    assert reserved.batch_per_step == by_reservation.running_per_step
    assert reserved.max_batch == 13 < paged.max_batch  # 512 slots hold 13 reservations of about 38
    assert paged.batch_per_step == by_paging.running_per_step  # the replay is the engine's scheduler
    assert paged.num_steps == by_paging.num_steps and paged.mean_batch == by_paging.mean_running
    # the lesson's expect: more sequences per step, fewer steps, the same tokens
    assert paged.mean_batch > reserved.mean_batch and paged.num_steps < reserved.num_steps
    assert paged.num_tokens == reserved.num_tokens == sum(r.num_output_tokens for r in trace)
    assert paged.max_batch == 24 and paged.num_tokens / paged.num_steps > 1.2 * reserved.num_tokens / reserved.num_steps
    # the lesson's prose on the counts table: lesson 11's utilisation, lower for paging than lesson 11's 96 % and up
    # because a conversation of about one block leaves a large empty tail (its internal share)
    assert 0.5 < by_paging.utilisation < 0.96 and by_paging.share("internal") > 0.3
    assert by_reservation.utilisation < by_paging.utilisation


def _by_hand(card: str, config, context: int = 4096) -> dict:
    hw = HARDWARE[card]
    bandwidth, flops = hw.bandwidth_gbs * 1e9, hw.tflops * 1e12
    weights = costs.weight_bytes_read_per_pass(config, 2)
    per_seq_kv = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 2 * context
    kv_budget = round(hw.memory_gib * 2**30 - costs.weight_bytes(config, 2))
    fit = (kv_budget // (per_seq_kv // context * BLOCK_SIZE)) // math.ceil(context / BLOCK_SIZE)
    step = (weights + fit * per_seq_kv) / bandwidth  # memory-bound: the reads set the step
    assert fit * costs.forward_flops(config, 1, context, num_logits=1) / flops < step
    weights_only_ridge = math.ceil(weights / bandwidth / (costs.decode_step_flops(config, 1, 1) / flops))
    return {
        "weights": weights,
        "batch_1_s": (weights + per_seq_kv) / bandwidth,
        "fit": fit,
        "best": fit / step,
        "per_user": 1 / step,
        "ridge": weights_only_ridge,
    }


@pytest.mark.parametrize(
    "card, name, fit, ridge", [("H100 SXM", "llama-2-13b", 17, 296), ("H200 SXM", "smollm2-135m", 1601, 207)]
)
def test_the_cards_on_paper(card, name, fit, ridge):
    config, hw = MODEL_CONFIGS[name], HARDWARE[card]
    sim = Throughput(ThroughputConfig(name, 2, hw.bandwidth_gbs, hw.tflops, kv_budget_on_card(hw, config), 4096))
    hand = _by_hand(card, config)
    assert sim.weight_bytes_per_step == hand["weights"] and sim.max_batch == hand["fit"] == fit
    assert sim.memory_seconds(1) == pytest.approx(hand["batch_1_s"])
    assert sim.best_tokens_per_second == pytest.approx(hand["best"])
    assert 1 / sim.step_seconds(sim.max_batch) == pytest.approx(hand["per_user"])
    assert hand["ridge"] == ridge  # the lesson's "counting the weights alone": K/V free, one token of context
    if card == "H100 SXM":  # 14.ridge_h100 is revealed as the order of magnitude nearest it on a log scale
        assert closest_option({f"about {n:,}": n for n in (3, 30, 300, 3_000)}, ridge) == "about 300"
    # with one token of K/V counted the ridge moves a little later (299 for the 13B model on an H100)
    assert costs.compute_bound_batch(config, 1, hw.tflops * 1e12, hw.bandwidth_gbs * 1e9, 2) > ridge
    assert sim.ridge_batch is None  # at 4,096 tokens the K/V reads keep every batch memory-bound
    assert fit < ridge or name == "smollm2-135m"  # the 13B model's memory caps the batch far below the ridge


def test_spec_sheet_figures():
    # NVIDIA data sheets, SXM: memory GB, bandwidth GB/s, dense BF16 TFLOP/s (half the "with sparsity" figure)
    assert HARDWARE["H100 SXM"] == type(HARDWARE["H100 SXM"])(80.0, 3350.0, 989.0)
    assert HARDWARE["H200 SXM"] == type(HARDWARE["H200 SXM"])(141.0, 4800.0, 989.0)
    assert EXAMPLE_13B is MODEL_CONFIGS["llama-2-13b"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype, bytes_per_value", [(torch.float32, 4), (torch.bfloat16, 2)])
def test_smollm2_weight_tensors_match_the_cost_model(real_model, dtype, bytes_per_value):
    hf_model, _ = real_model
    model = Transformer.from_hf(copy.deepcopy(hf_model).to(dtype))
    assert model.weight_bytes_read_per_pass() == costs.weight_bytes_read_per_pass(model.config, bytes_per_value)


@pytest.mark.slow
def test_on_smollm2_the_trace_runs_the_same_batches_as_on_the_tiny_model(real_model, smol_model, tiny):
    tokenizer, model = real_model[1], smol_model
    trace = lesson_trace(40)
    ids = tokenizer(" ".join(["The memory a server saves becomes more users."] * 4))["input_ids"]
    real = _serve_both(model, trace, trace_prompts(trace, ids))
    small = _serve_both(tiny, trace, trace_prompts(trace, list(range(3, 90))))
    for a, b in zip(real, small, strict=True):
        assert a.batch_per_step == b.batch_per_step and a.num_tokens == b.num_tokens


def test_a_quarter_of_the_memory_per_conversation_shorter_or_shared():
    # lesson 14's cell after "Three things" and exercise 2: 13B on an H100, 4,096-token conversations
    config, hw = MODEL_CONFIGS["llama-2-13b"], HARDWARE["H100 SXM"]
    bandwidth, weights, per_token = hw.bandwidth_gbs * 1e9, costs.weight_bytes_read_per_pass(config, 2), 819_200
    blocks = (80 * 2**30 - costs.weight_bytes(config, 2)) // (per_token * BLOCK_SIZE)
    long_fit, quarter_fit = blocks // (4096 // BLOCK_SIZE), blocks // (1024 // BLOCK_SIZE)
    assert (long_fit, quarter_fit) == (17, 71)
    base = long_fit / ((weights + long_fit * 4096 * per_token) / bandwidth)
    shorter = quarter_fit / ((weights + quarter_fit * 1024 * per_token) / bandwidth) / base
    shared = quarter_fit / ((weights + quarter_fit * 4096 * per_token) / bandwidth) / base  # each reads all 4,096
    assert round(shorter, 2) == 4.05 and round(shared, 2) == 1.31  # 4.2x the conversations either way
    sim = Throughput(
        ThroughputConfig("llama-2-13b", 2, hw.bandwidth_gbs, hw.tflops, kv_budget_on_card(hw, config), 4096)
    )
    quarter = Throughput(ThroughputConfig("llama-2-13b", 2, hw.bandwidth_gbs, hw.tflops, sim.config.kv_budget_gb, 1024))
    assert quarter.max_batch == quarter_fit
    assert quarter.best_tokens_per_second / sim.best_tokens_per_second == pytest.approx(shorter)
    assert quarter_fit / sim.step_seconds(quarter_fit) / sim.best_tokens_per_second == pytest.approx(shared)


@pytest.mark.parametrize("num_requests, static_steps, continuous_steps", [(40, 140, 73), (64, 212, 102)])
def test_continuous_batching_fills_the_slots_static_batching_leaves_empty(
    tiny, num_requests, static_steps, continuous_steps
):
    # the lesson's "Keep the batch full": the stream's requests all queued at step 0, served 8 at a time
    waiting = [dataclasses.replace(r, arrival_step=0) for r in lesson_trace(num_requests)]
    static, continuous = batching.serve_static_and_continuous(
        tiny, waiting, trace_prompts(waiting, list(range(3, 90))), 8, BLOCK_SIZE
    )
    lengths = [r.num_output_tokens for r in waiting]
    # static: each group of 8, in order, lasts as long as its longest answer
    assert static.num_steps == sum(max(lengths[i : i + 8]) for i in range(0, len(lengths), 8)) == static_steps
    # continuous: at most 8 a step, a freed slot refilled at the next step, so no step can run more
    assert continuous.num_steps == continuous_steps and continuous.max_batch == 8
    assert continuous.num_steps >= math.ceil(sum(lengths) / 8)
    assert static.num_tokens == continuous.num_tokens == sum(lengths)
    assert 1 - continuous_steps / static_steps > 0.4  # the lesson's reveal: "over 40% fewer"


def test_the_roofline_comes_from_the_machine_not_from_the_sweep():
    machine = Roofline(flops_per_second=100e9, bytes_per_second=20e9)
    table = batch_sweep.step_table([{1: 0.030, 32: 0.040}, {1: 0.031, 32: 0.041}], SMOL, 16, 4)
    roof = batch_sweep.beside_roofline(table, machine, SMOL, 16, 4)
    floor_1 = max(costs.decode_step_bytes(SMOL, 1, 16, 4) / 20e9, costs.decode_step_flops(SMOL, 1, 16) / 100e9)
    assert roof.loc[1, "roofline ms"] == pytest.approx(floor_1 * 1e3, abs=0.01)
    assert roof.loc[1, "measured / roofline"] > 1 and roof.loc[1, "binds"] == "memory"
    assert roof.loc[32, "binds"] == "compute" and roof.loc[32, "measured / roofline"] < 1  # a step can beat it


def test_a_run_is_priced_at_the_sweep_s_step_times_and_on_an_h100():
    assert batching.seconds_for_batches([1, 2, 4], {1: 0.1, 4: 0.4}) == pytest.approx(0.7)
    hw = HARDWARE["H100 SXM"]
    h100 = Throughput(ThroughputConfig("smollm2-135m", 2, hw.bandwidth_gbs, hw.tflops, 1.0, 16))
    assert h100.step_seconds(24) / h100.step_seconds(8) < 1.05  # a fuller step costs almost nothing there
