"""Lesson 21's claims that are not timings, checked on the tiny model, and its trend logic on made-up latencies.

The lesson serves a long document among chatting users at several token budgets on SmolLM2 and reads the
users' gaps, the document's time to first token and goodput (kernels/measure/chunked_prefill.py). Who runs
in which step does not depend on the model when every answer has a fixed length, so the schedule is checked
on the tiny model: the decodes are served first in every step (each user's gaps are one step each, at every
budget), the document's first token takes one step per chunk, and the tokens are the same at every budget in
float32. The percentile and goodput logic the lesson's verdicts rest on is checked on latencies made up so
that the answer is known: a p95 that rises while the worst gap falls, and goodput peaking between the ends.
"""

from __future__ import annotations

import math

import pytest
from factories import make_tiny_model

from kvcourse.kernel_env import HEADLESS_ENV
from kvcourse.kernels.engine.latency import RequestLatency
from kvcourse.kernels.measure import chunked_prefill
from kvcourse.serving_sweep import serving_sweep_size
from kvcourse.simulators.disaggregation import Disaggregation, DisaggregationConfig, transfer_table

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

DOCUMENT = list(range(3, 83))  # 80 tokens
CHATS = [list(range(5, 5 + n)) for n in (4, 6, 5, 7)]
ANSWER = 30


@pytest.fixture(scope="module")
def runs():
    tiny = make_tiny_model(max_position_embeddings=256)
    return [
        chunked_prefill.serve_chat_and_document(tiny, budget, DOCUMENT, CHATS, answer=ANSWER)
        for budget in (128, 36, 20, 8)
    ]


def test_decodes_first_and_one_step_per_chunk(runs):
    users = len(CHATS)
    for served in runs:
        doc = served.latencies[chunked_prefill.DOCUMENT]
        assert all(gap == 1 for name, lat in served.latencies.items() if name != "document" for gap in lat.itl_steps)
        # the document arrives among 4 running decodes: (budget - 4) prompt tokens per step
        chunks = math.ceil(len(DOCUMENT) / (served.budget - users)) if served.budget < len(DOCUMENT) + users else 1
        assert doc.ttft_steps == chunks
    steps = [served.latencies["document"].ttft_steps for served in runs]
    assert steps == sorted(steps) and steps[0] == 1 and steps[-1] > steps[1]


def test_the_tokens_are_the_same_at_every_budget_in_float32(runs):
    assert chunked_prefill.tokens_equal(runs) == (len(CHATS) + 1, len(CHATS) + 1)
    assert all(len(tokens) == ANSWER for name, tokens in runs[0].tokens.items() if name != "document")


def test_the_table_has_a_row_per_budget_and_goodput_only_with_targets(runs):
    table = chunked_prefill.budget_table(runs)
    assert list(table.index) == [128, 36, 20, 8] and "goodput req/s" not in table
    with_targets = chunked_prefill.budget_table(runs, chunked_prefill.targets_from(runs[0]))
    assert with_targets["requests meeting both"].between(0, len(CHATS) + 1).all()


def _latency(gaps: list[float], ttft: float, arrival: float = 0.0) -> RequestLatency:
    e2e = ttft + sum(gaps)
    return RequestLatency(
        0,
        1,
        1 + len(gaps),
        len(gaps) + 1,
        arrival,
        ttft,
        sum(gaps) / max(1, len(gaps)),
        tuple(gaps),
        e2e,
        tuple([1] * len(gaps)),
    )


def _served(budget: int, stall: float, stalls: int, doc_ttft: float, doc_steps: int) -> chunked_prefill.BudgetRun:
    """Four chats of 40 gaps of 0.1 s, ``stalls`` of them ``stall`` long; the document's TTFT as given."""
    chats = {f"chat {i}": _latency([stall] * stalls + [0.1] * (40 - stalls), 0.05) for i in range(4)}
    doc = RequestLatency(4, 4 + doc_steps, 5 + doc_steps, 2, 0.4, doc_ttft, 0.1, (0.1,), doc_ttft + 0.1, (1,))
    return chunked_prefill.BudgetRun(budget, {**chats, "document": doc}, {})


def test_p95_rises_while_the_worst_gap_falls_when_many_gaps_are_slowed():
    whole = _served(2048, stall=5.0, stalls=1, doc_ttft=5.0, doc_steps=1)  # one stall per user
    small = _served(128, stall=0.5, stalls=16, doc_ttft=6.0, doc_steps=16)  # 16 shorter ones
    table = chunked_prefill.budget_table([whole, small])
    assert table["worst chat gap ms"][128] < table["worst chat gap ms"][2048] / 2
    assert table["p95 ITL ms"][128] > table["p95 ITL ms"][2048]  # 40 % of gaps slowed: p95 is one of them
    assert table["chat gaps slowed"].tolist() == [4, 64]


def test_goodput_peaks_between_the_ends_when_the_smallest_chunks_miss_the_document_target():
    whole = _served(2048, stall=5.0, stalls=1, doc_ttft=5.0, doc_steps=1)
    middle = _served(512, stall=1.2, stalls=4, doc_ttft=5.5, doc_steps=4)
    small = _served(64, stall=0.4, stalls=34, doc_ttft=7.5, doc_steps=34)
    targets = chunked_prefill.targets_from(whole, ttft_factor=1.2, gap_share=0.25)
    assert targets.ttft_s == pytest.approx(6.0) and targets.itl_s == pytest.approx(1.25)
    table = chunked_prefill.budget_table([whole, middle, small], targets)
    assert table["requests meeting both"].tolist() == [1, 5, 4]
    assert table["goodput req/s"].idxmax() == 512


def test_the_sweep_sizes(monkeypatch):
    monkeypatch.delenv(HEADLESS_ENV, raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    full = serving_sweep_size()
    monkeypatch.setenv(HEADLESS_ENV, "1")
    short = serving_sweep_size()
    assert full.document_tokens == 2000 and short.document_tokens < full.document_tokens
    for sweep in (full, short):
        assert sweep.budgets[0] >= sweep.document_tokens + len(CHATS)  # the first holds the whole document
        assert list(sweep.budgets) == sorted(sweep.budgets, reverse=True)


# -- "See it move": the simulator's stream ----------------------------------------------------------------
def test_a_request_arriving_while_a_long_prompt_is_chunked_waits_for_its_last_chunk():
    """The lesson says a request arriving meanwhile usually waits for the last chunk: the running sequences, the
    chunked prompt among them, take each step's budget first, and only its last chunk leaves budget over."""
    from kvcourse.simulators.serving_budget import ServingBudget, ServingBudgetConfig

    for budget in (32, 64, 128):
        sim = ServingBudget(
            ServingBudgetConfig(num_requests=20, long_percent=5, long_prompt_tokens=600, token_budget=budget)
        )
        (long,) = [lat for lat, is_long in zip(sim.latencies, sim.is_long, strict=True) if is_long]
        during = [
            lat
            for lat, is_long in zip(sim.latencies, sim.is_long, strict=True)
            if not is_long and long.arrival_step < lat.arrival_step < long.first_token_step
        ]
        assert during, budget  # the stream has requests arriving while the long prompt is chunked
        assert all(lat.first_token_step >= long.first_token_step for lat in during), budget


# -- "Prefill and decode apart" (cells 21-60 .. 21-66): the section's claims about the 2026 table and its simulator
DOCUMENT_LENGTHS = (512, 2000)  # serving_sweep_size's document, headless and for people: the simulator opens on it


def test_the_split_simulator_opens_on_the_sweeps_document(monkeypatch):
    monkeypatch.delenv(HEADLESS_ENV, raising=False)
    full = serving_sweep_size().document_tokens
    monkeypatch.setenv(HEADLESS_ENV, "1")
    assert (serving_sweep_size().document_tokens, full) == DOCUMENT_LENGTHS


def test_the_lightest_caches_to_send_are_deepseek_v3_and_gpt_oss():
    sent = transfer_table(["llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "deepseek-v3", "gpt-oss-120b"], 8192)
    assert set(sent["MB per request"].nsmallest(2).index) == {"deepseek-v3", "gpt-oss-120b"}


@pytest.mark.parametrize("prompt", DOCUMENT_LENGTHS)
def test_the_split_simulator_does_what_the_section_says_to_try(prompt):
    sim = Disaggregation(DisaggregationConfig("llama-3.1-8b", prompt_tokens=prompt))
    n, targets = sim.config.num_gpus, (sim.config.ttft_target_s, sim.config.tpot_target_ms / 1e3)
    best, goodput = sim.best_split
    assert 1 < best < n - 1 and goodput > max(sim.split_goodput(1), sim.split_goodput(n - 1))
    # too few prefill GPUs: the first-token target fails first; too few decode GPUs: the time-per-token target
    one_prefill = sim.split(sim.split_goodput(1) * 1.01, 1)
    assert one_prefill.ttft_s > targets[0] and one_prefill.tpot_s <= targets[1]
    one_decode = sim.split(sim.split_goodput(n - 1) * 1.01, n - 1)
    assert one_decode.tpot_s > targets[1] and one_decode.ttft_s <= targets[0]
    loose = Disaggregation(DisaggregationConfig("llama-3.1-8b", prompt_tokens=prompt, tpot_target_ms=40.0))
    assert loose.colocated_goodput > loose.best_split[1]
